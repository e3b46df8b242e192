"""`rllm view [RUN_DIR ...]`: open runs in a local web viewer (`rllm.viewer`).

rllm view                                  # every run under ./runs
rllm view runs/train-arithmetic-grpo-20261126-101500 runs/eval-arithmetic-20261126-093000
rllm view runs --port 8123                 # a fixed port (default: a free one)
"""

from __future__ import annotations

import argparse
import sys
import time


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("view", help="browse runs in a local web viewer: curves, episodes, token overlay")
    p.add_argument("runs", nargs="*", default=["runs"], help="run directories or folders of them (default: runs)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host header is NAME, e.g. an SSH tunnel's or proxy's name (repeatable)",
    )
    p.add_argument(
        "--no-index-cache",
        action="store_true",
        help="keep episode indexes in memory only (default: cached under $RLLM_HOME/view-index)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm.models.registry import rllm_home
    from rllm.viewer import start_server

    cache = None if args.no_index_cache else rllm_home() / "view-index"
    server = start_server(args.runs, port=args.port, cache_dir=cache, allowed_hosts=args.allow_host)
    print(f"rllm view: {server.url}  ({len(server.viewer.runs())} runs; Ctrl-C stops it)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.shutdown()
    return 0
