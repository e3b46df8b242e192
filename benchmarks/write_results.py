"""Runs the speed benchmarks the README quotes and writes `benchmarks/RESULTS.md`: a summary table (the headline
line of each) with the machine and date, then each benchmark's own output in full.

    .venv/bin/python benchmarks/write_results.py              # all (about 45 minutes on 2 cores)
    .venv/bin/python benchmarks/write_results.py --only generation-fp32 engine
    .venv/bin/python benchmarks/write_results.py --only busy-machine         # make bench-busy (about 3 minutes)
    .venv/bin/python benchmarks/write_results.py --merge gpu/RESULTS.json   # add figures taken on another machine

`make bench` runs it (after installing the `bench` extra for TRL). A benchmark that fails is recorded as failed
with its last output lines; the others still run. The benchmarks in `NEEDS_GPU` are skipped, with a note, where
torch sees no GPU; their last figures (from a GPU) are kept. Each figure names its device: the summary table has a
device column (the GPU's name from the benchmark's `device:` line, else the CPU model), each section the machine.
Results are kept per benchmark AND device: a run on an Intel Xeon adds its figures beside an AMD EPYC's (a row and
a section each) instead of replacing them, so no one CPU family's figure stands for "the CPU".
On a GPU machine, `--only gpu-step gpu-sizes --out DIR/RESULTS.md` writes those two alone (DIR/RESULTS.json), and
`--merge DIR/RESULTS.json` here puts them beside the others.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from rllm.cpus import cpu_model, describe_cpu

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "RESULTS.md"
PY = sys.executable

_GPU_GENERATION = [
    "benchmarks/local_generation.py",
    "--device",
    "cuda",
    "--random-init",
    "--model",
    "qwen2.5-coder-0.5b-instruct",
    "--num-prompts",
    "64",
    "--new-tokens",
    "256",
    "--max-batch-size",
    "64",
    "--modes",
    "sampled",
    "--repeats",
    "2",
]
# (key, title, arguments after the python executable, what the headline is: a regex over the output's lines)
RUNS = [
    (
        "generation-fp32",
        "LocalModel vs transformers `generate`, SmolLM2-135M, float32, 32 prompts x 64 tokens",
        ["benchmarks/local_generation.py"],
        r"^(sampled|greedy) |^roofline|^ops per decode step",
    ),
    (
        "generation-bf16",
        "LocalModel vs transformers `generate`, SmolLM2-135M, bfloat16, 8 prompts x 16 tokens",
        [
            "benchmarks/local_generation.py",
            "--dtype",
            "bfloat16",
            "--num-prompts",
            "8",
            "--new-tokens",
            "16",
            "--repeats",
            "1",
        ],
        r"^(sampled|greedy) |^roofline",
    ),
    ("grpo-smollm2", "GRPO step vs TRL GRPOTrainer, SmolLM2-135M", ["benchmarks/grpo_vs_trl.py"], r"^ratio"),
    (
        "grpo-qwen",
        "GRPO step vs TRL GRPOTrainer, Qwen2.5-Coder-0.5B",
        ["benchmarks/grpo_vs_trl.py", "--model", "qwen2.5-coder-0.5b-instruct", "--steps", "2"],
        r"^ratio",
    ),
    (
        "sft-vs-trl",
        "SFT step vs TRL SFTTrainer, SmolLM2-135M, LoRA, 16 rows",
        ["benchmarks/sft_vs_trl.py"],
        r"^ratio|^median",
    ),
    (
        "dpo-vs-trl",
        "DPO step vs TRL DPOTrainer, SmolLM2-135M, LoRA, 8 pairs",
        ["benchmarks/sft_vs_trl.py", "--method", "dpo"],
        r"^ratio|^median",
    ),
    (
        "engine",
        "Rollout engine concurrency (512 episodes x 5 turns, 50 ms per call)",
        ["benchmarks/engine_concurrency.py"],
        r"^\s+\d+ |^framework",
    ),
    (
        "gateway-flavours",
        "The gateway's three APIs (chat completions, Responses, Anthropic Messages), 64 sessions, instant model",
        ["benchmarks/gateway_flavours.py"],
        r"^(chat|responses|messages) |^worst",
    ),
    (
        "vlm",
        "The embedded VLM vs its text model (SmolLM2-135M): rollout and update time, exactness",
        ["benchmarks/vlm_step.py"],
        r"^ratio|^exactness",
    ),
    (
        "busy-machine",
        "Generation + a GRPO update of SmolLM2-135M, idle and beside 2 busy processes: the default "
        "thread count vs fixed ones",
        ["benchmarks/busy_machine.py"],
        r"^(idle|loaded): |^verdict",
    ),
    (
        "gpu-generation-bf16",
        "LocalModel vs transformers `generate` on a GPU, Qwen2.5-0.5B shape (random init), "
        "bfloat16, 64 prompts x 256 tokens",
        [*_GPU_GENERATION, "--dtype", "bfloat16", "--profile"],
        r"^sampled |^ops per decode step|^LocalModel ran|^profile:",
    ),
    (
        "gpu-generation-fp32",
        "LocalModel vs transformers `generate` on a GPU, Qwen2.5-0.5B shape (random init), "
        "float32, 64 prompts x 256 tokens",
        [*_GPU_GENERATION, "--dtype", "float32", "--no-ops"],
        r"^sampled ",
    ),
    (
        "gpu-step",
        "GPU-sized GRPO step of `rllm train` (Qwen2.5-0.5B shape, 16 tasks x 8 samples x 256 tokens), "
        "fp32 and bf16 rollouts",
        ["benchmarks/gpu_step.py", "--budget-s", "250"],
        r"^summary ",
    ),
    (
        "gpu-sizes",
        "The largest Qwen2.5 shape that trains with LoRA on one 80 GB GPU (one small step each)",
        ["benchmarks/gpu_step.py", "--sizes", "--budget-s", "160"],
        r"^size |^largest",
    ),
]
NEEDS_GPU = {"gpu-generation-bf16", "gpu-generation-fp32", "gpu-step", "gpu-sizes"}


def machine() -> str:
    import torch

    return (
        f"{describe_cpu()}, {torch.get_num_threads()} torch threads, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {platform.system()} {platform.release()}"
    )


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def device_of(key: str, output: str) -> str:
    """The GPU a benchmark names on its `device:` line (name up to the first parenthesis), else this CPU."""
    if key in NEEDS_GPU:
        for line in output.splitlines():
            if line.startswith("device:"):
                return line.removeprefix("device:").split("(")[0].split(";")[0].strip()
    return cpu_model()


def run(args: list[str]) -> tuple[int, str, float]:
    started = time.perf_counter()
    done = subprocess.run([PY, *args], cwd=REPO, capture_output=True, text=True, check=False)
    output = done.stdout + (f"\n[stderr tail]\n{_tail(done.stderr)}" if done.returncode else "")
    return done.returncode, output, time.perf_counter() - started


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=[key for key, *_ in RUNS],
        help="run these only; the other sections keep their last results",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--merge", type=Path, help="add the results of another RESULTS.json and rewrite; run nothing")
    args = parser.parse_args(argv)
    store = args.out.with_suffix(".json")  # every run's raw result, so --only can refresh a few sections
    results = per_device(json.loads(store.read_text())) if store.exists() else {}
    failed = 0
    for key, _, command, _ in [] if args.merge else RUNS:
        if args.only and key not in args.only:
            continue
        if key in NEEDS_GPU and not has_gpu():
            print(f"== {key}: skipped, needs a GPU (torch sees none); its last figures are kept", flush=True)
            continue
        print(f"== {key}: {' '.join(command)}", flush=True)
        code, output, seconds = run(command)
        print(output, flush=True)
        failed += code != 0
        device = device_of(key, output)
        results.setdefault(key, {})[device] = {
            "code": code,
            "command": command,
            "output": output.strip(),
            "seconds": seconds,
            "device": device,
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
        }
    if args.merge:
        for key, by_device in per_device(json.loads(args.merge.read_text())).items():
            results.setdefault(key, {}).update(by_device)
    store.write_text(json.dumps(results, indent=1))
    args.out.write_text(render(results))
    print(f"wrote {args.out}")
    return 1 if failed else 0


def per_device(results: dict) -> dict:
    """{benchmark: {device: result}}; a file written before results were kept per device held one result per
    benchmark, which becomes its device's."""
    return {
        key: {entry.get("device") or entry["machine"].split(",")[0]: entry} if "code" in entry else entry
        for key, entry in results.items()
    }


