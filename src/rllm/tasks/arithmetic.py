"""Arithmetic: a single-turn task whose answers the embedded model gets right sometimes, not always — where RL
visibly helps on a CPU within minutes (the main job trains on it).

One task = one dataset row `{"id", "question", "answer"}` (e.g. "What is 347 * 6?" / 2082). The env's only step
reads the LAST integer in the reply (so "347 * 6 = 2082" counts) and gives reward 1 if it equals the answer.
Prompts are short on purpose: every prompt token is paid for once per sample in generation and again in training.

Parts: `make_arithmetic_tasks` (the generator), `ArithmeticAgent` (the system prompt; the question is the env's
observation), `ArithmeticEnv` (one step, scored by `parse_last_integer`); `arithmetic_prompt` and
`arithmetic_reward`, the same question and rule for what plays it with one instruction and a reward (a harness,
`agent: react`; the `single_turn` workflow).
"""

from __future__ import annotations

import random
import re
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.envs.base import BaseEnv
from rllm.tasks import Task

__all__ = [
    "ArithmeticAgent",
    "ArithmeticEnv",
    "arithmetic_prompt",
    "arithmetic_reward",
    "make_arithmetic_tasks",
    "parse_last_integer",
]

_INTEGER = re.compile(r"-?\d+")
_OPERATORS = {"*": lambda a, b: a * b, "+": lambda a, b: a + b, "-": lambda a, b: a - b}


def parse_last_integer(text: Any) -> int | None:
    """The last integer in `text` (thousands separators ignored), or None."""
    found = _INTEGER.findall(str(text or "").replace(",", ""))
    return int(found[-1]) if found else None


class ArithmeticAgent(BaseAgent):
    # Replaces the chat template's default system prompt (Qwen's is ~20 tokens) with a shorter, useful one.
    system_prompt = "Answer with just the number."


class ArithmeticEnv(BaseEnv):
    blocking = False  # pure Python state: the engine steps it inline, no thread hop

    def __init__(self, question: str, answer: int) -> None:
        self.question, self.answer = question, int(answer)
        self.done = False

    @classmethod
    def from_dict(cls, task: dict) -> ArithmeticEnv:
        return cls(task["question"], task["answer"])

    def reset(self) -> tuple[str, dict]:
        self.done = False
        return self.question, {}

    def step(self, action: Any) -> tuple[str, float, bool, dict]:
        if self.done:
            raise RuntimeError("the episode is over (one answer per question); call reset()")
        self.done = True
        given = parse_last_integer(action)
        success = given == self.answer
        info = {"success": success, "answer": self.answer, "given": given, "invalid_action": given is None}
        return ("Correct." if success else f"Wrong; the answer is {self.answer}."), float(success), True, info


def make_arithmetic_tasks(
    n: int, *, seed: int = 0, digits: tuple[int, int] = (3, 1), operator: str = "*"
) -> list[dict]:
    """`n` questions `a <op> b` with `a` of `digits[0]` digits and `b` of `digits[1]` (b ≥ 2), deterministic in
    `seed`. The default, 3-digit × 1-digit, is where Qwen2.5-Coder-0.5B starts at ~0.4 greedy / ~0.23 sampled."""
    if operator not in _OPERATORS:
        raise ValueError(f"operator must be one of {sorted(_OPERATORS)}, got {operator!r}")
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        a = rng.randint(10 ** (digits[0] - 1), 10 ** digits[0] - 1)
        b = rng.randint(max(2, 10 ** (digits[1] - 1)), 10 ** digits[1] - 1)
        question = f"What is {a} {operator} {b}?"
        tasks.append({"id": f"arith-{seed}-{i}", "question": question, "answer": _OPERATORS[operator](a, b)})
    return tasks


def arithmetic_prompt(task: dict) -> str:
    return task["question"]


def arithmetic_reward(task: dict, response: Any) -> float:
    """1 when the last integer of the response is the answer (the env's rule)."""
    return float(parse_last_integer(response) == int(task["answer"]))


TASK = Task(
    name="arithmetic",
    description="Answer a generated multiplication question (single-turn); reward 1 for the right number.",
    make_tasks=make_arithmetic_tasks,
    agent=ArithmeticAgent,
    env=ArithmeticEnv,
    prompt_fn=arithmetic_prompt,
    reward_fn=arithmetic_reward,
)
