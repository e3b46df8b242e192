"""BFCL (Berkeley Function Calling Leaderboard), simple categories: grade the reply's one function call by its AST.

`bfcl_reward(task, response)` scores 1.0 when the reply makes the one call `task["ground_truth"]` allows. Nothing
is executed: the call is parsed, not run. The reply may write the call as Python (`area(base=10, height=5)`,
BFCL's prompt format `[area(base=10, height=5)]`, inside a ```python fence or not) or as JSON
(`{"name": "area", "arguments": {...}}`, "parameters" for "arguments", the arguments as a JSON string as OpenAI's
tool calls carry them, a one-element list of such, or inside `<tool_call>` tags).

Ground truth, in either of BFCL's forms:
- The AST categories' possible answers: `[{"area": {"base": [10], "height": [5, 5.0], "unit": ["", "cm"]}}]`: each
  parameter's list holds the values allowed, and `""` in it means the parameter may be left out.
- The exec categories' calls: `["area(base=10, height=5)"]`: each argument must take exactly that value (every
  argument of the call is required).

The checks follow BFCL's `simple_function_checker` (bfcl_eval/eval_checker/ast_eval/ast_checker.py), in its order:
the function name (a dotted name also matches with `_` for `.`, as OpenAI-style names must be written); every
required parameter present (the schema's `required` in `task["functions"]` when the row has it); no parameter that
the schema or the ground truth does not know; each value of the schema's type (an int is accepted for a float, a
tuple for an array, and a value of the ground truth's own type is accepted too, as BFCL does for variables); each
value among the allowed ones; every parameter the ground truth requires present. Values compare as BFCL compares
them: strings (also inside lists and dicts) without case, spaces and `,./-_*^`, and with `'` read as `"` ("April 1,
2024" is "april 1 2024"); numbers by value (5 == 5.0, never True == 1); a dict against each allowed dict, its
values lists of allowed values. One leniency: inside a list an int is accepted for a float too (BFCL's nested type
check rejects `[1, 2]` for an array of floats unless the answer lists ints; its value check would accept it).
Arguments that are not literals are read as BFCL reads them: simple arithmetic on numbers is evaluated
(`1/3`), anything else (a variable name) becomes its source text.
`info["reason"]` says why a call failed: no call, wrong function name, missing parameter X, unexpected parameter X,
type or value of X not allowed.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import operator
import re
from typing import Any

from rllm.rewards.base import RewardOutput, refuse_reward

__all__ = ["bfcl_reward", "parse_call"]

Call = tuple[str, dict[str, Any]]

# ------------------------------------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"```[\w+-]*\s*\n?(.*?)```", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_CALL_START = re.compile(r"\[?\b[A-Za-z_][\w.]*\(")  # in prose "step (1)" is not a call
_CLOSER = re.compile(r"[)\]]")
_MOST_STARTS, _MOST_ENDS = 20, 40  # a long reply full of parentheses costs at most 800 small parses


class _BadCall(ValueError):
    """The reply's call cannot be graded (positional arguments, several calls): the message is the reason."""


def parse_call(text: str) -> Call | None:
    """The one function call written in `text` as `(name, {param: value})`, or None when there is none. Raises
    `ValueError` with the reason when the call cannot be graded (several calls, positional arguments)."""
    explicit = [match.group(1) for match in _TOOL_CALL.finditer(text)]
    explicit += [match.group(1) for match in _FENCE.finditer(text)][-1:]
    explicit += [text, text[text.find("{") : text.rfind("}") + 1]]  # a JSON call among prose
    for candidate in explicit:
        call = _json_call(candidate.strip()) or _python_call(candidate)
        if call is not None:
            return call
    return _call_in_prose(text)


def _call_in_prose(text: str) -> Call | None:
    """The first `name(...)` in running text that parses as a call: from each place a call may start, the text up
    to each later `)` or `]` is tried in turn (a bounded number of times), so prose before and after is ignored."""
    refused: _BadCall | None = None
    for start in itertools.islice(_CALL_START.finditer(text), _MOST_STARTS):
        for end in itertools.islice(_CLOSER.finditer(text, start.start()), _MOST_ENDS):
            try:
                call = _python_call(text[start.start() : end.end()])
            except _BadCall as error:  # "step(1)" in the prose may come before the real call
                refused = refused or error
                break
            if call is not None:
                return call
    if refused is not None:
        raise refused
    return None


