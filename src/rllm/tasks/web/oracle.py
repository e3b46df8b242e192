"""A scripted oracle for MiniWoB++ tasks: proof that WebEnv's observation and actions suffice, not just that it runs.

`oracle_action(task, observation)` reads only what an agent reads (the goal and the accessibility tree) and answers
with the action text an agent would write. It keeps no state: a task that takes several steps is answered from the
page as it is now (a ticked box shows `[checked]`, an expanded section shows its content). `run_oracle` plays one
episode with it. `benchmarks/web_oracle.py` measures every covered task over seeds;
tests/unit/tasks/web/test_web_oracle.py a few.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ORACLE_TASKS", "Element", "elements", "oracle_action", "run_oracle"]

_LINE = re.compile(
    r"^(?P<indent>\s*)- '?(?P<role>[a-z]+)(?: \"(?P<name>(?:[^\"\\]|\\.)*)\")?(?P<flags>[^:]*?)"
    r"\[ref=(?P<ref>\w+)\][^:]*'?(?::\s*(?P<value>.*))?$"
)


@dataclass(frozen=True)
class Element:
    role: str
    name: str
    ref: str
    value: str
    checked: bool
    expanded: bool
    depth: int


def elements(axtree: str) -> list[Element]:
    """The snapshot's elements that have a ref, in page order."""
    found = []
    for line in axtree.splitlines():
        match = _LINE.match(line)
        if match:
            value = (match["value"] or "").strip().strip('"')
            flags = match["flags"] or ""
            found.append(
                Element(
                    match["role"],
                    (match["name"] or "").replace('\\"', '"'),
                    match["ref"],
                    value,
                    "[checked]" in flags,
                    "[expanded]" in flags,
                    len(match["indent"]),
                )
            )
    return found


def _quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]*)"', goal)


def _first(items: list[Element], role: str, name: str | None = None) -> Element:
    for element in items:
        if element.role == role and (name is None or element.name == name):
            return element
    raise LookupError(f"no {role} {name or ''} on the page")


def _of_role(items: list[Element], role: str) -> list[Element]:
    return [e for e in items if e.role == role]


def _submit(items: list[Element]) -> Element:
    return next(e for e in items if e.role == "button" and e.name.lower() in ("submit", "login", "go!", "search"))


def _click(element: Element) -> str:
    return f"click({element.ref!r})"


def _fill(element: Element, text: str) -> str:
    return f"fill({element.ref!r}, {text!r})"


# ---- one rule per task: (goal, elements) -> action text ---------------------------------------------------------


def _click_named_button(goal: str, items: list[Element]) -> str:
    quoted = _quoted(goal)
    name = quoted[0] if quoted else re.search(r"button (\w+)", goal).group(1)
    return _click(_first(items, "button", "Close" if name == "x" else name))


def _click_button_sequence(goal: str, items: list[Element]) -> str:
    return "\n".join(_click(_first(items, "button", name)) for name in re.findall(r"button (\w+)", goal))


def _click_link(goal: str, items: list[Element]) -> str:
    return _click(_first(items, "link", _quoted(goal)[0]))


def _click_tab(goal: str, items: list[Element]) -> str:
    return _click(_first(items, "link", re.search(r"(Tab #\d+)", goal).group(1)))


def _choose(goal: str, items: list[Element], role: str) -> str:
    match = re.search(r"Select (.*) and click Submit", goal)
    wanted = [] if match[1] == "nothing" else [w.strip() for w in match[1].split(",")]
    todo = [e for e in _of_role(items, role) if e.name in wanted and not e.checked]
    if todo:
        return "\n".join(f"check({e.ref!r})" for e in todo[:4])
    return _click(_submit(items))


def _choose_list(goal: str, items: list[Element]) -> str:
    option = re.search(r"Select (.*) from the list", goal).group(1)
    return f"select_option({_first(items, 'combobox').ref!r}, {option!r})\n{_click(_submit(items))}"


def _focus_nth_textbox(goal: str, items: list[Element]) -> str:
    match = re.search(r"(\d+)(?:st|nd|rd|th)", goal)
    index = int(match.group(1)) - 1 if match else 0
    return f"focus({_of_role(items, 'textbox')[index].ref!r})"


def _enter_text(transform: Callable[[str, str], str]) -> Callable[[str, list[Element]], str]:
    def rule(goal: str, items: list[Element]) -> str:
        text = transform(goal, _quoted(goal)[0])
        boxes = _of_role(items, "textbox")
        return "\n".join([*(_fill(box, text) for box in boxes), _click(_submit(items))])

    return rule


def _case(goal: str, text: str) -> str:
    return text.lower() if "lower case" in goal else text.upper() if "upper case" in goal else text


def _login(goal: str, items: list[Element]) -> str:
    user, password = _quoted(goal)[:2]
    boxes = _of_role(items, "textbox")
    return "\n".join([_fill(boxes[0], user), _fill(boxes[1], password), _click(_submit(items))])


def _enter_date(goal: str, items: list[Element]) -> str:
    month, day, year = re.search(r"(\d\d)/(\d\d)/(\d{4})", goal).groups()
    return "\n".join([_fill(_first(items, "textbox"), f"{year}-{month}-{day}"), _click(_submit(items))])


def _arithmetic(goal: str, items: list[Element]) -> str:
    problem = next(e.value for e in items if e.role == "generic" and e.value.endswith("="))
    a, op, b = re.match(r"(-?\d+)\s*([-+*x])\s*(-?\d+)", problem).groups()
    answer = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b), "x": int(a) * int(b)}[op]
    return "\n".join([_fill(_first(items, "textbox"), str(answer)), _click(_submit(items))])


