"""`rllm sft CONFIG [key=value ...]`: supervised fine-tuning with the config `rllm train` reads plus its `sft` section.

rllm sft configs/arithmetic_sft.yaml sft.episodes=runs/eval-arithmetic-20261126-120000   # successes of a run
rllm sft configs/arithmetic_sft.yaml sft.episodes=null sft.messages=chats.jsonl        # TRL-style conversations
rllm sft configs/arithmetic_sft.yaml sft.episodes=runs/eval-... --export-trl rows.jsonl   # for trl.SFTTrainer
rllm sft configs/arithmetic_sft.yaml --resume runs/sft-eval-arithmetic-20261126-121500
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sft", help="supervised fine-tuning on a run's successes or on conversations (config + "
                       "key=value overrides)")  # fmt: skip
    p.add_argument("config", nargs="?", help="YAML config, e.g. configs/arithmetic_sft.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. sft.episodes=runs/eval-... sft.epochs=2")
    p.add_argument("--resume", default=None, help="continue a run directory from its latest checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--export-trl", metavar="PATH", default=None,
                   help="write the selected rows as TRL's pre-tokenized SFT dataset (input_ids, completion_mask "
                   "JSONL) and exit without training")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm.config import ConfigError, load_config

    overrides = list(args.overrides) + ([f"trainer.resume={args.resume}"] if args.resume else [])
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    from rllm.training.sft import SFTTrainer
    from rllm.training.trainer import format_result_table

    if args.export_trl:
        from rllm.models.registry import load_tokenizer
        from rllm.training.sft import load_sft_rows
        from rllm.training.sft_data import export_trl

        rows, stats = load_sft_rows(config, load_tokenizer(config.model.name))
        print(f"wrote {export_trl(rows, args.export_trl)} rows ({stats['loss_tokens']} trained tokens) to "
              f"{args.export_trl}")  # fmt: skip
        return 0
    result = SFTTrainer(config=config, progress=not args.no_progress).train()
    print(format_result_table(result))
    return 0
