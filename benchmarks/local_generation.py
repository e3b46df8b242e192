"""Tokens/s of `LocalModel` against plain transformers `model.generate` on the same model, prompts and batch.

    .venv/bin/python benchmarks/local_generation.py                       # SmolLM2-135M, fp32, sampled + greedy
    .venv/bin/python benchmarks/local_generation.py --model qwen2.5-coder-0.5b-instruct --repeats 1
    .venv/bin/python benchmarks/local_generation.py --dtype bfloat16
    python benchmarks/local_generation.py --device cuda --model <folder> --dtype bfloat16 --num-prompts 64 \
        --new-tokens 256 --max-batch-size 64                              # one GPU (the issue's 64 x 256)
    python benchmarks/local_generation.py --random-init --model <config+tokenizer folder> --device cuda ...

Workload: `--num-prompts` chat-templated prompts of varied lengths (about 60-200 tokens), all submitted at once,
`--new-tokens` new tokens each. The baseline is one `model.generate` call on the whole batch (left padding +
attention mask, the way a user batches with transformers). Rows are timed alternately (baseline, ours, baseline,
ours, ...) so that load from other processes hits both sides alike; read the ratio, not the absolute numbers.

Fairness: by default both sides produce exactly `--new-tokens` tokens per prompt. The baseline uses
`min_new_tokens` (EOS is masked until then) and `LocalModel` gets `eos_token_ids=()` (it never stops on a token),
so both count the same tokens. With `--respect-eos` both stop at EOS and only the tokens actually produced are
counted (the baseline's rows that finished early still cost compute, ours free their slot: that is the continuous
batching gain on top of the per-token one).

Also printed: the device (CPU model or GPU name, every figure is of that device), and the torch operators one decode
step dispatches at 8, 64 and 128 running rows against those of one `generate` step on 8 rows (`rllm.testing.ops`;
an eager count: on a GPU each operator is a kernel launch, so a count that grows with the rows would cap large
batches; LocalModel's GPU steps are then replayed from CUDA graphs). On a GPU the timed regions end with a device
synchronisation. `--random-init` builds random weights of the model's shape from its config and tokenizer (a GPU
machine that cannot receive the real weights measures the same shapes and the same work).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import functools
import random
import statistics
import time

import torch

from rllm.inference import InferenceOptions
from rllm.inference.model import LocalModel
from rllm.models.base import SamplingParams
from rllm.testing.ops import decode_step_ops, generate_step_ops
from smoke import add_smoke_flag, tiny_model_folder

_TOPICS = [
    "the water cycle",
    "prime numbers",
    "a frozen lake",
    "binary search",
    "photosynthesis",
    "the moon",
    "sorting algorithms",
    "a short poem",
    "the French revolution",
    "compound interest",
    "volcanoes",
    "neural networks",
    "chess openings",
    "the solar system",
    "bread baking",
    "ocean tides",
]
_FILLER_TEXT = (
    "Please be precise, keep the answer short and explain each step clearly so that a student can follow "
    "the reasoning without any prior knowledge of the subject and check every intermediate result."
)
_FILLER = tuple(_FILLER_TEXT.split())


def build_prompts(tokenizer, count: int, *, seed: int = 0, min_tokens: int = 60, max_tokens: int = 200):
    """`count` chat-templated prompts whose token lengths spread over [min_tokens, max_tokens]."""
    from rllm.models.chat import render_messages

    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        target = min_tokens + (max_tokens - min_tokens) * i // max(count - 1, 1)
        words = [f"Tell me about {rng.choice(_TOPICS)}."]
        ids = render_messages(tokenizer, [{"role": "user", "content": " ".join(words)}])
        while len(ids) < target:
            words.append(rng.choice(_FILLER))
            ids = render_messages(tokenizer, [{"role": "user", "content": " ".join(words)}])
        prompts.append(ids)
    rng.shuffle(prompts)
    return prompts


def on_one_thread(local: LocalModel, fn, *args, **kwargs):
    """`fn(*args, **kwargs)` on the LocalModel's worker thread: both sides compute on one thread, as a program that
    calls `generate` on its main thread does. A second computing thread would slow both: libgomp's idle workers
    barely spin once a process holds more OpenMP teams than cores (`rllm.cpus`' docstring)."""
    return local.call_on_worker(functools.partial(fn, *args, **kwargs)).result()


def run_baseline(model, tokenizer, prompts, *, new_tokens: int, greedy: bool, respect_eos: bool) -> tuple[int, float]:
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=model.device)
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    kwargs = {"max_new_tokens": new_tokens, "pad_token_id": pad_id}
    if not respect_eos:
        kwargs["min_new_tokens"] = new_tokens
    if greedy:
        kwargs.update(do_sample=False)
    else:
        kwargs.update(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    _synchronize(model.device)
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    _synchronize(model.device)
    elapsed = time.perf_counter() - started
    new = out[:, width:]
    if not respect_eos:
        return new.numel(), elapsed
    eos = set(_eos_ids(model, tokenizer))
    produced = 0
    for row in new.tolist():
        ends = [i for i, t in enumerate(row) if t in eos]
        produced += ends[0] + 1 if ends else len(row)
    return produced, elapsed


def profile_line(local: LocalModel, prompts, *, new_tokens: int) -> str:
    """Where a LocalModel run's time goes, from torch.profiler: the run's wall time per decode step (its prefills
    included) against the time the device was busy (the sum of its kernels' time; CPU: n/a) and the kernels a step
    launched, plus the costliest kernels and those under 5 us a launch. Wall well above busy means the host is what
    to speed up; busy near wall, the kernels: many short ones (a decode step of a small model is ~1,000 elementwise
    kernels, each a few microseconds however little it computes) call for fewer, fused kernels; a few long ones, for
    faster kernels."""
    from torch.profiler import ProfilerActivity, profile

    on_cuda = local.model.device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_cuda else [])]
    before = local.stats["decode_steps"]
    with profile(activities=activities) as prof:
        _, seconds, _ = run_local(local, prompts, new_tokens=new_tokens, greedy=False, seed=0)
    steps = max(1, local.stats["decode_steps"] - before)
    line = f"profile: {steps} decode steps, wall {seconds / steps * 1e3:.2f} ms a step"
    if not on_cuda:
        return line + " (device busy time: n/a on a CPU)"
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in kernels) / 1e3  # microseconds -> ms
    launched = sum(e.count for e in kernels)
    short = [e for e in kernels if e.count and e.self_device_time_total / e.count < 5.0]  # microseconds a launch
    short_launched = sum(e.count for e in short)
    short_busy = sum(e.self_device_time_total for e in short) / 1e3
    top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:5]
    named = ", ".join(f"{e.key[:40]} {e.self_device_time_total / 1e3 / steps:.2f}" for e in top)
    share = busy / (seconds * 1e3)
    return (
        f"{line}, device busy {busy / steps:.2f} ms a step ({share:.0%} of wall), "
        f"{launched / steps:.0f} kernels a step, {short_launched / steps:.0f} of them under 5 us "
        f"({short_busy / steps:.2f} ms a step); top kernels (ms a step): {named}"
    )


