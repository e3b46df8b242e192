"""Reward for model-written code: run the task's tests in the sandbox; 1.0 only if every selected test passes.

`code_reward(task, response)` takes the last ```python block of the reply (`extract_code`) and runs `task["tests"]`
through `run_code_tests`, which executes `code_runner.py` (a trusted script, copied fresh into the sandbox for every
run) under `rllm.sandbox`. The runner's worker forks one child per test; the verdict comes only from the
runner's judge over the sandbox's result channel (fd 3), which the children close before any solution code runs.

Test formats (`tests`, after `normalise_tests`):
- `{"format": "stdio", "cases": [{"input": str, "output": str}, ...]}`: APPS / LiveCodeBench / Codeforces style. The
  program runs once per case with the input on stdin (as `__main__`); its stdout must equal the output after
  ignoring trailing spaces on each line and trailing blank lines. With `"float_tol"` (default 1e-6; None turns it
  off) a mismatch is retried token by token: whitespace-separated tokens must match one for one, numbers written
  with a '.' or an exponent within 1e-6 absolute or relative error, integers exactly (Codeforces checker rules).
- `{"format": "call", "fn_name": str, "cases": [{"args": [...], "output": value}, ...]}`: APPS call-based and
  LiveCodeBench functional tests. The module is run (as `__solution__`, after `CALL_PRELUDE`: `from typing import *`
  and a few standard modules, as LiveCodeBench does for LeetCode-style code), then `fn_name(*args)` is called, or
  `Solution().fn_name(*args)` when the code defines a `Solution` class instead. The return value must be plain JSON
  data (tuples read as lists); floats match within `float_tol`. `"unwrap_single": true` also accepts `output[0]`
  when the output is a one-element list (APPS stores some outputs wrapped that way).
- `{"format": "humaneval", "prompt": str, "test": str, "entry_point": str}`: `check(candidate)` must return. The
  program is prompt + completion: a completion that defines `entry_point` itself is appended after the prompt (the
  prompt's stub is then replaced; its imports and helpers stay), otherwise it is the function body that continues
  the prompt (the canonical solutions are bodies). One test per problem.
Shorthands are accepted: a list of `{"input", "output"}` (stdio), `{"fn_name", "inputs", "outputs"}` (APPS call
style), `{"inputs", "outputs"}` (APPS stdio) and `{"test", "entry_point", ...}` (HumanEval rows).

Reward hacking (the runner's docstring has the full threat model):
- Nothing the solution prints or its exit code counts; each test needs a report with a per-test random nonce, so a
  program that exits early (`os._exit(0)` at import) fails.
- stdio and call verdicts are computed by the runner's judge from the child's output / JSON return value: an object
  whose `__eq__` always returns True cannot be serialised and fails. HumanEval's `candidate` returns are rebuilt from
  exact builtin types before any assert sees them, and `check` runs with a pristine copy of the builtins.
- Expected outputs never reach the children, not even as freed memory: the job goes in over stdin (no file holds
  it) as two lines, and only the runner's judge reads the second (expected outputs, verdict token); the worker that
  forks the tests was forked before the judge read anything and gets the first line alone. The judge and the worker
  are non-dumpable, so their memory and descriptors (/proc/<pid>/mem, /proc/<pid>/fd/3) are closed to the
  children; the verdict must carry the host-chosen token.
- Out of scope: the HumanEval format runs `check` in the solution's interpreter, so a solution that manipulates the
  interpreter (frame or `gc` inspection to read the nonce and forge a report or rewrite `check`, trace functions
  that skip asserts, monkeypatching a module `check` uses, forking to try both answers to an assert) can defeat it.
  Prefer stdio/call tests where the reward is adversarial.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm.rewards.base import RewardOutput

__all__ = [
    "CALL_PRELUDE",
    "CodeTestResult",
    "MalformedTestsError",
    "code_reward",
    "extract_code",
    "feedback_text",
    "humaneval_program",
    "normalise_tests",
    "run_code_tests",
]

CALL_PRELUDE = "from typing import *\nimport bisect, collections, functools, heapq, itertools, math, re, string\n"
FEEDBACK_CHARS = 1000
_EXCERPT = 300  # characters of an input / expected / actual output shown per field
_RUNNER_FILE = "code_runner.py"
_RUNNER_VERSION = "rllm-code-runner/1"
_STARTUP_S = 5.0  # sandbox + interpreter start on top of the runner's own total time limit
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_STATUS_TEXT = {
    "wrong_answer": "wrong answer",
    "runtime_error": "runtime error",
    "syntax_error": "syntax error",
    "timeout": "time limit exceeded",
    "output_limit": "output limit exceeded",
    "no_report": "the program exited before the test finished",
    "unserializable": "the return value is not plain data",
    "missing_function": "function not found",
    "killed": "killed (out of memory?)",
    "bad_report": "invalid test report",
    "harness_error": "the test harness failed",
}


class MalformedTestsError(ValueError):
    """A task's `tests` are not in a format this module runs (a dataset bug, not a zero reward)."""


