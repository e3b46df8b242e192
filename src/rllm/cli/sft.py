"""`rllm sft CONFIG [key=value ...]` and `rllm dpo CONFIG [key=value ...]`: supervised fine-tuning and direct
preference optimisation, with the config `rllm train` reads plus its `sft` / `dpo` section.

rllm sft configs/arithmetic_sft.yaml sft.episodes=runs/eval-arithmetic-20261126-120000   # successes of a run
rllm sft configs/arithmetic_sft.yaml sft.episodes=null sft.messages=chats.jsonl        # TRL-style conversations
rllm sft configs/arithmetic_sft.yaml sft.episodes=runs/eval-... --export-trl rows.jsonl   # for trl.SFTTrainer
rllm dpo configs/arithmetic_dpo.yaml dpo.episodes=runs/eval-arithmetic-20261126-120000   # success/failure pairs
rllm dpo configs/arithmetic_dpo.yaml dpo.episodes=runs/eval-... --export-trl prefs.jsonl  # for trl.DPOTrainer
rllm sft --resume runs/sft-eval-arithmetic-20261126-121500         # with the run's own config
rllm rft configs/arithmetic_sft.yaml rft.attempts=4        # attempts -> successes of mixed tasks -> SFT -> before/after
"""

from __future__ import annotations

import argparse
import sys

_HELP = {
    "sft": (
        "supervised fine-tuning on a run's successes or on conversations",
        "configs/arithmetic_sft.yaml",
        "sft.episodes=runs/eval-... sft.epochs=2",
        "the selected rows as TRL's pre-tokenized SFT dataset (input_ids, completion_mask JSONL)",
    ),
    "dpo": (
        "direct preference optimisation on a run's success/failure pairs or on preference records",
        "configs/arithmetic_dpo.yaml",
        "dpo.episodes=runs/eval-... dpo.beta=0.1",
        "the pairs as TRL's plain-text preference dataset (prompt, chosen, rejected JSONL)",
    ),
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    for command, (summary, config, overrides, export) in _HELP.items():
        p = sub.add_parser(command, help=f"{summary} (config + key=value overrides)")
        p.add_argument("config", nargs="?", help=f"YAML config or shipped config name, e.g. {config}")
        p.add_argument("overrides", nargs="*", help=f"dotted overrides, e.g. {overrides}")
        p.add_argument(
            "--resume",
            default=None,
            help="continue a run directory from its latest checkpoint, with "
            "the run's own config (no CONFIG needed; a CONFIG given must match it)",
        )
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.add_argument("--export-trl", metavar="PATH", default=None, help=f"write {export} and exit without training")
        p.set_defaults(run=run, kind=command)
    p = sub.add_parser(
        "rft",
        help="rejection-sampling fine-tuning: sampled attempts at the training tasks, SFT on "
        "the successes of tasks with 0 < pass rate < 1, before/after validation",
    )
    p.add_argument("config", nargs="?", help="YAML config or shipped config name, e.g. arithmetic_sft")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rft.attempts=8 sft.max_per_task=2")
    p.add_argument("--resume", default=None, help="continue an rft run directory (attempts kept, SFT resumed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_rft)


def run(args: argparse.Namespace) -> int:
    from rllm.cli._resume import load_run_config, report_interrupted
    from rllm.config import ConfigError

    try:
        config = load_run_config(args.config, list(args.overrides), args.resume)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    if args.export_trl:
        return _export(config, args.kind, args.export_trl)
    from rllm import runtime
    from rllm.training.dpo import DPOTrainer
    from rllm.training.interrupt import TrainingInterrupted
    from rllm.training.sft import SFTTrainer
    from rllm.training.trainer import format_result_table

    trainer = {"sft": SFTTrainer, "dpo": DPOTrainer}[args.kind]
    runtime.enable(config.runtime.options())  # the command owns its process: its tuning is on (config `runtime:`)
    try:
        result = trainer(config=config, progress=not args.no_progress).train()
    except TrainingInterrupted as exc:
        return report_interrupted(exc, f"rllm {args.kind}")
    print(format_result_table(result))
    return 0


def run_rft(args: argparse.Namespace) -> int:
    from rllm.cli._resume import load_run_config, report_interrupted
    from rllm.config import ConfigError

    try:  # the rft run's own config.yaml is its top-level config; run_rft resumes the attempts and the SFT inside
        config = load_run_config(args.config, list(args.overrides), args.resume, key=None)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    from rllm import runtime
    from rllm.rft import run_rft as rft
    from rllm.training.interrupt import TrainingInterrupted
    from rllm.training.trainer import format_result_table

    runtime.enable(config.runtime.options())  # the command owns its process: its tuning is on (config `runtime:`)
    try:
        result = rft(config, resume=args.resume, progress=not args.no_progress)
    except TrainingInterrupted as exc:  # the SFT inside was stopped: `rllm rft --resume` continues the whole run
        rft_run = args.resume or (exc.run_dir.parent if exc.run_dir is not None else None)  # <rft run>/sft
        return report_interrupted(exc, "rllm rft", rft_run)
    attempts, data = result["attempts"], result["data"]
    print(
        f"attempts: {attempts['episodes']} episodes, success rate {attempts['success_rate']:.3f}; kept "
        f"{data['rows']} rows from {data['tasks']} tasks with 0 < pass rate < 1"
    )
    print(format_result_table(result))
    print(f"rft run: {result['rft_run_dir']}")
    return 0


def _export(config, kind: str, path: str) -> int:
    from rllm.models.registry import load_tokenizer
    from rllm.training.sft_data import check_data_paths

    check_data_paths(config, kind)  # before the tokenizer loads
    tokenizer = load_tokenizer(config.model.name)
    if kind == "sft":
        from rllm.training.sft import load_sft_rows
        from rllm.training.sft_data import export_trl

        rows, stats = load_sft_rows(config, tokenizer)
        print(f"wrote {export_trl(rows, path)} rows ({stats['loss_tokens']} trained tokens) to {path}")
    else:
        from rllm.training.dpo import load_dpo_pairs
        from rllm.training.dpo_data import export_trl_preferences

        pairs, _ = load_dpo_pairs(config, tokenizer)
        print(f"wrote {export_trl_preferences(pairs, tokenizer, path)} preference pairs to {path}")
    return 0
