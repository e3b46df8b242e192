"""The `code` task: a small generated set of function-writing tasks that runs offline on a CPU, a loader for APPS /
LiveCodeBench rows, the prompt and what plays them. The reward is `rllm.rewards.code.code_reward` (the task's tests
run in the sandbox). HumanEval (`rllm.tasks.humaneval`) reuses the prompt, the agent and the env.

Every row has `id`, `question` (the problem text) and `tests` in the format of `rllm.rewards.code` ("stdio", "call" or
"humaneval"); `code_prompt(row)` turns it into the user message.

Parts: `make_code_tasks` (the generator), `load_code_rows` (APPS / LiveCodeBench / rllm rows), `code_prompt`, and
for the multi-turn variant `CodeAgent` (one ```python block per reply) with `CodeEnv` (a FeedbackEnv: a failing
attempt gets the first failing test's output and another try). The reply's text is the action; the reward function
extracts the last code block.

Choices:
- Loaders fail loudly: a row with no tests, tests that do not parse, or test cases of mixed types raises ValueError
  naming the row; nothing is dropped silently (a silently shrunk dataset reads as a better model).
- APPS: `input_output` (a JSON string) holds `inputs`/`outputs`; with `fn_name` the tests are call-based (outputs may be
  wrapped in a one-element list, so `unwrap_single` is set), otherwise stdin/stdout (a list of lines is joined).
- LiveCodeBench: `public_test_cases` and `private_test_cases` (JSON strings of `{"input", "output", "testtype"}`; the
  released private tests are also base64(zlib(pickle(json))) — unpickled with an unpickler that refuses every global,
  so only plain strings can come out) and `metadata.func_name` for "functional" tests, whose input holds one JSON
  value per line (the arguments) and whose output is one JSON value.
- `make_code_tasks` draws from 22 small function templates (list and string manipulation, half of them a step
  harder: an edge case, an exact rule, a structure to build) with five call tests
  each, deterministic in the seed; each row keeps a reference `solution` (tested to pass). They are small enough for a
  0.5B coder model to solve some of the time, so GRPO has a signal on a CPU.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import random
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from rllm.agents.base import BaseAgent
from rllm.envs.feedback import FeedbackEnv
from rllm.rewards.code import code_reward, normalise_tests
from rllm.tasks import Task

__all__ = [
    "CODE_FAMILIES",
    "CODE_SYSTEM_PROMPT",
    "CodeAgent",
    "CodeEnv",
    "MalformedCodeRowError",
    "code_prompt",
    "load_code_rows",
    "make_code_tasks",
]


class MalformedCodeRowError(ValueError):
    """A dataset row the loader cannot turn into a code task; the message names the row and the problem."""


_N_CASES = 5


# -------------------------------------------------------------------------------------------------------- prompts


def code_prompt(task: dict) -> str:
    """The user message: the problem and the ask for one ```python block (for HumanEval: the signature+docstring)."""
    tests = normalise_tests(task["tests"])
    if tests["format"] == "humaneval":
        return (
            "Complete the following Python function. Reply with the complete function (signature included) in "
            f"one ```python block.\n\n```python\n{tests['prompt'].strip()}\n```"
        )
    parts = [str(task.get("question", "")).strip()]
    if task.get("starter_code"):
        parts.append(f"Start from this code:\n```python\n{task['starter_code'].strip()}\n```")
    if tests["format"] == "stdio":
        parts.append(
            "Write a complete Python program that reads standard input and writes standard output. "
            "Reply with the program in one ```python block."
        )
    else:
        parts.append(f"Reply with the function {tests['fn_name']} in one ```python block.")
    return "\n\n".join(p for p in parts if p)


# ------------------------------------------------------------------------------------------- APPS / LiveCodeBench


def load_code_rows(source: str | Path | list[dict], *, limit: int | None = None) -> list[dict]:
    """Rows `{"id", "question", "starter_code", "tests", "source"}` from a JSONL/JSON file or a list of dicts in APPS,
    LiveCodeBench or rllm form (a `tests` field in any shape `normalise_tests` accepts)."""
    raw = _read_rows(source)[:limit]
    rows = []
    for i, row in enumerate(raw):
        if not isinstance(row, dict):
            raise MalformedCodeRowError(f"row {i}: expected a JSON object, got {type(row).__name__}")
        label = f"row {i} (id {row.get('question_id', row.get('problem_id', row.get('id', '?')))})"
        try:
            rows.append(_normalise_row(row, i))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MalformedCodeRowError(f"{label}: {exc}") from None
    return rows