def _algebra(goal: str, items: list[Element]) -> str:
    equation = next(e.value for e in items if e.role == "generic" and "x" in e.value and "=" in e.value)
    left, op, right, result = re.match(r"(-?\d+|x) ([-+]) (-?\d+|x) = (-?\d+)", equation).groups()
    result = int(result)
    if left == "x":  # x + a = r, x - a = r
        x = result - int(right) if op == "+" else result + int(right)
    else:  # a + x = r, a - x = r
        x = result - int(left) if op == "+" else int(left) - result
    return "\n".join([_fill(_first(items, "textbox"), str(x)), _click(_submit(items))])


def _read_table(goal: str, items: list[Element]) -> str:
    key = re.search(r"value of (.*) into", goal).group(1)
    cells = _of_role(items, "cell")
    value = next(cells[i + 1].name for i, cell in enumerate(cells[:-1]) if cell.name == key)
    return "\n".join([_fill(_first(items, "textbox"), value), _click(_submit(items))])


def _find_word(goal: str, items: list[Element]) -> str:
    index = int(re.search(r"(\d+)(?:st|nd|rd|th) word", goal).group(1)) - 1
    words = re.findall(r"[\w']+", _first(items, "paragraph").value)
    return "\n".join([_fill(_first(items, "textbox"), words[index]), _click(_submit(items))])


def _collapsible(goal: str, items: list[Element]) -> str:
    header = next(e for e in items if e.role == "tab" and e.name.startswith("Section"))
    return _click(_submit(items)) if header.expanded else _click(header)


def _odd_or_even(goal: str, items: list[Element]) -> str:
    calls = []
    for i, element in enumerate(items):
        if element.role == "generic" and re.fullmatch(r"-?\d+", element.value):
            odd, even = items[i - 1], items[i + 1]
            calls.append(_click(odd if int(element.value) % 2 else even))
    return "\n".join([*calls[:4], _click(_submit(items))]) if len(calls) <= 4 else "\n".join(calls)


_MOVIE_FIELDS = {
    "year": re.compile(r"year (\d+)"),
    "genre": re.compile(r"for (\w+) movies"),
    "director": re.compile(r"directed by (\w+)"),
}


def _movie_search(goal: str, items: list[Element]) -> str:
    values = {field: pattern.search(goal).group(1) for field, pattern in _MOVIE_FIELDS.items()}
    calls = []
    for i, element in enumerate(items):
        if element.role == "textbox":
            label = _label_of(items, i).lower()
            field = next((f for f in values if f in label or (f == "year" and "date" in label)), None)
            if field:
                calls.append(_fill(element, values[field]))
    button = next(e for e in items if e.role == "button")
    return "\n".join([*calls, _click(button)])


def _label_of(items: list[Element], index: int) -> str:
    """A field's label: its sibling just before or after it (layouts put it on either side), else the last label
    above it (a table's row header)."""

    def label(element: Element) -> str:
        return (element.name or element.value) if element.role in ("rowheader", "generic") else ""

    depth = items[index].depth
    for neighbour in (index - 1, index + 1):
        if 0 <= neighbour < len(items) and items[neighbour].depth == depth and label(items[neighbour]):
            return label(items[neighbour])
    return next((label(e) for e in reversed(items[:index]) if label(e)), "")


_RULES: dict[str, Callable[[str, list[Element]], str]] = {
    "click-test": lambda goal, items: _click(_first(items, "button")),
    "click-test-2": _click_named_button,
    "click-test-transfer": _click_named_button,
    "click-button": _click_named_button,
    "click-button-sequence": _click_button_sequence,
    "click-dialog": lambda goal, items: _click(_first(items, "button", "Close")),
    "click-dialog-2": _click_named_button,
    "unicode-test": _click_named_button,
    "click-link": _click_link,
    "click-tab": _click_tab,
    "click-option": lambda goal, items: _choose(goal, items, "radio"),
    "click-checkboxes": lambda goal, items: _choose(goal, items, "checkbox"),
    "choose-list": _choose_list,
    "focus-text": _focus_nth_textbox,
    "focus-text-2": _focus_nth_textbox,
    "enter-text": _enter_text(lambda goal, text: text),
    "enter-text-dynamic": _enter_text(lambda goal, text: text),
    "enter-text-2": _enter_text(_case),
    "enter-password": _enter_text(lambda goal, text: text),
    "login-user": _login,
    "enter-date": _enter_date,
    "simple-arithmetic": _arithmetic,
    "simple-algebra": _algebra,
    "read-table": _read_table,
    "find-word": _find_word,
    "click-collapsible": _collapsible,
    "click-collapsible-nodelay": _collapsible,
    "odd-or-even": _odd_or_even,
    "multi-orderings": _movie_search,
    "multi-layouts": _movie_search,
}
ORACLE_TASKS = tuple(_RULES)


def oracle_action(task: str, observation: dict) -> str:
    """The next action for `task` from what the page shows (see the module docstring)."""
    if task not in _RULES:
        raise KeyError(f"the oracle has no rule for {task!r}; it covers {', '.join(ORACLE_TASKS)}")
    return _RULES[task](observation["goal"], elements(observation["axtree"]))


def run_oracle(task: str, seed: int, max_steps: int = 10, **env_options: Any) -> tuple[float, int]:
    """Play one episode of `task` with the oracle: (reward, steps taken)."""
    from rllm.tasks.web.env import WebEnv

    env = WebEnv({"task": task, "seed": seed}, **env_options)
    try:
        observation, _ = env.reset()
        for step in range(1, max_steps + 1):
            observation, reward, done, _ = env.step(oracle_action(task, observation))
            if done:
                return reward, step
        return 0.0, max_steps
    finally:
        env.close()
