"""Task statements for generated SWE tasks: what a user would write in an issue about the bug, and nothing that gives
away the hidden tests or the mutated code.

`describe_task` runs the task's FAIL_TO_PASS tests twice in the sandbox with rllm_swe_trace, on the buggy tree and
on the fixed one, and compares the calls each test makes into the package. The first call made the same way in both
runs whose outcome differs is the failure the statement shows: the call with its argument values, what it returns
(raises, yields) now, and what it should return. Each task's statement is then its own: two mutants that break the
same call differently read differently. Where no such call exists (the test fails on the state of an object, or
its calls differ between the runs: the bug changed which inner call a test makes), the statement falls back to the
failure report (`problem_statement` on pytest's `E` lines), with the test's failing statement when it is one line.

Never shown: a test's name or file, a frame of the package (it would show the mutated code), a sandbox path, a
memory address, the clock's time. The same tree, bug and tests give the same statement (the sandbox fixes
PYTHONHASHSEED), so `rllm swe build` stays reproducible, and `restate` rewrites the statements of rows made before.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

__all__ = ["call_differences", "describe_task", "problem_statement", "restate", "restate_tasks", "test_words"]

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
MAX_VALUE_CHARS = 1500
MORE_CALLS = 3
MORE_CHARS = 500  # each text of the other calls
_OPAQUE = re.compile(r" at 0x\.\.\.>")  # a value whose repr says nothing of it (a function, a plain object)
_VERBS = {"returns": "return", "raises": "raise", "yields": "yield"}


def test_words(tree: str | Path, test_paths: list[str]) -> set[str]:
    """Names that would point at a test: its files and modules, and the functions and classes defined in them."""
    words: set[str] = set()
    for rel in test_paths:
        words.update([rel, PurePosixPath(rel).name, PurePosixPath(rel).stem])
        try:
            module = ast.parse(Path(tree, rel).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in module.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                words.add(node.name)
            elif isinstance(node, ast.ClassDef):
                words.add(node.name)
                words.update(f.name for f in node.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test"))
    return words


def _outcome(event: dict) -> tuple[str, str]:
    """(verb, value text) of a traced call: returns/raises/yields."""
    if "raises" in event:
        return "raises", event["raises"]
    if "yields" in event:
        items = event["yields"]
        joiner = "\n" if any("\n" in item for item in items) else ", "
        return "yields", "[" + joiner.join(items) + "]"
    return "returns", str(event.get("returns", ""))


def call_differences(buggy: list[dict], fixed: list[dict]) -> list[dict]:
    """The calls into the package made alike in both runs whose outcomes differ, {"call", "got", "expected"} (each
    outcome a (verb, text) pair), up to where the runs part: past a call the bug changed (the test made another
    call), a difference would show the package's internals."""
    found = []
    for now, before in zip(buggy, fixed, strict=False):
        if now["call"] != before["call"]:
            break
        if _outcome(now) != _outcome(before):
            found.append({"call": now["call"], "got": _outcome(now), "expected": _outcome(before)})
    return found


def _block(text: str, language: str = "", limit: int = MAX_VALUE_CHARS) -> str:
    text = text if len(text) <= limit else text[:limit] + "\n...[cut]"
    fence = "````" if "```" in text else "```"
    return f"{fence}{language}\n{text}\n{fence}"


def _difference_statement(package: str, differences: list[dict]) -> str:
    first, *more = differences
    (verb, got), (expected_verb, expected) = first["got"], first["expected"]
    text = (
        f"After a recent change, {package} gives a wrong result. This call\n\n{_block(first['call'], 'python')}"
        f"\n\nnow {verb}\n\n{_block(got)}\n\nbut it should {_VERBS[expected_verb]}\n\n{_block(expected)}\n\n"
    )
    if more:
        text += "Other calls that changed:\n\n" + "".join(_difference_line(d) for d in more) + "\n"
    return text + "Find the cause in the package's source code and fix it."