def _read_rows(source: str | Path | list[dict]) -> list:
    if isinstance(source, list):
        return source
    path = Path(source)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    if not isinstance(data, list):
        raise MalformedCodeRowError(f"{path}: expected a JSON list of rows (or a .jsonl file)")
    return data


def _normalise_row(row: dict, index: int) -> dict:
    if "tests" in row:
        tests, source = normalise_tests(row["tests"]), row.get("source", "rllm")
    elif "input_output" in row:
        tests, source = _apps_tests(row), "apps"
    elif "public_test_cases" in row or "private_test_cases" in row:
        tests, source = _lcb_tests(row), "livecodebench"
    else:
        raise MalformedCodeRowError(
            "no tests: expected 'tests', APPS 'input_output' or LiveCodeBench 'public_test_cases'"
        )
    question = row.get("question", row.get("question_content", row.get("prompt")))
    if not isinstance(question, str) or not question.strip():
        raise MalformedCodeRowError("no problem text ('question' or 'question_content')")
    row_id = row.get("id", row.get("question_id", row.get("problem_id", index)))
    out = {"id": str(row_id), "question": question, "tests": tests, "source": source}
    if row.get("starter_code"):
        out["starter_code"] = row["starter_code"]
    return out


def _apps_tests(row: dict) -> dict:
    io_spec = row["input_output"]
    io_spec = json.loads(io_spec) if isinstance(io_spec, str) else io_spec
    if not isinstance(io_spec, dict) or not io_spec.get("inputs"):
        raise MalformedCodeRowError("APPS 'input_output' has no inputs")
    inputs, outputs = io_spec["inputs"], io_spec.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        raise MalformedCodeRowError("APPS 'input_output' needs as many outputs as inputs")
    if io_spec.get("fn_name"):
        return normalise_tests({"fn_name": io_spec["fn_name"], "inputs": inputs, "outputs": outputs})
    cases = [{"input": _lines(a), "output": _lines(o)} for a, o in zip(inputs, outputs, strict=True)]
    return normalise_tests({"format": "stdio", "cases": cases})


def _lines(value: Any) -> Any:
    """APPS stores some stdio inputs/outputs as a list of lines."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value) + "\n"
    return value


def _lcb_tests(row: dict) -> dict:
    cases = _lcb_cases(row.get("public_test_cases")) + _lcb_cases(row.get("private_test_cases"))
    if not cases:
        raise MalformedCodeRowError("no LiveCodeBench test cases")
    kinds = {c.get("testtype") for c in cases}
    if kinds == {"stdin"}:
        return normalise_tests(
            {"format": "stdio", "cases": [{"input": c["input"], "output": c["output"]} for c in cases]}
        )
    if kinds == {"functional"}:
        metadata = row.get("metadata") or {}
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
        calls = [
            {
                "args": [json.loads(line) for line in c["input"].split("\n") if line.strip()],
                "output": json.loads(c["output"]),
            }
            for c in cases
        ]
        return normalise_tests({"format": "call", "fn_name": metadata.get("func_name"), "cases": calls})
    raise MalformedCodeRowError(
        f"LiveCodeBench test types must all be 'stdin' or all 'functional', got {sorted(map(str, kinds))}"
    )


def _lcb_cases(value: Any) -> list[dict]:
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            try:
                value = json.loads(_unpickle_str(zlib.decompress(base64.b64decode(value))))
            except (pickle.UnpicklingError, zlib.error, EOFError) as exc:
                raise MalformedCodeRowError(
                    f"test cases are neither JSON nor LiveCodeBench-compressed: {exc}"
                ) from None
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise MalformedCodeRowError("LiveCodeBench test cases must be a list of objects")
    return value


class _StrOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a test-case pickle")


def _unpickle_str(data: bytes) -> str:
    """LiveCodeBench's compressed private tests are a pickled JSON string; no global may be loaded."""
    value = _StrOnlyUnpickler(io.BytesIO(data)).load()
    if not isinstance(value, str):
        raise MalformedCodeRowError(f"compressed test cases hold a {type(value).__name__}, expected a JSON string")
    return value


# ----------------------------------------------------------------------------------------- generated small tasks


def _ints(rng: random.Random, lo: int = 0) -> list[int]:
    return [rng.randint(-9, 20) for _ in range(rng.randint(lo, 6))]


