"""Tools a model can call: the `Tool` base class, the `@tool` decorator, and `ToolRegistry`, which runs calls.

A tool has a `name`, a `description` and `parameters` (the JSON schema of its arguments); `schema()` gives the
OpenAI / Hugging Face chat-template format, so `tokenizer.apply_chat_template(messages, tools=registry.schemas())`
renders them. Subclasses implement `call` (sync, run in a thread) or `acall` (async).

`ToolRegistry.call` never raises for anything the model did (only cancellation propagates): every failure comes
back as a `ToolResult` with `is_error=True` and an `error_kind`, so an agent can show the message to the model and
the trainer can count the kind:

- "unknown_tool": no tool of that name (the message lists the available ones),
- "bad_arguments": the arguments are not a JSON object, or do not match the schema (which argument, what was
  expected),
- "timeout": the tool ran past `timeout_s`. A sync tool's thread cannot be killed: it runs on in the background and
  its result is dropped, so a sync tool that can hang should bound itself too (the python tool does),
- "exception": the tool raised; the model sees "ExcType: message", never a traceback,
- "disabled": the tool was switched off with `disable` (e.g. its MCP server died).

Argument checking is a small validator for the subset of JSON schema that `@tool` emits and tools commonly use:
`type` (one or a list; "integer" refuses floats and booleans, "number" refuses booleans), `nullable`, `enum`,
`anyOf`, `items`, `properties`/`required`/`additionalProperties` (unknown keys are refused unless
`additionalProperties` allows them; a schema with neither `properties` nor `additionalProperties` takes any keys).
Other keywords (`$ref`, `oneOf`, `minimum`, ...) are not checked: the tool itself must refuse what they forbid.
It is ours rather than jsonschema's so that the messages are written for a model.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "TOOL_NAME_PATTERN",
    "FunctionTool",
    "Tool",
    "ToolRegistry",
    "ToolResult",
    "run_coroutine",
    "tool",
    "validate_arguments",
]

# The MCP spec's advice for tool names; the parser accepts only these, so a registered tool is always callable.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
TRUNCATED_MARKER = "\n[truncated]"


@dataclass
class ToolResult:
    content: str  # the text the model sees
    is_error: bool = False
    error_kind: str | None = None  # "unknown_tool" | "bad_arguments" | "timeout" | "exception" | "disabled" | None


class Tool:
    """Base class of tools. Set `name`, `description`, `parameters` (a JSON schema with "type": "object") and
    override `call` (sync) or `acall` (async)."""

    name: str = ""
    description: str = ""
    parameters: dict = {"type": "object", "properties": {}, "required": []}  # noqa: RUF012 - read-only default

    def call(self, **kwargs: Any) -> Any:
        raise NotImplementedError(f"tool {self.name!r} implements neither call nor acall")

    async def acall(self, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.call, **kwargs)

    def schema(self) -> dict:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class FunctionTool(Tool):
    """A Python function (sync or async) as a tool; its schema comes from its signature and docstring unless
    `parameters` is given. Calling the FunctionTool itself calls the function unchanged."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
        self.description = description if description is not None else summary
        self.parameters = parameters if parameters is not None else function_parameters(fn, arg_docs)
        self.is_async = inspect.iscoroutinefunction(fn)

    def call(self, **kwargs: Any) -> Any:
        if self.is_async:
            return run_coroutine(self.fn(**kwargs))
        return self.fn(**kwargs)

    async def acall(self, **kwargs: Any) -> Any:
        if self.is_async:
            return await self.fn(**kwargs)
        return await asyncio.to_thread(self.fn, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Decorator: `@tool` or `@tool(name=..., description=...)` turns a function into a `FunctionTool`."""
    if fn is None:
        return lambda f: FunctionTool(f, name=name, description=description)
    return FunctionTool(fn, name=name, description=description)


# ---- schema from a signature ----

_SIMPLE_TYPES: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}


def function_parameters(fn: Callable[..., Any], arg_docs: dict[str, str] | None = None) -> dict:
    """The JSON schema of `fn`'s keyword arguments. Every parameter needs a type hint (the error names it)."""
    arg_docs = arg_docs or {}
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # an unresolvable forward reference
        raise TypeError(f"cannot resolve the type hints of {fn.__qualname__}: {exc}") from exc
    properties: dict[str, dict] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__qualname__}: *args/**kwargs cannot be described to a model ({param.name})")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"tool {fn.__qualname__}: parameter {param.name!r} is positional-only")
        if param.name not in hints:
            raise TypeError(f"tool {fn.__qualname__}: parameter {param.name!r} has no type hint")
        prop, nullable = _type_schema(hints[param.name], f"{fn.__qualname__}.{param.name}")
        if nullable:
            prop["nullable"] = True
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is not param.empty:
            if is_json_value(param.default):
                prop["default"] = param.default
        elif not nullable:
            required.append(param.name)
        properties[param.name] = prop
    return {"type": "object", "properties": properties, "required": required}


def _type_schema(hint: Any, where: str) -> tuple[dict, bool]:
    """(schema, nullable) of one type hint."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _type_schema(args[0], where)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        if len(members) == 1:
            return _type_schema(members[0], where)[0], nullable
        schemas = [_type_schema(m, where)[0] for m in members]
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
            return {"type": [s["type"] for s in schemas]}, nullable
        return {"anyOf": schemas}, nullable
    if hint is type(None):
        return {"type": "null"}, True
    if hint is Any:
        return {}, False
    if hint in _SIMPLE_TYPES:
        return {"type": _SIMPLE_TYPES[hint]}, False
    if origin is Literal:
        values = list(args)
        kinds = {_SIMPLE_TYPES.get(type(v)) for v in values}
        schema: dict = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), "enum": values}
        return schema, False
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        return {"enum": values}, False
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, typing.Sequence):
        schema = {"type": "array"}
        item_args = [a for a in args if a is not Ellipsis]
        if len(set(item_args)) == 1:
            schema["items"] = _type_schema(item_args[0], where)[0]
        return schema, False
    if hint is dict or origin in (dict, typing.Mapping):
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = _type_schema(args[1], where)[0]
        else:
            schema["additionalProperties"] = True
        return schema, False
    raise TypeError(f"tool parameter {where}: type {hint!r} has no JSON schema equivalent")


def is_json_value(value: Any) -> bool:
    """Whether `value` serializes to JSON as it is."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_GOOGLE_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "kwargs"}
_OTHER_SECTIONS = {"returns", "return", "raises", "yields", "examples", "example", "notes", "note", "see also"}
_REST_PARAM = re.compile(r":param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)")
_GOOGLE_ARG = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph, {argument: description}) from a Google-style ("Args:") or reST (":param x:") docstring."""
    lines = doc.strip().splitlines()
    summary: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith(":") or stripped.rstrip(":").lower() in _GOOGLE_SECTIONS:
            break
        summary.append(stripped)
    args: dict[str, str] = {}
    current: str | None = None  # the argument a continuation line belongs to
    in_args, section_indent, entry_indent = False, 0, None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = stripped[:-1].strip().lower() if stripped.endswith(":") else None
        if header in _GOOGLE_SECTIONS or header in _OTHER_SECTIONS:
            in_args, section_indent, entry_indent, current = header in _GOOGLE_SECTIONS, indent, None, None
            continue
        if match := _REST_PARAM.match(stripped):
            in_args, current = False, match.group(1)
            args[current] = match.group(2).strip()
            continue
        if not stripped or stripped.startswith(":"):  # a blank line or :returns: ends a reST description
            current = current if in_args else None
            continue
        if in_args and indent <= section_indent:
            in_args, current = False, None
        if in_args and (entry_indent is None or indent <= entry_indent):
            entry = _GOOGLE_ARG.match(stripped)
            if entry:
                entry_indent, current = indent, entry.group(1)
                args[current] = entry.group(2).strip()
                continue
        if current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary), args


# ---- argument checking ----

_JSON_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _json_type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _JSON_TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def _show(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validate_arguments(schema: dict, arguments: Any) -> str | None:
    """None when `arguments` fits the tool's parameter schema, else a message for the model."""
    if not isinstance(arguments, dict):
        return f"the arguments must be a JSON object, got {_json_type_name(arguments)} {_show(arguments)}"
    return _check(arguments, schema or {"type": "object"}, "")


def _check(value: Any, schema: dict, path: str) -> str | None:
    where = f"argument {path!r}" if path else "the arguments"
    if value is None and schema.get("nullable"):
        return None
    if "anyOf" in schema and all(_check(value, option, path) is not None for option in schema["anyOf"]):
        return f"{where}: {_show(value)} matches none of the allowed forms"
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_JSON_TYPE_CHECKS.get(n, lambda v: True)(value) for n in names):
            return f"{where}: expected {' or '.join(names)}, got {_json_type_name(value)} {_show(value)}"
    # 1 == True in Python: compare types too, so true is not accepted for 1.
    if "enum" in schema and not any(value == o and type(value) is type(o) for o in schema["enum"]):
        allowed = ", ".join(_show(o, 30) for o in schema["enum"])
        return f"{where}: {_show(value)} is not one of the allowed values: {allowed}"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if error := _check(item, schema["items"], f"{path}[{i}]"):
                return error
    if isinstance(value, dict) and (schema.get("type") == "object" or "properties" in schema):
        return _check_object(value, schema, path)
    return None


def _check_object(value: dict, schema: dict, path: str) -> str | None:
    properties = schema.get("properties") or {}
    prefix = f"{path}." if path else ""
    for key in schema.get("required") or []:
        if key not in value:
            expected = properties.get(key, {}).get("type")
            what = f" ({expected})" if isinstance(expected, str) else ""
            return f"missing required argument {prefix + key!r}{what}"
    extra = schema.get("additionalProperties", not properties and "properties" not in schema)
    for key, item in value.items():
        if key in properties:
            if error := _check(item, properties[key], prefix + key):
                return error
        elif extra is False:
            allowed = ", ".join(properties) or "none"
            return f"unknown argument {prefix + key!r}; the arguments are: {allowed}"
        elif isinstance(extra, dict) and (error := _check(item, extra, prefix + key)):
            return error
    return None


# ---- the registry ----


def _to_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    if isinstance(result, bytes):
        return result.decode("utf-8", errors="replace")
    if isinstance(result, (dict, list, tuple, int, float, bool)):
        try:
            return json.dumps(result, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def _cap(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - len(TRUNCATED_MARKER))] + TRUNCATED_MARKER


class ToolRegistry:
    """The tools one agent may call, by name. `schemas()` goes to the chat template; `call` runs one call."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.disabled: dict[str, str] = {}  # name -> reason
        for item in tools:
            self.register(item)

    def register(self, tool: Tool) -> None:
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
            raise ValueError(f"tool name {name!r} must be 1-128 characters from A-Z a-z 0-9 _ - .")
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._tools[name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self):
        return iter(self._tools.values())

    def schemas(self, *, include_disabled: bool = True) -> list[dict]:
        """Tool schemas for `apply_chat_template(tools=...)`. Disabled tools stay listed by default, so that
        disabling one mid-episode does not change the prompt (and break prefix extension of the token ids)."""
        return [t.schema() for n, t in self._tools.items() if include_disabled or n not in self.disabled]

    def disable(self, name: str, reason: str) -> None:
        if name not in self._tools:
            raise KeyError(f"no tool named {name!r}")
        self.disabled[name] = reason

    def enable(self, name: str) -> None:
        self.disabled.pop(name, None)

    async def call(
        self, name: str, arguments: dict | str, *, timeout_s: float = 10.0, max_result_chars: int = 4000
    ) -> ToolResult:
        """Run one tool call; every failure is a ToolResult with is_error=True (see the module docstring)."""

        def error(kind: str, message: str) -> ToolResult:
            return ToolResult(_cap(message, max_result_chars), is_error=True, error_kind=kind)

        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            available = ", ".join(self._tools) or "none"
            return error("unknown_tool", f"unknown tool {_show(name)}; the available tools are: {available}")
        if name in self.disabled:
            return error("disabled", f"tool {name!r} is disabled: {self.disabled[name]}")
        if isinstance(arguments, str):
            if not arguments.strip():
                arguments = {}
            else:
                try:
                    arguments = json.loads(arguments)
                except (ValueError, RecursionError) as exc:
                    return error("bad_arguments", f"the arguments of {name!r} are not valid JSON: {exc}")
        if problem := validate_arguments(tool.parameters, arguments):
            return error("bad_arguments", f"bad arguments for tool {name!r}: {problem}")
        try:
            result = await asyncio.wait_for(tool.acall(**arguments), timeout_s)
        except TimeoutError:
            return error("timeout", f"tool {name!r} timed out after {timeout_s:g} s")
        except Exception as exc:
            return error("exception", f"{type(exc).__name__}: {exc}")
        if isinstance(result, ToolResult):
            return ToolResult(_cap(result.content, max_result_chars), result.is_error, result.error_kind)
        return ToolResult(_cap(_to_text(result), max_result_chars))


def run_coroutine(coroutine: Any) -> Any:
    """Run `coroutine` to completion from synchronous code and return its result. With no event loop running in this
    thread that is `asyncio.run`; inside one (env code run inline on the engine's loop, `env_workers=0`, where
    `asyncio.run` refuses) it runs on a fresh loop in a helper thread while this thread waits, as blocking env code
    does anyway."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rllm-run-coroutine") as pool:
        return pool.submit(asyncio.run, coroutine).result()
