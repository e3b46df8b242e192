"""Wall time per SFT (or DPO) optimizer step, rllm's `TorchBackend.update(objective="sft")` vs TRL's `SFTTrainer`
(`update_pairs` vs `DPOTrainer` with `--method dpo`), on the same batch of the real SmolLM2-135M, in one process,
on this CPU.

    pip install -e ".[bench]"      # trl==1.16.0
    .venv/bin/python benchmarks/sft_vs_trl.py                    # 6 paired steps after one warm-up step each
    .venv/bin/python benchmarks/sft_vs_trl.py --rows 16 --steps 10 --lora false
    .venv/bin/python benchmarks/sft_vs_trl.py --method dpo       # 8 pairs a step, 2 pairs a micro-batch

The batch: `--rows` conversations (a system prompt, a question, a multi-sentence answer; lengths vary from row to row)
made into rows by `rllm.training.sft_data.rows_from_messages` and handed to TRL as those very rows
(`export_trl`: TRL's pre-tokenized `input_ids` + `completion_mask`), so both train on identical tokens and masks.
Each step is one optimizer step on the whole batch, split into micro-batches of `--micro-batch` rows.

Setting mapping (ours -> TRL 1.16 `SFTConfig`):
- precision float32 -> bf16=False, fp16=False, use_cpu=True (TRL's default is bf16).
- LoRA r=16, alpha=32, dropout 0 on q/k/v/o/gate/up/down_proj -> the same `peft.LoraConfig` (`--lora false`: full).
- micro-batches: optim.micro_batch_size=mb, one update on R rows -> per_device_train_batch_size=mb,
  gradient_accumulation_steps=R/mb (TRL normalises by the tokens of the whole accumulated batch, as we do).
- gradient checkpointing off on both (TRL's default is on); AdamW (torch, not fused), constant lr 1e-5, grad clip 1.
- loss: mean NLL over the completion tokens (both; a test checks they agree within 1e-4).
DPO (`--method dpo`): `--rows` / 2 preference pairs (the same conversations, a short wrong answer as the rejected
side), beta 0.1, sigmoid loss, the reference computed live on both sides with the LoRA adapters disabled (ours
`live_reference=True`; TRL's default without `precompute_ref_log_probs`); a micro-batch holds both sides of
`--micro-batch` / 2 pairs (TRL: per_device_train_batch_size = that many pairs). Full fine-tuning would need TRL's
reference copy: LoRA only.
Pairing: TRL runs `train()` for warm-up + `--steps` steps; a callback runs our step for the same step index right
before TRL's (odd steps) or right after it (even steps), so background load is shared; each side's time is the wall
time of its optimizer step (TRL: `on_step_begin` to `on_step_end`). Ratio = median over the paired steps of
ours / TRL. What differs and is measured: we sort rows by length into micro-batches (TRL shuffles them, padding each
to its longest) and compute only the loss positions' logits; TRL computes the entropy and token accuracy of every
step for its log.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

from smoke import add_smoke_flag, device_line, tiny_model_folder

MODEL = "smollm2-135m-instruct"


def conversations(n: int) -> list[dict]:
    """Chats whose answers grow with the index, so the rows' lengths spread (about 60 to 200 tokens)."""
    sentence = "We carry the tens, check the units and write the digits down in order. "
    return [
        {
            "messages": [
                {"role": "system", "content": "You are a careful tutor. Explain each step briefly."},
                {"role": "user", "content": f"What is {37 * (i + 3)} times {i % 9 + 2}? Show the steps."},
                {
                    "role": "assistant",
                    "content": sentence * (1 + i % 8) + f"So the answer is {37 * (i + 3) * (i % 9 + 2)}.",
                },
            ]
        }
        for i in range(n)
    ]


def preferences(n: int) -> list[dict]:
    wrong = [{"role": "assistant", "content": "I think it is 42."}]
    return [
        {"prompt": chat["messages"][:2], "chosen": chat["messages"][2:], "rejected": wrong} for chat in conversations(n)
    ]