def run_local(local: LocalModel, prompts, *, new_tokens: int, greedy: bool, seed: int):
    sampling = SamplingParams(temperature=0.0 if greedy else 1.0, max_tokens=new_tokens)

    async def go():
        return await asyncio.gather(*[local.generate(p, sampling) for p in prompts])

    _synchronize(local.model.device)
    started = time.perf_counter()
    outputs = asyncio.run(go())
    _synchronize(local.model.device)
    elapsed = time.perf_counter() - started
    return sum(o.completion_length for o in outputs), elapsed, outputs


def logprob_drift(reference_model, outputs, temperature: float, count: int = 4) -> tuple[float, float]:
    """Max and mean |LocalModel logprob - logprob from a plain fp32 forward pass| over a few outputs."""
    diffs = []
    with torch.inference_mode():
        for out in outputs[:count]:
            ids = torch.tensor([out.prompt_ids + out.completion_ids], device=reference_model.device)
            logits = reference_model(input_ids=ids).logits[0, len(out.prompt_ids) - 1 : -1].float().cpu()
            ref = torch.log_softmax(logits / (temperature or 1.0), -1).gather(
                1, torch.tensor(out.completion_ids)[:, None]
            )
            diffs.append((ref.squeeze(1) - torch.tensor(out.logprobs)).abs())
    every = torch.cat(diffs)
    return every.max().item(), every.mean().item()


