"""Built-in tools: `calculator` (safe arithmetic), `python_tool` (code in the sandbox), `DocumentSearch` (BM25).

`BUILTIN_TOOLS` maps a name to a factory taking keyword arguments (`DocumentSearch` needs `corpus=`), for configs.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from rllm.tools.base import Tool, tool

__all__ = ["BUILTIN_TOOLS", "DocumentSearch", "PythonTool", "calculator", "python_tool"]

MAX_MAGNITUDE = 10**100
MAX_EXPONENT = 1000
MAX_EXPRESSION_CHARS = 1000

_BINARY_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: numbers with + - * / // % ** and parentheses, e.g. "(3 + 4) * 2 ** 5".
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not an arithmetic expression: {getattr(exc, 'msg', None) or exc}") from None
    try:
        value = _evaluate(tree.body)
    except RecursionError:
        raise ValueError("the expression is nested too deeply") from None
    if isinstance(value, float):
        return format(value, ".12g")
    return str(value)


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            return _bounded(_BINARY_OPS[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        except OverflowError:
            raise ValueError(f"the result is larger than {MAX_MAGNITUDE:.0e}") from None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise ValueError("^ is not a power here: write ** (e.g. 2 ** 10)")
    raise ValueError(
        f"unsupported element in the expression: {ast.unparse(node)[:40]!r} (only numbers and + - * / // % **)"
    )


def _check_power(base: float, exponent: float) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"the exponent {exponent} is too large (at most {MAX_EXPONENT})")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > 100:
        raise ValueError(f"the result is larger than {MAX_MAGNITUDE:.0e}")
    if base == 0 and exponent < 0:
        raise ValueError("division by zero (0 to a negative power)")


def _bounded(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError(f"the result is larger than {MAX_MAGNITUDE:.0e}")
    return value


class PythonTool(Tool):
    """Runs Python code in `rllm.sandbox` (no network, no host files) and returns what it printed."""

    name = "python"
    description = (
        "Run a Python 3 program (standard library only, no network, no files kept between calls) and return what "
        "it printed. Use print() to see results."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the complete program to run"}},
        "required": ["code"],
    }

    def __init__(self, *, sandbox: Any = None, limits: Any = None, max_output_chars: int = 4000) -> None:
        from rllm.sandbox import SandboxLimits

        self._sandbox = sandbox  # None: the process-wide default sandbox, created on first use
        # Under the registry's default 10 s timeout, so a runaway program is reported as such, not as a timeout.
        self.limits = limits or SandboxLimits(wall_s=5.0, cpu_s=5, output_bytes=1 << 16)
        self.max_output_chars = max_output_chars

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            from rllm.sandbox import default_sandbox

            self._sandbox = default_sandbox()
        return self._sandbox

    def call(self, code: str) -> str:
        return self._format(self.sandbox.run(self._argv(), files={"main.py": code}, limits=self.limits))

    async def acall(self, code: str) -> str:
        sandbox = self.sandbox
        return self._format(await sandbox.run_async(self._argv(), files={"main.py": code}, limits=self.limits))

    def _argv(self) -> list[str]:
        return self.sandbox.python_argv("main.py")

    def _format(self, result: Any) -> str:
        stdout = result.stdout.decode("utf-8", errors="replace")
        if result.ok:
            stdout = stdout.rstrip()
            return _tail(stdout, self.max_output_chars) if stdout else "(no output; use print() to show results)"
        stderr = result.stderr.decode("utf-8", errors="replace")
        why = f"killed: {result.killed_reason}" if result.killed_reason else f"exit code {result.exit_code}"
        half = self.max_output_chars // 2
        parts = [_tail(stdout, half)] if stdout else []
        parts.append(f"[{why}]")
        if stderr:
            parts.append(_tail(stderr, half))
        return "\n".join(parts)


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "...[truncated]\n" + text[-limit:]


python_tool = PythonTool()

_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class DocumentSearch(Tool):
    """BM25 search over a small in-memory corpus of {"id", "title", "text"} documents."""

    description = "Search the document collection and return the titles and snippets of the best matches."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for, in a few words"},
            "k": {"type": "integer", "description": "how many documents to return (1-10)", "default": 3},
        },
        "required": ["query"],
    }

    def __init__(
        self, corpus: list[dict], *, name: str = "search", k1: float = 1.5, b: float = 0.75, snippet_chars: int = 300
    ) -> None:
        self.name = name
        self.docs = [dict(doc) for doc in corpus]
        self.k1, self.b, self.snippet_chars = k1, b, snippet_chars
        self._term_counts = [Counter(_tokens(f"{d.get('title', '')} {d.get('text', '')}")) for d in self.docs]
        self._lengths = [sum(c.values()) for c in self._term_counts]
        self._avg_length = (sum(self._lengths) / len(self._lengths)) if self.docs else 0.0
        df = Counter(term for counts in self._term_counts for term in counts)
        n = len(self.docs)
        self._idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = _tokens(query)
        out = []
        for counts, length in zip(self._term_counts, self._lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / (self._avg_length or 1))
            out.append(
                sum(
                    self._idf.get(t, 0.0) * counts[t] * (self.k1 + 1) / (counts[t] + norm) for t in terms if t in counts
                )
            )
        return out

    def call(self, query: str, k: int = 3) -> str:
        if not 1 <= k <= 10:
            raise ValueError(f"k must be between 1 and 10, got {k}")
        scores = self.scores(query)
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))[:k]
        if not ranked:
            return f"no documents match {query!r}"
        lines = []
        for rank, i in enumerate(ranked, 1):
            doc = self.docs[i]
            lines.append(f"[{rank}] {doc.get('title', '')} (id: {doc.get('id', i)})\n{self._snippet(doc, query)}")
        return "\n\n".join(lines)

    def _snippet(self, doc: dict, query: str) -> str:
        text = " ".join(str(doc.get("text", "")).split())
        lowered = text.lower()
        hits = [p for t in set(_tokens(query)) if (p := lowered.find(t)) != -1]
        start = max(0, min(hits) - self.snippet_chars // 4) if hits else 0
        snippet = text[start : start + self.snippet_chars]
        return ("..." if start else "") + snippet + ("..." if start + self.snippet_chars < len(text) else "")


BUILTIN_TOOLS: dict[str, Callable[..., Tool]] = {
    "calculator": lambda: calculator,
    "python": PythonTool,
    "search": DocumentSearch,
}
