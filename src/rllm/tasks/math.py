"""Math word problems and equations: generated sets that run offline, a loader for any math dataset on disk or in
memory, the prompt, and what plays it. The reward is `rllm.rewards.math.math_reward` (verified equivalence of the
boxed answer).

Parts: `make_math_tasks` (the generator: word problems and/or equations), `load_math_rows` (any math dataset),
`math_prompt`, and for the multi-turn variant `MathAgent` (reasoning, then a final `\\boxed{}` answer) with `MathEnv`
(a FeedbackEnv: a wrong attempt gets "not correct" and another try). The reply's text is the action; the reward
function extracts and verifies the boxed answer.

Rows are `{"id", "question", "answer"}`; `answer` is a latex-friendly string ("42", "-\\frac{7}{3}").

Choices:
- Generators are small and our own (reasoning-gym is heavy): multi-step arithmetic word problems with integer
  answers, and linear equations in one variable whose answer is an integer or a reduced fraction. Both are
  deterministic in `seed`, so a run's data is reproducible, and every row's answer is exact by construction.
- The loader refuses a row without a question or an answer, naming the row and the keys it has, instead of dropping
  it: a silently shrunk dataset reads as a worse model.
- A GSM8K-style answer ("reasoning ... #### 72") is split: `answer` becomes "72" and the full text is kept as
  `solution` (unless the row already has one), since the reward compares against a final answer.
- Numeric answers (int or float) become strings, so every reference is compared the same way.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.envs.feedback import FeedbackEnv
from rllm.rewards.math import math_reward
from rllm.tasks import Task

__all__ = [
    "MATH_SYSTEM_PROMPT",
    "MathAgent",
    "MathEnv",
    "load_math_rows",
    "make_arithmetic_word_tasks",
    "make_linear_equation_tasks",
    "make_math_tasks",
    "math_prompt",
]

MATH_KINDS = ("arithmetic", "equation", "mixed")

# --------------------------------------------------------------------------------------------------------- loading


def load_math_rows(
    source: Any,
    *,
    question_key: str = "question",
    answer_key: str = "answer",
    limit: int | None = None,
) -> list[dict]:
    """Rows `{"id", "question", "answer", ...other fields}` from a JSONL, JSON (a list of objects) or parquet file,
    a `datasets.Dataset`, or any iterable of dicts. `question_key`/`answer_key` name the source's columns (e.g.
    "problem"/"solution"); they are renamed to "question"/"answer". A row without an "id" gets `"{stem}-{i}"` (the
    file's stem, else "math"). `limit` keeps the first rows only."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")
    if isinstance(source, (str, Path)):
        path = Path(source)
        stem, where, rows = path.stem, str(path), _read_file(path, limit)
    elif isinstance(source, Mapping):
        raise TypeError("load_math_rows takes a list of rows, not one row: wrap it in a list")
    elif isinstance(source, Iterable):
        stem, where, rows = "math", type(source).__name__, source  # a datasets.Dataset iterates as dicts
    else:
        raise TypeError(f"load_math_rows takes a file path, a datasets.Dataset or a list of dicts, got {source!r}")
    out = []
    for i, row in enumerate(rows):
        if limit is not None and i >= limit:
            break
        out.append(_to_row(row, i, stem, where, question_key, answer_key))
    return out


def _read_file(path: Path, limit: int | None) -> Iterable[Any]:
    if not path.is_file():
        raise FileNotFoundError(f"no dataset file at {path}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path} holds a JSON {type(data).__name__}; a JSON dataset must be a list of objects")
        return data
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(f"reading {path} needs pyarrow: pip install pyarrow") from None
        table = pq.read_table(path)
        return table.slice(0, limit).to_pylist() if limit is not None else table.to_pylist()
    raise ValueError(f"cannot read {path}: expected a .jsonl, .json or .parquet file")


def _read_jsonl(path: Path) -> Iterable[Any]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path} line {number} is not JSON: {error}") from None


