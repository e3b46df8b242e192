"""rLLM v0.2's python tool, `PythonInterpreter` (`tools=["python"]`), running the code in rllm's sandbox
(`rllm.sandbox`: no network, no host files, CPU, memory and output limits).

How its output differs from rLLM's local backend: rLLM shows the value of a last bare expression *instead of* what
was printed; here it is printed after what the program printed, as a notebook cell shows it (the program's last line
then reads `_ = <expression>`), so `stdout` holds both and `output` stays None. A failed run sets `error` ("exit code
1", "killed: timeout", ...) and the model reads what was printed, the error and stderr (`CodeToolOutput.to_string`).
`timeout` is capped at `max_timeout_s` (60 s). A machine without a working sandbox gives an `error` whose
`metadata["error_kind"]` is "infra": rLLM's `ToolEnvironment` then raises `rllm.errors.InfraError` (the rollout is
retried, not scored).
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from rllm.compat.tools.code_tools.code_tool import CodeTool, CodeToolOutput
from rllm.errors import RllmError, SandboxUnavailableError

__all__ = ["PythonInterpreter", "echo_last_value"]

_DESCRIPTION = "Run a Python program in a sandbox (no network) and return what it printed and its last value."
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # lines as the Python tokenizer counts them


class PythonInterpreter(CodeTool):
    """rLLM's `PythonInterpreter(backend="local")` over rllm's sandbox."""

    def __init__(
        self,
        backend: str = "local",
        n_sandboxes: int = 1,
        api_key: str | None = None,
        name: str = "python",
        description: str = _DESCRIPTION,
        *,
        max_timeout_s: float = 60.0,
        sandbox: Any = None,
    ) -> None:
        if backend != "local":
            raise RllmError(
                f"PythonInterpreter(backend={backend!r}): rllm runs code in its own sandbox only; use "
                'backend="local" (rllm.sandbox, no API key needed)'
            )
        self.backend_type = backend
        self.max_timeout_s = max_timeout_s
        self.sandbox = sandbox  # None: rllm's process-wide sandbox
        super().__init__(name=name, description=description, n_sandboxes=n_sandboxes)

    def forward(self, code: str, timeout: int = 12, **kwargs: Any) -> CodeToolOutput:
        try:
            sandbox = self._sandbox()
            result = sandbox.run(sandbox.python_argv("main.py"), **self._run_args(code, timeout))
        except SandboxUnavailableError as exc:
            return self._unavailable(exc)
        return self._output(result)

    async def async_forward(self, code: str, timeout: int = 12, **kwargs: Any) -> CodeToolOutput:
        try:
            sandbox = self._sandbox()
            result = await sandbox.run_async(sandbox.python_argv("main.py"), **self._run_args(code, timeout))
        except SandboxUnavailableError as exc:
            return self._unavailable(exc)
        return self._output(result)

    def _sandbox(self) -> Any:
        if self.sandbox is None:
            from rllm.sandbox import default_sandbox

            return default_sandbox()
        return self.sandbox

    def _run_args(self, code: str, timeout: Any) -> dict[str, Any]:
        from rllm.sandbox import SandboxLimits

        try:
            seconds = min(max(float(timeout), 1.0), self.max_timeout_s)
        except (TypeError, ValueError):
            seconds = 12.0
        limits = SandboxLimits(wall_s=seconds, cpu_s=math.ceil(seconds), output_bytes=1 << 16)
        return {"files": {"main.py": echo_last_value(str(code))}, "limits": limits}

    def _output(self, result: Any) -> CodeToolOutput:
        stdout = result.stdout.decode("utf-8", errors="replace")
        stderr = result.stderr.decode("utf-8", errors="replace") or None
        error = None
        if not result.ok:
            error = f"killed: {result.killed_reason}" if result.killed_reason else f"exit code {result.exit_code}"
        return CodeToolOutput(name=self.name or "python", stdout=stdout, stderr=stderr, error=error)

    def _unavailable(self, exc: Exception) -> CodeToolOutput:
        return CodeToolOutput(name=self.name or "python", error=str(exc), metadata={"error_kind": "infra"})


def echo_last_value(code: str) -> str:
    """`code` with a last bare expression's value printed (unless None), line numbers unchanged; code that does not
    parse is returned as it is (the run then reports the SyntaxError)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    lines = _LINES.findall(code)
    start = _offset(lines, last.lineno, last.col_offset)
    end = _offset(lines, last.end_lineno or last.lineno, last.end_col_offset or 0)
    # `_ = ...` (the REPL's name for the last value) so a traceback in that line still reads as the model wrote it
    return f"{code[:start]}_ = {code[start:end]}{code[end:]}\nif _ is not None:\n    print(_)\n"


def _offset(lines: list[str], lineno: int, col_bytes: int) -> int:
    """The string index of an ast position (1-based line, column in UTF-8 bytes)."""
    line = lines[lineno - 1]
    return sum(len(x) for x in lines[: lineno - 1]) + len(line.encode()[:col_bytes].decode(errors="ignore"))
