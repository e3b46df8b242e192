"""The OpenAI Responses API wire format (`POST /v1/responses`), both ways: a request body in (parsed, checked, turned
into the gateway's `ChatRequest`) and a `Reply` out (a `response` object, or its streaming events). Pure functions,
no I/O: the server resolves `previous_response_id` and serves the chat request; tests check these without sockets.

Choices:

- Input items become the chat messages the chat-completions path would see: a `message` item is a chat message
  (`output_text` parts are text, `developer` becomes `system` via `normalize_messages`); `function_call` items are the
  `tool_calls` of an assistant message (call `id` = `call_id`), merged into the assistant message before them, so a
  sampled reply echoed back as a message item plus function_call items is again ONE assistant turn;
  `function_call_output` items are `tool` messages. Anything else the gateway cannot render is refused, naming the
  item type and what to send instead; errors point at `input[i]`, not at the chat message the item became.
- `reasoning` items are dropped: the session restores its own sampled text (thinking included) when a reply comes
  back, and a client's reasoning item carries nothing a chat template renders.
- `instructions` become a leading system message for this request only (OpenAI: instructions of earlier responses
  are not carried over); they are not part of `input_messages`, which is what the server keeps as the conversation.
- Images are turned into chat `image_url` parts so that `normalize_messages` refuses them with its text-only-model
  error; files are refused here. Only function tools are served: built-in tools (web search, file search, computer
  use, ...) are the agent's own job, declared as function tools.
- Accepted, not enforced (as chat completions does for `tool_choice`/`response_format`): `tool_choice`,
  `parallel_tool_calls`, `text.format` (json_schema/json_object), `truncation`, `reasoning`, `store`, `metadata`,
  `service_tier`, `user`, `prompt_cache_key`, `safety_identifier`, `max_tool_calls`, `include` entries other than
  "message.output_text.logprobs". `top_k`/`seed` are accepted as extensions (vLLM does too). Refused with 400:
  `background: true`, `conversation` (history lives in the session, through `previous_response_id`) and `prompt`.
- The response object is built field by field from what the SDK's `Response` model declares (the SDK has no
  `store` field, so it is not echoed); token ids and server-only fields cannot leak. Item ids derive from the
  response id (`msg_<id>`, `fc_<id>_<k>`) so they are reproducible. `finish_reason` "length" makes the response
  and its message item "incomplete" (reason "max_output_tokens").
- Logprobs (when `include` asks) are all the reply's entries, end-of-turn token included, on the message's
  `output_text` part; a reply with tool calls only has no text part to carry them. Streaming events carry them
  without `bytes`, which the SDK's event models do not declare.
- Streaming is emulated, as for chat completions: the reply is complete before the first event. Text goes out per
  group of token pieces (multi-byte characters never split) when the pieces add up to the content, else whole;
  function-call arguments go out whole in one delta.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rllm.gateway.openai_format import (
    _INT32_MAX,
    ChatRequest,
    Reply,
    RequestError,
    _flag,
    _group_pieces,
    _integer,
    _number,
    normalize_messages,
)

__all__ = [
    "ResponsesRequest",
    "parse_responses_request",
    "reply_message",
    "response_body",
    "response_events",
]

_INPUT_ROLES = ("user", "system", "developer", "assistant")
_TOOL_CHOICES = ("none", "auto", "required")
_TEXT_FORMATS = ("text", "json_schema", "json_object")
_TRUNCATIONS = ("auto", "disabled")
_LOGPROBS_INCLUDE = "message.output_text.logprobs"
_SERVED_ITEMS = "message, function_call and function_call_output items (reasoning items are accepted and dropped)"


@dataclass
class ResponsesRequest:
    """A parsed `POST /responses` body. `input_messages` are the `input` as chat messages (no instructions)."""

    input_messages: list[dict[str, Any]]
    raw_input: Any
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)  # Responses function tools, as echoed back
    chat_tools: list[dict[str, Any]] | None = None  # the same tools in chat-completions format
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    store: bool = True
    include_logprobs: bool = False
    model: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    top_logprobs: int | None = None
    stream: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    truncation: str = "disabled"

    def chat_request(self, history: list[dict[str, Any]]) -> ChatRequest:
        """The chat request to serve: this request's instructions, then `history` (the earlier responses of the
        `previous_response_id` chain, as chat messages), then this request's input."""
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        # the record keeps what the client sent; a string input is one raw message
        raw = self.raw_input if isinstance(self.raw_input, list) else [self.raw_input]
        return ChatRequest(
            messages=[*system, *history, *self.input_messages],
            raw_messages=raw,
            tools=self.chat_tools,
            model=self.model,
            max_tokens=self.max_output_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            logprobs=self.include_logprobs,
            stream=self.stream,
            include_usage=False,
        )


