"""Does training make each built-in agent better? Trains every shipped RL config for its documented budget on the
embedded model, validates before and after on its held-out tasks (fixed seeds), and prints one row per config.

    python benchmarks/learning.py                                  # every config, its own budget (hours on 2 cores)
    python benchmarks/learning.py --config arithmetic_grpo --steps 3   # one config, a shortened budget
    python benchmarks/learning.py --markdown benchmarks/LEARNING.md    # also write the table as Markdown

Each config runs as a user runs it (`rllm train configs/<name>.yaml`, in a subprocess) into one folder of runs.
Validation success per task = the share of its validation episodes that are correct, greedy as the config says;
the gain is the mean over tasks of after - before, its 95 % interval a paired bootstrap over tasks (10,000
resamples, seed 0), and a config "learns" when the interval's lower end is above 0. Prints `configs learning:
K/N` last.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml

from rllm.runs import read_episode_records

ROOT = Path(__file__).resolve().parents[1]
# every shipped RL config (the SFT / DPO ones train from a run's episodes: `rllm rft` covers them)
CONFIGS = ["arithmetic_grpo", "countdown_solver_judge", "frozenlake_grpo", "math_grpo", "code_grpo", "mcp_tool_agent",
           "openai_agent_grpo", "web_grpo", "swe_grpo"]  # fmt: skip
RESAMPLES = 10_000


def task_success(run_dir: Path, step: int) -> dict[str, float]:
    """Per validation task: the share of its episodes at `step` that are correct."""
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for record in read_episode_records(run_dir, split="val"):
        if record["step"] == step:
            outcomes[record["episode"].task_id].append(record["episode"].is_correct)
    return {task: sum(values) / len(values) for task, values in outcomes.items()}


def paired_bootstrap(before: dict[str, float], after: dict[str, float], seed: int = 0) -> tuple[float, float, float]:
    """Mean over tasks of after - before, and its 95 % percentile interval over `RESAMPLES` resamples of tasks."""
    tasks = sorted(set(before) & set(after))
    if not tasks:
        raise ValueError("no validation task was evaluated both before and after training")
    gains = [after[t] - before[t] for t in tasks]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(gains, k=len(gains))) / len(gains) for _ in range(RESAMPLES))
    return sum(gains) / len(gains), means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def train(name: str, runs: Path, steps: int | None, extra: list[str]) -> tuple[Path, float, str]:
    """`rllm train configs/<name>.yaml` into `runs/<name>`; the run directory, wall seconds and the model's name."""
    overrides = [f"trainer.run_dir={runs}", f"trainer.name={name}", *extra]
    if steps is not None:
        overrides.append(f"trainer.total_steps={steps}")
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rllm.cli.main", "train", f"configs/{name}.yaml", *overrides,
                          "--no-progress"], cwd=ROOT, capture_output=True, text=True, check=False)  # fmt: skip
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"{name}: rllm train failed ({out.returncode}):\n{out.stderr[-3000:]}")
    config = yaml.safe_load((runs / name / "config.yaml").read_text())
    return runs / name, seconds, config["model"]["name"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", choices=CONFIGS, help="only these configs (repeatable)")
    parser.add_argument("--steps", type=int, default=None, help="a shortened budget: this many steps each")
    parser.add_argument("--runs", type=Path, default=None, help="folder for the runs (default: runs/learning-<time>)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table to this Markdown file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every config")
    args = parser.parse_args()
    runs = args.runs or ROOT / "runs" / time.strftime("learning-%Y%m%d-%H%M%S")
    header = "| config | model | steps | wall | validation before → after | gain [95 % interval] | learns |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    print(header, flush=True)
    learning, total_seconds = 0, 0.0
    for name in args.config or CONFIGS:
        run_dir, seconds, model = train(name, runs, args.steps, args.overrides)
        total_seconds += seconds
        steps = max(r["step"] for r in read_episode_records(run_dir, split="val"))
        before, after = task_success(run_dir, 0), task_success(run_dir, steps)
        gain, low, high = paired_bootstrap(before, after)
        learns = low > 0
        learning += learns
        mean_before, mean_after = (sum(d.values()) / len(d) for d in (before, after))
        verdict = "yes" if learns else "no"
        line = (f"| {name} | {model} | {steps} | {seconds / 60:.1f} min | {mean_before:.3f} → {mean_after:.3f} "
                f"({len(before)} tasks) | {gain:+.3f} [{low:+.3f}, {high:+.3f}] | {verdict} |")  # fmt: skip
        lines.append(line)
        print(line, flush=True)
    summary = f"configs learning: {learning}/{len(args.config or CONFIGS)}"
    footer = f"{time.strftime('%Y-%m-%d')}, {total_seconds / 60:.0f} min of training in all; runs in {runs}"
    if args.markdown is not None:
        args.markdown.write_text("\n".join([*lines, "", footer, "", summary]) + "\n", encoding="utf-8")
    print(footer)
    print(summary)


if __name__ == "__main__":
    main()
