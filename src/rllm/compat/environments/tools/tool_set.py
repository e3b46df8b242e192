"""The tools of rLLM v0.2's `ToolAgent` and `ToolEnvironment`, resolved to rllm's own tools.

rLLM looks tool names up in its registry (`rllm.tools.tool_registry`) and wraps them in a `MultiTool`; here the
same `tools=[...]` names or `tool_map={name: tool}` become one `rllm.tools.ToolRegistry`, the registry that runs
every tool call in rllm (argument checks against the schema, a timeout, capped results, never raising for the
model's mistakes). The agent renders its schemas into the prompt; the env runs the calls.

Names (`tools=`):

- "python": rLLM's `PythonInterpreter` (its "local" backend) as `PythonInterpreter` below, which runs the code in
  rllm's sandbox (`rllm.rewards.sandbox`: no network, no host files) through rllm's `PythonTool`. rLLM's schema
  (`code`, `timeout` default 12) is kept, so prompts read as in rLLM.
- "calculator": rllm's safe arithmetic tool (not in rLLM; offered since it needs nothing).
- rLLM's web tools ("google_search", "firecrawl", "tavily-extract", "tavily-search") are not here: they need network
  access and API keys. The error says so and names what is available.

`tool_map=` values are rllm tools (`rllm.tools.Tool` subclasses or instances, e.g. `@rllm.tools.tool` functions),
registered under their key. rLLM's own `Tool` base class (`rllm.tools.tool_base`) is not provided.

How the python tool's output differs from rLLM's: rLLM shows the value of a last bare expression *instead of* what
was printed (and what was printed when the value is None); here it is printed after what the program printed, as a
notebook cell shows it (the program's last line then reads `_ = <expression>`). A failed program shows its stdout,
`[exit code N]` or `[killed: timeout]`, and its stderr (rLLM: the traceback alone); a program that printed nothing
says so (rLLM: an empty string). `timeout` is capped at `max_timeout_s` (60 s).
"""

from __future__ import annotations

import ast
import copy
import math
import re
from typing import Any

from rllm.tools.base import Tool, ToolRegistry, ToolResult, run_coroutine

__all__ = ["AVAILABLE_TOOLS", "RLLM_WEB_TOOLS", "PythonInterpreter", "echo_last_value", "make_tool_registry"]

RLLM_WEB_TOOLS = ("google_search", "firecrawl", "tavily-extract", "tavily-search")
_DESCRIPTION = "Execute Python code in a sandboxed environment. Returns results and standard output/error."
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # lines as the Python tokenizer counts them


class PythonInterpreter(Tool):
    """rLLM's `python` tool over rllm's sandboxed `PythonTool` (see the module docstring for the differences)."""

    name = "python"
    description = _DESCRIPTION
    parameters = {  # noqa: RUF012 - rLLM's PythonInterpreter schema, as its prompts show it
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": _DESCRIPTION,
            },
            "timeout": {
                "type": "integer",
                "description": "Maximum execution time in seconds before timing out",
                "default": 12,
            },
        },
        "required": ["code"],
    }

    def __init__(self, name: str = "python", *, max_timeout_s: float = 60.0, sandbox: Any = None) -> None:
        self.name = name
        self.max_timeout_s = max_timeout_s
        self.sandbox = sandbox  # None: rllm's process-wide sandbox

    def call(self, code: str, timeout: int = 12) -> Any:
        return run_coroutine(self.acall(code=code, timeout=timeout))

    async def acall(self, code: str, timeout: int = 12) -> Any:
        from rllm.errors import SandboxUnavailableError
        from rllm.rewards.sandbox import SandboxLimits
        from rllm.tools.builtin import PythonTool

        seconds = min(max(float(timeout), 1.0), self.max_timeout_s)
        limits = SandboxLimits(wall_s=seconds, cpu_s=math.ceil(seconds), output_bytes=1 << 16)
        try:
            return await PythonTool(sandbox=self.sandbox, limits=limits).acall(code=echo_last_value(code))
        except SandboxUnavailableError as exc:  # this machine's fault, not the model's: the env raises InfraError
            return ToolResult(str(exc), is_error=True, error_kind="infra")


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


def _calculator() -> Tool:
    from rllm.tools.builtin import calculator

    return calculator


AVAILABLE_TOOLS = {"calculator": _calculator, "python": PythonInterpreter}


def make_tool_registry(tools: list[str] | None = None, tool_map: dict[str, Any] | None = None) -> ToolRegistry:
    """The registry for rLLM's `tools=` names or `tool_map=` (not both, as in rLLM)."""
    if tool_map is not None and tools is not None:
        raise ValueError("Cannot specify both 'tools' and 'tool_map' parameters")
    if tool_map is not None:
        return ToolRegistry(_from_map(name, value) for name, value in tool_map.items())
    registry = ToolRegistry()
    for name in tools or []:
        if name not in AVAILABLE_TOOLS:
            available = ", ".join(sorted(AVAILABLE_TOOLS))
            why = (
                f"rLLM's {name!r} tool is not available in rllm (rLLM's web tools need network access and API keys)"
                if name in RLLM_WEB_TOOLS
                else f"no tool named {name!r}"
            )
            raise ValueError(
                f"{why}; the tools available by name are: {available}. Other tools go in tool_map={{name: tool}} "
                "as rllm.tools.Tool classes or instances (e.g. rllm.tools.DocumentSearch for search over your own "
                "documents)"
            )
        if name not in registry:
            registry.register(AVAILABLE_TOOLS[name]())
    return registry


def _from_map(name: str, value: Any) -> Tool:
    if isinstance(value, type) and issubclass(value, Tool):
        value = value()
    if not isinstance(value, Tool):
        raise TypeError(
            f"tool_map[{name!r}] is {value!r}: tool_map values must be rllm.tools.Tool classes or instances (write "
            "the tool with the rllm.tools.tool decorator or subclass rllm.tools.Tool); rLLM's rllm.tools.tool_base "
            "classes are not available in rllm"
        )
    if value.name != name:  # rLLM registers a tool_map tool under its key
        value = copy.copy(value)
        value.name = name
    return value
