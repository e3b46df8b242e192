"""Rollout tokens/s of `LocalModel` against a vLLM server (the CPU build from `make vllm`), same model and requests.

    .venv/bin/python benchmarks/local_vs_vllm.py                                   # SmolLM2-135M, fp32
    .venv/bin/python benchmarks/local_vs_vllm.py --model qwen2.5-coder-0.5b-instruct --repeats 1

Workload: `--num-prompts` chat-templated prompts of 60-200 tokens (benchmarks/local_generation.py's), all submitted
at once, `--new-tokens` tokens each, token-in/token-out with logprobs, as rollouts send them. Both sides produce
exactly `--new-tokens` per prompt (`LocalModel(eos_token_ids=())`, vLLM `ignore_eos`), so they count the same tokens.
vLLM is reached the way the trainer reaches it: `VLLMRolloutClient` over HTTP, server started by `VLLMServer.launch`
on the model's folder, float32 like the trainer. The two sides alternate (local, vllm, local, ...) and never run at
once, so each has the machine to itself; the server's startup is not timed. Read the ratio, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from local_generation import build_prompts

from rllm.inference import InferenceOptions
from rllm.inference.model import LocalModel
from rllm.models.base import SamplingParams


async def _timed(client, prompts, sampling) -> tuple[int, float]:
    started = time.perf_counter()
    outputs = await asyncio.gather(*[client.generate(p, sampling) for p in prompts])
    elapsed = time.perf_counter() - started
    assert all(o.logprobs is not None and len(o.logprobs) == o.completion_length for o in outputs)
    return sum(o.completion_length for o in outputs), elapsed


def main(argv=None) -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="embedded model name or a folder")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--modes", default="sampled,greedy", help="comma list of sampled, greedy")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per side and mode (median reported)")
    args = parser.parse_args(argv)

    from rllm.models.registry import load_causal_lm, load_tokenizer, resolve_model_path
    from rllm.models.vllm_rollout import VLLMRolloutClient
    from rllm.models.vllm_server import VLLMServer

    tokenizer = load_tokenizer(args.model)
    prompts = build_prompts(tokenizer, args.num_prompts)
    local = LocalModel(
        load_causal_lm(args.model, dtype="float32"),
        tokenizer,
        InferenceOptions(max_batch_size=args.num_prompts, eos_token_ids=()),
    )
    workdir = Path(tempfile.mkdtemp(prefix="rllm-bench-vllm-"))
    started = time.perf_counter()
    server = VLLMServer.launch(
        resolve_model_path(args.model), dtype="float32", max_model_len=2048, log_path=workdir / "server.log"
    )
    print(f"vLLM server up in {time.perf_counter() - started:.0f} s (log: {workdir / 'server.log'})")
    vllm = VLLMRolloutClient(server, tokenizer, workdir=workdir, extra_body={"ignore_eos": True})
    lengths = [len(p) for p in prompts]
    print(
        f"model={args.model} fp32 torch threads={torch.get_num_threads()} prompts={len(prompts)} (tokens "
        f"{min(lengths)}-{max(lengths)}, mean {statistics.mean(lengths):.0f}) new_tokens={args.new_tokens}"
    )

    async def run() -> None:
        warm = SamplingParams(temperature=0.0, max_tokens=4)
        await _timed(local, prompts[:4], warm)
        await _timed(vllm, prompts[:4], warm)
        for mode in args.modes.split(","):
            sampling = SamplingParams(temperature=0.0 if mode.strip() == "greedy" else 1.0, max_tokens=args.new_tokens)
            rates: dict[str, list[float]] = {"local": [], "vllm": []}
            for _ in range(args.repeats):
                for name, client in (("local", local), ("vllm", vllm)):
                    tokens, seconds = await _timed(client, prompts, sampling)
                    rates[name].append(tokens / seconds)
            ours, theirs = statistics.median(rates["local"]), statistics.median(rates["vllm"])
            print(
                f"{mode:8s} LocalModel {ours:7.1f} tok/s   vLLM server {theirs:7.1f} tok/s   "
                f"vLLM / LocalModel = {theirs / ours:.2f}x"
            )
        await vllm.aclose()

    try:
        asyncio.run(run())
    finally:
        local.close()
        server.stop()


if __name__ == "__main__":
    main()