def main() -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6, help="paired steps after one warm-up step")
    parser.add_argument("--lora", default="true", choices=["true", "false"])
    parser.add_argument("--method", default="sft", choices=["sft", "dpo"])
    add_smoke_flag(parser)
    args = parser.parse_args()
    model_name = tiny_model_folder() if args.smoke else MODEL
    if args.smoke:
        args.rows, args.micro_batch, args.steps = 4, 2, 1
    print(device_line())
    if args.rows % args.micro_batch or args.micro_batch % 2:
        parser.error("--rows must be a multiple of --micro-batch, which must be even")
    if args.method == "dpo" and args.lora == "false":
        parser.error("--method dpo runs with LoRA (the reference is the adapters disabled)")

    import datasets
    import peft
    import torch
    import trl
    from transformers import TrainerCallback

    from rllm.config import AlgorithmConfig, LoraConfig, ModelConfig, OptimConfig
    from rllm.models.registry import load_causal_lm, load_tokenizer
    from rllm.training.backends.torch import TorchBackend
    from rllm.training.dpo_data import pairs_from_preferences
    from rllm.training.sft_data import export_trl, rows_from_messages

    lora = args.lora == "true"
    tokenizer = load_tokenizer(model_name)
    base = load_causal_lm(model_name)
    dpo = args.method == "dpo"
    if dpo:
        pairs, _ = pairs_from_preferences(preferences(args.rows // 2), tokenizer, max_length=1024)
        rows = [row for pair in pairs for row in (pair.chosen, pair.rejected)]
    else:
        rows, _ = rows_from_messages(conversations(args.rows), tokenizer, max_length=1024)
    lengths = sorted(len(row) for row in rows)
    tuning = "LoRA r=16" if lora else "full fine-tuning"
    print(
        f"{args.method}: model {model_name}, {args.rows} rows of {lengths[0]}-{lengths[-1]} tokens "
        f"({sum(r.num_loss_tokens for r in rows)} trained), micro-batch {args.micro_batch} rows, {tuning}, "
        f"float32, torch threads {torch.get_num_threads()}"
    )

    lora_config = LoraConfig(enabled=lora)
    ours = TorchBackend(
        ModelConfig(name=model_name, lora=lora_config),
        AlgorithmConfig(),
        OptimConfig(lr=1e-5, micro_batch_size=args.micro_batch, grad_clip=1.0),
        total_steps=args.steps + 1,
        model=copy.deepcopy(base),
        tokenizer=tokenizer,
    )
    ours_times: dict[int, float] = {}

    def our_step(index: int) -> None:
        started = time.perf_counter()
        if dpo:
            ours.update_pairs(pairs, loss="sigmoid", beta=0.1, live_reference=True)
        else:
            ours.update(rows, temperature=1.0, objective="sft")
        ours_times[index] = time.perf_counter() - started

    trl_times: dict[int, float] = {}

    class Pairing(TrainerCallback):
        def on_step_begin(self, _args, state, control, **kwargs):
            index = state.global_step + 1
            if index % 2 == 1:
                our_step(index)
            self.started = time.perf_counter()

        def on_step_end(self, _args, state, control, **kwargs):
            trl_times[state.global_step] = time.perf_counter() - self.started
            if state.global_step % 2 == 0:
                our_step(state.global_step)

    peft_config = None
    if lora:
        peft_config = peft.LoraConfig(
            r=lora_config.rank,
            lora_alpha=lora_config.alpha,
            lora_dropout=0.0,
            target_modules=lora_config.target_modules,
            task_type="CAUSAL_LM",
        )
    with tempfile.TemporaryDirectory() as tmp:
        common = dict(
            output_dir=tmp,
            max_steps=args.steps + 1,
            learning_rate=1e-5,
            lr_scheduler_type="constant",
            warmup_steps=0,
            max_grad_norm=1.0,
            optim="adamw_torch",
            bf16=False,
            fp16=False,
            use_cpu=True,
            gradient_checkpointing=False,
            max_length=None,
            report_to=[],
            save_strategy="no",
            eval_strategy="no",
            logging_steps=1,
            seed=0,
            disable_tqdm=True,
        )
        if dpo:
            config = trl.DPOConfig(
                per_device_train_batch_size=args.micro_batch // 2,
                beta=0.1,
                loss_type=["sigmoid"],
                gradient_accumulation_steps=args.rows // args.micro_batch,
                **common,
            )
            dataset = datasets.Dataset.from_list(preferences(args.rows // 2))
            make = trl.DPOTrainer
        else:
            export_trl(rows, Path(tmp) / "rows.jsonl")
            dataset = datasets.Dataset.from_json(str(Path(tmp) / "rows.jsonl"))
            config = trl.SFTConfig(
                per_device_train_batch_size=args.micro_batch,
                completion_only_loss=True,
                gradient_accumulation_steps=args.rows // args.micro_batch,
                **common,
            )
            make = trl.SFTTrainer
        trainer = make(
            model=copy.deepcopy(base),
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[Pairing()],
        )
        trainer.train()

    steps = range(2, args.steps + 2)  # step 1 is warm-up on both sides
    ratios = [ours_times[s] / trl_times[s] for s in steps]
    print(f"{'step':>6}{'ours s':>10}{'TRL s':>10}{'ratio':>8}")
    print(f"{'warm':>6}{ours_times[1]:>10.2f}{trl_times[1]:>10.2f}{ours_times[1] / trl_times[1]:>8.2f}")
    for s, r in zip(steps, ratios, strict=True):
        print(f"{s:>6}{ours_times[s]:>10.2f}{trl_times[s]:>10.2f}{r:>8.2f}")
    print(
        f"median s/step: ours {statistics.median(ours_times[s] for s in steps):.2f}, "
        f"TRL {statistics.median(trl_times[s] for s in steps):.2f}"
    )
    print(f"ratio {statistics.median(ratios):.3f}  ({args.method}: median of paired steps, ours / TRL; target <= 0.8)")


if __name__ == "__main__":
    main()
