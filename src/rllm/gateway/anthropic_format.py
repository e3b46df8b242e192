"""The Anthropic Messages wire format, both ways: a `POST /v1/messages` body in (checked, translated into the
gateway's `ChatRequest`) and a `Reply` out (a `Message`, its streaming events, error objects). Pure functions, no
I/O, built on `openai_format`: the same normalised messages, validators and `Reply` serve both APIs.

Choices:

- Messages become the chat-completions messages `normalize_messages` makes, so history matching, rendering and
  records are shared with the OpenAI route. `system` (a string, or text blocks joined by "\\n") is the first
  message. `tool_use` blocks become the assistant's `tool_calls` (arguments = `input`); `tool_result` blocks become
  `tool` messages placed before the rest of their user message (chat templates want them right after the call); a
  turn's assistant text blocks are concatenated (as Anthropic does) and a user's joined by "\\n" (as for OpenAI text
  parts). So an assistant turn the gateway produced, echoed back by the SDK, normalises exactly as the
  chat-completions echo of the same reply does. A `system` message among the messages (Claude Code's beta requests
  carry one) is kept in place as a system message of text.
- `thinking`/`redacted_thinking` blocks are dropped (the gateway restores its own sampled text); `cache_control`,
  `citations` and other unknown keys are ignored. Images become OpenAI `image_url` parts, so they meet the same
  text-only refusal as on the OpenAI route; documents, search results and server-tool blocks are refused by type.
- Only client tools (name + input_schema) are served: server tools (bash, text editor, web search, computer, code
  execution, ...) and `mcp_servers` would need the gateway to run tools, so they are refused. `tool_choice` is
  checked, not enforced; `metadata`, `thinking`, `service_tier`, `container`, `context_management` are accepted and
  ignored. `max_tokens` is required, as Anthropic's API requires it; `temperature` is in [0, 1] as there.
- `raw_messages` (what the session records as received) are the body's messages with the `system` prompt, as sent,
  put first as a system message: the record then holds the whole prompt.
- The response is built field by field from the SDK's `Message` schema: token ids and server-only fields cannot
  leak. Usage reports no prompt caching (cache counts 0). A tool call whose arguments are not a JSON object keeps
  them under `{"arguments": ...}` (`input` must be an object). `stop_reason` is "tool_use" when there are calls,
  else "max_tokens", "stop_sequence" (with the string) or "end_turn".
- Streaming is emulated as in `openai_format`: text goes out one delta per group of token pieces, a tool call's
  input as one `input_json_delta`; no `ping` events (the SDK skips them). Errors use Anthropic's types by status
  (unlisted 4xx are invalid_request_error, unlisted 5xx api_error, as Anthropic documents).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rllm.gateway.openai_format import (
    ChatRequest,
    Reply,
    RequestError,
    _flag,
    _group_pieces,
    _integer,
    _number,
    normalize_messages,
)
from rllm.types import ToolCall

__all__ = ["anthropic_error_body", "message_body", "message_events", "parse_messages_request"]

_DROPPED_BLOCKS = {"thinking", "redacted_thinking"}
_CLIENT_TOOL_TYPES = {None, "custom"}
_TOOL_CHOICES = {"auto", "any", "tool", "none"}
_MESSAGE_INDEX = re.compile(r"^messages\[\d+\]")
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


# ---- requests ----------------------------------------------------------------------------------------------------


def parse_messages_request(body: Any) -> ChatRequest:
    """Check a Messages API body and translate it; raises `RequestError` naming what to change."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if body.get("mcp_servers"):
        raise RequestError(
            "`mcp_servers` is not supported: the gateway samples a model and runs no tools; connect to the MCP "
            "servers in the agent and send their tools as client `tools`",
            param="mcp_servers",
        )
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("`messages` must be a non-empty list of user and assistant messages", param="messages")
    messages = _system_messages(body.get("system"))
    for index, message in enumerate(raw):
        messages.extend(_chat_messages(message, index))
    request = ChatRequest(messages=messages, raw_messages=_raw_messages(body.get("system"), raw))
    request.tools = _tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"))
    request.model = body.get("model")
    request.max_tokens = _required_max_tokens(body)
    request.stop = _stop_sequences(body.get("stop_sequences"))
    request.temperature = _number(body, "temperature", low=0.0, high=1.0)
    request.top_p = _number(body, "top_p", low=0.0, high=1.0, open_low=True)
    request.top_k = _integer(body, "top_k", low=0)
    request.stream = _flag(body, "stream")
    return request


def _system_messages(system: Any) -> list[dict[str, Any]]:
    if system is None or system == []:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list) and all(_is_text_block(block) for block in system):
        return [{"role": "system", "content": "\n".join(block["text"] for block in system)}]
    raise RequestError('`system` must be a string or a list of {"type": "text", "text": ...} blocks', param="system")


def _raw_messages(system: Any, messages: list[Any]) -> list[Any]:
    # the system prompt lives outside `messages` in this API: put it first so a record holds the whole prompt
    return messages if system is None or system == [] else [{"role": "system", "content": system}, *messages]


