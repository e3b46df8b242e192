"""What each of the gateway's three APIs costs per call: chat completions, the Responses API and the Anthropic Messages
API, streamed and not, at 64 concurrent sessions against an instant model.

    .venv/bin/python benchmarks/gateway_flavours.py              # 64 sessions x 6 turns, 9 interleaved rounds

The gateway runs in its own process (`--serve`: a standalone `Gateway` over a `FakeModel` that answers at once with
SmolLM2's real tokenizer, so every call renders the real chat template, tokenizes, records and builds its reply
exactly as in a rollout). The client is one aiohttp event loop posting raw JSON bodies (no SDK, so the client's cost
is the same for every flavour): each session is a conversation of `--turns` calls, each call sending the whole
history so far, as agents do. Flavours are measured in interleaved rounds (chat, responses, messages, each streamed
and not, then again), so a drift of the shared CPU touches all of them alike; the figure of each is its median over
the rounds.

- calls/s     = calls / wall time of a round;
- ms per call = client-observed latency of one call (request sent to last byte read), mean over the round;
- vs chat     = chat completions' calls/s over this flavour's, same streaming mode (the target: at most 1.2).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import aiohttp

from smoke import add_smoke_flag, device_line

REPLY = "The answer is 42, as the two tools agreed."
FLAVOURS = [(api, stream) for stream in (False, True) for api in ("chat", "responses", "messages")]
PATHS = {"chat": "chat/completions", "responses": "responses", "messages": "messages"}


def body(api: str, history: list[dict], stream: bool) -> dict:
    """The request an agent of that API sends for `history` (user and assistant text turns)."""
    if api == "chat":
        return {"model": "m", "messages": history, "stream": stream}
    if api == "responses":
        return {"model": "m", "input": history, "stream": stream}
    return {"model": "m", "max_tokens": 64, "messages": history, "stream": stream}


def reply_text(api: str, data: dict) -> str:
    if api == "chat":
        return data["choices"][0]["message"]["content"]
    if api == "responses":
        return data["output"][0]["content"][0]["text"]
    return data["content"][0]["text"]


async def conversation(http, base: str, sid: str, api: str, stream: bool, turns: int, latencies: list) -> None:
    history: list[dict] = []
    url = f"{base}/sessions/{sid}/v1/{PATHS[api]}"
    for turn in range(turns):
        history.append({"role": "user", "content": f"Question {turn}: what do the tools say about item {sid}?"})
        started = time.perf_counter()
        async with http.post(url, json=body(api, history, stream)) as response:
            raw = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{api} stream={stream}: HTTP {response.status}: {raw[:300]!r}")
        latencies.append(time.perf_counter() - started)
        text = REPLY if stream else reply_text(api, await response.json())
        history.append({"role": "assistant", "content": text})


async def one_round(base: str, api: str, stream: bool, sessions: int, turns: int, tag: str) -> tuple[float, float]:
    """(calls/s, mean ms per call) of `sessions` concurrent conversations."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=sessions)
    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.perf_counter()
        await asyncio.gather(
            *(conversation(http, base, f"{tag}-{i}", api, stream, turns, latencies) for i in range(sessions))
        )
        wall = time.perf_counter() - started
    return len(latencies) / wall, 1000 * statistics.fmean(latencies)


def serve() -> None:
    """The gateway process: prints its base URL, then serves until killed."""
    from rllm.gateway import Gateway
    from rllm.models.fake import FakeModel
    from rllm.models.registry import load_tokenizer

    async def main() -> None:
        tokenizer = load_tokenizer("smollm2-135m-instruct")
        gateway = await Gateway(FakeModel(REPLY, tokenizer=tokenizer)).start()
        gateway.model.calls = _Discard()  # the fake model's call log would grow for the whole benchmark
        print(gateway.base_url, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class _Discard(list):
    def append(self, item: object) -> None:
        pass


def main() -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.serve:
        return serve()
    if args.smoke:
        args.sessions, args.turns, args.rounds = 4, 2, 1
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        base = server.stdout.readline().strip()
        if not base.startswith("http"):
            raise SystemExit(f"the gateway process did not start (exit {server.poll()})")
        results = asyncio.run(measure(base, args))
    finally:
        server.kill()
        server.wait()
    report(results, args)


async def measure(base: str, args: argparse.Namespace) -> dict:
    await one_round(base, "chat", False, args.sessions, 1, "warm-up")  # connections and the template cache
    results: dict = {flavour: [] for flavour in FLAVOURS}
    for index in range(args.rounds):
        for api, stream in FLAVOURS:
            tag = f"{api}-{stream}-{index}"
            results[api, stream].append(await one_round(base, api, stream, args.sessions, args.turns, tag))
    return results


def report(results: dict, args: argparse.Namespace) -> None:
    print(device_line())
    print(f"{args.sessions} concurrent sessions x {args.turns} turns, {args.rounds} rounds, instant model")
    print(f"{'api':12}{'stream':>8}{'calls/s':>10}{'ms/call':>10}{'vs chat':>10}")
    medians = {
        key: (statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds))
        for key, rounds in results.items()
    }
    worst = 0.0
    for (api, stream), (rate, ms) in medians.items():
        ratio = medians["chat", stream][0] / rate
        worst = max(worst, ratio)
        print(f"{api:12}{stream!s:>8}{rate:>10.0f}{ms:>10.2f}{ratio:>10.2f}")
    print(f"worst flavour vs chat completions: {worst:.2f}x (target <= 1.2)")


if __name__ == "__main__":
    main()
