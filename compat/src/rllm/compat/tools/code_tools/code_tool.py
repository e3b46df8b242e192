"""rLLM v0.2's `CodeTool` (a tool that runs code, with rLLM's `code`/`timeout` schema) and `CodeToolOutput`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rllm.compat.tools.tool_base import Tool, ToolOutput

__all__ = ["CODE_PARAMETERS", "CodeTool", "CodeToolOutput"]

CODE_PARAMETERS = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "The Python program to run."},
        "timeout": {
            "type": "integer",
            "description": "Maximum execution time in seconds before timing out",
            "default": 12,
        },
    },
    "required": ["code"],
}


@dataclass
class CodeToolOutput(ToolOutput):
    """A program's run: what it printed (`stdout`, `stderr`), its value (`output`), and why it failed (`error`:
    "exit code N", "killed: timeout", ...)."""

    stdout: str | None = None
    stderr: str | None = None
    output: str | None = None

    def to_string(self) -> str:
        """The text the model sees. A failed run: what it printed, `[<error>]`, then its stderr. Otherwise the value
        (`output`) when there is one, else what it printed (stdout, else stderr)."""
        if self.error:
            parts = [self.stdout.rstrip()] if self.stdout and self.stdout.strip() else []
            parts.append(f"[{self.error}]")
            if self.stderr and self.stderr.strip():
                parts.append(self.stderr.rstrip())
            return "\n".join(parts)
        if self.output is not None:
            return str(self.output)
        for text in (self.stdout, self.stderr):
            if text and text.strip():
                return text.rstrip()
        return ""


class CodeTool(Tool):
    """Base class of rLLM's code tools: `forward(code, timeout=12) -> CodeToolOutput`."""

    def __init__(self, name: str, description: str, n_sandboxes: int = 1) -> None:
        self.n_sandboxes = n_sandboxes
        super().__init__(name=name, description=description)

    @property
    def json(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": CODE_PARAMETERS},
        }

    def forward(self, code: str, timeout: int = 12, **kwargs: Any) -> CodeToolOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement forward(code, timeout)")
