"""rLLM v0.2's tool base classes (`rllm.tools.tool_base`): `Tool`, `ToolOutput`, `ToolCall`.

An rLLM tool implements `forward(**arguments) -> ToolOutput` (or `async_forward`) and describes itself with `json`,
an OpenAI function schema (`{"type": "function", "function": {"name", "description", "parameters"}}`). A plain
function becomes a tool with `Tool(function=fn)`: its schema is read from its signature and docstring by rllm's own
schema builder (`rllm.tools.base.FunctionTool`), and an exception it raises becomes `ToolOutput(error=...)`.

rllm's own tools (`rllm.tools.Tool`, with `call`/`acall` and `schema()`) are another protocol; rLLM's `ToolAgent`,
`ToolEnvironment` and `MultiTool` take both (`rllm.tools.multi_tool`).

One addition: a subclass that sets `parameters` (a JSON schema) instead of overriding `json` gets the function
schema built from `name`, `description` and `parameters` (rLLM requires `json` to be overridden). The schema is read
when it is used (rLLM reads it in `__init__`), so a subclass may set `parameters` after calling `super().__init__`.
"""

from __future__ import annotations

import json as _json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllm.errors import RllmError

__all__ = ["Tool", "ToolCall", "ToolOutput"]


@dataclass
class ToolCall:
    """One call the model asked for: the tool's name and its arguments (a dict)."""

    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class ToolOutput:
    """What a tool returned: `output` (text, or JSON-able data), or `error` (a message for the model)."""

    name: str
    output: str | list | dict | None = None
    error: str | None = None
    metadata: dict | None = None

    def __str__(self) -> str:
        """The text the model sees: "Error: <error>", the output (lists and dicts as JSON), or ""."""
        if self.error:
            return f"Error: {self.error}"
        if self.output is None:
            return ""
        if isinstance(self.output, (list, dict)):
            return _json.dumps(self.output)
        return str(self.output)

    def to_string(self) -> str:
        return str(self)


class Tool:
    """rLLM's tool base class: override `forward` (sync) or `async_forward` (async), and `json` (or set
    `parameters`); or pass `function=` to wrap a typed, documented Python function."""

    def __init__(self, name: str | None = None, description: str | None = None, function: Callable | None = None):
        self.name = name
        self.description = description
        self.function = function
        if function is not None:
            self._json = _function_schema(function)
            self.name = self._json["function"]["name"]
            self.description = self._json["function"]["description"]
            return
        if name is None or description is None:
            raise RllmError(
                f"{type(self).__name__}: an rLLM Tool needs name= and description= (or function=<a Python function>)"
            )

    @property
    def json(self) -> dict[str, Any]:
        """The tool's OpenAI function schema."""
        own = self.__dict__.get("_json")
        if own is not None:
            return own
        parameters = getattr(self, "parameters", None)
        if isinstance(parameters, dict):
            return {
                "type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": parameters},
            }
        raise RllmError(
            f"{type(self).__name__}: override the json property (an OpenAI function schema) or set "
            "self.parameters (a JSON schema of the arguments)"
        )

    def forward(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the tool. The default runs `function=`; a tool without one must override this or `async_forward`."""
        if self.function is None:
            raise NotImplementedError(f"{type(self).__name__} must implement forward() or be given function=")
        try:
            return ToolOutput(name=self.name or "unknown", output=self.function(*args, **kwargs))
        except Exception as exc:  # the model's call failed: it reads why
            return ToolOutput(name=self.name or "unknown", error=f"{type(exc).__name__} - {exc}")

    async def async_forward(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the tool asynchronously. The default calls `forward`."""
        return self.forward(*args, **kwargs)

    def __call__(self, *args: Any, use_async: bool | None = False, **kwargs: Any) -> Any:
        """`forward(...)` by default; with `use_async=True` (or None, as in rLLM) the `async_forward(...)`
        coroutine, for the caller to await."""
        if use_async is False:
            return self.forward(*args, **kwargs)
        return self.async_forward(*args, **kwargs)


def _function_schema(function: Callable) -> dict[str, Any]:
    """rllm's schema of a function (its type hints and Google- or reST-style docstring)."""
    from rllm.tools.base import FunctionTool

    return FunctionTool(function).schema()