# ---- requests ----------------------------------------------------------------------------------------------------


def parse_responses_request(body: Any) -> ResponsesRequest:
    """Check and translate a Responses body; raises `RequestError` naming the field and what to change."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    _refuse_unservable(body)
    request = ResponsesRequest(input_messages=_input_messages(body.get("input")), raw_input=body.get("input"))
    request.instructions = _optional_string(body, "instructions")
    request.previous_response_id = _optional_string(body, "previous_response_id")
    request.model = _optional_string(body, "model")
    request.tools, request.chat_tools = _function_tools(body.get("tools"))
    request.tool_choice = _tool_choice(body.get("tool_choice"))
    request.parallel_tool_calls = _flag_or_true(body, "parallel_tool_calls")
    request.store = _flag_or_true(body, "store")
    request.include_logprobs = _wants_logprobs(body.get("include"))
    request.stream = _flag(body, "stream")
    _parse_sampling(body, request)
    _parse_accepted(body, request)
    return request


def _input_messages(raw: Any) -> list[dict[str, Any]]:
    """A Responses `input` (a string, or a list of items) as normalised chat messages (module docstring)."""
    if isinstance(raw, str) and raw:
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise RequestError("`input` must be a non-empty string or a non-empty list of input items", param="input")
    chat: list[tuple[int, dict[str, Any]]] = []  # (the input index an error should name, chat-format message)
    for index, item in enumerate(raw):
        _add_item(chat, item, index)
    if not chat:
        raise RequestError(f"`input` has nothing to render: send {_SERVED_ITEMS}", param="input")
    return [_normalized(message, index) for index, message in chat]


def _add_item(chat: list[tuple[int, dict[str, Any]]], item: Any, index: int) -> None:
    if not isinstance(item, dict):
        raise RequestError(f"input[{index}] must be an object (a message or an input item)", param="input")
    kind = item.get("type", "message" if "role" in item else None)  # "easy" messages may omit the type
    if kind == "message":
        chat.append((index, _message(item, index)))
    elif kind == "function_call":
        _add_function_call(chat, _function_call(item, index), index)
    elif kind == "function_call_output":
        chat.append((index, _function_call_output(item, index)))
    elif kind == "reasoning":
        return  # the session restores its own sampled text; nothing here is rendered
    elif kind == "item_reference":
        raise RequestError(
            f"input[{index}] is an item_reference: the gateway does not look items up by id; send the item itself, "
            "or continue a response of this session with `previous_response_id`",
            param="input",
        )
    else:
        what = f"has type {kind!r}, which the gateway does not serve" if kind else "has no `type` (nor a `role`)"
        raise RequestError(f"input[{index}] {what}; send {_SERVED_ITEMS}", param="input")


def _message(item: dict[str, Any], index: int) -> dict[str, Any]:
    role = item.get("role")
    if role not in _INPUT_ROLES:
        raise RequestError(
            f"input[{index}] has role {role!r}; use one of {list(_INPUT_ROLES)} (a tool's result is a "
            "function_call_output item)",
            param="input",
        )
    content = item.get("content")
    if isinstance(content, list):
        content = [_part(part, f"input[{index}].content[{k}]") for k, part in enumerate(content)]
    elif not isinstance(content, str):
        raise RequestError(f"input[{index}].content must be a string or a list of content parts", param="input")
    return {"role": role, "content": content}


def _part(part: Any, where: str) -> Any:
    """A Responses content part as the chat part `normalize_messages` reads (it refuses what is not text)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        return {"type": "image_url", "image_url": {"url": part.get("image_url")}}
    if kind == "input_file":
        raise RequestError(
            f"{where}: input_file parts are not supported; the gateway serves text-only models, put the file's text "
            "in an input_text part",
            param="input",
        )
    return part  # refusal parts are text to normalize_messages; anything else gets its text-only error


