#!/usr/bin/env bash
# SFT warm start then GRPO, against GRPO alone, and DPO, on the main job's task (arithmetic, the embedded
# Qwen2.5-Coder-0.5B with LoRA, on a CPU). About 50 minutes on 2 cores. The README's "Beyond RL" section reports its
# numbers.
#   bash examples/sft_warm_start.sh [runs folder]
set -euo pipefail
R=${1:-runs/warm-start}
RLLM=${RLLM:-rllm}
# 1. four sampled attempts at each of 256 questions that are neither training nor validation questions
$RLLM eval configs/arithmetic_sft.yaml data.val_size=256 data.val_seed=7 rollout.val_n=4 \
  rollout.val_temperature=1.0 trainer.run_dir="$R" trainer.name=attempts
# 2. SFT on the correct ones (2 a question at most), exactly the sampled tokens
$RLLM sft configs/arithmetic_sft.yaml sft.episodes="$R/attempts" trainer.run_dir="$R" trainer.name=sft --no-progress
# 3. GRPO from the warm start, and GRPO alone, with the same config and validation
$RLLM train configs/arithmetic_grpo.yaml model.init_from="$R/sft" trainer.run_dir="$R" trainer.name=grpo-after-sft \
  --no-progress
$RLLM train configs/arithmetic_grpo.yaml trainer.run_dir="$R" trainer.name=grpo-alone --no-progress
# 4. DPO on the success/failure pairs of the same attempts
$RLLM dpo configs/arithmetic_dpo.yaml dpo.episodes="$R/attempts" trainer.run_dir="$R" trainer.name=dpo --no-progress
