"""Does training make each built-in agent better? Trains every shipped RL config for its documented budget on the
embedded model, validates before and after on its held-out tasks (fixed seeds), and prints one row per config.

    python benchmarks/learning.py                                  # every row, its own budget (hours on 2 cores)
    python benchmarks/learning.py --config arithmetic_grpo --steps 3   # one row, a shortened budget
    python benchmarks/learning.py --markdown benchmarks/LEARNING.md    # also write the table as Markdown

A row is a shipped config, or a config with overrides (`ROWS`): the multi-turn variants of math and code, and the
arithmetic config under other estimators and policy losses, so those compare on one task and budget. Each runs as a
user runs it (`rllm train configs/<config>.yaml <overrides>`, in a subprocess) into one folder of runs.
Validation success per task = the share of its validation episodes that are correct, greedy as the config says;
the gain is the mean over tasks of after - before, its 95 % interval a paired bootstrap over tasks (10,000
resamples, seed 0), and a config "learns" when the interval's lower end is above 0. A row whose run fails is
printed as failed (with the error's last line) and the others go on. The Markdown table is rewritten after every
row, so an interrupted table keeps its finished rows. Prints `configs learning: K/N` last.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

from rllm.runs import read_episode_records
from smoke import add_smoke_flag, device_line, tiny_training_overrides

ROOT = Path(__file__).resolve().parents[1]
# row -> (config, overrides): every shipped RL config (the SFT / DPO ones train from a run's episodes: `rllm rft`
# covers them), the multi-turn variants, and the arithmetic task under each estimator and policy loss
_MULTI_TURN = ["workflow=agent_env", "rollout.max_steps=3"]
ROWS: dict[str, tuple[str, list[str]]] = {
    "arithmetic_grpo": ("arithmetic_grpo", []),
    "countdown_solver_judge": ("countdown_solver_judge", []),
    "frozenlake_grpo": ("frozenlake_grpo", []),
    "math_grpo": ("math_grpo", []),
    "math_refine": ("math_grpo", [*_MULTI_TURN, "workflow_args={}"]),  # single_turn's system_prompt: the agent's
    "code_grpo": ("code_grpo", []),
    "code_repair": ("code_grpo", _MULTI_TURN),
    "mcp_tool_agent": ("mcp_tool_agent", []),
    "openai_agent_grpo": ("openai_agent_grpo", []),
    "openai_agents_grpo": ("openai_agents_grpo", []),  # the OpenAI Agents SDK's agent, a harness (agent:)
    "web_grpo": ("web_grpo", []),
    "swe_grpo": ("swe_grpo", []),
    "shapes_grpo": ("shapes_grpo", []),  # the vision-language agent, from the base model (no SFT warm start)
    "textarena_grpo": ("textarena_grpo", []),  # a TextArena game from its hub, multi-turn (textarena:ENV_ID)
    "reasoning_gym_grpo": ("reasoning_gym_grpo", []),  # a reasoning-gym generator with its own scorer
    "arithmetic_rloo": ("arithmetic_grpo", ["algorithm.advantage=rloo"]),
    "arithmetic_dr_grpo": (
        "arithmetic_grpo",
        ["algorithm.advantage=dr_grpo", "algorithm.loss_agg=seq-mean-token-sum-norm"],
    ),
    "arithmetic_ppo_critic": ("arithmetic_grpo", ["algorithm.advantage=gae", "algorithm.lam=0.95"]),
    "arithmetic_gspo": (
        "arithmetic_grpo",
        [
            "algorithm.policy_loss=gspo",
            "algorithm.clip_low=3e-4",
            "algorithm.clip_high=4e-4",
            "algorithm.loss_agg=seq-mean-token-mean",
        ],
    ),
    "arithmetic_cispo": (
        "arithmetic_grpo",
        ["algorithm.policy_loss=cispo", "algorithm.clip_low=0.99", "algorithm.clip_high=0.28"],
    ),
    "arithmetic_dapo": (
        "arithmetic_grpo",
        [
            "algorithm.drop_uniform_groups=true",
            "algorithm.max_sampling_rounds=3",
            "algorithm.overlong_buffer=4",
            "algorithm.clip_high=0.28",
            "algorithm.loss_agg=token-mean",
        ],
    ),
}
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


def train(row: str, runs: Path, steps: int | None, extra: list[str]) -> tuple[Path, float, str]:
    """`rllm train configs/<config>.yaml <overrides>` of `row` into `runs/<row>`; the run directory, wall seconds
    and the model's name."""
    config_name, row_overrides = ROWS[row]
    overrides = [*row_overrides, f"trainer.run_dir={runs}", f"trainer.name={row}", *extra]
    if steps is not None:
        overrides.append(f"trainer.total_steps={steps}")
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", "train", f"configs/{config_name}.yaml", *overrides, "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"{row}: rllm train failed ({out.returncode}):\n{out.stderr[-3000:]}")
    config = yaml.safe_load((runs / row / "config.yaml").read_text())
    return runs / row, seconds, config["model"]["name"]