def _text(rng: random.Random, lo: int = 1) -> str:
    words = ["apple", "sky", "river", "code", "moon", "tea", "idea", "orbit", "stone", "Umbrella", "echo", "bird"]
    return " ".join(rng.choice(words) for _ in range(rng.randint(lo, 5)))


def _maybe_palindrome(rng: random.Random) -> str:
    half = "".join(rng.choice("abcx") for _ in range(rng.randint(0, 3)))
    return half + rng.choice(["", "z"]) + half[::-1] if rng.random() < 0.5 else half + "q" + half


class _Template(NamedTuple):
    name: str
    params: str
    returns: str  # completes "Write a Python function name(params) that returns ..."
    body: str  # the reference solution's body
    args: Callable[[random.Random], list]  # one test's arguments


_T = _Template
_TEMPLATES = [
    _T(
        "add_k",
        "xs, k",
        "a new list with k added to every number in xs",
        "return [x + k for x in xs]",
        lambda r: [_ints(r), r.randint(-5, 9)],
    ),
    _T(
        "count_even",
        "xs",
        "how many numbers in xs are even",
        "return sum(1 for x in xs if x % 2 == 0)",
        lambda r: [_ints(r)],
    ),
    _T(
        "max_minus_min",
        "xs",
        "the largest number in the non-empty list xs minus the smallest",
        "return max(xs) - min(xs)",
        lambda r: [_ints(r, 1)],
    ),
    _T(
        "reverse_words",
        "s",
        "the words of s in reverse order, joined by single spaces",
        "return ' '.join(s.split()[::-1])",
        lambda r: [_text(r)],
    ),
    _T(
        "sum_digits",
        "n",
        "the sum of the decimal digits of the non-negative integer n",
        "return sum(int(d) for d in str(n))",
        lambda r: [r.randint(0, 10**6)],
    ),
    _T(
        "count_vowels",
        "s",
        "how many characters of s are vowels (a, e, i, o, u, in either case)",
        "return sum(1 for c in s.lower() if c in 'aeiou')",
        lambda r: [_text(r)],
    ),
    _T(
        "is_palindrome",
        "s",
        "True if s reads the same forwards and backwards, else False",
        "return s == s[::-1]",
        lambda r: [_maybe_palindrome(r)],
    ),
    _T(
        "running_sum",
        "xs",
        "the running totals of xs: item i is xs[0] + ... + xs[i]",
        "out, total = [], 0\n    for x in xs:\n        total += x\n        out.append(total)\n    return out",
        lambda r: [_ints(r)],
    ),
    _T(
        "greater_than",
        "xs, k",
        "the numbers in xs that are greater than k, in their original order",
        "return [x for x in xs if x > k]",
        lambda r: [_ints(r), r.randint(-3, 12)],
    ),
    _T(
        "count_char",
        "s, c",
        "how many times the character c occurs in s",
        "return s.count(c)",
        lambda r: [_text(r), r.choice("aeiorst")],
    ),
    _T(
        "square_all",
        "xs",
        "a new list with the square of every number in xs",
        "return [x * x for x in xs]",
        lambda r: [_ints(r)],
    ),
    _T(
        "longest_word",
        "s",
        "the longest word in s (the first one when several are equally long)",
        "return max(s.split(), key=len)",
        lambda r: [_text(r)],
    ),
    _T(
        "dedupe",
        "xs",
        "xs without repeats, keeping the first occurrence of each number in order",
        "out = []\n    for x in xs:\n        if x not in out:\n            out.append(x)\n    return out",
        lambda r: [[r.randint(0, 5) for _ in range(r.randint(0, 8))]],
    ),
    # a step harder: an edge case, a rule to follow exactly, or a structure to build
    _T(
        "second_largest",
        "xs",
        "the second largest distinct number in xs (xs has at least two distinct numbers)",
        "return sorted(set(xs))[-2]",
        lambda r: [_ints(r, 1) + [21, 22]],
    ),
    _T(
        "rotate_left",
        "xs, k",
        "xs rotated left by k positions (k may be larger than len(xs); xs is not empty)",
        "k %= len(xs)\n    return xs[k:] + xs[:k]",
        lambda r: [_ints(r, 1), r.randint(0, 12)],
    ),
    _T(
        "chunks",
        "xs, n",
        "xs split into consecutive lists of n items (the last one may be shorter)",
        "return [xs[i:i + n] for i in range(0, len(xs), n)]",
        lambda r: [_ints(r), r.randint(1, 4)],
    ),
    _T(
        "run_lengths",
        "s",
        "the run-length encoding of s as a list of [character, count] pairs, e.g. 'aab' gives [['a', 2], ['b', 1]]",
        (
            "out = []\n    for c in s:\n        if out and out[-1][0] == c:\n            out[-1][1] += 1\n"
            "        else:\n            out.append([c, 1])\n    return out"
        ),
        lambda r: ["".join(r.choice("aab") * r.randint(1, 3) for _ in range(r.randint(0, 4)))],
    ),
    _T(
        "caesar",
        "s, k",
        "s with every lowercase letter shifted k places forward in the alphabet (z wraps to a); others stay",
        "return ''.join(chr((ord(c) - 97 + k) % 26 + 97) if 'a' <= c <= 'z' else c for c in s)",
        lambda r: [_text(r), r.randint(1, 30)],
    ),
    _T(
        "word_counts",
        "s",
        "a dict mapping each word of s to how many times it occurs",
        "out = {}\n    for w in s.split():\n        out[w] = out.get(w, 0) + 1\n    return out",
        lambda r: [_text(r, 0)],
    ),
    _T(
        "pair_count",
        "xs, t",
        "how many pairs of positions i < j have xs[i] + xs[j] == t",
        "return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] + xs[j] == t)",
        lambda r: [[r.randint(0, 6) for _ in range(r.randint(0, 7))], r.randint(2, 9)],
    ),
    _T(
        "most_common",
        "xs",
        "the number occurring most often in the non-empty list xs (the smallest on a tie)",
        "return min(set(xs), key=lambda x: (-xs.count(x), x))",
        lambda r: [[r.randint(0, 5) for _ in range(r.randint(1, 8))]],
    ),
    _T(
        "collatz_steps",
        "n",
        "how many steps the rule n -> n // 2 (n even) or 3 * n + 1 (n odd) takes to reach 1 from the positive n",
        "steps = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
        "        steps += 1\n    return steps",
        lambda r: [r.randint(1, 60)],
    ),
]


