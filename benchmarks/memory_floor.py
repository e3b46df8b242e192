"""Resident-memory floor of a long full fine-tuning run (issue 53): `rllm train` of SmolLM2-135M with LoRA off, 2 tasks
x 4 samples a step, a checkpoint every 50 steps, no validation, in a child process whose resident memory (VmRSS,
its children's included) is read every 0.25 s. The samples are mapped to steps by the lines of the run's
metrics.jsonl; the floor at step S is the least resident memory while steps S-5..S+5 ran (the rollouts and the
update lift the memory within a step; the floor is what stays). Growth per 100 steps is measured from step 10
(the first steps fill torch's and malloc's caches).

    python benchmarks/memory_floor.py                 # 150 steps: 13-16 min on 2 cores
    python benchmarks/memory_floor.py --steps 80      # enough to see a growth of tens of MB per 100 steps
    python benchmarks/memory_floor.py --smoke         # the tiny model, 6 steps: checks the script still runs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import add_smoke_flag, device_line, tiny_training_overrides

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_EVERY_S = 0.25


def resident_kib(pid: int) -> int:
    """VmRSS of the process and its descendants, in KiB (0 once it is gone)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            status = Path(f"/proc/{current}/status").read_text()
            todo += [int(child) for child in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


def steps_done(metrics: Path) -> int:
    try:
        with metrics.open("rb") as lines:
            return sum(1 for _ in lines)
    except FileNotFoundError:
        return 0


def run_and_sample(command: list[str], metrics: Path) -> list[tuple[int, int]]:
    """(steps done, resident KiB) every SAMPLE_EVERY_S while the command runs; raises if it fails."""
    samples = []
    with tempfile.TemporaryFile("w+") as log:
        child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while child.poll() is None:
            samples.append((steps_done(metrics), resident_kib(child.pid)))
            time.sleep(SAMPLE_EVERY_S)
        if child.returncode != 0:
            log.seek(0)
            raise SystemExit(f"rllm train failed (exit {child.returncode}):\n{log.read()[-3000:]}")
    return samples


def floor_mb(samples: list[tuple[int, int]], first: int, last: int) -> float:
    """Least resident memory (MB) while steps first..last ran (step k runs while k-1 lines are written); never
    while the first step ran: the process was still starting (importing, loading the model)."""
    values = [kib for done, kib in samples if max(1, first - 1) <= done <= last - 1 and kib > 0]
    if not values:
        raise SystemExit(f"no sample while steps {first}-{last} ran: the run was too short to measure")
    return min(values) / 1024


def floors(samples: list[tuple[int, int]], steps: int) -> dict[int, float]:
    """Floors at step 10 (the warm-up's end), every checkpoint step before the end, and the end (a window of up to
    5 steps either side, cut at the run's ends)."""
    warm = min(10, max(1, steps // 3))
    half = max(1, min(5, steps // 10))
    points = sorted({warm, *range(50, steps, 50), steps})
    return {p: floor_mb(samples, max(1, p - half), min(steps, p + half)) for p in points}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150, help="training steps (default 150)")
    parser.add_argument("--save-every", type=int, default=50, help="checkpoint every this many steps (default 50)")
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    model = ["model.name=smollm2-135m-instruct", "trainer.tasks_per_step=2", "rollout.n=4"]
    if args.smoke:
        args.steps, args.save_every, model = 6, 3, tiny_training_overrides()
    print(device_line())
    with tempfile.TemporaryDirectory(prefix="rllm-memory-floor-") as runs:
        overrides = [
            *model,
            "model.lora.enabled=false",
            f"trainer.total_steps={args.steps}",
            f"trainer.save_every={args.save_every}",
            "data.val_size=0",
            f"trainer.run_dir={runs}",
            "trainer.name=run",
        ]
        command = [sys.executable, "-m", "rllm.cli.main", "train", "configs/arithmetic_grpo.yaml", *overrides]
        print("command:", " ".join(command[1:]), "--no-progress", flush=True)
        started = time.perf_counter()
        samples = run_and_sample([*command, "--no-progress"], Path(runs) / "run" / "metrics.jsonl")
        wall = time.perf_counter() - started
    found = floors(samples, args.steps)
    (warm, first), (end, last) = next(iter(found.items())), list(found.items())[-1]
    growth = (last - first) / (end - warm) * 100
    rounded = {step: round(mb) for step, mb in found.items()}
    print(f"steps {args.steps}, {wall:.0f} s, {len(samples)} samples; floor MB at step: {json.dumps(rounded)}")
    print(f"floor growth: {growth:+.1f} MB per 100 steps from step {warm} ({first:.0f} -> {last:.0f} MB)")


if __name__ == "__main__":
    main()