def render(results: dict) -> str:
    summary, sections = [], []
    for key, title, command, headline in RUNS:
        if key not in results:
            if key in NEEDS_GPU:
                summary.append(f"| {title} | | not run yet: needs a GPU (`python {' '.join(command)}` on one) |")
            continue
        for r in results[key].values():
            _render_one(r, title, command, headline, summary, sections)
    return "\n".join(
        [
            "# Benchmark results",
            "",
            "Written by `benchmarks/write_results.py` (`make bench`; raw results in `RESULTS.json`). Ratios are what "
            "to read: absolute numbers move with the load of a shared machine. Each benchmark's docstring says what it "
            "measures and how the two sides are aligned. A benchmark run on several CPU families has a row and a "
            "section for each: a CPU figure holds for the family it names.",
            "",
            "| benchmark | device | headline |",
            "|---|---|---|",
            *summary,
            "",
            *sections,
        ]
    )


def _render_one(r: dict, title: str, command: list[str], headline: str, summary: list, sections: list) -> None:
    """One device's result of a benchmark: its summary row and its section."""
    lines = [line.strip() for line in r["output"].splitlines() if re.search(headline, line)] if not r["code"] else []
    cell = "<br>".join(line.replace("|", "\\|") for line in lines) if lines else f"FAILED (exit {r['code']})"
    device = r.get("device") or r["machine"].split(",")[0]  # results written before the device was stored
    summary.append(f"| {title} | {device} | {cell} |")
    host = "" if r["machine"].startswith(device) else f"{device}, host: "  # a GPU's figures, or another machine's
    as_run = " ".join(r.get("command", command))  # what produced these figures (the RUNS entry may have moved)
    sections.append(
        f"## {title} ({device})\n\n`python {as_run}`: {r['seconds'] / 60:.1f} min on {r['date']}, "
        f"{host}{r['machine']}\n\n```\n{r['output']}\n```\n"
    )


if __name__ == "__main__":
    sys.exit(main())