def table_row(row: str, runs: Path, steps: int | None, extra: list[str]) -> tuple[str, bool, float]:
    """The Markdown line of one row, whether it learns, and its training seconds (a failed run: its error)."""
    try:
        run_dir, seconds, model = train(row, runs, steps, extra)
    except RuntimeError as exc:
        last = next((line for line in reversed(str(exc).splitlines()) if line.strip()), "?")
        return f"| {row} | | | | failed: {last[:160]} | | no |", False, 0.0
    steps_done = max(r["step"] for r in read_episode_records(run_dir, split="val"))
    before, after = task_success(run_dir, 0), task_success(run_dir, steps_done)
    gain, low, high = paired_bootstrap(before, after)
    mean_before, mean_after = (sum(d.values()) / len(d) for d in (before, after))
    verdict = "yes" if low > 0 else "no"
    line = (
        f"| {row} | {model} | {steps_done} | {seconds / 60:.1f} min | {mean_before:.3f} → {mean_after:.3f} "
        f"({len(before)} tasks) | {gain:+.3f} [{low:+.3f}, {high:+.3f}] | {verdict} |"
    )
    return line, low > 0, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", choices=list(ROWS), help="only these rows (repeatable)")
    parser.add_argument("--steps", type=int, default=None, help="a shortened budget: this many steps each")
    parser.add_argument("--runs", type=Path, default=None, help="folder for the runs (default: runs/learning-<time>)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table to this Markdown file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every row")
    add_smoke_flag(parser)
    args = parser.parse_args()
    print(device_line())
    if args.smoke:  # one row, one step, 2 validation tasks, into a folder deleted when main returns
        smoke_runs = tempfile.TemporaryDirectory(prefix="rllm-learning-smoke-")
        args.config, args.steps, args.runs = ["arithmetic_grpo"], 1, Path(smoke_runs.name)
        args.overrides = [*tiny_training_overrides(), "data.val_size=2", *args.overrides]
    runs = args.runs or ROOT / "runs" / time.strftime("learning-%Y%m%d-%H%M%S")
    rows = args.config or list(ROWS)
    header = "| config | model | steps | wall | validation before → after | gain [95 % interval] | learns |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    print(header, flush=True)
    learning, total_seconds = 0, 0.0
    for done, row in enumerate(rows, 1):
        line, learns, seconds = table_row(row, runs, args.steps, args.overrides)
        lines.append(line)
        learning, total_seconds = learning + learns, total_seconds + seconds
        print(line, flush=True)
        footer = f"{time.strftime('%Y-%m-%d')}, {total_seconds / 60:.0f} min of training in all; runs in {runs}"
        summary = f"configs learning: {learning}/{done}" + (f" (of {len(rows)} rows)" if done < len(rows) else "")
        if args.markdown is not None:
            args.markdown.write_text("\n".join([*lines, "", footer, "", summary]) + "\n", encoding="utf-8")
    print(footer)
    print(summary)


if __name__ == "__main__":
    main()
