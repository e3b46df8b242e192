"""`rllm` command line: thin subcommands over the library.

rllm eval frozenlake data.val_size=16            # the embedded model on a CPU
rllm eval configs/math_grpo.yaml rollout.server=openai rollout.openai.base_url=URL   # any endpoint
rllm train configs/frozenlake_grpo.yaml trainer.total_steps=20   # RL on the embedded model
rllm train arithmetic_grpo trainer.total_steps=1  # a shipped config by name (rllm configs lists them)
rllm sft configs/arithmetic_sft.yaml sft.episodes=runs/eval-...    # supervised fine-tuning on a run's successes
rllm dpo configs/arithmetic_dpo.yaml dpo.episodes=runs/eval-...    # DPO on its success/failure pairs
rllm rft configs/arithmetic_sft.yaml rft.attempts=4                # rejection sampling: attempts, keep, SFT
rllm configs cp arithmetic_grpo my.yaml          # copy a shipped config to edit
rllm datasets list                               # benchmarks by name: rllm eval gsm8k, rllm train gsm8k
rllm fetch qwen2.5-coder-0.5b-instruct           # download + verify + convert an embedded model
rllm serve gateway --upstream URL --model NAME --tokenizer NAME   # OpenAI-compatible gateway, exact token ids
rllm swe build --out tasks.jsonl                 # SWE tasks from PyPI sdists (mutations, hidden tests)
rllm view runs/                                  # browse runs: curves, episodes, the trained-token overlay
rllm audit runs/<name>                           # the run's alarms (reward hacking, instability); exit 1 on any
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rllm.cli import audit as audit_cmd
from rllm.cli import configs as configs_cmd
from rllm.cli import datasets as datasets_cmd
from rllm.cli import eval as eval_cmd
from rllm.cli import fetch as fetch_cmd
from rllm.cli import serve as serve_cmd
from rllm.cli import sft as sft_cmd
from rllm.cli import swe as swe_cmd
from rllm.cli import train as train_cmd
from rllm.cli import view as view_cmd
from rllm.errors import RllmError

__all__ = ["main"]


class _IntermixedParser(argparse.ArgumentParser):
    """A subcommand's parser that takes its options before or after the overrides (`rllm train CONFIG --no-progress
    trainer.total_steps=20`): plain argparse stops collecting positionals at the first option and then refuses the
    rest. Parsers with their own subcommands (`rllm serve gateway`) cannot be parsed this way and parse as usual."""

    _intermixing = False

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        nested = any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._get_positional_actions())
        if self._intermixing or nested:
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # parse_known_intermixed_args calls parse_known_args itself
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rllm", description="Train and evaluate language agents with RL.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_IntermixedParser)
    audit_cmd.add_parser(sub)
    configs_cmd.add_parser(sub)
    datasets_cmd.add_parser(sub)
    eval_cmd.add_parser(sub)
    fetch_cmd.add_parser(sub)
    serve_cmd.add_parser(sub)
    sft_cmd.add_parser(sub)
    swe_cmd.add_parser(sub)
    train_cmd.add_parser(sub)
    view_cmd.add_parser(sub)
    for command_parser in sub.choices.values():
        command_parser.set_defaults(parser=command_parser)  # for the usage of a command that lacks its config
    return parser


# commands that run a config, and an example of one: without it they print their usage rather than train defaults
_CONFIG_EXAMPLES = {
    "train": "configs/frozenlake_grpo.yaml",
    "sft": "configs/arithmetic_sft.yaml",
    "dpo": "configs/arithmetic_dpo.yaml",
    "rft": "configs/arithmetic_sft.yaml",
}


def _require_config(args: argparse.Namespace) -> None:
    """Exit with the command's usage when it was given no config (a run directory to resume, or `--help-config`,
    is enough)."""
    example = _CONFIG_EXAMPLES.get(args.command)
    if example is None or getattr(args, "resume", None) or getattr(args, "help_config", False):
        return
    if args.config and not ("=" in args.config and not Path(args.config).exists()):  # an override is no config
        return
    command = f"rllm {args.command} {example}"
    args.parser.error(
        f"give a config, e.g. {command} (key=value overrides may follow; every key: rllm train --help-config)"
    )


def _resolve_config_name(args: argparse.Namespace) -> None:
    """A shipped config's name (`rllm train arithmetic_grpo`) becomes its file. `rllm eval` also takes a
    task's name, so there only shipped names and paths resolve and anything else stays a task; `rllm train` takes
    one too (`rllm train arithmetic --agent react`: the default config on that task)."""
    config = getattr(args, "config", None)
    if args.command not in (*_CONFIG_EXAMPLES, "eval") or not config or ("=" in config and not Path(config).exists()):
        return
    if args.command == "train" and Path(config).is_dir():  # a folder of task folders (Harbor's): the default config
        from rllm.tasks import is_task_name

        if is_task_name(config):
            args.config, args.overrides = None, [f"data.task={config}", *args.overrides]
            return
    try:
        args.config = configs_cmd.resolve_config(config)
    except RllmError:
        from rllm.tasks import is_task_name

        if args.command != "eval" and not (args.command == "train" and is_task_name(config)):
            raise  # eval, train: a task's name (built-in, a benchmark, hub:name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _require_config(args)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as typed (train may hand it over)
    try:
        _resolve_config_name(args)
        return int(args.run(args) or 0)
    except RllmError as exc:  # our own errors already say what to do: no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C where no command saves anything (training handles its own): one line
        print(f"\ninterrupted: rllm {args.command} stopped (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
