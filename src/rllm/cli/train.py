"""`rllm train CONFIG [key=value ...]`: train an agent with the settings of a YAML config plus dotted overrides.

rllm train configs/frozenlake_grpo.yaml trainer.total_steps=20 rollout.n=8
rllm train configs/frozenlake_grpo.yaml --resume runs/train-frozenlake-grpo-20261121-120000
rllm train --help-config          # every key, its type, default and meaning
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an agent with RL (config file + key=value overrides)")
    p.add_argument("config", nargs="?", help="YAML config, e.g. configs/frozenlake_grpo.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.total_steps=20")
    p.add_argument("--resume", default=None, help="continue a run directory from its latest checkpoint")
    p.add_argument("--help-config", action="store_true", help="list every config key and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm.config import ConfigError, config_help, load_config

    if args.help_config:
        print(config_help())
        return 0
    overrides = list(args.overrides)
    if args.resume:
        overrides.append(f"trainer.resume={args.resume}")
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2

    from rllm.training.trainer import AgentTrainer, format_result_table

    result = AgentTrainer(config=config, progress=not args.no_progress).train()
    print(format_result_table(result))
    return 0
