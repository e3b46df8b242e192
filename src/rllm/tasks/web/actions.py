"""Web actions, BrowserGym's high-level style: `click("e5")`, `fill("e5", "text")`, ... on the snapshot's refs.

An action reaches the env as the model's text or as tool calls (ToolAgent's `{"tool_calls": [...]}`).
- From text, the calls are read from the last ```` ``` ```` block if there is one, else from the whole reply. Each
  call is parsed as a Python call whose arguments are literals (`ast`), never evaluated; text around the calls is
  ignored.
- From tool calls, each call's name is the action and its arguments go by the names below.
- A ref is the snapshot's `e5` (or `f1e5` inside a frame). `"5"`, `5` and `"[ref=e5]"` all mean `e5`, so
  BrowserGym-trained habits (numeric bids) still work.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ACTIONS", "ActionError", "WebAction", "describe_actions", "parse_actions", "perform"]

# name -> (parameter names, required count, what it does)
ACTIONS: dict[str, tuple[tuple[str, ...], int, str]] = {
    "click": (("ref",), 1, "click the element"),
    "dblclick": (("ref",), 1, "double-click the element"),
    "hover": (("ref",), 1, "move the mouse over the element"),
    "fill": (("ref", "text"), 2, "clear a text field and type text into it"),
    "select_option": (("ref", "value"), 2, "choose an option of a list box by its label or value"),
    "press": (("ref", "key"), 2, "press a key (e.g. 'Enter', 'Tab', 'ArrowDown') in the element"),
    "focus": (("ref",), 1, "focus the element"),
    "check": (("ref",), 1, "tick a checkbox"),
    "uncheck": (("ref",), 1, "untick a checkbox"),
    "scroll": (("delta_x", "delta_y"), 2, "scroll the page by pixels (scroll(0, 300) scrolls down)"),
    "noop": (("wait_ms",), 0, "do nothing and wait (default 500 ms)"),
}
_CALL_START = re.compile(r"\b(" + "|".join(ACTIONS) + r")\s*\(")
_BLOCK = re.compile(r"```(?:[a-zA-Z]*\n)?(.*?)```", re.DOTALL)
_REF = re.compile(r"^(?:\[?ref=)?([a-z]\d*e\d+|e\d+|\d+)\]?$")


class ActionError(Exception):
    """The action could not be parsed or done; its message is shown to the agent as `last_action_error`."""


@dataclass(frozen=True)
class WebAction:
    name: str
    args: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(repr(self.args[p]) for p in ACTIONS[self.name][0] if p in self.args)})"


def describe_actions() -> str:
    """The action space in words, for prompts."""
    lines = []
    for name, (params, required, what) in ACTIONS.items():
        shown = [p if i < required else f"{p}=..." for i, p in enumerate(params)]
        lines.append(f"{name}({', '.join(shown)}): {what}")
    return "\n".join(lines)


def parse_actions(action: Any) -> list[WebAction]:
    """The calls in a reply (text, or `{"tool_calls": [...]}`), in order. Raises ActionError if there is none or
    one is malformed."""
    if isinstance(action, dict) and "tool_calls" in action:
        calls = [_from_tool_call(call) for call in action.get("tool_calls") or []]
        if calls:
            return calls
        action = action.get("content") or ""
    if isinstance(action, WebAction):
        return [action]
    if not isinstance(action, str):
        raise ActionError(f"expected a reply with an action such as click('e5'), got {type(action).__name__}")
    blocks = _BLOCK.findall(action)
    text = blocks[-1] if blocks else action
    calls = [_parse_call(text, match.start()) for match in _CALL_START.finditer(text)]
    calls = [call for call in calls if call is not None]
    if not calls:
        # no concrete ref in the hint: a small model copies whatever example it is shown
        raise ActionError(
            "no action found: end the reply with the calls inside ``` ```, e.g. click(ref) with a ref of the page"
        )
    return calls


def _parse_call(text: str, start: int) -> WebAction | None:
    """The call starting at `start`: the shortest prefix up to a ')' that parses as a Python call."""
    end = text.find(")", start)
    while end != -1:
        try:
            node = ast.parse(text[start : end + 1].strip(), mode="eval").body
        except SyntaxError:
            end = text.find(")", end + 1)
            continue
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return None
        try:
            args = [ast.literal_eval(arg) for arg in node.args]
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        except ValueError as e:
            raise ActionError(f"{text[start : end + 1]}: arguments must be plain values (quoted text, numbers)") from e
        return _build(node.func.id, args, kwargs)
    raise ActionError(f"unbalanced parentheses in {text[start : start + 80]!r}")


def _from_tool_call(call: Any) -> WebAction:
    if not isinstance(call, dict):
        raise ActionError(f"malformed tool call {call!r}")
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name, arguments = function.get("name"), function.get("arguments") or {}
    if isinstance(arguments, str):
        import json

        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as e:
            raise ActionError(f"tool call {name}: arguments are not a JSON object: {arguments[:200]!r}") from e
    if not isinstance(arguments, dict):
        raise ActionError(f"tool call {name}: arguments must be an object")
    return _build(str(name), [], arguments)


def _build(name: str, args: list[Any], kwargs: dict[str, Any]) -> WebAction:
    if name not in ACTIONS:
        raise ActionError(f"unknown action {name!r}; the actions are {', '.join(ACTIONS)}")
    params, required, _ = ACTIONS[name]
    if len(args) > len(params):
        raise ActionError(f"{name} takes at most {len(params)} arguments ({', '.join(params)}), got {len(args)}")
    values = dict(zip(params, args, strict=False))
    for key, value in kwargs.items():
        if key not in params:
            raise ActionError(f"{name} has no argument {key!r}; its arguments are {', '.join(params) or 'none'}")
        values[key] = value
    missing = [p for p in params[:required] if p not in values]
    if missing:
        raise ActionError(f"{name} needs {', '.join(missing)}: e.g. {name}({', '.join(repr(p) for p in params)})")
    if "ref" in values:
        values["ref"] = normalize_ref(values["ref"])
    for key in ("text", "key"):
        if key in values and not isinstance(values[key], str):
            values[key] = str(values[key])
    for key in ("delta_x", "delta_y", "wait_ms"):
        if key in values and not isinstance(values[key], int | float):
            raise ActionError(f"{name}: {key} must be a number, got {values[key]!r}")
    return WebAction(name, values)


def normalize_ref(ref: Any) -> str:
    match = _REF.match(str(ref).strip())
    if not match or isinstance(ref, bool):
        raise ActionError(f"{ref!r} is not an element ref: use the ref shown in the page, e.g. 'e5' from [ref=e5]")
    ref = match.group(1)
    return f"e{ref}" if ref.isdigit() else ref


async def perform(page: Any, action: WebAction, timeout_ms: float) -> None:
    """Do one action on a Playwright page. Raises ActionError with a short reason the agent can read."""
    from playwright.async_api import Error as PlaywrightError

    args = action.args
    try:
        if action.name == "noop":
            await page.wait_for_timeout(float(args.get("wait_ms", 500)))
            return
        if action.name == "scroll":
            await page.mouse.wheel(float(args["delta_x"]), float(args["delta_y"]))
            return
        target = page.locator(f"aria-ref={args['ref']}")
        if await target.count() == 0:
            raise ActionError(f"{action}: no element with ref {args['ref']!r} on the page now")
        if action.name in ("click", "dblclick", "hover"):
            await _pointer(target, action.name, timeout_ms)
        elif action.name in ("focus", "check", "uncheck"):
            await getattr(target, action.name)(timeout=timeout_ms)
        elif action.name == "fill":
            await target.fill(args["text"], timeout=timeout_ms)
        elif action.name == "press":
            await target.press(args["key"], timeout=timeout_ms)
        elif action.name == "select_option":
            value = args["value"]
            await target.select_option(value if isinstance(value, list) else str(value), timeout=timeout_ms)
    except PlaywrightError as e:
        if _is_crash(e):
            raise
        reason = str(e).split("\n")[0].replace("Locator.", "").replace("Page.", "")
        if "intercepts pointer events" in str(e):
            reason = "another element covers it wherever it could be clicked"
        elif "Timeout" in reason:
            reason = f"the element did not accept it within {timeout_ms:g} ms (hidden, disabled or the wrong kind)"
        raise ActionError(f"{action}: {reason}") from None


async def _pointer(target: Any, how: str, timeout_ms: float) -> None:
    """Click (or hover) the element where it can be hit. Playwright aims at the centre and refuses when another
    element covers it there (MiniWoB places some elements overlapping); a person would aim at the part they can see,
    so the corners are tried (a trial, which clicks nothing) before giving up."""
    from playwright.async_api import Error as PlaywrightError

    try:
        await getattr(target, how)(timeout=timeout_ms)
        return
    except PlaywrightError as e:
        if "intercepts pointer events" not in str(e):
            raise
        covered = e
    box = await target.bounding_box()
    if box:
        for x, y in ((0.1, 0.1), (0.9, 0.1), (0.1, 0.9), (0.9, 0.9), (0.5, 0.1), (0.5, 0.9), (0.1, 0.5), (0.9, 0.5)):
            position = {"x": box["width"] * x, "y": box["height"] * y}
            try:
                await getattr(target, how)(position=position, timeout=200, trial=True)
            except PlaywrightError:
                continue
            await getattr(target, how)(position=position, timeout=timeout_ms)
            return
    raise covered


def _is_crash(error: Exception) -> bool:
    text = str(error)
    return "Target page, context or browser has been closed" in text or "Target crashed" in text