def _difference_line(difference: dict) -> str:
    """One more changed call, on one line when it is short."""
    (verb, got), (expected_verb, expected) = difference["got"], difference["expected"]
    call, should = difference["call"], f"but it should {_VERBS[expected_verb]}"
    texts = call + got + expected
    if max(len(call), len(got), len(expected)) <= 100 and "\n" not in texts and "`" not in texts:
        return f"- `{call}` now {verb} `{got}` {should} `{expected}`\n"
    blocks = [_block(t, language, MORE_CHARS) for t, language in ((call, "python"), (got, ""), (expected, ""))]
    return f"- {blocks[0]}\n\n  now {verb}\n\n{blocks[1]}\n\n  {should}\n\n{blocks[2]}\n"


_HINTS = re.compile(r"-v to get|use '-vv'|\(pytest_assertion plugin|Full output truncated")
_FRAME = re.compile(r"^(\S+?):\d+: in \S+$")
# a test helper's or attribute's name (`_test_queue(...)`, `self.test_str`), a test directory, a sandbox path
_TEST_WORD = re.compile(r"(?<![A-Za-z0-9])_*[Tt]ests?_\w|\btests?/|/tmp/|/opt/")
# a datetime down to the microsecond is the clock's (`datetime.now()` in a test): it would differ in every build
_NOW = re.compile(r"datetime\.datetime\(\d{4}(?:, \d+){6}\)")
_TRIVIAL = re.compile(r"^(AssertionError|assert (False|True|None|0))$")


def problem_statement(package: str, failures: list[str], test_words: set[str], differences: list[dict] = ()) -> str:
    """An issue about the bug. From `differences` (`call_differences` of the failing tests, in order): those that show
    nothing of the tests (see below), the first in full (the call, what it does now and what it should do) and up to
    `MORE_CALLS` others in short, which tell apart two bugs that break the first call alike. Otherwise
    from failure reports (pytest's `--tb=short` text): the `E` lines (the exception, or the assertion's values) and
    the failing statement of the test when it is one whole line; of the reports, the first whose `E` lines say more
    than `assert False`. Never shown: a test's name or file, a frame of the package (it would show the mutated
    code), a sandbox path, a memory address or the clock's time. One thing can still differ between builds: a set
    printed in a value, when its items hash by address (None, in Python 3.11)."""
    words = sorted((w for w in test_words if w), key=len, reverse=True)
    leaks = re.compile("|".join(rf"(?<![\w/.]){re.escape(w)}(?!\w)" for w in words)) if words else None
    shown: list[dict] = []
    for difference in differences:
        (verb, got), (expected_verb, expected) = difference["got"], difference["expected"]
        texts = [_scrub(t, leaks, MAX_VALUE_CHARS * 2) for t in (difference["call"], got, expected)]
        scrubbed = {"call": texts[0], "got": (verb, texts[1]), "expected": (expected_verb, texts[2])}
        if None not in texts and texts[1] != texts[2] and scrubbed not in shown:
            shown.append(scrubbed)
    if shown:
        shown.sort(key=lambda d: _OPAQUE.search(d["call"]) is not None)  # `raises(KeyError, <function ...>)` last
        return _difference_statement(package, shown[: 1 + MORE_CALLS])
    described = [d for d in (_describe(f, leaks) for f in failures) if d[1]]
    if not described:
        return (
            f"After a recent change, {package} misbehaves: some of its functions give wrong results or raise "
            "errors where they used to work. Find the cause in the package's source code and fix it."
        )
    call, error = next((d for d in described if not _TRIVIAL.match(d[1])), described[0])
    text = f"After a recent change, {package} misbehaves. "
    text += f"This used to work:\n\n```python\n{call}\n```\n\nand now fails with\n\n" if call else "Code that "
    text += "" if call else "used to work now fails with\n\n"
    return text + f"```\n{error}\n```\n\nFind the cause in the package's source code and fix it."