def _function_call(item: dict[str, Any], index: int) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not all(isinstance(value, str) for value in (call_id, name, arguments)):
        raise RequestError(
            f"input[{index}]: a function_call item needs string `call_id`, `name` and `arguments` (a JSON string)",
            param="input",
        )
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _add_function_call(chat: list[tuple[int, dict[str, Any]]], call: dict[str, Any], index: int) -> None:
    """A reply with text and calls comes back as a message item then function_call items: one assistant turn."""
    if chat and chat[-1][1]["role"] == "assistant":
        chat[-1][1].setdefault("tool_calls", []).append(call)
    else:
        chat.append((index, {"role": "assistant", "content": None, "tool_calls": [call]}))


def _function_call_output(item: dict[str, Any], index: int) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str):
        raise RequestError(f"input[{index}]: a function_call_output item needs a string `call_id`", param="input")
    if isinstance(output, list):
        output = [_part(part, f"input[{index}].output[{k}]") for k, part in enumerate(output)]
    elif not isinstance(output, str):
        raise RequestError(f"input[{index}].output must be a string or a list of input_text parts", param="input")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _normalized(message: dict[str, Any], index: int) -> dict[str, Any]:
    """`normalize_messages` of one message, its errors re-pointed at the input item the message came from."""
    try:
        return normalize_messages([message])[0]
    except RequestError as exc:
        raise RequestError(str(exc).replace("messages[0]", f"input[{index}]"), param="input") from None


