"""`rllm eval CONFIG|TASK [key=value ...]`: evaluate with the config tree training reads (`rllm.evaluation`).

    rllm eval configs/math_grpo.yaml                       # the validation split of that training config
    rllm eval frozenlake data.val_size=16                  # a built-in task with the default config
    rllm eval gsm8k --data-dir data                        # a benchmark of the catalog (rllm datasets list)
    rllm eval arithmetic --agent openai-agents             # played by a harness (rllm.harnesses)
    rllm eval math rollout.server=openai rollout.openai.base_url=http://localhost:8000/v1 \\
        rollout.openai.model=Qwen/Qwen2.5-0.5B-Instruct rollout.openai.tokenizer=Qwen/Qwen2.5-0.5B-Instruct

Prints success rate, mean reward, mean turns, tokens/s, terminations and per-role numbers, and writes a run
directory (config, manifest, episodes.jsonl, summary.json).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    # no abbreviated options: `--n 2` would otherwise be taken for --no-progress (and "2" for an override)
    p = sub.add_parser(
        "eval", help="evaluate an agent: a config's validation split, or a built-in task's", allow_abbrev=False
    )
    p.add_argument(
        "config",
        help="a YAML config, a shipped config name (math_grpo), a task (math), a benchmark (gsm8k: rllm datasets "
        "list) or a hub environment (reasoning_gym:leg_counting)",
    )
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. data.val_size=100 rollout.val_n=4")
    p.add_argument("--agent", default=None, help="a harness that plays the task (rllm.harnesses): react, ...")
    p.add_argument("--data-dir", default=None, help="a benchmark's local copy (rllm datasets pull): data.data_dir")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm import runtime
    from rllm.config import load_config
    from rllm.evaluation import evaluate

    path, overrides = (args.config, []) if Path(args.config).is_file() else (None, [f"data.task={args.config}"])
    agent = [] if args.agent is None else [f"agent={args.agent}"]
    data_dir = [] if args.data_dir is None else [f"data.data_dir={args.data_dir}"]
    config = load_config(path, [*overrides, *args.overrides, *agent, *data_dir])
    runtime.enable(config.runtime.options())  # the command owns its process: its tuning is on (config `runtime:`)
    summary, run_dir = evaluate(config, progress=not args.no_progress)
    _print_summary(summary, run_dir)
    return 0


def _print_summary(summary: dict, run_dir: Path) -> None:
    print(f"success rate   {summary['success_rate']:.3f}  ({summary['episodes']} episodes)")
    print(f"mean reward    {summary['reward_mean']:.3f}")
    print(f"mean turns     {summary['turns_mean']:.2f}")
    print(
        f"tokens/s       {summary['tokens_per_s']:.1f}  ({summary['completion_tokens']} tokens "
        f"in {summary['wall_time_s']:.1f} s)"
    )
    endings = {k.removeprefix("termination/"): round(v, 3) for k, v in summary.items() if k.startswith("termination/")}
    print(f"terminations   {json.dumps(endings)}")
    print(f"token mismatch {summary['token_mismatch']}")
    roles = sorted({key.split("/")[1] for key in summary if key.startswith("role/")})
    if len(roles) > 1:
        for role in roles:
            print(
                f"role {role:9} success {summary[f'role/{role}/success_rate']:.3f}  "
                f"mean reward {summary[f'role/{role}/reward_mean']:.3f}  "
                f"({summary[f'role/{role}/count']} trajectories)"
            )
    print(f"run directory  {run_dir}   (browse it: rllm view {run_dir})")