def _to_row(row: Any, i: int, stem: str, where: str, question_key: str, answer_key: str) -> dict:
    if not isinstance(row, Mapping):
        raise TypeError(f"row {i} of {where} is a {type(row).__name__}, not an object with question and answer")
    row, keys = dict(row), sorted(map(str, row))
    values = {}
    for key, name in ((question_key, "question"), (answer_key, "answer")):
        value = row.pop(key, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            problem = f"no {key!r}" if value is None else f"an empty or non-text {key!r} ({value!r:.80})"
            raise ValueError(
                f"row {i} of {where} has {problem} (the {name}); its keys are {keys}. Pass question_key=/answer_key= "
                "naming the fields that hold the question and the answer, or fix the row"
            )
        values[name] = value
    if "####" in values["answer"]:  # GSM8K: reasoning, then "#### 72"
        row.setdefault("solution", values["answer"])
        values["answer"] = values["answer"].rsplit("####", 1)[1].strip()
    row.update(values)
    row.setdefault("id", f"{stem}-{i}")
    return row


# ------------------------------------------------------------------------------------------------------ generators

_NAMES = ["Tom", "Ana", "Li", "Sara", "Omar", "Maya", "Ben", "Yuki", "Nina", "Raj"]
_ITEMS = ["apple", "pencil", "marble", "cookie", "sticker", "book", "card", "orange"]


def _word_problem(rng: random.Random, m: int) -> tuple[str, int]:
    """One of six templates, two or three steps each, with a non-negative integer answer; `m` scales the numbers."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.randrange(6)
    if kind == 0:
        boxes, per_box = rng.randint(2, m), rng.randint(2, m)
        given = rng.randint(1, boxes * per_box - 1)
        question = (
            f"{name} has {boxes} boxes of {per_box} {item}s and gives away {given} {item}s. "
            f"How many {item}s does {name} have left?"
        )
        return question, boxes * per_box - given
    if kind == 1:
        count, price = rng.randint(2, m), rng.randint(2, m)
        bill = next(b for b in (10, 20, 50, 100, 200, 500, 1000) if b > count * price)
        question = (
            f"{name} buys {count} {item}s at {price} dollars each and pays with a {bill}-dollar bill. "
            f"How many dollars of change does {name} get?"
        )
        return question, bill - count * price
    if kind == 2:
        speed, hours, extra = rng.randint(2, 4 * m), rng.randint(2, 6), rng.randint(1, 4 * m)
        question = (
            f"A bus drives at {speed} km per hour for {hours} hours and then drives {extra} more km. "
            "How many km does it drive in total?"
        )
        return question, speed * hours + extra
    if kind == 3:
        friends, each = rng.randint(2, 8), rng.randint(2, m)
        eaten = rng.randint(1, each - 1)
        question = (
            f"{friends} friends share {friends * each} {item}s equally. Each friend then gives away {eaten} of their "
            f"{item}s. How many {item}s does each friend have now?"
        )
        return question, each - eaten
    if kind == 4:
        start, weekly, weeks = rng.randint(1, 4 * m), rng.randint(2, m), rng.randint(2, 8)
        spent = rng.randint(1, start + weekly * weeks)
        question = (
            f"{name} has {start} dollars, saves {weekly} dollars a week for {weeks} weeks, and then spends "
            f"{spent} dollars. How many dollars does {name} have now?"
        )
        return question, start + weekly * weeks - spent
    rows, per_row, broken = rng.randint(2, m), rng.randint(2, m), rng.randint(2, 5)
    question = (
        f"A shop puts {item}s in {rows} rows of {per_row}, then adds 2 more rows of the same size and removes "
        f"{broken} damaged {item}s. How many {item}s are there now?"
    )
    return question, (rows + 2) * per_row - broken


def make_arithmetic_word_tasks(n: int, *, seed: int = 0, max_number: int = 12) -> list[dict]:
    """`n` multi-step word problems with integer answers, deterministic in `seed`; `max_number` (at least 3) bounds
    the counts and prices in a problem."""
    _check_n(n)
    if max_number < 3:
        raise ValueError(f"max_number must be at least 3, got {max_number}")
    rng = random.Random(f"math-arith-{seed}")
    rows = []
    for i in range(n):
        question, answer = _word_problem(rng, max_number)
        rows.append({"id": f"math-arith-{seed}-{i}", "question": question, "answer": str(answer)})
    return rows


def _latex_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _linear(coefficient: int, variable: str, constant: int) -> str:
    """`3x + 7`, `-x - 2`, `5x` (the constant left out when 0)."""
    term = {1: variable, -1: f"-{variable}"}.get(coefficient, f"{coefficient}{variable}")
    if constant == 0:
        return term
    return f"{term} {'+' if constant > 0 else '-'} {abs(constant)}"


def _equation(rng: random.Random, max_coefficient: int, fraction: bool) -> tuple[str, Fraction]:
    """`a v + b = c` (half the time with a second variable term on the right: `a v + b = d v + e`), built backwards
    from the solution so the answer is exact; a fractional solution has denominator that does not divide out."""
    variable = rng.choice("xxxyzn")
    a = rng.choice([k for k in range(-max_coefficient, max_coefficient + 1) if abs(k) >= 2])
    d = 0
    if rng.random() < 0.5:  # |a - d| >= 2 keeps a fractional solution possible and "3x = 2x + 5" out
        d = rng.choice([k for k in range(-max_coefficient, max_coefficient + 1) if k != 0 and abs(a - k) >= 2])
    slope = a - d  # (a - d) v = e - b
    if fraction:
        numerator = rng.choice([k for k in range(-4 * max_coefficient, 4 * max_coefficient + 1) if k % slope])
        solution = Fraction(numerator, slope)
    else:
        solution = Fraction(rng.randint(-10, 10))
    b = rng.randint(-20, 20)
    e = int(slope * solution) + b
    left = _linear(a, variable, b)
    right = _linear(d, variable, e) if d else str(e)
    return f"Solve for {variable}: {left} = {right}", solution


def make_linear_equation_tasks(
    n: int, *, seed: int = 0, max_coefficient: int = 9, fraction_share: float = 0.3
) -> list[dict]:
    """`n` linear equations in one variable ("Solve for x: 3x + 7 = 22"), deterministic in `seed`. About
    `fraction_share` of them have a reduced-fraction answer ("\\frac{7}{3}"), the rest an integer in -10..10."""
    _check_n(n)
    if max_coefficient < 2:
        raise ValueError(
            f"max_coefficient must be at least 2 (a coefficient of 1 is no equation), got {max_coefficient}"
        )
    if not 0.0 <= fraction_share <= 1.0:
        raise ValueError(f"fraction_share must be between 0 and 1, got {fraction_share}")
    rng = random.Random(f"math-eq-{seed}")
    rows = []
    for i in range(n):
        question, solution = _equation(rng, max_coefficient, rng.random() < fraction_share)
        rows.append({"id": f"math-eq-{seed}-{i}", "question": question, "answer": _latex_number(solution)})
    return rows


def make_math_tasks(n: int, *, seed: int = 0, kind: str = "mixed") -> list[dict]:
    """The registry's entry point: `n` rows of "arithmetic" word problems, linear "equation"s, or "mixed"
    (alternating, starting with a word problem), deterministic in `seed`."""
    _check_n(n)
    if kind == "arithmetic":
        return make_arithmetic_word_tasks(n, seed=seed)
    if kind == "equation":
        return make_linear_equation_tasks(n, seed=seed)
    if kind != "mixed":
        raise ValueError(f"kind must be one of {', '.join(MATH_KINDS)}; got {kind!r}")
    words, equations = (
        make_arithmetic_word_tasks((n + 1) // 2, seed=seed),
        make_linear_equation_tasks(n // 2, seed=seed),
    )
    mixed = [row for pair in zip(words, equations, strict=False) for row in pair]
    return mixed + words[len(equations) :]


def _check_n(n: int) -> None:
    if n < 0:
        raise ValueError(f"n must be 0 or more, got {n}")


# ---------------------------------------------------------------------------------------------------------- prompt


def math_prompt(task: dict) -> str:
    """The user message: one instruction line, then the question. Short because every prompt token is paid for once
    per sample, and it names `\\boxed{...}` because that is what the reward reads first."""
    return f"Solve the problem. Think step by step, then give the final answer as \\boxed{{...}}.\n\n{task['question']}"


# -------------------------------------------------------------------------------------- agent and env (multi-turn)

# Brevity matters on a CPU: asked to "reason step by step" the embedded 0.5B model ran past 200 tokens on 13 of 16
# problems before writing its answer; this prompt got 3/16 right against 0/16 (greedy, same 16 problems).
MATH_SYSTEM_PROMPT = "You are a concise math solver. Show only the key calculation, then the final answer in \\boxed{}."


class MathAgent(BaseAgent):
    system_prompt = MATH_SYSTEM_PROMPT


class MathEnv(FeedbackEnv):
    prompt_fn = staticmethod(math_prompt)
    reward_fn = staticmethod(math_reward)


TASK = Task(
    name="math",
    description="Generated word problems and linear equations; reward by verified equivalence of the boxed answer.",
    make_tasks=make_math_tasks,
    agent=MathAgent,
    env=MathEnv,
    prompt_fn=math_prompt,
    reward_fn=math_reward,
    default_workflow="single_turn",
)