CODE_FAMILIES = tuple(t.name for t in _TEMPLATES)


def make_code_tasks(n: int, *, seed: int = 0, families: list[str] | None = None) -> list[dict]:
    """`n` generated function-writing rows `{"id", "question", "fn_name", "tests", "solution"}` with five call tests
    each, deterministic in `seed`; `families` (default: all of `CODE_FAMILIES`) picks the function templates, e.g.
    those a model solves sometimes (`benchmarks/calibrate_code.py` measures each family's pass rate)."""
    if n < 0:
        raise ValueError(f"n must be 0 or more, got {n}")
    chosen = list(CODE_FAMILIES) if families is None else list(families)
    unknown = [f for f in chosen if f not in CODE_FAMILIES]
    if unknown or not chosen:
        problem = f"unknown code families {unknown}" if unknown else "no code families"
        raise ValueError(f"code: {problem}; data.task_args.families takes one or more of {', '.join(CODE_FAMILIES)}")
    templates = [t for t in _TEMPLATES if t.name in chosen]
    rng = random.Random(seed)
    return [_make_task(rng, f"code-{seed}-{i}", templates) for i in range(n)]


def _make_task(rng: random.Random, task_id: str, templates: list[_Template]) -> dict:
    name, params, returns, body, make_args = rng.choice(templates)
    solution = f"def {name}({params}):\n    {body}\n"
    namespace: dict = {}
    exec(solution, namespace)
    cases = []
    for _ in range(_N_CASES):
        args = make_args(rng)
        cases.append({"args": args, "output": namespace[name](*args)})
    question = f"Write a Python function {name}({params}) that returns {returns}."
    tests = {"format": "call", "fn_name": name, "cases": cases}
    return {"id": task_id, "question": question, "fn_name": name, "tests": tests, "solution": solution}


# -------------------------------------------------------------------------------------- agent and env (multi-turn)

CODE_SYSTEM_PROMPT = "You are an expert Python programmer. Reply with the complete solution in one ```python block."


class CodeAgent(BaseAgent):
    system_prompt = CODE_SYSTEM_PROMPT


class CodeEnv(FeedbackEnv):
    prompt_fn = staticmethod(code_prompt)
    reward_fn = staticmethod(code_reward)


TASK = Task(
    name="code",
    description="Write a small generated Python function; reward 1 if every test passes in the sandbox.",
    make_tasks=make_code_tasks,
    agent=CodeAgent,
    env=CodeEnv,
    prompt_fn=code_prompt,
    reward_fn=code_reward,
    default_workflow="single_turn",
)
