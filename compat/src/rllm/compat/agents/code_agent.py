"""rLLM v0.2's `CompetitionCodingAgent` (DeepCoder's agent): writes a program for a competitive-programming problem,
and, in a multi-turn env, revises it from the test results it is shown.

- The first observation is the task row; its `question` is the user message. A later observation with
  `test_results` (a list of `{"input", "expected", "output", "passed", "error_message"}`, what a code reward's
  metadata holds) is shown as the first `max_tests` failing tests, or a note that all passed; one with `error` as
  that error. With `public_test_only`, only tests whose input appears in the question are shown (the first two
  when none does).
- Each reply fills the current step: the action is the text after `</think>` when the reply has exactly one, else the
  whole reply (the code reward extracts the program from it).
- `chat_completions` drops the thinking of earlier assistant turns unless `accumulate_thinking`.
Grading is the env's: with rLLM's `SingleTurnEnvironment` and `rllm.rewards.reward_fn.code_reward_fn` (DeepCoder's
setup), or `rllm.environments.code.competition_coding.CompetitionCodingEnv` for several turns.
"""

from __future__ import annotations

from typing import Any

from rllm.compat.agents._thinking import without_earlier_thinking
from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory

__all__ = ["CompetitionCodingAgent", "truncatefn"]

_NO_TESTS = "No test results came back. Check your solution once more and give your final code."
_ALL_PASSED = "All the tests shown passed. Check edge cases and efficiency once more, then give your final code."
_SOME_FAILED = (
    "Some tests failed:\n{failures}\nFind what causes these failures, fix the code, and give the whole program."
)


def truncatefn(s: Any, length: int = 300) -> str:
    """`s` as text, its middle cut when longer than `length`."""
    s = s if isinstance(s, str) else str(s)
    if len(s) <= length:
        return s
    return s[: length // 2] + "...(truncated) ..." + s[-length // 2 :]


def _squash(text: str) -> str:
    return "".join(text.split())


class CompetitionCodingAgent(BaseAgent):
    def __init__(self, accumulate_thinking: bool = False, max_tests: int = 2, public_test_only: bool = False) -> None:
        self.revise_instruction = "Here are the results of your last attempt. Fix the code."
        self.accumulate_thinking, self.max_tests, self.public_test_only = (
            accumulate_thinking,
            max_tests,
            public_test_only,
        )
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        self.messages: list[dict[str, Any]] = []

    # ---- the rLLM agent protocol ------------------------------------------------------------------------------

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        if not self._trajectory.steps:
            if not isinstance(observation, dict) or "question" not in observation:
                raise ValueError("CompetitionCodingAgent: the first observation must be the task row, with 'question'")
            text = str(observation["question"])
        else:
            text = self._feedback(observation)
            step = self._trajectory.steps[-1]
            step.reward, step.done, step.info = reward, done, info
        if done:
            return
        self.messages.append({"role": "user", "content": text})
        self._trajectory.steps.append(Step(observation=text))

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        self.messages.append({"role": "assistant", "content": response})
        step = self.get_current_state()
        if step is None:  # a reply before any observation: record it anyway
            step = Step()
            self._trajectory.steps.append(step)
        step.chat_completions, step.model_response = self.chat_completions, response
        if response.count("</think>") == 1:
            thought, marker, answer = response.partition("</think>")
            step.thought, step.action = thought + marker, Action(answer.strip())
        else:
            step.thought, step.action = None, Action(response.strip())
        return step.action

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        messages = without_earlier_thinking(self.messages, self.accumulate_thinking)
        return messages

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    # ---- feedback -----------------------------------------------------------------------------------------------

    def _feedback(self, observation: Any) -> str:
        if isinstance(observation, dict) and "test_results" in observation:
            return self.format_test_results(observation["test_results"])
        if isinstance(observation, dict) and "error" in observation:
            return str(observation["error"])
        return str(observation)

    def format_test_results(self, test_results: list[dict]) -> str:
        """The failing tests (at most `max_tests`) as a user message; see the module docstring."""
        if not self._trajectory.steps:
            return _NO_TESTS
        if self.public_test_only:
            test_results = self._public(test_results)
            if not test_results:
                return _NO_TESTS
        failures = [_describe(i, test) for i, test in enumerate(test_results) if not test.get("passed")]
        failures = failures[: self.max_tests]
        return _SOME_FAILED.format(failures="\n".join(failures)) if failures else _ALL_PASSED

    def _public(self, test_results: list[dict]) -> list[dict]:
        """The tests whose every input line appears in the question (the examples it shows)."""
        question = _squash(str(self._trajectory.steps[0].observation))
        public = []
        for test in test_results:
            if not isinstance(test, dict) or "input" not in test:
                continue
            pieces = test["input"] if isinstance(test["input"], list) else str(test["input"]).split("\n")
            if all(_squash(str(piece)) in question for piece in pieces):
                public.append(test)
        return public or test_results[:2]


def _describe(index: int, test: dict) -> str:
    lines = [
        f"### Test {index + 1} failed",
        f"  Input: {truncatefn(test.get('input'))}",
        f"  Expected: {truncatefn(test.get('expected'))}",
    ]
    if test.get("output") is not None:
        lines.append(f"  Actual: {truncatefn(test['output'])}")
    if test.get("error_message") is not None:
        lines.append(f"  Error message: {truncatefn(test['error_message'])}")
    return "\n".join(lines) + "\n"
