"""`rllm serve gateway`: an OpenAI-compatible gateway that records exact token ids, in front of any
token-in/token-out server or an embedded model.

    rllm serve gateway --upstream http://localhost:8000/v1 --model Qwen/Qwen2.5-0.5B-Instruct \\
        --tokenizer Qwen/Qwen2.5-0.5B-Instruct --port 8090
    rllm serve gateway --embedded smollm2-135m-instruct --port 8090

Agents then use `openai.OpenAI(base_url="http://127.0.0.1:8090/sessions/<id>/v1")`, one id per conversation;
`GET /sessions/<id>/calls` returns what each call sampled (prompt and completion ids, logprobs, text). Upstream
calls go to `/v1/completions` with the prompt as token ids (`OpenAIClient`: `return_token_ids`, logprobs), so the
upstream must be vLLM >= 0.10.2 or an SGLang release that returns token ids. Request temperature/top_p/seed are
honoured. The first line printed is the gateway's base URL.

Only requests whose `Host` names this server are served (`--allow-host NAME` adds one, e.g. a reverse proxy's), and
POST bodies must be `application/json`: a web page cannot drive the gateway through the user's browser. With an API
key (`$RLLM_GATEWAY_API_KEY`, or `--api-key`, which other users of the machine can read in `ps`), every route but
/health needs `Authorization: Bearer <key>` (`openai.OpenAI(api_key=<key>)`). Threat model:
docs/agents/openai-sdk.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

API_KEY_ENV = "RLLM_GATEWAY_API_KEY"  # rllm.gateway.server.API_KEY_ENV (not imported here: it pulls aiohttp)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an OpenAI-compatible gateway that records exact token ids")
    what = p.add_subparsers(dest="what", required=True)
    g = what.add_parser("gateway", help="the rllm gateway in front of an upstream server or an embedded model")
    source = g.add_mutually_exclusive_group(required=True)
    source.add_argument("--upstream", help="token-in/token-out OpenAI-compatible server, e.g. http://host:8000/v1")
    source.add_argument("--embedded", help="serve an embedded model (name or local folder) with LocalModel")
    g.add_argument("--model", default=None, help="with --upstream: the served model's name")
    g.add_argument("--tokenizer", default=None, help="with --upstream: tokenizer name or folder (renders prompts)")
    g.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    g.add_argument("--port", type=int, default=8090, help="port (default 8090; 0 picks a free one)")
    g.add_argument("--max-tokens", type=int, default=1024, help="max_tokens of requests that give none")
    g.add_argument(
        "--api-key",
        default=None,
        help=f"require `Authorization: Bearer <key>` (default: ${API_KEY_ENV} if set, else no key)",
    )
    g.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also serve requests whose Host header is NAME (repeatable; '*' turns the Host check off)",
    )
    g.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm import runtime

    runtime.enable()  # the command owns its process: every tuning on (rllm.runtime; serve reads no config)
    model = _make_model(args)
    asyncio.run(_serve(model, args))
    return 0


def _make_model(args: argparse.Namespace):
    if args.embedded:
        from rllm.config import TrainConfig, inference_options
        from rllm.inference.model import LocalModel

        # serve reads no config file: the `inference:` section's defaults, the engine rollouts and eval run
        return LocalModel.from_pretrained(args.embedded, inference_options(TrainConfig()))
    if not args.model or not args.tokenizer:
        raise SystemExit(
            "--upstream needs --model (the served model's name) and --tokenizer (its tokenizer's name "
            "or folder: prompts are rendered here and sent as token ids, so the ids are exact)"
        )
    from rllm.models.endpoint import check_endpoint
    from rllm.models.openai import OpenAIClient

    # one request first: a gateway in front of nothing would answer every agent call with a retried 502
    check_endpoint(
        args.upstream, api_key=os.environ.get("OPENAI_API_KEY"), key_hint="$OPENAI_API_KEY", what="--upstream"
    )
    return OpenAIClient(args.upstream, args.model, tokenizer=args.tokenizer)


def api_key_of(args: argparse.Namespace) -> str | None:
    """The key requests must carry: `--api-key`, else $RLLM_GATEWAY_API_KEY, else none."""
    return args.api_key or os.environ.get(API_KEY_ENV) or None


async def _serve(model, args: argparse.Namespace) -> None:
    from rllm.gateway import Gateway
    from rllm.models.base import SamplingParams, close_model

    name = args.model or args.embedded
    api_key = api_key_of(args)
    gateway = Gateway(
        model,
        sampling=SamplingParams(max_tokens=args.max_tokens),
        model_name=name,
        api_key=api_key,
        allowed_hosts=args.allow_host,
    )
    await gateway.start(args.host, args.port)
    if api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: listening on {args.host} without an API key: anyone who can reach this port can use the model "
            f"and read its sessions; set ${API_KEY_ENV}",
            file=sys.stderr,
            flush=True,
        )
    print(gateway.base_url, flush=True)
    print(
        f"rllm gateway serving {name}: openai.OpenAI(base_url='{gateway.base_url}/sessions/<id>/v1'); Ctrl-C stops it",
        flush=True,
    )
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError):  # not on Windows
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        await gateway.stop()
        await close_model(model)