def matmul_peak_gflops(model, rows: tuple[int, ...] = (32, 128, 512), repeats: int = 5) -> float:
    """The machine's measured matmul rate for this model: the best rate over the model's own weight shapes (one
    layer's, and the output layer's) at `rows` rows, in the model's dtype, of torch's `F.linear` and (fp32) of
    oneDNN with the weight packed, the kernel LocalModel uses on a CPU (`rllm.inference.packed_linears`). torch picks
    kernels by shape and dtype (on CPUs without bf16 instructions a square bf16 GEMM is ~20x slower than the model's
    shapes), so a generic square GEMM would misstate what these weights can reach."""
    from rllm.inference.kernels import PACKED, KernelChoice
    from rllm.inference.packed_linears import PackedLinears, linear, packed_linears_available

    shapes = {tuple(module.weight.shape) for module in model.modules() if isinstance(module, torch.nn.Linear)}
    kernels = [torch.nn.functional.linear]
    if model.dtype == torch.float32 and packed_linears_available():
        packer = PackedLinears(KernelChoice.fixed(PACKED))  # the packed kernel, whatever this machine chose

        def packed(x, weight):
            with packer:
                return linear(x, weight)

        kernels.append(packed)
    best = 0.0
    for out_features, in_features in shapes:
        weight = torch.randn(out_features, in_features, dtype=model.dtype)
        for count in rows:
            x = torch.randn(count, in_features, dtype=model.dtype)
            for kernel in kernels:
                kernel(x, weight)
                fastest = float("inf")
                for _ in range(repeats):
                    started = time.perf_counter()
                    kernel(x, weight)
                    fastest = min(fastest, time.perf_counter() - started)
                best = max(best, 2 * count * in_features * out_features / fastest / 1e9)
    return best


def packed_linears_for(kernels: str):
    """`--kernels`: None lets LocalModel measure (or read the cached choice); a fixed path otherwise."""
    from rllm.inference.kernels import KernelChoice
    from rllm.inference.packed_linears import PackedLinears

    return None if kernels == "measured" else PackedLinears(KernelChoice.fixed(kernels))


