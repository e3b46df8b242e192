"""The OpenAI chat-completions wire format, both ways: requests in (parsed, checked, normalised) and responses out
(`chat.completion`, `chat.completion.chunk`, error objects). Pure functions, no I/O: the server and the session use
them, and tests check them without sockets.

Choices:

- Messages are normalised to what a chat template renders: `role`, `content`, `tool_calls`, `tool_call_id`,
  `name`. What the `openai` SDK sends back when an agent appends `response.choices[0].message` (`refusal`,
  `annotations`, `audio`, `function_call: null`, ...) is dropped; a list of text parts becomes one string (joined by
  "\\n", as vLLM does); `developer` becomes `system` (templates do not know it); tool-call `arguments` given as a
  JSON string become the dict HF templates expect. Non-text parts (images, audio) are refused with a clear error.
- Only one choice per request: `n > 1` is refused (each training sample is its own rollout). `top_logprobs` is
  accepted but alternatives are not returned (`top_logprobs: []`); `tool_choice`, `response_format`,
  `parallel_tool_calls`, `user`, `metadata`, `store` are accepted and not enforced.
- The response is built field by field, so server-only fields (token ids, prompt logprobs, reasoning, stop reasons)
  can never leak: the official SDK and a strict schema check both accept it. `finish_reason` is one of OpenAI's
  words ("stop", "length", "tool_calls"). Stop strings are cut from `content` (OpenAI's behaviour), though the
  sampled text and ids keep them.
- Logprobs, when asked, have one entry per sampled token, the end-of-turn token included (so a client can line them
  up with token counts); a token's `token` is its piece of the incrementally decoded text, or its own decoding when
  the piece is empty (an end-of-turn token, half a UTF-8 character). -inf becomes -9999.0, as OpenAI writes it.
- Streaming is emulated: the reply is complete before the first chunk. Content goes out one token piece per chunk
  (incremental decoding, so multi-byte characters are never split) when the pieces add up to the content, else as
  one chunk; tool calls go out one chunk per call, arguments whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import RllmError
from rllm.images import VLM_NEEDED
from rllm.models.base import SamplingParams
from rllm.types import ToolCall

__all__ = [
    "ChatRequest",
    "Reply",
    "RequestError",
    "completion_body",
    "error_body",
    "logprob_entries",
    "normalize_messages",
    "parse_request",
    "sampling_overrides",
    "stream_chunks",
    "token_pieces",
]

_ROLES = {"system", "user", "assistant", "tool"}
_FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter"}
_MIN_LOGPROB = -9999.0
_INT32_MAX = 2**31 - 1  # max_tokens, top_k, n: what a model server's int fields hold


class RequestError(RllmError):
    """A request the gateway cannot serve as sent: answered with an OpenAI error object and `status`."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


@dataclass
class ChatRequest:
    """A parsed `POST /chat/completions` body. `raw_messages` are the messages as received."""

    messages: list[dict[str, Any]]
    raw_messages: list[Any]
    tools: list[dict[str, Any]] | None = None
    model: str | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    unsupported_sampling: list[str] = field(default_factory=list)  # non-default penalties etc., never applied
    logprobs: bool = False
    stream: bool = False
    include_usage: bool = False


@dataclass
class Reply:
    """What the gateway answers for one call, independent of streaming."""

    content: str | None
    tool_calls: list[dict[str, Any]]  # OpenAI format: {"id", "type": "function", "function": {"name", "arguments"}}
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    token_entries: list[dict[str, Any]] | None = None  # OpenAI logprob entries, one per completion token
    pieces: list[str] | None = None  # content split per token (for streaming), when they add up to `content`
    stop_sequence: str | None = None  # the request's stop string the content was cut at, if any


# ---- requests ----------------------------------------------------------------------------------------------------