def _json_call(text: str) -> Call | None:
    if not text.startswith(("{", "[")):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past Python's limit
        return None
    if isinstance(data, list):
        if len(data) != 1:
            if data and all(isinstance(item, dict) and ("name" in item or "function" in item) for item in data):
                raise _BadCall(f"{len(data)} calls where one was expected")
            return None
        data = data[0]
    if isinstance(data, dict) and isinstance(data.get("function"), dict):
        data = data["function"]  # OpenAI's {"type": "function", "function": {"name": ..., "arguments": "..."}}
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            raise _BadCall("the call's arguments are not valid JSON") from None
    if not isinstance(arguments, dict):
        raise _BadCall("the call's arguments are not a JSON object")
    return data["name"], arguments


def _python_call(text: str) -> Call | None:
    text = text.strip().removesuffix(";")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # ValueError: a null byte; the others: absurdly deep nesting
    calls = tree.elts if isinstance(tree, ast.List | ast.Tuple) else [tree]
    if not calls or not all(isinstance(call, ast.Call) for call in calls):
        return None
    if len(calls) != 1:
        raise _BadCall(f"{len(calls)} calls where one was expected")
    return _read_call(calls[0])


def _read_call(call: ast.Call) -> Call | None:
    name = _dotted_name(call.func)
    if name is None:
        return None
    if call.args or any(keyword.arg is None for keyword in call.keywords):
        raise _BadCall(f"{name} was called with positional or ** arguments: name every parameter")
    return name, {keyword.arg: _value(keyword.value) for keyword in call.keywords}


