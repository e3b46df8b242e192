"""rLLM v0.2's `rllm.data.utils.fetch_live_code_bench_system_prompt`, the prompt DeepCoder's data preparation wraps
each problem in. The wording is rllm's own (rLLM uses LiveCodeBench's); the shape is rLLM's: the problem, then how
to answer (fill in the starter code, or read stdin and write stdout), then one ```python block to write in.
`rllm.rewards.code_reward.RewardCodeFn` grades the last ```python block of the reply."""

from __future__ import annotations

__all__ = ["fetch_live_code_bench_system_prompt"]

CODER_ROLE = (
    "You are an expert Python programmer. Read the problem below and write one correct, efficient Python program "
    "that solves it and passes every hidden test."
)
WITH_STARTER_CODE = "Complete the starter code below; keep its class and function signatures unchanged."
WITHOUT_STARTER_CODE = (
    "Write a complete program: read the input from standard input, solve the problem and print the answer to "
    "standard output. Do not hard-code the sample tests."
)


def fetch_live_code_bench_system_prompt(prompt: str, starter_code: str | None = None) -> str:
    """The problem `prompt` wrapped in the coding instructions, with `starter_code` (a LeetCode-style signature, for
    functional tests) to complete when given."""
    if starter_code:
        instructions, block = WITH_STARTER_CODE, starter_code
    else:
        instructions, block = WITHOUT_STARTER_CODE, "# your code here"
    return (
        f"{CODER_ROLE}\n\n{prompt}\n\n### Format\n{instructions} Answer with your code in one block:\n"
        f"```python\n{block}\n```\n\n### Answer (one ```python block)\n\n"
    )
