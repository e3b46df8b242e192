"""Why a turn did not extend, and whether a chat template's tool calls parse back: the renderer's side of the
token-exactness report (`rllm.exactness`).

`ChatRenderer` counts a prefix break when a prompt does not extend the previous prompt + the sampled reply.
`break_kind` tells the three causes apart, with at most one more render, and only at a break (breaks are rare, so
the exact path pays nothing):

    "history"     the messages before the reply are not the ones the previous prompt rendered (an agent that
                  rewrote or shortened its history), or the reply is not the next message
    "round_trip"  the reply as the history holds it (parsed into `tool_calls`, its content edited) does not render
                  back to the text that was sampled: rendered alone after the same messages, it does not print the
                  previous prompt + the reply as sampled
    "template"    the reply renders back as sampled, or the agent stored it verbatim, so the template itself prints it
                  differently once later turns follow (a template that strips earlier `<think>` blocks, or trims
                  content): legitimate, the new row is what the model was sent

`tool_format_round_trips` renders a probe assistant turn with two tool calls through the template and parses what
it prints with `rllm.tools.parsing`: a template whose calls do not parse back (another family's format, a list the
parser does not read, a template that prints only the first of parallel calls) teaches the model a format whose
calls would be read as zero calls. Cached per template.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["BREAK_KINDS", "break_kind", "tool_format_round_trips"]

BREAK_KINDS = ("template", "history", "round_trip")

Render = Callable[[list[dict], bool], str]  # (messages, add_generation_prompt) -> text

_PROBE_CALLS = (("rllm_probe_a", {"x": 1}), ("rllm_probe_b", {"y": "two words"}))
_round_trips: dict[tuple, bool] = {}  # (tokenizer class, template) -> answer


def break_kind(render: Render, previous: list[dict], messages: list[dict], context_text: str, reply: str) -> str:
    """The cause of a prefix break (module docstring): `previous` are the messages of the previous prompt,
    `context_text` that prompt's text + the reply as sampled (its ids decoded), `reply` the sampled text."""
    n = len(previous)
    stored = messages[n] if len(messages) > n else None
    if messages[:n] != previous or not isinstance(stored, dict) or stored.get("role") != "assistant":
        return "history"
    if not stored.get("tool_calls") and stored.get("content") == reply:
        return "template"  # stored verbatim: whatever printed it otherwise is the template's doing
    try:
        alone = render([*previous, stored], False)
    except Exception:  # a template that refuses to end on an assistant turn: it could not print the reply back
        return "round_trip"
    return "template" if alone.startswith(context_text) else "round_trip"


def tool_format_round_trips(tokenizer: Any) -> bool:
    """Whether the tool calls the chat template prints parse back (names and arguments, both of two parallel calls)
    with rllm's parser. True for a template that prints no structured calls at all (SmolLM2's): rllm then describes
    the Hermes `<tool_call>` format in the system message and writes calls in it (`rllm.models.chat`)."""
    template = getattr(tokenizer, "chat_template", None)
    key = (type(tokenizer), template if template is None or isinstance(template, str) else repr(template))
    answer = _round_trips.get(key)
    if answer is None:
        try:
            answer = _probe_round_trip(tokenizer)
        except Exception:  # a template with rules of its own (a required system turn...): it cannot be told, and a
            answer = True  # count must never fail the rollout it is about
        _round_trips[key] = answer
    return answer


def _probe_round_trip(tokenizer: Any) -> bool:
    from rllm.tools.parsing import FAMILIES, detect_family, parse_tool_calls

    printed = _printed_calls(tokenizer)
    if printed is None:
        return True
    family = detect_family(tokenizer)
    if family not in FAMILIES:
        return False
    parsed = parse_tool_calls(printed, family=family)
    found = [(call.name, _arguments(call.arguments)) for call in parsed.calls]
    return found == [(name, arguments) for name, arguments in _PROBE_CALLS]


def _printed_calls(tokenizer: Any) -> str | None:
    """What the template prints for an assistant turn with the probe calls (the text after the user's turn), or
    None when it prints none of them."""
    user = [{"role": "user", "content": "rllm probe"}]
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(_PROBE_CALLS)
    ]
    turn = {"role": "assistant", "content": "", "tool_calls": calls}
    try:
        whole = tokenizer.apply_chat_template([*user, turn], tokenize=False)
    except Exception:  # a template that does not take structured calls: rllm writes them as text
        return None
    if not any(name in whole for name, _ in _PROBE_CALLS):
        return None
    head = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    return whole[len(head) :] if whole.startswith(head) else whole


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments
