"""Runs the speed benchmarks the README quotes and writes `benchmarks/RESULTS.md`: a summary table (the headline
line of each) with the machine and date, then each benchmark's own output in full.

    .venv/bin/python benchmarks/write_results.py              # all (about 45 minutes on 2 cores)
    .venv/bin/python benchmarks/write_results.py --only generation-fp32 engine

`make bench` runs it (after installing the `bench` extra for TRL). A benchmark that fails is recorded as failed
with its last output lines; the others still run.
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

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "RESULTS.md"
PY = sys.executable

# (key, title, arguments after the python executable, what the headline is: a regex over the output's lines)
RUNS = [
    ("generation-fp32", "LocalModel vs transformers `generate`, SmolLM2-135M, float32, 32 prompts x 64 tokens",
     ["benchmarks/local_generation.py"], r"^(sampled|greedy) |^roofline"),
    ("generation-bf16", "LocalModel vs transformers `generate`, SmolLM2-135M, bfloat16, 8 prompts x 16 tokens",
     ["benchmarks/local_generation.py", "--dtype", "bfloat16", "--num-prompts", "8", "--new-tokens", "16",
      "--repeats", "1"], r"^(sampled|greedy) |^roofline"),
    ("grpo-smollm2", "GRPO step vs TRL GRPOTrainer, SmolLM2-135M",
     ["benchmarks/grpo_vs_trl.py"], r"^ratio"),
    ("grpo-qwen", "GRPO step vs TRL GRPOTrainer, Qwen2.5-Coder-0.5B",
     ["benchmarks/grpo_vs_trl.py", "--model", "qwen2.5-coder-0.5b-instruct", "--steps", "2"], r"^ratio"),
    ("sft-vs-trl", "SFT step vs TRL SFTTrainer, SmolLM2-135M, LoRA, 16 rows",
     ["benchmarks/sft_vs_trl.py"], r"^ratio|^median"),
    ("dpo-vs-trl", "DPO step vs TRL DPOTrainer, SmolLM2-135M, LoRA, 8 pairs",
     ["benchmarks/sft_vs_trl.py", "--method", "dpo"], r"^ratio|^median"),
    ("engine", "Rollout engine concurrency (512 episodes x 5 turns, 50 ms per call)",
     ["benchmarks/engine_concurrency.py"], r"^\s+\d+ |^framework"),
    ("vlm", "The embedded VLM vs its text model (SmolLM2-135M): rollout and update time, exactness",
     ["benchmarks/vlm_step.py"], r"^ratio|^exactness"),
]  # fmt: skip


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return (f"{cpu}, {torch.get_num_threads()} torch threads, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {platform.system()} {platform.release()}")  # fmt: skip


def run(args: list[str]) -> tuple[int, str, float]:
    started = time.perf_counter()
    done = subprocess.run([PY, *args], cwd=REPO, capture_output=True, text=True, check=False)
    output = done.stdout + (f"\n[stderr tail]\n{_tail(done.stderr)}" if done.returncode else "")
    return done.returncode, output, time.perf_counter() - started


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=[key for key, *_ in RUNS],
                        help="run these only; the other sections keep their last results")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    store = args.out.with_suffix(".json")  # every run's raw result, so --only can refresh a few sections
    results = json.loads(store.read_text()) if store.exists() else {}
    failed = 0
    for key, _, command, _ in RUNS:
        if args.only and key not in args.only:
            continue
        print(f"== {key}: {' '.join(command)}", flush=True)
        code, output, seconds = run(command)
        print(output, flush=True)
        failed += code != 0
        results[key] = {"code": code, "output": output.strip(), "seconds": seconds,
                        "date": datetime.date.today().isoformat(), "machine": machine()}  # fmt: skip
    store.write_text(json.dumps(results, indent=1))
    args.out.write_text(render(results))
    print(f"wrote {args.out}")
    return 1 if failed else 0


def render(results: dict) -> str:
    summary, sections = [], []
    for key, title, command, headline in RUNS:
        if key not in results:
            continue
        r = results[key]
        lines = (
            [line.strip() for line in r["output"].splitlines() if re.search(headline, line)] if not r["code"] else []
        )
        cell = "<br>".join(line.replace("|", "\\|") for line in lines) if lines else f"FAILED (exit {r['code']})"
        summary.append(f"| {title} | {cell} |")
        sections.append(f"## {title}\n\n`python {' '.join(command)}`: {r['seconds'] / 60:.1f} min on {r['date']}, "
                        f"{r['machine']}\n\n```\n{r['output']}\n```\n")  # fmt: skip
    return "\n".join([
        "# Benchmark results", "",
        "Written by `benchmarks/write_results.py` (`make bench`; raw results in `RESULTS.json`). Ratios are what to "
        "read: absolute numbers move with the load of a shared machine. Each benchmark's docstring says what it "
        "measures and how the two sides are aligned.", "",
        "| benchmark | headline |", "|---|---|", *summary, "", *sections,
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
