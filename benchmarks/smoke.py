"""What the benchmarks' `--smoke` modes share. Every benchmark takes `--smoke`: the same code path at tiny sizes, in
seconds, so that a refactor cannot break a benchmark unnoticed (tests/smoke/test_benchmarks_smoke.py runs each one
and checks that its output still carries its figures and a `device:` line). A smoke run's figures mean nothing.

    .venv/bin/python benchmarks/smoke.py benchmarks/engine_concurrency.py benchmarks/web_env.py   # several, one process
"""

from __future__ import annotations

import argparse
import atexit
import functools
import runpy
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

TOKENIZER = "smollm2-135m-instruct"  # the real chat template a tiny model is built around


def add_smoke_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: checks the script still runs")


def device_line(kernels: str | None = None) -> str:
    """`device: <CPU model> (<its vector/matrix extensions>), N usable cores[; kernels: ...]`: a figure without its
    machine is not a figure, and a CPU figure depends on the extensions (MKL and oneDNN pick their code by them)
    and on which linear shapes ran packed (`rllm.inference.kernels`, a `KernelChoice.describe()`)."""
    from rllm.cpus import describe_cpu, usable_cores

    line = f"device: {describe_cpu()}, {usable_cores()} usable cores"
    return line if kernels is None else f"{line}; kernels: {kernels}"


@functools.cache
def tiny_model_folder() -> str:
    """A tiny random-init model with SmolLM2's real tokenizer, saved once per process (deleted at exit): loads in
    a fraction of a second wherever a benchmark takes an embedded model's name or a folder."""
    from rllm.models.registry import build_tiny_model, load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER)
    folder = tempfile.mkdtemp(prefix="rllm-bench-tiny-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    build_tiny_model(tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@functools.cache
def tiny_vlm_folder() -> str:
    """A tiny random-init Idefics3 (SmolVLM's architecture) with its processor and SmolLM2's tokenizer, saved once
    per process: 64 px pictures cost 16 image tokens, as the shapes task's do in the embedded VLM."""
    from rllm.models.registry import load_tokenizer
    from rllm.models.vlm import build_tiny_vlm

    folder = tempfile.mkdtemp(prefix="rllm-bench-tiny-vlm-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    model, processor = build_tiny_vlm(load_tokenizer(TOKENIZER), seed=0, image_size=64, patch_size=16)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def tiny_training_overrides() -> list[str]:
    """Overrides that shrink a shipped config's run to seconds: the tiny model, 2 tasks x 2 samples x 8 tokens."""
    return [f"model.name={tiny_model_folder()}", "trainer.tasks_per_step=2", "rollout.n=2", "rollout.max_tokens=8"]


def run_in_process(script: Path) -> bool:
    """`python <script> --smoke` in this process (the imports and the tiny model are shared with the scripts run
    before it); False when it raised or exited non-zero (its traceback printed)."""
    sys.argv = [str(script), "--smoke"]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        return exit_.code in (None, 0)
    except Exception:
        traceback.print_exc(file=sys.stdout)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Runs the given benchmark scripts' smoke modes one after another in this process; between them a line
    `== <script>: ok|FAILED, <seconds> s` (tests/smoke/test_benchmarks_smoke.py reads the output by those lines)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("scripts", nargs="+", type=Path)
    failed = 0
    for script in parser.parse_args(argv).scripts:
        started = time.perf_counter()
        ok = run_in_process(script)
        sys.stdout.flush()
        print(f"== {script.name}: {'ok' if ok else 'FAILED'}, {time.perf_counter() - started:.1f} s", flush=True)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