_KILLED_STATUS = {"memory": "killed", "timeout": "timeout", "output_limit": "output_limit", "pids": "runtime_error"}


@dataclass(frozen=True)
class CodeTestResult:
    passed: bool
    passed_tests: int
    total_tests: int
    first_failure: str | None
    details: list[dict]
    error: str | None = None


# --------------------------------------------------------------------------------------------------- extraction


def extract_code(response: str, language: str = "python") -> str | None:
    """The last fenced block tagged `language` (for python also py/python3), else the last fenced block of any tag;
    None when the reply has no closed fence (a reply cut off mid-block is treated as having no code)."""
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(response or "")]
    if not blocks:
        return None
    wanted = _PYTHON_TAGS if language.lower() in _PYTHON_TAGS else {language.lower()}
    tagged = [body for tag, body in blocks if tag in wanted]
    return tagged[-1] if tagged else blocks[-1][1]


def humaneval_program(prompt: str, completion: str, entry_point: str) -> str:
    """The program HumanEval's test runs: the prompt continued by a body, or followed by a full definition."""
    defines = re.search(rf"^(async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", completion, re.MULTILINE)
    return f"{prompt}\n\n{completion}" if defines else prompt + completion


# ------------------------------------------------------------------------------------------------------ formats


def normalise_tests(tests: Any) -> dict:
    """The canonical `tests` dict (see the module docstring); MalformedTestsError naming the problem otherwise."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as exc:
            raise MalformedTestsError(f"tests is a string but not JSON: {exc}") from None
    if isinstance(tests, list):
        tests = {"format": "stdio", "cases": tests}
    if not isinstance(tests, dict):
        raise MalformedTestsError(f"tests must be a dict or a list of cases, got {type(tests).__name__}")
    tests = _from_shorthand(tests)
    fmt = tests.get("format")
    if fmt == "stdio":
        out = {"format": fmt, "cases": [_stdio_case(c, i) for i, c in enumerate(_cases(tests))]}
    elif fmt == "call":
        out = {
            "format": fmt,
            "fn_name": _identifier(tests, "fn_name"),
            "unwrap_single": bool(tests.get("unwrap_single")),
            "cases": [_call_case(c, i) for i, c in enumerate(_cases(tests))],
        }
    elif fmt == "humaneval":
        if not isinstance(tests.get("test"), str) or "def check" not in tests["test"]:
            raise MalformedTestsError("humaneval tests need 'test': the source of `def check(candidate): ...`")
        if not isinstance(tests.get("prompt", ""), str):
            raise MalformedTestsError("humaneval 'prompt' must be a string")
        out = {
            "format": fmt,
            "test": tests["test"],
            "entry_point": _identifier(tests, "entry_point"),
            "prompt": tests.get("prompt", ""),
        }
    else:
        raise MalformedTestsError(f"tests 'format' must be 'stdio', 'call' or 'humaneval', got {fmt!r}")
    tol = tests.get("float_tol", 1e-6)
    if tol is not None and not (isinstance(tol, (int, float)) and tol >= 0):
        raise MalformedTestsError(f"float_tol must be a number >= 0 or None, got {tol!r}")
    out["float_tol"] = tol
    return out


def _from_shorthand(tests: dict) -> dict:
    if "format" in tests:
        return tests
    if "test" in tests and "entry_point" in tests:
        return {**tests, "format": "humaneval"}
    if "inputs" in tests and "outputs" in tests:
        inputs, outputs = tests["inputs"], tests["outputs"]
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise MalformedTestsError("'inputs' and 'outputs' must be lists of the same length")
        if tests.get("fn_name"):
            cases = [{"args": a, "output": o} for a, o in zip(inputs, outputs, strict=True)]
            return {"format": "call", "fn_name": tests["fn_name"], "cases": cases, "unwrap_single": True}
        return {"format": "stdio", "cases": [{"input": a, "output": o} for a, o in zip(inputs, outputs, strict=True)]}
    raise MalformedTestsError("tests need a 'format' ('stdio', 'call', 'humaneval') or one of the shorthand shapes")


def _cases(tests: dict) -> list:
    cases = tests.get("cases")
    if not isinstance(cases, list) or not cases:
        raise MalformedTestsError(f"{tests.get('format')} tests need a non-empty list 'cases'")
    return cases


def _stdio_case(case: Any, i: int) -> dict:
    if not isinstance(case, dict) or not isinstance(case.get("input"), str) or not isinstance(case.get("output"), str):
        raise MalformedTestsError(f"stdio case {i} must be {{'input': str, 'output': str}}, got {str(case)[:200]}")
    return {"input": case["input"], "output": case["output"]}


def _call_case(case: Any, i: int) -> dict:
    if not isinstance(case, dict) or not isinstance(case.get("args"), list) or "output" not in case:
        raise MalformedTestsError(f"call case {i} must be {{'args': list, 'output': value}}, got {str(case)[:200]}")
    try:
        json.dumps(case["output"], allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise MalformedTestsError(f"call case {i}: the expected output must be JSON data: {exc}") from None
    return {"args": case["args"], "output": case["output"]}


def _identifier(tests: dict, key: str) -> str:
    value = tests.get(key)
    if not isinstance(value, str) or not value.isidentifier():
        raise MalformedTestsError(f"{tests.get('format')} tests need '{key}': a Python identifier, got {value!r}")
    return value


# -------------------------------------------------------------------------------------------------------- running


def run_code_tests(
    code: str,
    tests: dict,
    *,
    sandbox: Any = None,
    per_test_timeout_s: float = 5.0,
    total_timeout_s: float = 30.0,
    max_tests: int | None = None,
    stop_at_first_failure: bool = True,
) -> CodeTestResult:
    """Run `code` against the first `max_tests` cases of `tests` in the sandbox. With `stop_at_first_failure` (what
    an all-or-nothing reward needs) the cases after a failure are not run and `passed_tests` counts those before it.
    Raises MalformedTestsError (a ValueError) for malformed tests, and SandboxUnavailableError or InfraError when the
    sandbox cannot run (not the policy's fault); anything the code does is a failed result, never an exception."""
    spec = normalise_tests(tests)
    if per_test_timeout_s <= 0 or total_timeout_s <= 0:
        raise ValueError("per_test_timeout_s and total_timeout_s must be > 0")
    cases = _select(spec, max_tests)
    job, hidden = _job(code, spec, cases, per_test_timeout_s, total_timeout_s, stop_at_first_failure)
    job_bytes = f"{json.dumps(job)}\n{json.dumps(hidden)}".encode()  # the runner's judge keeps the second line
    if sandbox is None:
        from rllm.sandbox import default_sandbox

        sandbox = default_sandbox()
    result = sandbox.run(
        sandbox.python_argv(_RUNNER_FILE),
        files={_RUNNER_FILE: _runner_source()},
        stdin=job_bytes,  # not a file: the solution could read the expected outputs from it
        limits=_limits(sandbox, len(cases), total_timeout_s),
    )
    return _result(spec, cases, _verdict(result, hidden["token"]))


def _select(spec: dict, max_tests: int | None) -> list[dict]:
    if spec["format"] == "humaneval":
        return [{}]
    if max_tests is not None and max_tests < 1:
        raise ValueError(f"max_tests must be >= 1 or None, got {max_tests}")
    return spec["cases"][:max_tests]


def _job(code, spec, cases, per_test_timeout_s, total_timeout_s, stop_at_first_failure) -> tuple[dict, dict]:
    """(what the tests may see, what only the runner's judge may: the expected outputs and the verdict token)."""
    fmt = spec["format"]
    expected = [c.get("output") for c in cases]
    job = {
        "format": fmt,
        "code": humaneval_program(spec["prompt"], code, spec["entry_point"]) if fmt == "humaneval" else code,
        "inputs": [c.get("input") if fmt == "stdio" else c.get("args") for c in cases],
        "float_tol": spec["float_tol"],
        "per_test_timeout_s": per_test_timeout_s,
        "total_timeout_s": total_timeout_s,
        "stop_at_first_failure": stop_at_first_failure,
        "output_limit_bytes": max(1 << 20, 2 * max(len(json.dumps(e)) for e in expected) + 1024),
        "excerpt_chars": _EXCERPT,
    }
    if fmt == "call":
        job.update(fn_name=spec["fn_name"], unwrap_single=spec["unwrap_single"], prelude=CALL_PRELUDE)
    elif fmt == "humaneval":
        job.update(prompt=spec["prompt"], test=spec["test"], entry_point=spec["entry_point"])
    return job, {"expected": expected, "token": secrets.token_hex(16)}


@functools.cache
def _runner_source() -> bytes:
    """Read once per process: the host's copy cannot be touched by anything that runs in the sandbox."""
    return Path(__file__).with_name(_RUNNER_FILE).read_bytes()


def _limits(sandbox: Any, n_tests: int, total_timeout_s: float) -> Any:
    base = getattr(sandbox, "limits", None)
    if base is None:
        from rllm.sandbox import SandboxLimits

        base = SandboxLimits()
    return dataclasses.replace(
        base,
        wall_s=total_timeout_s + _STARTUP_S,
        cpu_s=max(base.cpu_s, math.ceil(total_timeout_s + _STARTUP_S)),
        result_bytes=max(base.result_bytes, 4096 * n_tests + (64 << 10)),
    )


def _verdict(result: Any, token: str) -> dict:
    """The runner's verdict, or {"error": ...} when there is none to trust (a killed run fails every test)."""
    if result.killed_reason is not None and not result.result:
        status = _KILLED_STATUS.get(result.killed_reason, "harness_error")
        return {"error": f"the sandbox stopped the run ({result.killed_reason})", "status": status}
    try:
        verdict = json.loads(result.result)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {
            "error": f"no valid verdict from the test runner (exit code {result.exit_code}, "
            f"stderr: {result.stderr[-300:].decode('utf-8', 'replace')!r})"
        }
    if not isinstance(verdict, dict) or verdict.get("runner") != _RUNNER_VERSION:
        return {"error": "the verdict does not come from the test runner"}
    if verdict.get("error"):
        return {"error": f"test runner: {verdict['error']}"}
    if verdict.get("token") != token or not isinstance(verdict.get("tests"), list):
        return {"error": "the verdict does not carry this run's token"}
    if (verdict.get("hardening") or {}).get("non_dumpable") is not True:
        # without it a child could open /proc/<runner>/fd/3 and /proc/<runner>/mem: fail closed
        return {"error": "the test runner could not make itself non-dumpable (prctl); its verdict is not trusted"}
    return verdict


def _result(spec: dict, cases: list[dict], verdict: dict) -> CodeTestResult:
    total = len(cases)
    if "error" in verdict:
        detail = {
            "index": 0,
            "passed": False,
            "status": verdict.get("status", "harness_error"),
            "error": verdict["error"],
        }
        return CodeTestResult(False, 0, total, f"error: {verdict['error']}", [detail], verdict["error"])
    details = [_detail(spec, cases, t) for t in verdict["tests"]]
    if verdict.get("stopped") == "total_timeout":
        details.append(
            {
                "index": len(details),
                "passed": False,
                "status": "timeout",
                "error": "not run: the total time limit for all tests was reached",
            }
        )
    passed = sum(1 for d in details if d["passed"])
    failed = next((d for d in details if not d["passed"]), None)
    all_passed = failed is None and passed == total
    return CodeTestResult(all_passed, passed, total, None if failed is None else _summary(failed), details)


def _detail(spec: dict, cases: list[dict], test: dict) -> dict:
    """The runner's record of one test, with the input and expected output (held here, on the host) on failures."""
    index = int(test.get("index", 0))
    detail = {k: test[k] for k in ("index", "passed", "status", "duration_s", "got", "error", "stderr") if k in test}
    detail["passed"] = test.get("passed") is True
    if not detail["passed"] and spec["format"] != "humaneval" and 0 <= index < len(cases):
        case = cases[index]
        if spec["format"] == "stdio":
            detail["input"] = _excerpt(case["input"])
            detail["expected"] = _excerpt(case["output"])
        else:
            detail["call"] = _excerpt(f"{spec['fn_name']}({', '.join(json.dumps(a) for a in case['args'])})")
            detail["expected"] = _excerpt(json.dumps(case["output"]))
    return detail


def _excerpt(text: str, limit: int = _EXCERPT) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def _summary(detail: dict) -> str:
    """One line: which test, what went wrong, and the last line of the error (the exception or assert)."""
    status = detail.get("status", "failed")
    text = f"test {detail.get('index', 0) + 1}: {_STATUS_TEXT.get(status, status)}"
    error = (detail.get("error") or "").strip()
    if error:
        lines = error.splitlines()
        where = re.findall(r'File "<(?:solution|test)>", line (\d+)', error)
        text += f" at line {where[-1]}" if where and status == "syntax_error" else ""
        last = lines[-1].strip()
        test_frames = [i for i, line in enumerate(lines[:-1]) if line.strip().startswith('File "<test>"')]
        if last == "AssertionError" and test_frames and test_frames[-1] + 1 < len(lines) - 1:
            last = f"{lines[test_frames[-1] + 1].strip()} failed"  # a bare assert: show the assert itself
        text += f": {last}"
    return text


def feedback_text(result: CodeTestResult) -> str:
    """What a multi-turn code agent is shown: the first failing test (input, expected, got / the failed assert /
    the traceback's tail), at most `FEEDBACK_CHARS` characters."""
    if result.passed:
        return "The test passed." if result.total_tests == 1 else f"All {result.total_tests} tests passed."
    failed = next((d for d in result.details if not d["passed"]), None)
    if failed is None:
        return f"Passed {result.passed_tests} of {result.total_tests} tests."
    status = failed.get("status", "failed")
    lines = [f"Test {failed.get('index', 0) + 1} of {result.total_tests} failed: {_STATUS_TEXT.get(status, status)}."]
    if "input" in failed and status != "syntax_error":
        lines += ["Input:", failed["input"].rstrip("\n")]
    if "call" in failed and status != "syntax_error":
        lines += [f"Call: {failed['call']}"]
    if status == "wrong_answer" and "expected" in failed:
        lines += ["Expected output:", failed["expected"].rstrip("\n"), "Your output:", _excerpt(failed.get("got", ""))]
    if failed.get("error"):
        lines += [failed["error"].strip()[-600:]]
    elif failed.get("stderr"):
        lines += ["Stderr:", failed["stderr"].strip()[-300:]]
    text = "\n".join(lines)
    return text if len(text) <= FEEDBACK_CHARS else text[: FEEDBACK_CHARS - 15] + "\n[... truncated]"


# --------------------------------------------------------------------------------------------------------- reward


def code_reward(
    task: dict,
    response: str,
    *,
    partial_credit: bool = False,
    per_test_timeout_s: float = 5.0,
    total_timeout_s: float = 30.0,
) -> RewardOutput:
    """1.0 when every test in `task["tests"]` passes, else 0.0 (with `partial_credit`: the fraction passed, all
    tests run; `is_correct` stays all-passed). info: passed_tests, total_tests, first_failure, feedback."""
    if "tests" not in task:
        raise MalformedTestsError(f"code task {task.get('id', '?')!r} has no 'tests'")
    spec = normalise_tests(task["tests"])
    code = extract_code(response)
    if code is None:
        total = len(spec.get("cases", [{}]))
        feedback = "No code found: reply with the complete solution in one ```python block."
        info = {"passed_tests": 0, "total_tests": total, "first_failure": "no code block", "feedback": feedback}
        return RewardOutput(0.0, is_correct=False, info=info)
    result = run_code_tests(
        code,
        spec,
        per_test_timeout_s=per_test_timeout_s,
        total_timeout_s=total_timeout_s,
        stop_at_first_failure=not partial_credit,
    )
    reward = 1.0 if result.passed else (result.passed_tests / result.total_tests if partial_credit else 0.0)
    info = {
        "passed_tests": result.passed_tests,
        "total_tests": result.total_tests,
        "first_failure": result.first_failure,
        "feedback": feedback_text(result),
    }
    if result.error:
        info["error"] = result.error
    return RewardOutput(reward, is_correct=result.passed, info=info)
