"""Tools: schemas derived from signatures, ToolRegistry.call's error classification, and the built-in tools."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Literal, Optional

import pytest

from rllm.tools import (
    BUILTIN_TOOLS,
    DocumentSearch,
    FunctionTool,
    Tool,
    ToolRegistry,
    ToolResult,
    calculator,
    python_tool,
    tool,
)


def run(coro):
    return asyncio.run(coro)


# ---- schemas from signatures ----


def test_schema_types_defaults_optional_literal_and_google_docstring():
    @tool
    def book(
        city: str,
        nights: int,
        budget: float,
        tags: list[int],
        extras: dict,
        pets: bool = False,
        room: Literal["single", "double"] = "single",
        note: Optional[str] = None,  # noqa: UP045 - the old spelling must work too
        floor: int | None = None,
    ) -> str:
        """Book a hotel room.

        Use it once per stay.

        Args:
            city: where to stay.
            nights (int): how many nights,
                at least one.
            budget: the most to pay.
        """
        return city

    schema = book.schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "book" and function["description"] == "Book a hotel room."
    params = function["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["city", "nights", "budget", "tags", "extras"]
    props = params["properties"]
    assert props["city"] == {"type": "string", "description": "where to stay."}
    assert props["nights"] == {"type": "integer", "description": "how many nights, at least one."}
    assert props["budget"]["type"] == "number"
    assert props["tags"] == {"type": "array", "items": {"type": "integer"}}
    assert props["extras"]["type"] == "object"
    assert props["pets"] == {"type": "boolean", "default": False}
    assert props["room"] == {"type": "string", "enum": ["single", "double"], "default": "single"}
    assert props["note"] == {"type": "string", "nullable": True, "default": None}
    assert props["floor"] == {"type": "integer", "nullable": True, "default": None}


def test_rest_docstring_and_decorator_with_arguments():
    @tool(name="lookup", description="Find a word.")
    def find(word: str, limit: int = 5) -> list:
        """Ignored summary.

        :param word: the word to find
        :param int limit: at most this many
            results.
        :returns: matches
        """
        return [word] * limit

    assert isinstance(find, FunctionTool)
    assert find.name == "lookup" and find.description == "Find a word."
    props = find.parameters["properties"]
    assert props["word"]["description"] == "the word to find"
    assert props["limit"]["description"] == "at most this many results."
    assert find("a", 2) == ["a", "a"]  # still callable as the function


def test_missing_type_hint_names_the_parameter():
    def bad(x: int, y):
        return x

    with pytest.raises(TypeError, match="'y' has no type hint"):
        tool(bad)


def test_sync_and_async_function_tools():
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @tool
    async def mul(a: int, b: int) -> int:
        """Multiply."""
        await asyncio.sleep(0)
        return a * b

    assert run(add.acall(a=2, b=3)) == 5 and add.call(a=2, b=3) == 5
    assert run(mul.acall(a=2, b=3)) == 6 and mul.call(a=2, b=3) == 6
    registry = ToolRegistry([add, mul])
    assert run(registry.call("mul", {"a": 4, "b": 5})) == ToolResult("20")


# ---- ToolRegistry.call ----


@tool
def pick(count: int, mode: Literal["fast", "slow"] = "fast", ratio: float = 0.5, ids: list[int] | None = None) -> dict:
    """Pick things."""
    return {"count": count, "mode": mode, "ratio": ratio, "ids": ids}


@tool
def boom(x: int) -> str:
    """Raise."""
    raise KeyError(f"no item {x}")


@tool
async def slow_async(seconds: float) -> str:
    """Sleep."""
    await asyncio.sleep(seconds)
    return "done"


@tool
def slow_sync(seconds: float) -> str:
    """Sleep in a thread."""
    time.sleep(seconds)
    return "done"


@tool
def huge() -> str:
    """Return a lot."""
    return "x" * 100_000


def registry() -> ToolRegistry:
    return ToolRegistry([pick, boom, slow_async, slow_sync, huge])


def test_registry_basics():
    reg = registry()
    assert reg.names() == ["pick", "boom", "slow_async", "slow_sync", "huge"]
    assert "pick" in reg and "nope" not in reg and len(reg) == 5
    assert reg.get("pick") is pick and reg.get("nope") is None
    assert [s["function"]["name"] for s in reg.schemas()] == reg.names()
    with pytest.raises(ValueError, match="already registered"):
        reg.register(pick)
    with pytest.raises(ValueError, match="tool name"):
        reg.register(FunctionTool(lambda: 1, name="bad name"))


def test_call_ok_with_dict_and_json_string():
    reg = registry()
    result = run(reg.call("pick", {"count": 2}))
    assert result == ToolResult('{"count": 2, "mode": "fast", "ratio": 0.5, "ids": null}')
    result = run(reg.call("pick", '{"count": 3, "ratio": 1, "ids": [1, 2]}'))  # an int is a number
    assert not result.is_error and '"ids": [1, 2]' in result.content


@pytest.mark.parametrize(
    "name,arguments,kind,words",
    [
        ("nope", {}, "unknown_tool", ["nope", "pick, boom, slow_async, slow_sync, huge"]),
        ("pick", "{count: 2", "bad_arguments", ["not valid JSON"]),
        ("pick", "[1, 2]", "bad_arguments", ["JSON object", "array"]),
        ("pick", {}, "bad_arguments", ["missing required argument 'count'"]),
        ("pick", {"count": 1, "colour": "red"}, "bad_arguments", ["unknown argument 'colour'", "count, mode"]),
        ("pick", {"count": "2"}, "bad_arguments", ["'count'", "expected integer", "string"]),
        ("pick", {"count": True}, "bad_arguments", ["'count'", "expected integer", "boolean"]),
        ("pick", {"count": 2.5}, "bad_arguments", ["'count'", "expected integer", "number 2.5"]),
        ("pick", {"count": 1, "ratio": False}, "bad_arguments", ["'ratio'", "expected number"]),
        ("pick", {"count": 1, "mode": "medium"}, "bad_arguments", ["'mode'", '"fast", "slow"']),
        ("pick", {"count": 1, "ids": [1, "2"]}, "bad_arguments", ["'ids[1]'", "expected integer"]),
        ("boom", {"x": 7}, "exception", ["KeyError: 'no item 7'"]),
    ],
)
def test_call_errors_are_classified(name, arguments, kind, words):
    result = run(registry().call(name, arguments))
    assert result.is_error and result.error_kind == kind
    for word in words:
        assert word in result.content
    assert "Traceback" not in result.content


def test_nullable_argument_accepts_null():
    assert not run(registry().call("pick", {"count": 1, "ids": None})).is_error


@pytest.mark.parametrize("name", ["slow_async", "slow_sync"])
def test_timeout(name):
    start = time.monotonic()
    result = run(registry().call(name, {"seconds": 0.5}, timeout_s=0.05))
    assert result.is_error and result.error_kind == "timeout" and "0.05" in result.content
    assert time.monotonic() - start < 2
    assert run(registry().call(name, {"seconds": 0.0}, timeout_s=2)) == ToolResult("done")


def test_huge_result_is_truncated():
    result = run(registry().call("huge", {}, max_result_chars=1000))
    assert not result.is_error and len(result.content) <= 1000 and result.content.endswith("[truncated]")


def test_disabled_tool():
    reg = registry()
    reg.disable("pick", "its server went away")
    assert reg.disabled == {"pick": "its server went away"}
    assert "pick" in reg.names() and len(reg.schemas()) == 5 and len(reg.schemas(include_disabled=False)) == 4
    result = run(reg.call("pick", {"count": 1}))
    assert result.is_error and result.error_kind == "disabled" and "its server went away" in result.content
    reg.enable("pick")
    assert not run(reg.call("pick", {"count": 1})).is_error


def test_a_tool_subclass_and_tool_results_pass_through():
    class Echo(Tool):
        name = "echo"
        description = "Echo."
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}  # noqa: RUF012

        def call(self, text: str) -> ToolResult:
            return ToolResult(text, is_error=text == "fail", error_kind="exception" if text == "fail" else None)

    reg = ToolRegistry([Echo()])
    assert run(reg.call("echo", {"text": "hi"})) == ToolResult("hi")
    assert run(reg.call("echo", {"text": "fail"})).error_kind == "exception"
    assert Echo().schema()["function"]["parameters"]["required"] == ["text"]


# ---- built-in tools ----


@pytest.mark.parametrize(
    "expression,expected",
    [
        ("1 + 2 * 3", "7"),
        ("(3 + 4) * 2 ** 5", "224"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("7 / 2", "3.5"),
        ("0.1 + 0.2", "0.3"),
        ("-(2 - 5)", "3"),
        ("2 ** -1", "0.5"),
        ("10 ** 100", str(10**100)),
    ],
)
def test_calculator(expression, expected):
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    "expression,message",
    [
        ("2 ** 10000", "too large"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("10 ** 99 * 10 ** 2", "larger than"),
        ("9 ** 9 ** 9", "too large"),
        ("2 ^ 3", "write **"),
        ("__import__('os')", "unsupported"),
        ("x + 1", "unsupported"),
        ("1 +", "not an arithmetic expression"),
        ("(-8) ** 0.5", "not a real number"),
        ("'a' * 3", "unsupported"),
        ("(" * 300 + "1" + ")" * 300, "not an arithmetic expression"),
        ("-" * 999 + "1", "nested too deeply"),
        ("1" * 1001, "longer than"),
    ],
)
def test_calculator_refuses(expression, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        calculator(expression)


def test_calculator_errors_reach_the_model_as_exceptions():
    result = run(ToolRegistry([calculator]).call("calculator", {"expression": "2**10000"}))
    assert result.is_error and result.error_kind == "exception" and result.content.startswith("ValueError: ")


def test_python_tool_runs_in_the_sandbox():
    reg = ToolRegistry([python_tool])
    assert run(reg.call("python", {"code": "print(6*7)"})) == ToolResult("42")
    failed = run(reg.call("python", {"code": "print('before')\n1/0"}))
    assert "before" in failed.content and "exit code 1" in failed.content and "ZeroDivisionError" in failed.content
    assert "no output" in python_tool.call(code="x = 1")


CORPUS = [
    {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
    {"id": "de", "title": "Germany", "text": "Berlin is the capital of Germany. Munich is in Bavaria."},
    {"id": "py", "title": "Python", "text": "Python is a programming language. It was created by Guido van Rossum."},
    {"id": "sn", "title": "Snakes", "text": "A python is a large snake found in Africa, Asia and Australia."},
]


def test_document_search_ranks_the_relevant_document_first():
    search = DocumentSearch(CORPUS)
    assert search.name == "search"
    out = search.call(query="capital of Germany", k=2)
    assert out.startswith("[1] Germany (id: de)") and "[2] France" in out
    assert search.call(query="who created the programming language python").startswith("[1] Python")
    assert "no documents match" in search.call(query="zebra")
    result = run(ToolRegistry([search]).call("search", {"query": "snake", "k": 0}))
    assert result.error_kind == "exception" and "k must be between 1 and 10" in result.content


def test_builtin_factories():
    assert BUILTIN_TOOLS["calculator"]() is calculator
    assert BUILTIN_TOOLS["python"]().name == "python"
    assert BUILTIN_TOOLS["search"](corpus=CORPUS).name == "search"