def parse_request(body: Any) -> ChatRequest:
    """Check and normalise a chat-completions body; raises `RequestError` naming what to change."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if body.get("functions") is not None or body.get("function_call") is not None:
        raise RequestError(
            "`functions`/`function_call` are deprecated and not supported; send `tools`", param="functions"
        )
    n = _integer(body, "n", low=1)
    if n not in (None, 1):
        raise RequestError(
            f"n={n!r}: the gateway samples one completion per request (each training sample is its own rollout); "
            "send n separate requests, or raise rollout.n to get more samples per task",
            param="n",
        )
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("`messages` must be a non-empty list of chat messages", param="messages")
    request = ChatRequest(messages=normalize_messages(raw), raw_messages=raw, tools=_tools(body.get("tools")))
    request.model = body.get("model")
    request.max_tokens = _max_tokens(body)
    request.stop = _stop(body.get("stop"))
    request.temperature = _number(body, "temperature", low=0.0, high=2.0)
    request.top_p = _number(body, "top_p", low=0.0, high=1.0, open_low=True)
    request.top_k = _integer(body, "top_k", low=0, high=_INT32_MAX)
    request.seed = _integer(body, "seed", low=-(2**63), high=2**63 - 1)
    for key in ("frequency_penalty", "presence_penalty"):  # never applied, but checked like the others
        _number(body, key, low=-2.0, high=2.0)
    _integer(body, "top_logprobs", low=0, high=20)
    request.unsupported_sampling = [
        key for key in ("frequency_penalty", "presence_penalty", "logit_bias") if body.get(key)
    ]
    request.logprobs = _flag(body, "logprobs")
    request.stream = _flag(body, "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError('`stream_options` must be an object like {"include_usage": true}', param="stream_options")
    request.include_usage = request.stream and _flag(options, "include_usage", where="stream_options.")
    return request


def normalize_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Messages reduced to what a chat template renders (see the module docstring)."""
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(f"messages[{index}] must be an object with a string `role`", param="messages")
        role = "system" if message["role"] == "developer" else message["role"]
        if role not in _ROLES:
            raise RequestError(
                f"messages[{index}] has role {role!r}; use one of {sorted(_ROLES)} (or developer)", param="messages"
            )
        content = _content(message.get("content"), index)
        if content is None and role != "assistant":
            raise RequestError(
                f"messages[{index}].content is null: only an assistant message (a tool-call turn) may have no "
                "content; send a string",
                param="messages",
            )
        # null content (the SDK's tool-call turn) is "no text": rendered as "" (templates concatenate content)
        clean: dict[str, Any] = {"role": role, "content": content or ""}
        if role == "assistant" and message.get("tool_calls"):
            if not isinstance(message["tool_calls"], list):
                raise RequestError(f"messages[{index}].tool_calls must be a list of tool calls", param="messages")
            clean["tool_calls"] = [_message_tool_call(call, index) for call in message["tool_calls"]]
        for key in ("tool_call_id", "name"):
            if message.get(key) is not None:
                clean[key] = str(message[key])
        out.append(clean)
    return out


def sampling_overrides(request: ChatRequest, base: SamplingParams, honor: bool) -> tuple[dict[str, Any], list[str]]:
    """(the SamplingParams fields this call overrides, the names of request fields ignored).

    `max_tokens` and `stop` always apply (the agent's own limits; stop strings add to the base's). With `honor`,
    temperature/top_p/top_k/seed apply too; without (training), they are ignored and reported when they differ from
    `base`, since the trainer's on-policy loss assumes its own sampling. Penalties and logit bias are never applied
    and always reported."""
    overrides: dict[str, Any] = {}
    if request.max_tokens is not None:
        overrides["max_tokens"] = request.max_tokens if honor else min(request.max_tokens, base.max_tokens)
    if request.stop:
        overrides["stop"] = list(dict.fromkeys([*base.stop, *request.stop]))  # the agent's, added to the base's
    ignored = list(request.unsupported_sampling)
    for key in ("temperature", "top_p", "top_k", "seed"):
        value = getattr(request, key)
        if value is None:
            continue
        if honor:
            overrides[key] = value
        elif value != getattr(base, key):
            ignored.append(key)
    return overrides, ignored


