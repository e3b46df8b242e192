"""Which generated code families does the base model solve sometimes? Samples the embedded model on every family of
`rllm.tasks.code` and prints each family's pass rate, then the families with a rate in [--low, --high] (default
[0.1, 0.9]) as the `data.task_args.families` line of a config: a family the model always or never solves gives
GRPO no signal.

    python benchmarks/calibrate_code.py                          # 110 tasks x 4 samples at temperature 0.8
    python benchmarks/calibrate_code.py --tasks 44 rollout.val_n=8   # fewer tasks, more samples each

It runs `rllm eval configs/code_grpo.yaml` (in a subprocess, as a user would) on tasks from a seed no config trains
or validates on (7), sampled as training samples them (`rollout.temperature` of the config, `rollout.n` samples),
and reads the run's episodes: a family's pass rate is the share of its episodes whose code passed every test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

from rllm.runs import read_episode_records
from rllm.tasks.code import make_code_tasks
from smoke import add_smoke_flag, device_line, tiny_training_overrides

ROOT = Path(__file__).resolve().parents[1]
SEED = 7


def family_pass_rates(run_dir: Path, tasks: list[dict]) -> dict[str, tuple[int, int]]:
    """family -> (episodes passed, episodes) over the run's episodes."""
    family_of = {task["id"]: task["fn_name"] for task in tasks}
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for record in read_episode_records(run_dir):
        episode = record["episode"]
        counts[family_of[episode.task_id]][0] += int(episode.is_correct)
        counts[family_of[episode.task_id]][1] += 1
    return {family: (passed, total) for family, (passed, total) in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/code_grpo.yaml", help="the config whose model and sampling count")
    parser.add_argument("--tasks", type=int, default=110, help="tasks to sample (families are drawn at random)")
    parser.add_argument("--low", type=float, default=0.1, help="keep families whose pass rate is at least this")
    parser.add_argument("--high", type=float, default=0.9, help="... and at most this")
    parser.add_argument("overrides", nargs="*", help="more key=value overrides of rllm eval")
    add_smoke_flag(parser)
    args = parser.parse_args()
    print(device_line())
    if args.smoke:
        args.tasks, args.overrides = 2, [*tiny_training_overrides(), "rollout.val_n=1", *args.overrides]
    config = yaml.safe_load((ROOT / args.config).read_text())
    rollout = config.get("rollout", {})
    with tempfile.TemporaryDirectory() as runs:
        sampling = [
            f"rollout.val_n={rollout.get('n', 4)}",
            f"rollout.val_temperature={rollout.get('temperature', 1.0)}",
        ]
        overrides = [
            f"data.val_size={args.tasks}",
            f"data.val_seed={SEED}",
            "data.task_args={}",
            *sampling,
            f"trainer.run_dir={runs}",
            "trainer.name=calibrate",
            *args.overrides,
        ]
        out = subprocess.run(
            [sys.executable, "-m", "rllm.cli.main", "eval", args.config, *overrides, "--no-progress"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            sys.exit(f"rllm eval failed ({out.returncode}):\n{out.stderr[-3000:]}")
        rates = family_pass_rates(Path(runs) / "calibrate", make_code_tasks(args.tasks, seed=SEED))
    print("| family | pass rate | episodes | kept |\n|---|---|---|---|")
    kept = []
    for family, (passed, total) in sorted(rates.items(), key=lambda item: item[1][0] / item[1][1]):
        rate = passed / total
        keep = args.low <= rate <= args.high
        kept += [family] if keep else []
        print(f"| {family} | {rate:.2f} | {total} | {'yes' if keep else 'no'} |")
    print(f"\nfamilies with a pass rate in [{args.low}, {args.high}]: {len(kept)} of {len(rates)}")
    print(f"data.task_args.families: [{', '.join(sorted(kept))}]")


if __name__ == "__main__":
    main()
