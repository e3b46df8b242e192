"""Reward functions: pure functions from (task, response) to a reward.

- `math`: verified equivalence of the final answer (math-verify, with a hard timeout).
- `code`: a program's tests run in the sandbox (`rllm.sandbox`, the only code runner); 1 only if every selected test
  passes.
- `choice`: the option letter a reply chose (multiple choice: MMLU-Pro, GPQA, ...), or the exact text of one option.
- `text`: short answers by SQuAD's exact match and token F1 (HotpotQA, ...); translations by chrF (sacrebleu).
- `ifeval`: IFEval's 25 verifiable instructions, strict: the fraction followed.
- `bfcl`: one function call graded by its AST against BFCL's possible answers (nothing is executed).
Submodules load on first use (math-verify, sacrebleu and the sandbox are not needed by `import rllm.rewards`).
"""

from rllm.rewards.base import RewardOutput, to_reward_output

__all__ = ["RewardOutput", "to_reward_output"]