def _content(content: Any, index: int) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text", None) and "text" in part:
                texts.append(str(part["text"]))
            elif isinstance(part, dict) and part.get("type") == "refusal":
                texts.append(str(part.get("refusal", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                hint = f": {VLM_NEEDED}" if kind in ("image_url", "image", "input_image") else ""
                raise RequestError(
                    f"messages[{index}]: content part of type {kind!r} is not supported; the gateway "
                    f"serves text-only models, send text parts{hint}",
                    param="messages",
                )
        return "\n".join(texts)
    raise RequestError(f"messages[{index}].content must be a string, a list of text parts or null", param="messages")


def _message_tool_call(call: Any, index: int) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(
            f"messages[{index}].tool_calls: each call needs function.name and function.arguments", param="messages"
        )
    arguments = ToolCall.decode_arguments(function.get("arguments"))  # a malformed string is kept as written
    clean = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if call.get("id") is not None:
        clean = {"id": str(call["id"]), **clean}
    return clean


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise RequestError('`tools` must be a list of {"type": "function", "function": {...}}', param="tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(
                f'tools[{i}] must be {{"type": "function", "function": {{"name": ..., "parameters": {{...}}}}}}}}',
                param="tools",
            )
    return tools


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = _integer(body, key, low=1)
        if value is not None:
            return value
    return None


def _stop(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise RequestError("`stop` must be a string or a list of strings", param="stop")


def _number(body: dict, key: str, *, low: float, high: float, open_low: bool = False) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"`{key}` must be a number, got {value!r}", param=key)
    if not math.isfinite(value):  # NaN passes every comparison below: refuse it first
        raise RequestError(f"`{key}`={value} is not a finite number", param=key)
    if value < low or value > high or (open_low and value == low):
        bounds = f"({low}, {high}]" if open_low else f"[{low}, {high}]"
        raise RequestError(f"`{key}`={value} is out of range {bounds}", param=key)
    return float(value)


def _integer(body: dict, key: str, *, low: int, high: int = _INT32_MAX) -> int | None:
    """An integer field in [low, high]: JSON integers are unbounded, the model's counts and seeds are not."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise RequestError(f"`{key}` must be an integer in [{low}, {high}], got {shown}", param=key)
    return value


def _flag(body: dict, key: str, *, where: str = "") -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"`{where}{key}` must be true or false, got {value!r}", param=f"{where}{key}")
    return bool(value)


# ---- tokens ------------------------------------------------------------------------------------------------------


def token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text each token adds to the decoded completion (special tokens add ""), by incremental decoding: a
    token is decoded together with the ones before it (a window, so the cost stays linear) and only the new text is
    its piece. A token that ends half a UTF-8 character adds "" and the next one adds the whole character."""
    pieces: list[str] = []
    prefix, read = 0, 0  # decode window: ids[prefix:read] is already emitted
    for i in range(len(ids)):
        before = tokenizer.decode(ids[prefix:read], skip_special_tokens=True)
        after = tokenizer.decode(ids[prefix : i + 1], skip_special_tokens=True)
        if after.endswith("\ufffd") or len(after) < len(before) or not after.startswith(before):
            pieces.append("")  # incomplete: wait for more tokens
            continue
        pieces.append(after[len(before) :])
        prefix, read = read, i + 1
    return pieces


def logprob_entries(tokenizer: Any, ids: list[int], logprobs: list[float], pieces: list[str]) -> list[dict]:
    """OpenAI `logprobs.content` entries, one per sampled token (see the module docstring)."""
    entries = []
    for token_id, value, piece in zip(ids, logprobs, pieces, strict=True):
        token = piece or tokenizer.decode([token_id], skip_special_tokens=False)
        logprob = float(value) if math.isfinite(value) else _MIN_LOGPROB
        entries.append(
            {"token": token, "logprob": max(logprob, _MIN_LOGPROB), "bytes": list(token.encode()), "top_logprobs": []}
        )
    return entries


# ---- responses ---------------------------------------------------------------------------------------------------


def finish_reason(reason: str | None, has_tool_calls: bool) -> str:
    if has_tool_calls:
        return "tool_calls"
    return reason if reason in _FINISH_REASONS else "stop"


def completion_body(reply: Reply, *, completion_id: str, created: int, model: str, logprobs: bool) -> dict:
    """A `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    choice = {
        "index": 0,
        "message": message,
        "logprobs": _logprobs(reply.token_entries, logprobs),
        "finish_reason": reply.finish_reason,
    }
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": _usage(reply),
    }


def stream_chunks(
    reply: Reply, *, completion_id: str, created: int, model: str, logprobs: bool, include_usage: bool
) -> list[dict]:
    """The `chat.completion.chunk` objects of a streamed reply, in order (without the final `[DONE]`)."""
    head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict, entries: list[dict] | None = None, finish: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": _logprobs(entries, logprobs), "finish_reason": finish}
        return {**head, "choices": [choice]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    entries = reply.token_entries or []
    if reply.pieces is not None and reply.content:
        for text, group in _group_pieces(reply.pieces, entries):
            chunks.append(chunk({"content": text}, group))
        entries = []
    elif reply.content:
        chunks.append(chunk({"content": reply.content}, entries or None))
        entries = []
    for index, call in enumerate(reply.tool_calls):
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}, entries or None))
        entries = []
    chunks.append(chunk({}, entries or None, reply.finish_reason))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(reply)})
    return chunks


def _group_pieces(pieces: list[str], entries: list[dict]) -> list[tuple[str, list[dict]]]:
    """Consecutive tokens grouped so every group adds text; tokens that add none ride with their neighbours."""
    groups: list[tuple[str, list[dict]]] = []
    text, group = "", []
    for i, piece in enumerate(pieces):
        text += piece
        if i < len(entries):
            group.append(entries[i])
        if text:
            groups.append((text, group))
            text, group = "", []
    if group and groups:
        groups[-1][1].extend(group)
    return groups


def _logprobs(entries: list[dict] | None, asked: bool) -> dict | None:
    return {"content": entries} if asked and entries is not None else None


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def error_body(message: str, *, status: int, param: str | None = None, code: str | None = None) -> dict:
    """An OpenAI error object; `type` follows the status as OpenAI's API does."""
    named = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
    kind = named.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