def _function_tools(tools: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(the tools as echoed back, the same tools in chat-completions format, or None when there are none)."""
    if tools is None:
        return [], None
    if not isinstance(tools, list):
        raise RequestError(
            '`tools` must be a list of {"type": "function", "name": ..., "parameters": {...}}', param="tools"
        )
    echoed = [_function_tool(tool, i) for i, tool in enumerate(tools)]
    chat = [
        {
            "type": "function",
            "function": {k: tool[k] for k in ("name", "description", "parameters") if tool[k] is not None},
        }
        for tool in echoed
    ]
    return echoed, chat or None


def _function_tool(tool: Any, i: int) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise RequestError(
            f"tools[{i}] has type {kind!r}: the gateway serves function tools only; run built-in tools (web search, "
            "file search, computer use, ...) in the agent and declare them as function tools",
            param="tools",
        )
    if not isinstance(tool.get("name"), str):
        nested = " (Responses function tools are flat, not nested under `function` as in chat completions)"
        raise RequestError(f"tools[{i}] needs a string `name`{nested if 'function' in tool else ''}", param="tools")
    checks = {"description": str, "parameters": dict, "strict": bool}
    for key, kind in checks.items():
        if tool.get(key) is not None and not isinstance(tool[key], kind):
            raise RequestError(f"tools[{i}].{key} must be a {kind.__name__} or null", param="tools")
    return {"type": "function", "name": tool["name"], **{key: tool.get(key) for key in checks}}


def _tool_choice(value: Any) -> Any:
    if value is None:
        return "auto"
    if (isinstance(value, str) and value in _TOOL_CHOICES) or (
        isinstance(value, dict) and isinstance(value.get("type"), str)
    ):
        return value
    raise RequestError(
        '`tool_choice` must be "none", "auto", "required" or an object like {"type": "function", "name": ...}',
        param="tool_choice",
    )


def _wants_logprobs(include: Any) -> bool:
    if include is None:
        return False
    if not isinstance(include, list) or not all(isinstance(entry, str) for entry in include):
        raise RequestError(f'`include` must be a list of strings like ["{_LOGPROBS_INCLUDE}"]', param="include")
    return _LOGPROBS_INCLUDE in include


def _parse_sampling(body: dict[str, Any], request: ResponsesRequest) -> None:
    request.max_output_tokens = _integer(body, "max_output_tokens", low=1)
    request.temperature = _number(body, "temperature", low=0.0, high=2.0)
    request.top_p = _number(body, "top_p", low=0.0, high=1.0, open_low=True)
    request.top_k = _integer(body, "top_k", low=0, high=_INT32_MAX)
    request.seed = _integer(body, "seed", low=-(2**63), high=2**63 - 1)
    request.top_logprobs = _integer(body, "top_logprobs", low=0, high=20)


def _parse_accepted(body: dict[str, Any], request: ResponsesRequest) -> None:
    """Fields that are checked and echoed (or ignored) but change nothing the gateway samples."""
    request.metadata = _metadata(body.get("metadata"))
    request.text = _text_config(body.get("text"))
    truncation = body.get("truncation")
    if truncation is not None and truncation not in _TRUNCATIONS:
        raise RequestError(f'`truncation` must be "auto" or "disabled", got {truncation!r}', param="truncation")
    request.truncation = truncation or "disabled"
    for key in ("user", "prompt_cache_key", "safety_identifier", "service_tier"):
        _optional_string(body, key)
    for key in ("stream_options", "reasoning"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise RequestError(f"`{key}` must be an object or null", param=key)
    _integer(body, "max_tool_calls", low=0)


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise RequestError("`metadata` must be an object whose values are strings", param="metadata")
    return value


def _text_config(text: Any) -> dict[str, Any]:
    """The `text` config as echoed: its format (text, or a JSON format accepted and not enforced)."""
    if text is None:
        return {"format": {"type": "text"}}
    form = text.get("format") if isinstance(text, dict) else None
    form = {"type": "text"} if isinstance(text, dict) and form is None else form
    if not isinstance(form, dict) or form.get("type") not in _TEXT_FORMATS:
        raise RequestError(
            f'`text` must be an object like {{"format": {{"type": "text"}}}}; format types: {list(_TEXT_FORMATS)}',
            param="text",
        )
    return {"format": form}


def _refuse_unservable(body: dict[str, Any]) -> None:
    if _flag(body, "background"):
        raise RequestError(
            "`background: true` is not supported: the gateway answers each request while the client waits; "
            "drop `background` (or set it to false)",
            param="background",
        )
    if body.get("conversation") is not None:
        raise RequestError(
            "`conversation` is not supported: the gateway keeps history per session through "
            "`previous_response_id` (or send the whole conversation as `input`)",
            param="conversation",
        )
    if body.get("prompt") is not None:
        raise RequestError(
            "`prompt` (a stored prompt template) is not supported: send `instructions` and `input` instead",
            param="prompt",
        )


def _flag_or_true(body: dict[str, Any], key: str) -> bool:
    """A flag whose OpenAI default (absent or null) is true."""
    return body.get(key) is None or _flag(body, key)


def _optional_string(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise RequestError(f"`{key}` must be a string or null, got {type(value).__name__}", param=key)
    return value


# ---- replies -----------------------------------------------------------------------------------------------------


def reply_message(reply: Reply) -> dict[str, Any]:
    """The assistant turn of `reply` as a normalised chat message: what a client echoing the response's output
    items back would give (see `_input_messages`), so a stored history and an echoed one render alike."""
    return normalize_messages([{"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls}])[0]


def response_body(reply: Reply, request: ResponsesRequest, *, response_id: str, created_at: int, model: str) -> dict:
    """A complete `response` object."""
    status = "incomplete" if reply.finish_reason == "length" else "completed"
    body = _response_head(request, response_id=response_id, created_at=created_at, model=model, status=status)
    body["completed_at"] = created_at if status == "completed" else None
    body["incomplete_details"] = {"reason": "max_output_tokens"} if status == "incomplete" else None
    body["output"] = _output_items(reply, request, response_id, status)
    body["usage"] = _usage(reply)
    return body


def response_events(
    reply: Reply, request: ResponsesRequest, *, response_id: str, created_at: int, model: str
) -> list[dict]:
    """The streaming events of a reply, in order, numbered from 0; the last one carries `response_body`'s object."""
    final = response_body(reply, request, response_id=response_id, created_at=created_at, model=model)
    started = _response_head(request, response_id=response_id, created_at=created_at, model=model, status="in_progress")
    events = [{"type": "response.created", "response": started}, {"type": "response.in_progress", "response": started}]
    for output_index, item in enumerate(final["output"]):
        if item["type"] == "message":
            events += _message_events(item, output_index, reply)
        else:
            events += _function_call_events(item, output_index)
    events.append({"type": f"response.{final['status']}", "response": final})  # response.completed / .incomplete
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def _response_head(request: ResponsesRequest, *, response_id: str, created_at: int, model: str, status: str) -> dict:
    """The response object before any output: the request's settings echoed, in OpenAI's field order."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": model,
        "output": [],
        "parallel_tool_calls": request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "temperature": request.temperature,
        "text": request.text,
        "tool_choice": request.tool_choice,
        "tools": request.tools,
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "truncation": request.truncation,
        "usage": None,
        "metadata": request.metadata,
    }


def _output_items(reply: Reply, request: ResponsesRequest, response_id: str, status: str) -> list[dict]:
    """A message item when there is text (or nothing at all), then one function_call item per call."""
    suffix = response_id.removeprefix("resp_")
    items = []
    if reply.content or not reply.tool_calls:
        entries = (reply.token_entries or []) if request.include_logprobs else []
        part = {"type": "output_text", "text": reply.content or "", "annotations": [], "logprobs": entries}
        items.append(
            {"id": f"msg_{suffix}", "type": "message", "status": status, "role": "assistant", "content": [part]}
        )
    for k, call in enumerate(reply.tool_calls):
        function = call["function"]
        items.append(
            {
                "id": f"fc_{suffix}_{k}",
                "type": "function_call",
                "status": "completed",
                "call_id": call["id"],
                "name": function["name"],
                "arguments": function["arguments"],
            }
        )
    return items


def _usage(reply: Reply) -> dict[str, Any]:
    return {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": reply.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _message_events(item: dict, output_index: int, reply: Reply) -> list[dict]:
    where = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
    part = item["content"][0]
    events: list[dict] = [
        {
            "type": "response.output_item.added",
            "output_index": output_index,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **where, "part": {**part, "text": "", "logprobs": []}},
    ]
    for delta, entries in _text_deltas(reply, part["logprobs"]):
        events.append(
            {"type": "response.output_text.delta", **where, "delta": delta, "logprobs": _event_logprobs(entries)}
        )
    events += [
        {
            "type": "response.output_text.done",
            **where,
            "text": part["text"],
            "logprobs": _event_logprobs(part["logprobs"]),
        },
        {"type": "response.content_part.done", **where, "part": part},
        {"type": "response.output_item.done", "output_index": output_index, "item": item},
    ]
    return events


def _text_deltas(reply: Reply, entries: list[dict]) -> list[tuple[str, list[dict]]]:
    """(text, its logprob entries) per delta: token pieces grouped so each adds text, else the content whole."""
    if reply.pieces is not None and reply.content:
        return _group_pieces(reply.pieces, entries)
    return [(reply.content, entries)] if reply.content else []


def _event_logprobs(entries: list[dict]) -> list[dict]:
    """Logprob entries as the text events declare them: no `bytes`, alternatives as (token, logprob)."""
    return [
        {
            "token": entry["token"],
            "logprob": entry["logprob"],
            "top_logprobs": [{"token": top["token"], "logprob": top["logprob"]} for top in entry["top_logprobs"]],
        }
        for entry in entries
    ]


def _function_call_events(item: dict, output_index: int) -> list[dict]:
    where = {"item_id": item["id"], "output_index": output_index}
    return [
        {
            "type": "response.output_item.added",
            "output_index": output_index,
            "item": {**item, "status": "in_progress", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]},
        {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]},
        {"type": "response.output_item.done", "output_index": output_index, "item": item},
    ]
