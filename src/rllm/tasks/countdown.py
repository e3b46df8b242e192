"""Countdown: given a few numbers and a target, write an arithmetic expression that equals the target (as in
TinyZero). Data generation, prompt, answer parsing and reward live together in this one file.

Rules: use each given number exactly once (a number given twice is used twice), with + - * / and parentheses
only; no other numbers, no unary minus, no powers, no decimals. The reply puts the expression in
`<answer>...</answer>`; the LAST such pair counts, and anything from its first "=" on is ignored, so
"(1 + 2) * 3 = 9" is read as "(1 + 2) * 3".

Choices:
- Every row is solvable by construction: the generator draws the numbers, builds a random expression over all of
  them and keeps it (as `solution`) only if its value is a positive integer up to `max_target` that is not one of
  the numbers.
- Values are exact `Fraction`s, so "7 / 2 * 2" is exactly 7 and intermediate fractions are allowed; floats would
  make 7 / 3 * 3 miss by a rounding error.
- The expression is parsed with `ast` and only integer literals, + - * / and parentheses are accepted: nothing the
  policy writes is ever executed, and a reply over 200 characters is refused before parsing.
- `format_reward` (for a well-formed but wrong expression) defaults to 0 so the reward is exactly success and its
  mean reads as accuracy. A small bonus (TinyZero used 0.1) helps a model that rarely closes the tag at first, but
  it is a shaped reward a policy can collect forever without solving anything, so it is opt-in. The same holds
  for `numbers_reward` (partial credit for using exactly the given numbers but missing the target): it teaches a
  small model the rule (the embedded 0.5B model almost never follows it unprompted), and it is opt-in too.
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from fractions import Fraction

from rllm.rewards.base import RewardOutput
from rllm.tasks import Task

__all__ = [
    "check_expression",
    "countdown_prompt",
    "countdown_reward",
    "extract_answer",
    "make_countdown_tasks",
    "score_countdown",
]

MAX_EXPRESSION_CHARS = 200
_MISSES_TARGET = "equals "  # the reason's prefix when the numbers are right and the value is not
_OPERATORS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_SYMBOLS = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_ATOM = 3
_DIGITS = re.compile(r"[0-9]+")
_MAX_TRIES = 10_000  # per row; only hopeless arguments (e.g. max_target=1) get near it


class _Disallowed(ValueError):
    """The expression uses syntax outside integers, + - * / and parentheses."""


def make_countdown_tasks(
    n: int, *, seed: int = 0, n_numbers: int = 3, max_number: int = 20, max_target: int = 100
) -> list[dict]:
    """`n` rows `{"id", "numbers", "target", "solution"}` with `n_numbers` numbers in 1..`max_number` and a target
    in 1..`max_target`, deterministic in `seed`. `solution` is one expression that reaches the target."""
    if n < 0:
        raise ValueError(f"n must be 0 or more, got {n}")
    if n_numbers < 2:
        raise ValueError(f"n_numbers must be at least 2 (one number would be its own answer), got {n_numbers}")
    if max_number < 1:
        raise ValueError(f"max_number must be at least 1 (numbers are drawn from 1..max_number), got {max_number}")
    if max_target < 1:
        raise ValueError(f"max_target must be at least 1 (targets are positive integers), got {max_target}")
    rng = random.Random(seed)
    return [_make_row(rng, f"countdown-{seed}-{i}", n_numbers, max_number, max_target) for i in range(n)]


def _make_row(rng: random.Random, row_id: str, n_numbers: int, max_number: int, max_target: int) -> dict:
    for _ in range(_MAX_TRIES):
        numbers = [rng.randint(1, max_number) for _ in range(n_numbers)]
        order = rng.sample(numbers, len(numbers))  # the solution need not list the numbers in the shown order
        solution, value = _random_expression(rng, order)
        if (
            value.denominator == 1
            and 1 <= value <= max_target
            and value not in numbers
            and len(solution) <= MAX_EXPRESSION_CHARS
        ):
            return {"id": row_id, "numbers": numbers, "target": int(value), "solution": solution}
    raise ValueError(
        f"could not generate a solvable countdown with n_numbers={n_numbers}, max_number={max_number}, "
        f"max_target={max_target} in {_MAX_TRIES} tries; raise max_target or max_number, or lower n_numbers"
    )


def _random_expression(rng: random.Random, numbers: list[int]) -> tuple[str, Fraction]:
    """Combine random neighbours with random operators until one expression is left: a random tree shape."""
    items = [(str(x), Fraction(x), _ATOM) for x in numbers]  # (text, value, precedence of its top operator)
    while len(items) > 1:
        i = rng.randrange(len(items) - 1)
        (left, left_value, left_prec), (right, right_value, right_prec) = items[i], items[i + 1]
        op = rng.choice("+-*/" if right_value != 0 else "+-*")
        prec = _PRECEDENCE[op]
        if left_prec < prec:
            left = f"({left})"
        # a - (b + c) and a / (b * c) need parentheses; a + (b - c) and a * (b / c) have the same exact value without
        if right_prec < prec or (right_prec == prec and op in "-/"):
            right = f"({right})"
        items[i : i + 2] = [(f"{left} {op} {right}", _OPERATORS[_SYMBOLS[op]](left_value, right_value), prec)]
    return items[0][0], items[0][1]


def countdown_prompt(task: dict) -> str:
    """The user message. Measured on the embedded 0.5B model (32 puzzles, 3 numbers up to 10): this wording gets
    16% right greedy and the right numbers 29/32 times; an earlier one with a worked example got 0% (the model
    copied the example) and "Using the numbers ..., make N" 3%."""
    numbers = ", ".join(str(x) for x in task["numbers"])
    return (
        f"Write an arithmetic expression that equals {task['target']} using each of the numbers {numbers} exactly "
        "once. You may use + - * / and parentheses. Put the expression inside <answer></answer> tags."
    )


def extract_answer(text: str) -> str | None:
    """The stripped content of the last `<answer>...</answer>` pair, or None. Linear time even on hostile input."""
    if not isinstance(text, str):
        return None
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    return text[start + len("<answer>") : end].strip() if start >= 0 else None


def check_expression(expression: str, numbers: list[int], target: int) -> tuple[bool, str]:
    """(ok, reason): whether `expression` uses each of `numbers` exactly once and equals `target` exactly."""
    try:
        tree = _parse(expression)
    except _Disallowed as error:
        return False, str(error)
    return _check_parsed(tree, numbers, target)


def score_countdown(
    task: dict, response: str, *, format_reward: float = 0.0, numbers_reward: float | None = None
) -> float:
    """1.0 for a right expression in the last answer tag; `numbers_reward` (default: `format_reward`) for one that
    uses exactly the given numbers but misses the target; `format_reward` for another well-formed wrong one (wrong
    numbers, division by zero); 0.0 for no tag or disallowed syntax. Never raises."""
    try:
        expression = extract_answer(response)
        if expression is None:
            return 0.0
        try:
            tree = _parse(expression)
        except _Disallowed:
            return 0.0
        ok, reason = _check_parsed(tree, task["numbers"], task["target"])
        if ok:
            return 1.0
        if reason.startswith(_MISSES_TARGET) and numbers_reward is not None:
            return float(numbers_reward)
        return float(format_reward)
    except (RecursionError, MemoryError, SyntaxError, ValueError, TypeError):
        return 0.0


def countdown_reward(
    task: dict, response: str, *, format_reward: float = 0.0, numbers_reward: float | None = None
) -> RewardOutput:
    """`score_countdown` as a reward function for workflows: correct only for a right expression, so partial
    credit never counts as a success."""
    reward = score_countdown(task, response, format_reward=format_reward, numbers_reward=numbers_reward)
    return RewardOutput(reward, is_correct=reward == 1.0, info={"answer": extract_answer(response)})


def _parse(expression: str) -> ast.expr:
    """The expression's tree if it holds only integer literals, + - * / and parentheses; else `_Disallowed`."""
    if not isinstance(expression, str):
        raise _Disallowed("the expression is not text")
    expression = expression.split("=", 1)[0].strip()
    if not expression:
        raise _Disallowed("empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise _Disallowed(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _Disallowed("not a valid expression") from None
    _check_syntax(tree.body, expression)
    return tree.body


def _check_syntax(node: ast.AST, source: str) -> None:
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _OPERATORS:
            raise _Disallowed("only + - * / and parentheses are allowed")
        _check_syntax(node.left, source)
        _check_syntax(node.right, source)
    elif isinstance(node, ast.Constant):
        # `type(...) is int` refuses True/False; the source check refuses 0x10, 1_0 and 1e2-style spellings
        if type(node.value) is not int or not _DIGITS.fullmatch(ast.get_source_segment(source, node) or ""):
            raise _Disallowed("only whole numbers written in digits are allowed")
    elif isinstance(node, ast.UnaryOp):
        raise _Disallowed("signs like -3 are not allowed; use only the given numbers")
    else:
        raise _Disallowed("only numbers, + - * / and parentheses are allowed")


def _check_parsed(tree: ast.expr, numbers: list[int], target: int) -> tuple[bool, str]:
    used = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)]
    if Counter(used) != Counter(numbers):
        return False, f"uses {sorted(used)} but must use each of {sorted(numbers)} exactly once"
    try:
        value = _evaluate(tree)
    except ZeroDivisionError:
        return False, "division by zero"
    if value != target:
        return False, f"{_MISSES_TARGET}{value} but the target is {target}"
    return True, "ok"


def _evaluate(node: ast.expr) -> Fraction:
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))


TASK = Task(
    name="countdown",
    description="Combine 3 generated numbers with + - * / to hit a target (single-turn or solver-judge).",
    make_tasks=make_countdown_tasks,
    prompt_fn=countdown_prompt,
    reward_fn=countdown_reward,
    default_workflow="single_turn",
)