def _scrub(text: str, leaks: re.Pattern | None, limit: int) -> str | None:
    """The text as a statement may show it, or None when it would give a test away."""
    text = re.sub(r"[\w.]*<locals>\.", "", text)  # `test_x.<locals>.<lambda>` names a test
    text = _ADDRESS.sub("0x...", text.replace("/testbed/", "").replace("/testbed", "."))
    text = _NOW.sub("datetime.datetime(...)", text)
    if _HINTS.search(text) or (leaks and leaks.search(text)) or _TEST_WORD.search(text):
        return None
    return text.rstrip()[:limit]


def _describe(failure: str, leaks: re.Pattern | None) -> tuple[str, str]:
    """(the test's failing statement or "", the scrubbed `E` lines) of one failure report."""
    lines = failure.splitlines()
    call = ""
    if lines and (frame := _FRAME.match(lines[0])) and _is_test_file(frame.group(1)) and len(lines) > 1:
        statement = lines[1].strip()
        if statement and not lines[1].startswith("E ") and _parses(statement):
            call = _scrub(statement, leaks, 300) or ""
    e_lines = [raw[4:] if raw.startswith("E   ") else raw[1:].strip() for raw in lines if raw.startswith("E ")]
    errors = [_scrub(line, leaks, 300) for line in e_lines]
    kept = [e for e in errors if e is not None]
    while kept and not kept[-1].strip():
        kept.pop()
    return call, "\n".join(kept[:15])[:1500]


def _is_test_file(path: str) -> bool:
    from rllm.tasks.swe.grading import is_test_path

    return is_test_path(path)


def _parses(statement: str) -> bool:
    try:
        ast.parse(statement)
    except SyntaxError:
        return False
    return True


def describe_task(
    package: str,
    tree: str | Path,
    fail_to_pass: list[str],
    *,
    bug: str | None = None,
    fix: str | None = None,
    timeout_s: float = 60.0,
    test_fields: dict | None = None,
) -> str:
    """The statement of a task whose FAIL_TO_PASS tests are in `tree`: the buggy tree is `tree` with `bug` applied,
    the fixed one `tree` with `fix` applied (one of them is None: `tree` itself). Two traced sandbox runs.
    `test_fields`: the row's `test_cmd` / `test_env`, how its tests run."""
    from rllm.tasks.swe.grading import run_tests, task_test_setup, test_files

    options, env = task_test_setup(test_fields or {})
    setup = {"test_options": options, "test_env": env, "trace": True, "timeout_s": timeout_s}
    buggy = run_tests(tree, fail_to_pass, diff=bug, **setup)
    fixed = run_tests(tree, fail_to_pass, diff=fix, **setup)
    differences = [d for t in fail_to_pass for d in call_differences(buggy.traces.get(t, []), fixed.traces.get(t, []))]
    reports = [buggy.failures[t] for t in fail_to_pass if t in buggy.failures]
    words = test_words(tree, test_files(Path(tree)))
    return problem_statement(package, reports, words, differences)


def restate(row: dict, timeout_s: float = 60.0) -> dict:
    """The row with its statement written by `describe_task` (a row of `rllm swe build`, or made before it traced)."""
    from rllm.tasks.swe.store import task_trees

    _, full = task_trees(row)
    statement = describe_task(
        row["repo"], full, row["FAIL_TO_PASS"], fix=row["patch"], timeout_s=timeout_s, test_fields=row
    )
    return {**row, "problem_statement": statement}


def restate_tasks(rows: list[dict], jobs: int = 1, timeout_s: float = 60.0) -> tuple[list[dict], list[str]]:
    """(the rows with their statements rewritten, the ids of rows left out): a row whose statement is an earlier
    row's is left out, as `rllm swe build` leaves it out (no test tells its bug apart from the earlier one's)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        restated = list(pool.map(lambda row: restate(row, timeout_s), rows))
    kept, dropped, seen = [], [], set()
    for row in restated:
        if row["problem_statement"] in seen:
            dropped.append(row["instance_id"])
        else:
            seen.add(row["problem_statement"])
            kept.append(row)
    return kept, dropped
