"""Tool calls parsed out of completion text, with every malformed call classified rather than dropped.

Families (what `detect_family` returns; `parse_tool_calls` parses "hermes" only):

- "hermes": `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one block per call. Qwen2.5 (and
  Qwen2.5-Coder, the embedded Qwen model) and NousResearch Hermes templates render tools and calls exactly so.
  It is also the fallback for templates that ignore `tools`: SmolLM2-Instruct's template (the other embedded model)
  renders only role and content and drops a `tools=` argument silently, so for it the tool instructions must go in
  the system prompt, which `tools_system_prompt` writes in the same words as Qwen's template, and replies are
  parsed as hermes. `template_renders_tools` says which case a tokenizer is in.
- "llama3" (`<|python_tag|>` / bare JSON with "parameters") and "mistral" (`[TOOL_CALLS]`): recognised by
  `detect_family` so they fail loudly in `parse_tool_calls` rather than being misparsed as hermes.

Leniencies, each because models emit it: "arguments" may be a JSON string (OpenAI style) or spelled "parameters";
`"arguments": null` or absent means no arguments; an OpenAI-style `{"type": "function", "function": {...}}` wrapper
is unwrapped. Not lenient: JSON outside `<tool_call>` tags is content, not a call.

Error kinds (`ToolCallError.kind`, all in `ERROR_KINDS`):
"truncated" (an opening tag without a closing one, or JSON cut off before its end), "invalid_json",
"not_an_object", "missing_name", "bad_name" (not a string, empty, over 128 characters, or characters outside
A-Z a-z 0-9 _ - .), "bad_arguments" (arguments neither an object nor a string holding one), "too_large" (a block
over `max_chars`), "too_many" (blocks past `max_calls`: one error for all of them, and they are not parsed),
"unmatched_close" (a `</tool_call>` with no opening tag: usually a call whose opening tag was forgotten; one error
for all of them). Unknown tool names and argument types are checked at call time by `ToolRegistry.call`.

Scanning is linear: tag positions are found with `str.find`, each position searched once, and each block is decoded
by `json.loads` (a C scanner) only when under `max_chars`, so any input parses in time linear in its length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rllm.tools.base import TOOL_NAME_PATTERN
from rllm.types import ToolCall

__all__ = [
    "ERROR_KINDS",
    "FAMILIES",
    "ParsedToolCalls",
    "ToolCallError",
    "detect_family",
    "parse_bare_call",
    "parse_tool_calls",
    "template_renders_tools",
    "tools_system_prompt",
]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FAMILIES = ("hermes",)
ERROR_KINDS = frozenset(
    {
        "truncated",
        "invalid_json",
        "not_an_object",
        "missing_name",
        "bad_name",
        "bad_arguments",
        "too_large",
        "too_many",
        "unmatched_close",
    }
)
RAW_CAP = 500
_EXPECTED = 'write {"name": <tool name>, "arguments": {<argument>: <value>, ...}} between <tool_call> and </tool_call>'


@dataclass
class ToolCallError:
    kind: str  # one of ERROR_KINDS
    raw: str  # the offending text, capped to 500 characters
    message: str  # plain words for the model


@dataclass
class ParsedToolCalls:
    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""  # the text outside tool-call blocks, stripped
    errors: list[ToolCallError] = field(default_factory=list)


def parse_tool_calls(
    text: str, *, family: str = "hermes", max_calls: int = 8, max_chars: int = 20_000, require_close: bool = True
) -> ParsedToolCalls:
    """Split a completion into tool calls, the content around them and classified errors. Never raises on any text.

    `require_close=False` accepts a last block that has no closing tag but holds a complete call: for generation
    stopped by a `</tool_call>` stop string, which servers drop from the text.
    """
    if family not in FAMILIES:
        raise ValueError(f"tool-call family {family!r} is not supported; supported: {', '.join(FAMILIES)}")
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    parsed = ParsedToolCalls()
    content: list[str] = []
    blocks = 0
    pos, n = 0, len(text)
    next_open = text.find(OPEN)
    next_close = text.find(CLOSE)
    unmatched: list[str] = []
    extra_blocks: list[str] = []
    while pos < n:
        if next_open != -1 and next_open < pos:
            next_open = text.find(OPEN, pos)
        if next_close != -1 and next_close < pos:
            next_close = text.find(CLOSE, pos)
        if next_open == -1:
            _add_content(text[pos:], content, unmatched)
            break
        _add_content(text[pos:next_open], content, unmatched)
        body_start = next_open + len(OPEN)
        following_open = text.find(OPEN, body_start)
        if next_close != -1 and next_close < body_start:
            next_close = text.find(CLOSE, body_start)
        closed = next_close != -1 and (following_open == -1 or next_close < following_open)
        body_end = next_close if closed else (following_open if following_open != -1 else n)
        block_text = text[next_open : body_end + (len(CLOSE) if closed else 0)]
        blocks += 1
        if blocks > max_calls:
            extra_blocks.append(block_text)
        else:
            _parse_block(text[body_start:body_end], block_text, closed, require_close, max_chars, parsed)
        pos = body_end + len(CLOSE) if closed else body_end
        next_open = following_open
    if extra_blocks:
        parsed.errors.append(
            ToolCallError(
                "too_many",
                _cap(extra_blocks[0]),
                f"you made {blocks} tool calls in one reply; at most {max_calls} are allowed, "
                f"so the last {len(extra_blocks)} were ignored",
            )
        )
    if unmatched:
        parsed.errors.append(
            ToolCallError(
                "unmatched_close",
                _cap(unmatched[0]),
                f"found {CLOSE} without a matching {OPEN} before it; {_EXPECTED}",
            )
        )
    parsed.content = "".join(content).strip()
    for i, call in enumerate(parsed.calls):
        if call.id is None:
            call.id = f"call_{i}"
    return parsed


def parse_bare_call(text: str, *, max_chars: int = 20_000) -> ToolCall | None:
    """A reply that is nothing but one JSON tool call without the tags (optionally in a ```json fence), as small
    models often write it: the embedded Qwen2.5-Coder-0.5B answered 16 of 16 MCP questions this way, although its
    template asks for <tool_call> tags. Anything else (prose around it, no "name", a malformed call) is None: the
    text stays a final answer. Never raises."""
    body = (text or "").strip()
    if len(body) > max_chars or not body:
        return None
    if body.startswith("```"):
        body = body.strip("`").strip()
        body = body[4:].lstrip() if body.startswith("json") else body
    if not (body.startswith("{") and body.endswith("}")):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    call = _call_from_value(value, lambda kind, message: None)
    if call is not None and call.id is None:
        call.id = "call_0"
    return call


def _add_content(segment: str, content: list[str], unmatched: list[str]) -> None:
    """Content between blocks; a stray closing tag in it is noted (and removed)."""
    if CLOSE in segment:
        pieces = segment.split(CLOSE)
        unmatched.append(pieces[0][-RAW_CAP:] + CLOSE)
        segment = "".join(pieces)
    content.append(segment)


def _cap(raw: str) -> str:
    return raw if len(raw) <= RAW_CAP else raw[: RAW_CAP - 3] + "..."


def _parse_block(
    body: str, raw: str, closed: bool, require_close: bool, max_chars: int, parsed: ParsedToolCalls
) -> None:
    def fail(kind: str, message: str) -> None:
        parsed.errors.append(ToolCallError(kind, _cap(raw), message))

    if len(body) > max_chars:
        if closed:
            fail("too_large", f"your tool call is {len(body)} characters long; the limit is {max_chars}")
        else:
            fail("truncated", f"your tool call has no closing {CLOSE} (the reply ended or a new call began)")
        return
    stripped = body.strip()
    if not stripped:
        kind = "invalid_json" if closed else "truncated"
        fail(kind, f"your tool call is empty; {_EXPECTED}")
        return
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as exc:
        cut_off = exc.pos >= len(stripped) or exc.msg.startswith("Unterminated string")
        if not closed:
            fail("truncated", f"your tool call has no closing {CLOSE} and its JSON is incomplete: {exc}")
        elif cut_off:
            fail("truncated", f"your tool call's JSON ends too early (a missing bracket or quote?): {exc}")
        else:
            fail("invalid_json", f"your tool call is not valid JSON: {exc}")
        return
    except (RecursionError, ValueError) as exc:  # nesting too deep; a number too long to convert
        fail("invalid_json", f"your tool call is not valid JSON: {type(exc).__name__}: {exc}")
        return
    if not closed and require_close:
        fail("truncated", f"your tool call has no closing {CLOSE}; end each call with {CLOSE}")
        return
    call = _call_from_value(value, fail)
    if call is not None:
        parsed.calls.append(call)


def _call_from_value(value: Any, fail) -> ToolCall | None:
    if not isinstance(value, dict):
        fail("not_an_object", f"your tool call must be a JSON object, got {_json_kind(value)}; {_EXPECTED}")
        return None
    if "name" not in value and isinstance(value.get("function"), dict):  # OpenAI's {"type": "function", ...}
        value = value["function"]
    if "name" not in value:
        fail("missing_name", f'your tool call has no "name"; {_EXPECTED}')
        return None
    name = value["name"]
    if not isinstance(name, str):
        fail("bad_name", f'the tool "name" must be a string, got {_json_kind(name)}')
        return None
    if not TOOL_NAME_PATTERN.fullmatch(name):
        why = "empty" if not name else "over 128 characters" if len(name) > 128 else "not a valid tool name"
        fail("bad_name", f"the tool name {_short(name)} is {why} (use letters, digits, _ - .)")
        return None
    arguments = value.get("arguments", value.get("parameters"))
    if arguments is None:
        arguments = {}
    elif isinstance(arguments, str):
        try:
            decoded = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            fail("bad_arguments", f'the "arguments" string of {name!r} is not valid JSON: {exc}')
            return None
        if not isinstance(decoded, dict):
            fail("bad_arguments", f'the "arguments" of {name!r} must be a JSON object, got {_json_kind(decoded)}')
            return None
        arguments = decoded
    elif not isinstance(arguments, dict):
        fail("bad_arguments", f'the "arguments" of {name!r} must be a JSON object, got {_json_kind(arguments)}')
        return None
    call_id = value.get("id") if isinstance(value.get("id"), str) else None
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _json_kind(value: Any) -> str:
    kind = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return "null" if value is None else kind.get(type(value), type(value).__name__)


def _short(text: str, limit: int = 40) -> str:
    shown = json.dumps(text[:limit], ensure_ascii=False)
    return shown if len(text) <= limit else shown + "..."


# ---- templates ----


def _template_text(tokenizer_or_template: Any) -> str:
    if tokenizer_or_template is None:
        return ""
    if isinstance(tokenizer_or_template, str):
        return tokenizer_or_template
    template = getattr(tokenizer_or_template, "chat_template", None)
    if isinstance(template, dict):  # named templates ({"default": ..., "tool_use": ...})
        return "\n".join(str(t) for t in template.values())
    if isinstance(template, list):
        return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return template or ""


def detect_family(tokenizer_or_template: Any) -> str:
    """The tool-call family of a tokenizer's chat template (or of the template text). "hermes" for Qwen2.5 / Hermes
    templates, and for templates with no tool support at all (SmolLM2): see the module docstring."""
    template = _template_text(tokenizer_or_template)
    if OPEN in template:
        return "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    return "hermes"


def template_renders_tools(tokenizer_or_template: Any) -> bool:
    """Whether the chat template text mentions its `tools` argument: a quick guess from the text. Rendering decides
    by rendering a probe tool (`rllm.models.chat.chat_template_renders_tools`), and describes the tools in the system
    message where the template ignores them (`rllm.models.chat.describe_ignored_tools`)."""
    return "tools" in _template_text(tokenizer_or_template)


def tools_system_prompt(schemas: list[dict], system: str | None = None, *, listing: str | None = None) -> str:
    """A system message describing `schemas` in the Hermes format, worded as Qwen2.5's template does, for templates
    that ignore `tools=` (the reply is then parsed with family "hermes"). `listing` replaces the text between the
    <tools> tags (one JSON schema a line by default): rLLM's ToolAgent lists them as one indented JSON array."""
    listed = listing if listing is not None else "".join("\n" + json.dumps(s, ensure_ascii=False) for s in schemas)
    head = f"{system}\n\n" if system else ""
    return (
        f"{head}# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>{listed}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call>"
    )
