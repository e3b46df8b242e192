"""Math answers: find the final answer in a reply and check it against the reference by verified equivalence.

`math_reward(task, response)` scores a reply 1.0 when its final answer (the last `\\boxed{...}`, else a
"final answer: X"-style line) equals `task["answer"]` as mathematics, not as text: `\\frac{1}{2}`, `0.5` and `1/2`
are one answer.

Choices:
- Verified equivalence (math-verify: latex -> sympy, then numeric and symbolic comparison) instead of string match.
  String match under-rewards right answers written another way (`0.5` for `\\frac{1}{2}`, `2\\sqrt{2}` for
  `\\sqrt{8}`), and a policy trained on it learns the reference's spelling instead of the mathematics.
- Decisions that follow math-verify: `x=5` equals `5` (an answer to "solve for x" may name the variable);
  `50\\%` equals both `50` and `0.5` (a percent is read either way); sets and intervals compare as sets
  (`\\{1,2\\}` equals `\\{2,1\\}`, `[1,2)` differs from `[1,2]`); units in `\\text{...}` are ignored
  (`10\\text{ cm}` equals `10`); decimals must agree to the printed precision (`2.333` is not `\\frac{7}{3}`,
  `2.3333333` is).
- A hard timeout outside signals. sympy hangs on some inputs: `9^{9^{9^9}}` (a tower of integers) was still
  running after 20 s when measured, and `2^{2^{40}}` had grown to 1.5 GB by then. math-verify's own timeout
  (`signal.alarm`) does stop them in the main thread, but it refuses to run in any other thread, and reward
  functions run in worker threads. So the check runs in a separate worker process (`python -c`, started once and
  kept alive, one per concurrent caller up to `RLLM_MATH_WORKERS`, default min(4, CPUs)) with math-verify's
  timeouts off; a reply that misses the deadline kills its worker (a fresh one starts on the next call). A timed-out
  check is False, is logged and counted (`verify_stats()`), and `math_reward` reports it as reason "timeout". The
  worker is a plain subprocess, not multiprocessing, so a user's script is never re-imported as `__main__`, and its
  memory is capped (4 GiB on Linux) because the same inputs also grow memory without bound. Verdicts are cached
  (a group's samples often repeat an answer; a timeout is not worth paying twice).
- A fallback: strings equal after `normalize_answer` are equal without asking sympy (the common case, and fast);
  when math-verify cannot parse one side, or the worker fails, that string equality is the answer. Answers longer
  than `MAX_VERIFY_CHARS` are compared only that way: no reference answer is that long.
- `format_reward` (for a boxed but wrong answer) defaults to 0, so the mean reward reads as accuracy. A small bonus
  helps a model that rarely boxes its answer, but a policy can collect it forever without solving anything, so it is
  opt-in. An unboxed answer found by a fallback pattern earns 1.0 when right but never the format bonus: it did not
  follow the requested format. A timed-out check scores like a wrong answer.
- Nothing here raises on any string input; only a task without its answer field (a dataset bug is not a zero
  reward) or a non-positive `timeout_s` raises.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import logging
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from rllm.cpus import usable_cores
from rllm.rewards.base import RewardOutput

__all__ = [
    "MAX_VERIFY_CHARS",
    "extract_boxed",
    "extract_final_answer",
    "math_equal",
    "math_reward",
    "normalize_answer",
    "verify_stats",
]

logger = logging.getLogger(__name__)

MAX_VERIFY_CHARS = 1000
_STARTUP_TIMEOUT_S = 120.0  # importing sympy on a busy machine; not counted against a check's deadline
_WORKER_MEMORY_BYTES = 4 << 30

# ---------------------------------------------------------------------------------------------------- extraction

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\[{}]|[{}]")  # escaped braces (`\{1,2\}`, a latex set) are text, not grouping


def extract_boxed(text: str) -> str | None:
    """The stripped content of the last `\\boxed{...}` (or `\\fbox{...}`) with balanced braces, or None.

    "Last" is the last box that is not inside another one, so `\\boxed{\\boxed{1}}` gives `\\boxed{1}`. A last box
    whose braces never close (a reply cut off mid-answer) gives None rather than an earlier answer. Linear time."""
    if not isinstance(text, str) or "\\" not in text:
        return None
    matching: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACE.finditer(text):
        if token.group() == "{":
            stack.append(token.start())
        elif token.group() == "}" and stack:
            matching[stack.pop()] = token.start()
    last: tuple[int, int | None] | None = None
    covered_until = -1
    for box in _BOX.finditer(text):
        if box.start() < covered_until:
            continue  # nested in the previous top-level box
        opening = box.end() - 1
        closing = matching.get(opening)
        last = (opening, closing)
        covered_until = closing if closing is not None else len(text)
    if last is None or last[1] is None:
        return None
    return text[last[0] + 1 : last[1]].strip()


_PHRASE = re.compile(r"final\s+answer|the\s+answer", re.IGNORECASE)
_PHRASE_ANSWER = re.compile(r"(?:final\s+answer|the\s+answer)\s*(?:is\b\s*)?:?\s*([^\n]*)", re.IGNORECASE)
_MATH_SPAN = re.compile(r"\$([^$]+)\$")
_GSM8K = re.compile(r"####([^\n]*)")
_SENTENCE_END = re.compile(r"\.(?:\s|$)")


def extract_final_answer(text: str) -> str | None:
    """The reply's final answer: the last `\\boxed{...}`; else the last of "Final answer: X" / "The answer is X",
    GSM8K's "#### X" and `<answer>X</answer>`. A phrase answer runs to the end of its sentence or line; `$`,
    markdown `*` and a trailing period are stripped. None when there is no answer."""
    if not isinstance(text, str):
        return None
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed or None
    # positions first, answers only from the last one on: a phrase's answer runs to the end of its line, so
    # capturing every phrase's answer would hide a later phrase on the same line and cost time quadratic in its length
    found: list[tuple[int, re.Pattern | None]] = [(m.start(), _PHRASE_ANSWER) for m in _PHRASE.finditer(text)]
    found += [(m.start(), _GSM8K) for m in _GSM8K.finditer(text)]
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    if start >= 0:
        found.append((start, None))
    for position, pattern in sorted(found, key=lambda item: item[0], reverse=True):
        if pattern is None:
            answer = text[start + len("<answer>") : end].strip()
        else:
            answer = _clean_phrase_answer(pattern.match(text, position).group(1))
        if answer:
            return answer
    return None


def _clean_phrase_answer(answer: str) -> str:
    math = _MATH_SPAN.search(answer)
    if math is not None:  # "is $3.5$ apples": the math is the answer
        return math.group(1).strip()
    answer = answer.strip().strip("*").strip()
    end = _SENTENCE_END.search(answer)
    if end is not None:
        answer = answer[: end.start()]
    return answer.strip().strip("*$").strip().rstrip(".").strip()


# ------------------------------------------------------------------------------------------------- normalisation

_TEXT_UNIT = re.compile(r"\\(?:text|textrm|mbox|mathrm)\{[^{}]*\}$")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mbox|mathrm|mathbf)\{([^{}]*)\}")
_LATEX_NOISE = re.compile(r"\\left|\\right|\\displaystyle|\\[!,;: ]|\{,\}|~")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°")
_FRAC_SHORTHAND = re.compile(r"\\frac(\d)(\d)")  # \frac12 is \frac{1}{2}
_SQRT_SHORTHAND = re.compile(r"\\sqrt(\w)")
_INT_FRAC = re.compile(r"(?<!\d)\\frac\{(-?\d+)\}\{(-?\d+)\}")  # not after a digit: 2\frac{1}{2} is 2.5, not 21/2
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL = re.compile(r"([-+]?\d*)\.(\d+)")
_ASSIGNMENT = re.compile(r"[A-Za-z]=")


def normalize_answer(s: str) -> str:
    """A cosmetic normal form for string comparison, the fallback when sympy cannot decide. In order:
    drop `$` and `\\$`; drop `\\left`/`\\right`, `\\displaystyle`, latex spacing (`\\!`, `\\,`, `\\;`, `\\:`,
    `\\ `, `~`) and `{,}`; drop a trailing `\\text{unit}` after a number and unwrap other `\\text{X}` to `X`; drop
    degrees (`^\\circ`) and percent signs; `\\dfrac`/`\\tfrac` -> `\\frac`, `\\frac12` -> `\\frac{1}{2}`,
    `\\sqrt2` -> `\\sqrt{2}`; remove all whitespace and a trailing period; a leading `x=`; then for the whole answer,
    thousands separators (`1,000` -> `1000`) and trailing zeros of a plain decimal (`0.50` -> `0.5`, `12.0` -> `12`);
    and integer `\\frac{a}{b}` -> `a/b` anywhere (so `\\frac{1}{2}` and `1/2` meet; `\\frac{2}{4}` stays `2/4`:
    values are sympy's job). Unicode minus becomes `-`. Never raises."""
    if not isinstance(s, str):
        s = "" if s is None else str(s)
    s = s.strip().replace("\\$", "").replace("$", "").replace("\u2212", "-")
    s = _LATEX_NOISE.sub("", s).strip()
    if _TEXT_UNIT.search(s):
        before = _TEXT_UNIT.sub("", s).rstrip()
        if before[-1:].isdigit():
            s = before
    s = _TEXT_WRAPPER.sub(r"\1", s)
    s = _DEGREES.sub("", s).replace("\\%", "").replace("%", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _FRAC_SHORTHAND.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORTHAND.sub(r"\\sqrt{\1}", s)
    s = "".join(s.split()).rstrip(".")
    if _ASSIGNMENT.match(s) and s.count("=") == 1:
        s = s[2:]
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    decimal = _DECIMAL.fullmatch(s)
    if decimal:
        whole, fraction = decimal.group(1), decimal.group(2).rstrip("0")
        whole = whole + "0" if whole in ("", "-", "+") else whole
        s = f"{whole}.{fraction}" if fraction else whole
    return _INT_FRAC.sub(r"\1/\2", s)


# -------------------------------------------------------------------------------------------------- verification

_stats = {"checks": 0, "timeouts": 0, "errors": 0, "unparsed": 0}
_stats_lock = threading.Lock()
_warned_worker_failed = threading.Event()


def verify_stats() -> dict[str, int]:
    """Counters since import: sympy checks sent to the worker, and how many timed out, failed (worker crash, so the
    string fallback decided) or could not be parsed by math-verify (string fallback too)."""
    with _stats_lock:
        return dict(_stats)


def _count(key: str) -> None:
    with _stats_lock:
        _stats[key] += 1


def math_equal(prediction: str, reference: str, *, timeout_s: float = 5.0) -> bool:
    """Whether `prediction` equals `reference` as mathematics (see the module docstring for what counts). A check
    that runs past `timeout_s` is False. Safe from any thread; never raises on any string input."""
    return _compare(prediction, reference, timeout_s) == "equal"


def _compare(prediction: Any, reference: Any, timeout_s: float) -> str:
    """The verdict: "equal", "not_equal" or "timeout"."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if prediction is None or reference is None:
        return "not_equal"
    prediction, reference = str(prediction), str(reference)
    normal_prediction, normal_reference = normalize_answer(prediction), normalize_answer(reference)
    if not normal_prediction or not normal_reference:
        return "not_equal"
    if normal_prediction == normal_reference:
        return "equal"
    if max(len(prediction), len(reference)) > MAX_VERIFY_CHARS:
        return "not_equal"
    try:
        status = _verify_in_worker(prediction.strip(), reference.strip(), float(timeout_s))
    except _WorkerFailed as error:
        _count("errors")
        if not _warned_worker_failed.is_set():
            _warned_worker_failed.set()
            logger.warning("math checks fall back to string comparison: %s", error)
        return "not_equal"
    if status == "unparsed":
        _count("unparsed")
        return "not_equal"  # the string fallback already said no
    return status


@functools.lru_cache(maxsize=8192)  # a group's samples often repeat an answer; failures raise and are not cached
def _verify_in_worker(prediction: str, reference: str, timeout_s: float) -> str:
    _count("checks")
    status = _POOL.check(prediction, reference, timeout_s)
    if status == "timeout":
        _count("timeouts")
        logger.warning("math check timed out after %.1fs: %.200r vs %.200r", timeout_s, prediction, reference)
    return status


@functools.cache
def _math_verify_installed() -> bool:
    return importlib.util.find_spec("math_verify") is not None


class _WorkerFailed(Exception):
    """The worker process could not start, crashed, or answered nonsense."""


class _Worker:
    """One `python -c` process running `_serve`, talking JSON lines over its stdin/stdout."""

    def __init__(self) -> None:
        if not sys.executable:
            raise _WorkerFailed("no python executable to start a math worker with")
        if not _math_verify_installed():
            raise _WorkerFailed("math-verify is not installed (pip install math-verify)")
        # the child imports this same rllm: its folder goes first unless the child's path already has it (an
        # installed or editable rllm), where putting site-packages first could shadow the standard library
        src = str(Path(__file__).resolve().parents[2])
        code = f"import sys\nif {src!r} not in sys.path: sys.path.insert(0, {src!r})\n" + (
            "from rllm.rewards.math import _serve\n_serve()"
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                encoding="utf-8",
            )
        except OSError as error:
            raise _WorkerFailed(f"could not start a math worker: {error}") from error
        self._lines: queue.Queue[str | None] = queue.Queue()
        # a reader thread and a queue give a deadline on the pipe on every platform (select() misses Windows pipes)
        threading.Thread(target=self._read, daemon=True, name="rllm-math-worker-reader").start()
        try:
            ready = self._receive(_STARTUP_TIMEOUT_S)
        except (TimeoutError, ValueError, _WorkerFailed):
            ready = None
        if ready != "ready":
            self.kill()
            raise _WorkerFailed("the math worker did not start (is math-verify installed? pip install math-verify)")

    def _read(self) -> None:
        try:
            with self.process.stdout as lines:  # closed here, at EOF, never under this thread's feet
                for line in lines:
                    self._lines.put(line.rstrip("\n"))
        except (OSError, ValueError):
            pass
        self._lines.put(None)

    def _receive(self, timeout_s: float) -> str | None:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError from None
        if line is None:
            raise _WorkerFailed("the math worker exited")
        return json.loads(line)

    def ask(self, prediction: str, reference: str, timeout_s: float) -> str:
        try:
            self.process.stdin.write(json.dumps({"prediction": prediction, "reference": reference}) + "\n")
            self.process.stdin.flush()
        except (OSError, ValueError) as error:
            raise _WorkerFailed(f"the math worker is gone: {error}") from error
        answer = self._receive(timeout_s)
        if answer not in ("equal", "not_equal", "unparsed"):
            raise _WorkerFailed(f"the math worker answered {answer!r}")
        return answer

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        try:
            self.process.stdin.close()
        except OSError:
            pass  # a broken pipe to a dead process


class _WorkerPool:
    """Idle workers kept alive between checks; at most `size` checks at once, each on its own worker."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def check(self, prediction: str, reference: str, timeout_s: float) -> str:
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is None or worker.process.poll() is not None:
                worker = _Worker()
            try:
                status = worker.ask(prediction, reference, timeout_s)
            except TimeoutError:
                worker.kill()  # the only way to stop sympy mid-computation
                return "timeout"
            except (_WorkerFailed, ValueError) as error:  # ValueError: a line that is not JSON
                worker.kill()
                raise _WorkerFailed(str(error)) from None
            with self._lock:
                self._idle.append(worker)
            return status

    def forget_after_fork(self) -> None:
        """In a forked child the idle workers' pipes are shared with the parent: start over with new ones."""
        self._idle = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self._size)

    def close(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()


def _pool_size() -> int:
    try:
        return max(1, int(os.environ["RLLM_MATH_WORKERS"]))
    except (KeyError, ValueError):
        return min(4, usable_cores())


_POOL = _WorkerPool(_pool_size())
atexit.register(_POOL.close)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget_after_fork)


def _serve() -> None:
    """The worker's loop: one JSON request per stdin line, one JSON status per stdout line."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a stray print from sympy goes to stderr and cannot corrupt the protocol
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_WORKER_MEMORY_BYTES, _WORKER_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # no rlimits on this platform; the deadline still holds
    logging.disable(logging.CRITICAL)  # math-verify warns on every call that its own timeout is off
    from math_verify import parse, verify

    out.write('"ready"\n')
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            gold = parse(_as_latex(request["reference"]), parsing_timeout=None)
            target = parse(_as_latex(request["prediction"]), parsing_timeout=None)
            if not gold or not target:
                status = "unparsed"
            else:
                status = "equal" if verify(gold, target, timeout_seconds=None) else "not_equal"
        except Exception:
            status = "unparsed"
        out.write(json.dumps(status) + "\n")
        out.flush()


def _as_latex(answer: str) -> str:
    """A bare answer wrapped in `$...$` so that math-verify reads it as latex (`\\frac{1}{2}` alone parses to
    nothing); one that already carries its delimiters is left alone."""
    if "$" in answer.replace("\\$", "") or "\\boxed" in answer or "\\(" in answer or "\\[" in answer:
        return answer
    return f"${answer}$"


# -------------------------------------------------------------------------------------------------------- reward


def math_reward(
    task: dict,
    response: str,
    *,
    format_reward: float = 0.0,
    answer_key: str = "answer",
    timeout_s: float = 5.0,
) -> RewardOutput:
    """1.0 (correct) when the reply's final answer equals `task[answer_key]`; `format_reward` (not correct) for a
    boxed answer that is wrong or whose check timed out; 0.0 otherwise. `info` holds the `extracted` answer and the
    `reason`: "correct", "wrong", "no_answer" or "timeout"."""
    if answer_key not in task or task[answer_key] is None:
        raise ValueError(
            f"task has no {answer_key!r} to check the reply against (keys: {sorted(task)}); fix the dataset or pass "
            "answer_key= naming the field that holds the reference answer"
        )
    extracted = extract_final_answer(response)
    if extracted is None:
        return RewardOutput(0.0, is_correct=False, info={"extracted": None, "reason": "no_answer"})
    status = _compare(extracted, task[answer_key], timeout_s)
    if status == "equal":
        return RewardOutput(1.0, is_correct=True, info={"extracted": extracted, "reason": "correct"})
    boxed = extract_boxed(response) is not None
    reason = "timeout" if status == "timeout" else "wrong"
    reward = float(format_reward) if boxed else 0.0
    return RewardOutput(reward, is_correct=False, info={"extracted": extracted, "reason": reason})