def work_gflop(model, stats_before: dict, stats_after: dict) -> float:
    """Matmul work of what LocalModel computed between two `stats` snapshots: 2 x (weights outside the
    embedding) per prefilled or decoded token, plus the output layer per sampled token. Attention over the cache
    is left out (small next to the weights at these lengths), so this is a floor of the work done."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    embedding = config.vocab_size * config.hidden_size
    body = sum(p.numel() for p in model.parameters()) - embedding * (1 if config.tie_word_embeddings else 2)
    delta = {k: stats_after[k] - stats_before[k] for k in ("prefill_tokens", "decode_rows", "generated_tokens")}
    tokens = delta["prefill_tokens"] + delta["decode_rows"]
    return (2 * body * tokens + 2 * embedding * delta["generated_tokens"]) / 1e9


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device, kernels=None) -> str:
    """What ran the figures: the GPU's name, or the CPU's model and extensions, the threads torch used and which
    linear shapes ran packed (`kernels`, a `rllm.inference.kernels.KernelChoice`)."""
    import transformers  # its attention code is on both sides (5.23 runs a decode step's GQA without repeating K/V)

    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} ({versions}, CUDA {torch.version.cuda})"
    from rllm.cpus import describe_cpu

    line = f"{describe_cpu()}, {torch.get_num_threads()} torch threads ({versions})"
    return line if kernels is None else f"{line}; kernels: {kernels.describe()}"


def ops_line(model, tokenizer, prompts, rows=(8, 64, 128)) -> str:
    """Operators one eager decode step dispatches at each row count (the same for all, by design) and per step of
    transformers `generate` on 8 rows."""
    counts = []
    for count in rows:
        batch = (prompts * (1 + count // len(prompts)))[:count]
        local = LocalModel(
            model,
            tokenizer,
            InferenceOptions(max_batch_size=count, eos_token_ids=(), prefix_cache_tokens=0, cuda_graphs=False),
        )
        steps = decode_step_ops(local, batch, new_tokens=4)
        local.close()
        counts.append(f"rows {count} {max(steps) if steps else 'n/a'}")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    generate = generate_step_ops(model, pad_id, prompts[:8])
    return f"ops per decode step: {', '.join(counts)}; generate {generate:.0f}"


def build_random_init(source: str, dtype: str) -> str:
    """A folder with random weights of `source`'s shape (its config) and its tokenizer files, in a temp dir."""
    import shutil
    import tempfile
    from pathlib import Path

    from transformers import AutoConfig, AutoModelForCausalLM

    from rllm.models.registry import resolve_model_path

    folder = Path(resolve_model_path(source))
    target = Path(tempfile.mkdtemp(prefix="rllm-random-init-"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=getattr(torch, dtype))
    model.save_pretrained(target)
    for path in folder.iterdir():
        if path.is_file() and path.suffix != ".safetensors" and path.name not in ("config.json", "manifest.json"):
            shutil.copy(path, target)
    return str(target)


def _eos_ids(model, tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    extra = getattr(model.generation_config, "eos_token_id", None)
    ids.update(extra if isinstance(extra, list) else [extra])
    ids.discard(None)
    return sorted(ids)


def main(argv=None) -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="embedded model name or a folder")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the loaded model's")
    parser.add_argument(
        "--local-dtype",
        default=None,
        choices=["float32", "bfloat16"],
        help="LocalModel's inference dtype (its own converted copy); default: the model's",
    )
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--modes", default="sampled,greedy", help="comma list of sampled, greedy")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per side and mode (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--respect-eos", action="store_true", help="stop at EOS and count produced tokens only")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--random-init", action="store_true", help="random weights of --model's shape (see above)")
    parser.add_argument("--no-ops", action="store_true", help="skip the operator count")
    parser.add_argument(
        "--kernels",
        default="measured",
        choices=["measured", "packed", "default"],
        help="which linear shapes run packed oneDNN: as measured on this machine (rllm's default), or every one "
        "packed (before the measured choice) or none",
    )
    parser.add_argument("--profile", action="store_true", help="profile one more LocalModel run (see profile_line)")
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.num_prompts, args.new_tokens, args.max_batch_size = tiny_model_folder(), 2, 4, 2
        args.repeats, args.no_ops, args.profile = 1, True, True

    from rllm.models.registry import load_causal_lm, load_tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    name = build_random_init(args.model, args.dtype) if args.random_init else args.model
    tokenizer = load_tokenizer(name)
    model = load_causal_lm(name, dtype=args.dtype, device=args.device)
    prompts = build_prompts(tokenizer, args.num_prompts)
    lengths = [len(p) for p in prompts]
    print(
        f"model={args.model}{' (random init)' if args.random_init else ''} dtype={args.dtype} "
        f"threads={torch.get_num_threads()} torch={torch.__version__} "
        f"prompts={len(prompts)} (tokens min {min(lengths)} mean {statistics.mean(lengths):.0f} max {max(lengths)}) "
        f"new_tokens={args.new_tokens} respect_eos={args.respect_eos}"
    )
    # No prefix store: the timed runs repeat the same prompts, which a store would serve from cache (a multi-turn
    # gain, not this single-turn workload's). Running prompts still share their common prefix (the chat template's
    # system prompt), as they would in any batch.
    local = LocalModel(
        model,
        tokenizer,
        InferenceOptions(
            max_batch_size=args.max_batch_size,
            dtype=args.local_dtype,
            eos_token_ids=None if args.respect_eos else (),
            prefix_cache_tokens=0,
        ),
        packed=packed_linears_for(args.kernels),
    )
    print(f"device: {device_name(model.device, local.kernels)}")
    kernel = f"oneDNN packed or F.linear per shape: {local.kernels.describe()}" if local.kernels else "torch's F.linear"
    print(f"LocalModel dtype={local.model.dtype} (baseline: {model.dtype}); LocalModel's linear layers: {kernel}")
    # Warm-up both sides (allocator, oneDNN kernels, the worker thread).
    # Each timed mode once: sampling is another code path on both sides (on a GPU, transformers' first sampled
    # `generate` ran at a quarter of its later speed).
    for mode in args.modes.split(","):
        greedy = mode.strip() == "greedy"
        run_local(local, prompts[:4], new_tokens=4, greedy=greedy, seed=0)
        if not args.skip_baseline:
            on_one_thread(
                local,
                run_baseline,
                model,
                tokenizer,
                prompts[:4],
                new_tokens=4,
                greedy=greedy,
                respect_eos=args.respect_eos,
            )

    # Logprobs are checked against fp32 weights (for a bf16-loaded model: its weights upcast, not the originals).
    reference = model if model.dtype == torch.float32 else copy.deepcopy(model).float()
    rates: list[float] = []  # achieved GFLOP/s of each LocalModel run
    for mode in args.modes.split(","):
        greedy = mode.strip() == "greedy"
        base_rates, local_rates, outputs = [], [], []
        for repeat in range(args.repeats):
            if not args.skip_baseline:
                tokens, seconds = on_one_thread(
                    local,
                    run_baseline,
                    model,
                    tokenizer,
                    prompts,
                    new_tokens=args.new_tokens,
                    greedy=greedy,
                    respect_eos=args.respect_eos,
                )
                base_rates.append(tokens / seconds)
            before = local.stats
            tokens, seconds, outputs = run_local(local, prompts, new_tokens=args.new_tokens, greedy=greedy, seed=repeat)
            local_rates.append(tokens / seconds)
            rates.append(work_gflop(local.model, before, local.stats) / seconds)
        ours = statistics.median(local_rates)
        line = f"{mode:8s} LocalModel {ours:7.1f} tok/s"
        if base_rates:
            base = statistics.median(base_rates)
            best = max(local_rates) / max(base_rates)  # best runs: a cold first run on either side cannot decide it
            line += f" | transformers generate {base:7.1f} tok/s | ratio {ours / base:.2f}x (best runs {best:.2f}x)"
        drift = logprob_drift(reference, outputs, 0.0 if greedy else 1.0)
        print(
            line + f"   (runs: ours {[round(r, 1) for r in local_rates]}, base {[round(r, 1) for r in base_rates]};"
            f" logprob |diff| vs fp32 forward: max {drift[0]:.1e} mean {drift[1]:.1e})"
        )
    print(f"LocalModel stats: {local.stats}")
    achieved = statistics.median(rates)
    if model.device.type == "cpu":
        peak = matmul_peak_gflops(local.model)
        print(
            f"roofline: LocalModel ran {achieved:.1f} GFLOP/s of matmul work (median run) = {achieved / peak:.0%} of "
            f"this machine's measured {local.model.dtype} matmul peak {peak:.1f} GFLOP/s"
        )
    else:
        print(
            f"LocalModel ran {achieved:.1f} GFLOP/s of matmul work (median run); peak GPU memory "
            f"{torch.cuda.max_memory_allocated(model.device) / 2**30:.1f} GiB"
        )
    if args.profile:
        print(profile_line(local, prompts, new_tokens=max(8, args.new_tokens // 4)))
    local.close()
    if not args.no_ops:
        print(ops_line(local.model, tokenizer, build_prompts(tokenizer, 16)))


if __name__ == "__main__":
    main()