def _dotted_name(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _value(node: ast.expr) -> Any:
    """A literal's value; simple arithmetic on numbers evaluated; anything else as its source text."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    number = _arithmetic(node)
    return number if number is not None else ast.unparse(node)


def _arithmetic(node: ast.expr) -> float | int | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _arithmetic(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if not isinstance(node, ast.BinOp) or type(node.op) not in _ARITHMETIC:
        return None
    left, right = _arithmetic(node.left), _arithmetic(node.right)
    if left is None or right is None or (isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 10**6)):
        return None  # 10**10**10, or a power of a power of a power, would never finish
    try:
        return _ARITHMETIC[type(node.op)](left, right)
    except (ArithmeticError, ValueError):
        return None


# -------------------------------------------------------------------------------------------------------- values

_STANDARDIZE = re.compile(r"[ ,./\-_*^]")


def _standardize(text: str) -> str:
    """BFCL's string normal form: no spaces or `,./-_*^`, lower case, `'` read as `"`."""
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def _same(value: Any, allowed: Any) -> bool:
    """Whether `value` is the single allowed value `allowed`, compared as BFCL compares values."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return type(value) is type(allowed) and value == allowed
    if isinstance(value, str) and isinstance(allowed, str):
        return _standardize(value) == _standardize(allowed)
    if isinstance(value, int | float) and isinstance(allowed, int | float):
        return value == allowed or (math.isnan(value) and math.isnan(allowed))
    if isinstance(value, list | tuple) and isinstance(allowed, list | tuple):
        return len(value) == len(allowed) and all(_same(v, a) for v, a in zip(value, allowed, strict=True))
    if isinstance(value, dict) and isinstance(allowed, dict):
        return _same_dict(value, allowed)
    return False


def _same_dict(value: dict, allowed: dict) -> bool:
    """BFCL's dict check: every key known, each value among the key's allowed values, every key present unless
    `""` is among them."""
    options = {key: (alts if isinstance(alts, list) else [alts]) for key, alts in allowed.items()}
    if any(key not in options for key in value):
        return False
    if any(not any(_same(item, alt) for alt in options[key]) for key, item in value.items()):
        return False
    return all(key in value or "" in alts for key, alts in options.items())


_SCHEMA_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "float": (float, int),
    "number": (float, int),
    "boolean": (bool,),
    "array": (list, tuple),
    "tuple": (list, tuple),
    "dict": (dict,),
    "object": (dict,),
    "any": (object,),
}


def _is_type(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in kinds and object not in kinds:
        return False  # True is an int to Python, never to BFCL
    return isinstance(value, kinds)


def _type_error(param: str, value: Any, schema: dict | None, allowed: list) -> str | None:
    """Why `value` has the wrong type for `param`, or None. The schema's type decides (with an int for a float);
    a value of the type of the ground truth's own answers is accepted too (BFCL's variables)."""
    answer_types = {type(item) for item in allowed if item != ""}
    if type(value) in answer_types or (type(value) is int and float in answer_types):
        return None
    declared = (schema or {}).get("type")
    kinds = _SCHEMA_TYPES.get(declared) if isinstance(declared, str) else None
    if kinds is None:
        return None if schema else f"value of {param} has type {type(value).__name__}, not one allowed"
    if not _is_type(value, kinds):
        return f"value of {param} has type {type(value).__name__}, expected {declared}"
    item_schema = schema.get("items") if isinstance(value, list | tuple) else None
    item_kinds = _SCHEMA_TYPES.get(item_schema.get("type")) if isinstance(item_schema, dict) else None
    if item_kinds is not None and not all(_is_type(item, item_kinds) for item in value):
        return f"value of {param} has an item that is not of type {item_schema.get('type')}"
    return None


# -------------------------------------------------------------------------------------------------------- checks


def _check(call: Call, expected: Call, schema: dict | None) -> str | None:
    """Why `call` is not allowed by the possible answer `expected` (name, {param: allowed values}), or None."""
    name, arguments = call
    expected_name, allowed = expected
    if name not in (expected_name, expected_name.replace(".", "_")):
        return f"wrong function name: called {name}, expected {expected_name}"
    properties = (schema or {}).get("properties")
    required = (schema or {}).get("required")
    for param in required if isinstance(required, list) else []:
        if param not in arguments:
            return f"missing required parameter {param}"
    for param, value in arguments.items():
        if param not in allowed or (isinstance(properties, dict) and param not in properties):
            return f"unexpected parameter {param}"
        param_schema = properties.get(param) if isinstance(properties, dict) else None
        error = _type_error(param, value, param_schema if isinstance(param_schema, dict) else None, allowed[param])
        if error is not None:
            return error
        if not any(_same(value, option) for option in allowed[param] if option != ""):
            return f"value of {param} not allowed: {repr(value)[:200]}, expected one of {allowed[param]}"
    for param, options in allowed.items():
        if param not in arguments and "" not in options:
            return f"missing parameter {param}"
    return None


# -------------------------------------------------------------------------------------------------------- reward


def _expected_call(task: Any) -> Call:
    """The ground truth as (name, {param: allowed values}); a refusal naming the fix for a row without one."""
    row = task.get("id", "?") if isinstance(task, dict) else "?"
    truth = task.get("ground_truth") if isinstance(task, dict) else None
    fix = (
        f"BFCL row {row} needs 'ground_truth' as one possible answer [{{name: {{param: [allowed values]}}}}] "
        "or one call ['name(param=value)']"
    )
    if not isinstance(truth, list) or len(truth) != 1:
        raise refuse_reward(f"{fix}: fix the row (got {type(truth).__name__}; several calls are not simple BFCL)")
    answer = truth[0]
    if isinstance(answer, str):
        try:
            call = _python_call(answer)
        except _BadCall:
            call = None
        if call is None:
            raise refuse_reward(f"{fix}: {answer!r} is not a call with named arguments; fix the row")
        return call[0], {param: [value] for param, value in call[1].items()}
    if not isinstance(answer, dict) or len(answer) != 1:
        raise refuse_reward(f"{fix}: fix the row")
    ((name, allowed),) = answer.items()
    if not isinstance(allowed, dict) or not all(isinstance(options, list) for options in allowed.values()):
        raise refuse_reward(f"{fix}: each parameter's allowed values must be a list; fix the row")
    return name, allowed


def _schema(task: dict, name: str) -> dict | None:
    """The `parameters` schema of function `name` in `task["functions"]` (a list, a dict or its JSON text)."""
    functions = task.get("functions", task.get("function"))
    if isinstance(functions, str):
        try:
            functions = json.loads(functions)
        except ValueError:
            raise refuse_reward(
                f"BFCL row {task.get('id', '?')} has 'functions' that are not JSON: fix the row"
            ) from None
    functions = [functions] if isinstance(functions, dict) else functions
    for function in functions if isinstance(functions, list) else []:
        if isinstance(function, dict) and function.get("name") == name:
            parameters = function.get("parameters")
            return parameters if isinstance(parameters, dict) else None
    return None


def bfcl_reward(task: dict, response: str) -> RewardOutput:
    """1.0 when the reply's one function call is allowed by `task["ground_truth"]` (checked against the schema in
    `task["functions"]` when the row has it), else 0.0 with the `reason` in `info`."""
    expected = _expected_call(task)
    schema = _schema(task, expected[0])
    if not isinstance(response, str) or not response.strip():
        reason = "empty reply" if isinstance(response, str) else f"reply is {type(response).__name__}, not text"
        return RewardOutput(0.0, is_correct=False, info={"reason": reason})
    try:
        call = parse_call(response)
    except _BadCall as error:
        return RewardOutput(0.0, is_correct=False, info={"reason": str(error)})
    if call is None:
        return RewardOutput(0.0, is_correct=False, info={"reason": "no function call found in the reply"})
    error = _check(call, expected, schema)
    info = {"call": {call[0]: call[1]}, "reason": error or "correct"}
    return RewardOutput(float(error is None), is_correct=error is None, info=info)