def _chat_messages(message: Any, index: int) -> list[dict[str, Any]]:
    """One Anthropic message as normalised chat messages (a user turn with tool results gives several)."""
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant", "system"):
        raise RequestError(
            f"messages[{index}] has role {role!r}: messages are user or assistant turns (a system prompt goes in the "
            "top-level `system` field)",
            param="messages",
        )
    content = message.get("content")
    if role == "system":  # Claude Code sends one among its messages (beta API): kept where it is, as text
        chat = [{"role": "system", "content": content if isinstance(content, str) else _texts(content, index)}]
    elif isinstance(content, str):
        chat = [{"role": role, "content": content}]
    elif isinstance(content, list):
        blocks = [_block(block, index) for block in content]
        chat = _assistant_turn(blocks, index) if role == "assistant" else _user_turn(blocks, index)
    else:
        raise RequestError(f"messages[{index}].content must be a string or a list of content blocks", param="messages")
    try:
        return normalize_messages(chat)
    except RequestError as error:  # its index counts chat messages: name the Anthropic message instead
        raise RequestError(_MESSAGE_INDEX.sub(f"messages[{index}]", str(error)), param="messages") from None


def _texts(content: Any, index: int) -> str:
    if isinstance(content, list) and all(_is_text_block(block) for block in content):
        return "\n".join(block["text"] for block in content)
    raise RequestError(
        f"messages[{index}]: a system message holds text only (a string or text blocks)", param="messages"
    )


def _block(block: Any, index: int) -> dict[str, Any]:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise RequestError(f"messages[{index}]: each content block must be an object with a `type`", param="messages")
    return block


def _user_turn(blocks: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """Tool results first, as tool messages in order, then the other blocks as one user message."""
    results, parts = [], []
    for block in blocks:
        if block["type"] == "tool_result":
            results.append(_tool_message(block, index))
        elif block["type"] not in _DROPPED_BLOCKS:
            parts.append(_part(block, index, "a user message"))
    if results and not parts:
        return results
    return [*results, {"role": "user", "content": parts}]


def _assistant_turn(blocks: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    texts, calls = [], []
    for block in blocks:
        if block["type"] == "tool_use":
            calls.append(_tool_call(block, index))
        elif block["type"] == "text":
            texts.append(_part(block, index, "an assistant message")["text"])
        elif block["type"] not in _DROPPED_BLOCKS:
            raise _unsupported(block["type"], index, "an assistant message")
    # "" like the chat echo of a tool-call turn (null content), so the gateway recognises its own replies
    return [{"role": "assistant", "content": "".join(texts), "tool_calls": calls}]


def _part(block: dict[str, Any], index: int, where: str) -> dict[str, Any]:
    """A text or image block as an OpenAI content part; anything else is refused."""
    if block["type"] == "text":
        if not _is_text_block(block):
            raise RequestError(f"messages[{index}]: a text block needs a string `text`", param="messages")
        return {"type": "text", "text": block["text"]}
    if block["type"] == "image":
        return {"type": "image_url", "image_url": {"url": _image_url(block.get("source"))}}
    raise _unsupported(block["type"], index, where)


def _image_url(source: Any) -> str:
    # only for the part's shape: normalize_messages refuses every image on a text-only gateway
    source = source if isinstance(source, dict) else {}
    if source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    return str(source.get("url") or source.get("file_id") or "")


def _unsupported(kind: str, index: int, where: str) -> RequestError:
    if kind == "tool_use":
        fix = "tool_use blocks belong in assistant messages"
    elif kind == "tool_result":
        fix = "tool_result blocks belong in the user message after the assistant's tool_use"
    else:
        fix = "the gateway serves text-only models with client tools: send text, tool_use and tool_result blocks"
    return RequestError(
        f"messages[{index}]: content block of type {kind!r} is not supported in {where}; {fix}", param="messages"
    )


def _tool_call(block: dict[str, Any], index: int) -> dict[str, Any]:
    if not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)):
        raise RequestError(f"messages[{index}]: a tool_use block needs a string `id` and `name`", param="messages")
    if not isinstance(block.get("input"), dict):
        raise RequestError(f"messages[{index}]: a tool_use block's `input` must be an object", param="messages")
    return {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": block["input"]}}


def _tool_message(block: dict[str, Any], index: int) -> dict[str, Any]:
    """A tool_result as a tool message; an error result (`is_error`) keeps its text, which says what failed."""
    if not isinstance(block.get("tool_use_id"), str):
        raise RequestError(f"messages[{index}]: a tool_result block needs a string `tool_use_id`", param="messages")
    content = block.get("content")
    if isinstance(content, list):
        content = [_part(_block(part, index), index, "a tool_result") for part in content]
    elif content is not None and not isinstance(content, str):
        raise RequestError(
            f"messages[{index}]: a tool_result's `content` must be a string or a list of text blocks", param="messages"
        )
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": content or ""}


def _is_text_block(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    """Client tools as chat-completions function tools (what the renderers take)."""
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise RequestError('`tools` must be a list of {"name", "description", "input_schema"} tools', param="tools")
    return [_function_tool(tool, i) for i, tool in enumerate(tools)]


def _function_tool(tool: Any, i: int) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind not in _CLIENT_TOOL_TYPES:
        raise RequestError(
            f"tools[{i}] has type {kind!r}, a server tool: the gateway serves client tools (name + input_schema) "
            "only; define the tool with a name and input_schema and run it in the agent",
            param="tools",
        )
    description = tool.get("description") if isinstance(tool, dict) else None
    valid = isinstance(tool, dict) and isinstance(tool.get("name"), str) and isinstance(tool.get("input_schema"), dict)
    if not valid or not isinstance(description, (str, type(None))):
        raise RequestError(
            f'tools[{i}] must be {{"name": str, "description": str, "input_schema": {{...}}}}', param="tools"
        )
    function = {"name": tool["name"], "description": description, "parameters": tool["input_schema"]}
    return {"type": "function", "function": {key: value for key, value in function.items() if value is not None}}


def _check_tool_choice(choice: Any) -> None:
    """Checked so a typo is caught, not enforced: the model is sampled as the chat template prompts it."""
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in _TOOL_CHOICES or (kind == "tool" and not isinstance(choice.get("name"), str)):
        raise RequestError(
            '`tool_choice` must be {"type": "auto"}, {"type": "any"}, {"type": "none"} or '
            '{"type": "tool", "name": ...}',
            param="tool_choice",
        )


def _required_max_tokens(body: dict[str, Any]) -> int:
    value = _integer(body, "max_tokens", low=1)
    if value is None:
        raise RequestError(
            "`max_tokens` is required by the Messages API: send the most tokens to sample, an integer >= 1",
            param="max_tokens",
        )
    return value


def _stop_sequences(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise RequestError("`stop_sequences` must be a list of strings", param="stop_sequences")
    return [s for s in value if s]


# ---- responses ---------------------------------------------------------------------------------------------------


def message_body(reply: Reply, *, message_id: str, model: str) -> dict:
    """A `Message` object."""
    stop_reason = _stop_reason(reply)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _content_blocks(reply),
        "stop_reason": stop_reason,
        "stop_sequence": reply.stop_sequence if stop_reason == "stop_sequence" else None,
        "usage": _usage(reply.prompt_tokens, reply.completion_tokens),
    }


def message_events(reply: Reply, *, message_id: str, model: str) -> list[dict]:
    """The events of a streamed reply, in order; the server writes each as `event: <type>` + `data: <json>`."""
    body = message_body(reply, message_id=message_id, model=model)
    # Anthropic opens with the prompt's count and at most one output token; the final count comes in message_delta
    opening = _usage(reply.prompt_tokens, min(reply.completion_tokens, 1))
    start = {**body, "content": [], "stop_reason": None, "stop_sequence": None, "usage": opening}
    events: list[dict] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(body["content"]):
        events.extend(_block_events(index, block, reply.pieces))
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]}
    events.append({"type": "message_delta", "delta": delta, "usage": {"output_tokens": reply.completion_tokens}})
    events.append({"type": "message_stop"})
    return events


