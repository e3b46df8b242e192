"""rLLM v0.2's `rllm.rewards.code_reward`: DeepCoder's reward, `RewardCodeFn(config)(task_info, action)`, graded in
rllm's sandbox by rllm's one test runner (`rllm.rewards.code.run_code_tests`).

- `task_info["ground_truth"]` holds the tests and `task_info["data_source"]` names their format (see
  `rllm.compat.rewards.code_rows` for each source's rows); no tests: `format_error_reward`.
- The program is the last fenced code block of the reply (a ```python block first, else any); none:
  `format_error_reward`.
- Every test must pass: `correct_reward` and `is_correct=True`; else `incorrect_reward`. The first failing test
  stops the run (later ones cannot change an all-or-nothing reward). KodCode's pytest files run under pytest in the
  sandbox (`rllm.compat.rewards.pytest_rows`).
`metadata` holds `all_passed`, `passed_tests`, `total_tests`, `test_results` (per test run: passed, status, and on
a failure the input, expected and actual output), `first_failure` and `feedback` (what a multi-turn agent can be
shown). A source rLLM does not know either raises
`UnsupportedCodeRowError`, a `NotImplementedError` as in rLLM; a sandbox that cannot start raises
`SandboxUnavailableError` (not the policy's fault, so never a zero reward). `use_together_code_interpreter` is
ignored: code runs in rllm's sandbox only.
"""

from __future__ import annotations

from typing import Any

from rllm.compat.rewards.code_rows import CodeGrading, UnsupportedCodeRowError, grading_for
from rllm.compat.rewards.reward_types import RewardConfig, RewardType
from rllm.rewards.base import RewardOutput

__all__ = ["RewardCodeFn", "UnsupportedCodeRowError", "extract_code_from_model", "rllm_reward_fn_code"]


def extract_code_from_model(model_response: str) -> str | None:
    """The program in a reply: its last ```python block (else its last fenced block), stripped; None without one."""
    from rllm.rewards.code import extract_code

    code = extract_code(model_response or "")
    return None if code is None else code.strip()


class RewardCodeFn:
    """DeepCoder's code reward (see the module docstring). Call it as `fn(task_info, action)`."""

    def __init__(self, config: RewardConfig | None = None, *, sandbox: Any = None) -> None:
        self.config = config if config is not None else RewardConfig()
        self.sandbox = sandbox  # None: rllm's shared default sandbox

    def __call__(self, task_info: dict, action: Any) -> RewardOutput:
        from rllm.types import Action

        response = action.action if isinstance(action, Action) else action
        tests = task_info.get("ground_truth")
        if tests is None:
            return self._format_error("No tests found in task_info")
        code = extract_code_from_model(str(response or ""))
        if code is None:
            return self._format_error("No code found in model response")
        data_source = task_info.get("data_source", "")
        if data_source == "kodcode":
            metadata = self._run_pytest(tests, code)
        else:
            metadata = self._run(grading_for(data_source, tests), code)
        if metadata["all_passed"]:
            return RewardOutput(reward=self.config.correct_reward, is_correct=True, metadata=metadata)
        return RewardOutput(reward=self.config.incorrect_reward, is_correct=False, metadata=metadata)

    def _format_error(self, why: str) -> RewardOutput:
        return RewardOutput(reward=self.config.format_error_reward, is_correct=False, metadata={"error": why})

    def _run_pytest(self, tests: Any, code: str) -> dict:
        from rllm.compat.rewards.pytest_rows import run_pytest_row
        from rllm.rewards.code import MalformedTestsError

        if not isinstance(tests, str):
            raise MalformedTestsError("kodcode tests must be the source of a pytest file")
        return run_pytest_row(code, tests, sandbox=self.sandbox)

    def _run(self, grading: CodeGrading, code: str) -> dict:
        from rllm.rewards.code import feedback_text, run_code_tests

        result = run_code_tests(
            grading.program(code),
            grading.tests,
            sandbox=self.sandbox,
            per_test_timeout_s=grading.per_test_timeout_s,
            total_timeout_s=grading.total_timeout_s,
        )
        metadata = {
            "all_passed": result.passed,
            "passed_tests": result.passed_tests,
            "total_tests": result.total_tests,
            "test_results": result.details,
            "first_failure": result.first_failure,
            "feedback": feedback_text(result),
        }
        if result.error:
            metadata["error"] = result.error
        return metadata


def rllm_reward_fn_code(data_source: str, llm_solution: str, ground_truth: Any, **kwargs: Any) -> RewardOutput:
    """rLLM's verl-style entry point: `RewardCodeFn(RewardConfig())` on a task built from the arguments."""
    task_info = {
        "problem": None,
        "problem_type": RewardType.CODE,
        "data_source": data_source,
        "ground_truth": ground_truth,
    }
    return RewardCodeFn(RewardConfig())(task_info, llm_solution)
