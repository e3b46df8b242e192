"""`rllm train CONFIG [key=value ...]`: train an agent with the settings of a YAML config plus dotted overrides.

rllm train configs/frozenlake_grpo.yaml trainer.total_steps=20 rollout.n=8
rllm train --resume runs/train-frozenlake-grpo-20261121-120000     # continue a run with its own config
rllm train --resume runs/train-frozenlake-grpo-20261121-120000 trainer.total_steps=40   # longer (rllm.training.resume)
rllm train --help-config          # every key, its type, default and meaning
rllm train arithmetic --agent openai-agents agent_args.tools=[calculator]   # a task, the default config, a harness
rllm train configs/arithmetic_grpo.yaml trainer.backend=verl trainer.workers_per_node=2   # verl's workers on Ray

verl pins its own transformers, so it lives in its own environment (`make verl` builds `.venv-verl`). With
`trainer.backend=verl`, a `rllm train` whose Python lacks verl hands the whole command over to that environment's
Python (`$RLLM_VERL_PYTHON`, else `./.venv-verl/bin/python`): one command line, whichever venv typed it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

VERL_VENV_PYTHON = Path(".venv-verl") / "bin" / "python"


def _verl_python() -> str | None:
    """$RLLM_VERL_PYTHON, else .venv-verl in the current folder, else beside the checkout rllm runs from."""
    import rllm

    checkout = Path(rllm.__file__).resolve().parents[2]
    candidates = [os.environ.get("RLLM_VERL_PYTHON"), VERL_VENV_PYTHON, checkout / VERL_VENV_PYTHON]
    return next((str(c) for c in candidates if c and Path(c).exists()), None)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an agent with RL (config file + key=value overrides)")
    p.add_argument(
        "config",
        nargs="?",
        help="YAML config, shipped config name (rllm configs): frozenlake_grpo, or a task with the default config: "
        "arithmetic, a benchmark (gsm8k), a hub environment (reasoning_gym:leg_counting)",
    )
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.total_steps=20")
    p.add_argument(
        "--resume",
        default=None,
        help="continue a run directory from its latest checkpoint, with the "
        "run's own config (no CONFIG needed; a CONFIG given must match it)",
    )
    p.add_argument("--agent", default=None, help="a harness that plays the task (rllm.harnesses): react, ...")
    p.add_argument("--data-dir", default=None, help="a benchmark's local copy (rllm datasets pull): data.data_dir")
    p.add_argument("--help-config", action="store_true", help="list every config key and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm.cli._resume import load_run_config, report_interrupted
    from rllm.config import ConfigError, config_help

    if args.help_config:
        print(config_help())
        return 0
    config_arg, overrides = args.config, list(args.overrides)
    if args.resume is None and config_arg is not None and _names_a_task(config_arg):
        config_arg, overrides = None, [f"data.task={config_arg}", *overrides]
    if args.agent is not None:
        overrides.append(f"agent={args.agent}")
    if args.data_dir is not None:
        overrides.append(f"data.data_dir={args.data_dir}")
    try:
        config = load_run_config(config_arg, overrides, args.resume)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2

    if config.trainer.backend == "verl" and importlib.util.find_spec("verl") is None:
        return _run_in_verl_environment(args.argv)

    from rllm import runtime

    runtime.enable(config.runtime.options())  # the command owns its process: its tuning is on (config `runtime:`)
    from rllm.training.interrupt import TrainingInterrupted
    from rllm.training.trainer import AgentTrainer, format_result_table

    try:
        result = AgentTrainer(config=config, progress=not args.no_progress).train()
    except TrainingInterrupted as exc:
        return report_interrupted(exc, "rllm train")
    print(format_result_table(result))
    return 0


def _names_a_task(name: str) -> bool:
    """A task's name (built-in, benchmark, hub:name) that is neither a file nor a shipped config: trained with the
    default config."""
    from rllm.cli.configs import shipped_configs
    from rllm.tasks import is_task_name

    return is_task_name(name) and not Path(name).exists() and name not in shipped_configs()


def _run_in_verl_environment(argv: list[str]) -> int:
    """Replace this process by the same command under the verl environment's Python (signals, exit code and
    output are then that process's own); or say how to install verl."""
    from rllm.training.backends.verl import INSTALL_HINT

    python = _verl_python()
    if python is None or os.environ.get("RLLM_VERL_REEXEC"):
        print(
            f"error: trainer.backend=verl needs verl, which this Python ({sys.executable}) lacks: {INSTALL_HINT}; "
            "or point RLLM_VERL_PYTHON at a Python that has it",
            file=sys.stderr,
        )
        return 2
    os.environ["RLLM_VERL_REEXEC"] = "1"  # never loop if that Python lacks verl too
    os.execv(python, [python, "-m", "rllm.cli.main", *argv])
    return 0  # not reached