def _stop_reason(reply: Reply) -> str:
    if reply.tool_calls:
        return "tool_use"
    if reply.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if reply.stop_sequence else "end_turn"


def _content_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks = [{"citations": None, "text": reply.content, "type": "text"}] if reply.content else []
    return blocks + [_tool_use_block(call) for call in reply.tool_calls]


def _tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    arguments = ToolCall.decode_arguments(call["function"].get("arguments"))
    # `input` must be an object: arguments that are not one (malformed JSON, a list) are passed whole under
    # "arguments", so the agent sees what the model wrote rather than an empty call
    tool_input = arguments if isinstance(arguments, dict) else {"arguments": arguments}
    return {"id": call["id"], "input": tool_input, "name": call["function"]["name"], "type": "tool_use"}


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,  # no prompt caching is reported: every prompt token counts as input
        "cache_read_input_tokens": 0,
    }


def _block_events(index: int, block: dict[str, Any], pieces: list[str] | None) -> list[dict]:
    """content_block_start (the block empty), its deltas, content_block_stop."""
    if block["type"] == "text":
        opening = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": text} for text in _text_deltas(block["text"], pieces)]
    else:
        opening = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}]
    return [
        {"type": "content_block_start", "index": index, "content_block": opening},
        *({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def _text_deltas(text: str, pieces: list[str] | None) -> list[str]:
    """One delta per group of token pieces (so a multi-byte character is never split) when they add up to the text;
    else the text whole."""
    if pieces is None or "".join(pieces) != text:
        return [text]
    return [group for group, _ in _group_pieces(pieces, [])]


def anthropic_error_body(message: str, *, status: int) -> dict:
    """An Anthropic error object; `error.type` follows the status as Anthropic's API does."""
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
