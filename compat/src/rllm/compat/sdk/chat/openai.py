"""rLLM v0.2's tracked OpenAI clients (`get_chat_client`, `get_chat_client_async`) over rllm's gateway.

A `TrackedChatClient` is an `openai.OpenAI` (all its APIs work) whose chat-completions calls made inside a
`session()` are recorded in that session and every session around it, as rLLM's `Trace`s. Where the calls go:

- `base_url` is a gateway session URL (`.../sessions/<id>/v1`, e.g. the `base_url` a `@rllm.rollout` function is
  given): the calls go there as they are.
- `base_url` is a gateway's URL + `/v1` (e.g. `http://127.0.0.1:8090/v1` for `rllm serve gateway --port 8090`), with
  `use_proxy=True` (rLLM's default): inside a session, each call goes to the gateway session of the innermost SDK
  session (`<gateway URL>/sessions/<session _uid>/v1`), so one SDK session is one gateway conversation, whose turns
  the gateway keeps token-exact. This is where rLLM routes to its LiteLLM proxy with the session's metadata in the
  URL. Outside a session the call goes to `base_url` unchanged (a gateway answers 404 naming the session URLs).
- `use_proxy=False`, or any other server: the call goes to `base_url`; it is recorded without token ids.

After a call through a gateway session the client reads that session's record (`GET .../sessions/<id>/calls`): the
trace gets the exact prompt ids, completion ids and logprobs the model saw and sampled. Streaming calls are recorded
when the stream ends.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from openai import AsyncOpenAI, OpenAI

from rllm.compat.sdk.protocol import LLMInput, LLMOutput, Trace
from rllm.compat.sdk.session import get_current_metadata, get_current_session_name
from rllm.compat.sdk.session.contextvar import ContextVarSession, get_active_cv_sessions

__all__ = [
    "AsyncOpenTelemetryTrackedChatClient",
    "AsyncProxyTrackedChatClient",
    "AsyncTrackedChatClient",
    "OpenTelemetryTrackedAsyncChatClient",
    "OpenTelemetryTrackedChatClient",
    "ProxyTrackedAsyncChatClient",
    "ProxyTrackedChatClient",
    "TrackedAsyncChatClient",
    "TrackedChatClient",
]

_SESSION_URL = re.compile(r"^(?P<root>.*/sessions/[^/]+)/v1/?$")


class _Call:
    """One chat-completions call in flight: where it goes, what was asked, and the sessions it belongs to."""

    def __init__(self, client: Any, options: Any) -> None:
        body = options.json_data if isinstance(options.json_data, dict) else {}
        self.model, self.messages, self.tools = body.get("model"), body.get("messages") or [], body.get("tools")
        self.sessions = get_active_cv_sessions()
        self.session_name = get_current_session_name()
        self.metadata = {**get_current_metadata(), **client._trace_metadata}
        self.started = time.perf_counter()
        self.url, self.calls_url = _route(str(client.base_url), client._use_proxy, self.sessions)

    def trace(self, response: dict, record: dict | None) -> Trace:
        choice = (response.get("choices") or [{}])[0]
        usage = response.get("usage") or {}
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        record = record or {}
        metadata = dict(self.metadata)
        if record.get("completion_ids") is not None:
            metadata["token_ids"] = {"prompt": record.get("prompt_ids") or [], "completion": record["completion_ids"]}
        return Trace(
            trace_id=response.get("id") or f"tr_{uuid.uuid4().hex[:16]}",
            session_name=self.session_name or "",
            name="chat.completions.create",
            input=LLMInput(messages=list(self.messages), prompt_token_ids=record.get("prompt_ids") or []),
            output=LLMOutput(
                message=choice.get("message") or {},
                finish_reason=choice.get("finish_reason"),
                output_token_ids=record.get("completion_ids") or [],
                rollout_logprobs=record.get("logprobs"),
            ),
            model=self.model or response.get("model") or "unknown",
            latency_ms=(time.perf_counter() - self.started) * 1000,
            tokens={
                "prompt": prompt,
                "completion": completion,
                "total": int(usage.get("total_tokens") or prompt + completion),
            },
            metadata=metadata,
            timestamp=time.time(),
            tools=self.tools,
        )

    def store(self, trace: Trace) -> None:
        for session in self.sessions:
            session.storage.add_trace(session._session_uid_chain, session.name, trace)

    def matching_record(self, calls: Any, response: dict) -> dict | None:
        """The gateway's record of this call: the latest one with the same messages and returned content."""
        if not isinstance(calls, dict):
            return None
        content = ((response.get("choices") or [{}])[0].get("message") or {}).get("content")
        sent = json.loads(json.dumps(self.messages, default=str))
        for record in reversed(calls.get("calls") or []):
            if record.get("messages") == sent and record.get("content") == content:
                return record
        return None


def _route(base_url: str, use_proxy: bool, sessions: list[ContextVarSession]) -> tuple[str | None, str | None]:
    """(the session URL to send to, or None for base_url as it is; the URL of the session's recorded calls)."""
    base = base_url.rstrip("/")
    found = _SESSION_URL.match(base)
    if found:
        return None, f"{found['root']}/calls"
    if use_proxy and sessions and base.endswith("/v1"):
        root = f"{base[: -len('/v1')]}/sessions/{sessions[-1]._uid}"
        return f"{root}/v1", f"{root}/calls"
    return None, None


def _is_chat_completions(url: str) -> bool:
    return url.rstrip("/").endswith("/chat/completions")


def _as_dict(response: Any) -> dict:
    if hasattr(response, "model_dump"):
        return response.model_dump()
    if hasattr(response, "parse"):  # with_raw_response
        parsed = response.parse()
        return parsed.model_dump() if hasattr(parsed, "model_dump") else {}
    return {}


def _redirect(options: Any, url: str | None) -> Any:
    if url is None:
        return options
    options = options.model_copy()
    options.url = url + "/" + options.url.lstrip("/")
    return options


class TrackedChatClient(OpenAI):
    """`openai.OpenAI` that records chat completions in the active sessions (module docstring). `tracer` is accepted
    as in rLLM; calls are always recorded in the sessions themselves."""

    def __init__(
        self,
        *,
        use_proxy: bool = True,
        enable_local_tracing: bool = True,
        tracer: Any = None,
        trace_metadata: dict | None = None,
        **kwargs: Any,
    ) -> None:
        self._use_proxy, self._enable_local_tracing = use_proxy, enable_local_tracing
        self._tracer, self._trace_metadata = tracer, dict(trace_metadata or {})
        super().__init__(**kwargs)

    def request(self, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None) -> Any:
        call = _Call(self, options)
        response = super().request(cast_to, _redirect(options, call.url), stream=stream, stream_cls=stream_cls)
        if not (self._enable_local_tracing and _is_chat_completions(options.url)):
            return response
        if stream:
            return _RecordedStream(response, lambda payload: self._record(call, payload))
        self._record(call, _as_dict(response))
        return response

    @property
    def with_raw_response(self) -> Any:
        """OpenAI's, plus `create` (LangChain's `ChatOpenAI(client=...)` calls `client.with_raw_response.create`)."""
        return _RawResponses(self, super().with_raw_response)

    def _record(self, call: _Call, payload: dict) -> None:
        if not call.sessions:
            return
        calls = None
        if call.calls_url is not None:
            try:
                calls = self._client.get(call.calls_url).json()
            except Exception:  # not a gateway after all: the trace has no token ids
                calls = None
        call.store(call.trace(payload, call.matching_record(calls, payload)))


class AsyncTrackedChatClient(AsyncOpenAI):
    """`openai.AsyncOpenAI` that records chat completions in the active sessions (module docstring)."""

    def __init__(
        self,
        *,
        use_proxy: bool = True,
        enable_local_tracing: bool = True,
        tracer: Any = None,
        trace_metadata: dict | None = None,
        **kwargs: Any,
    ) -> None:
        self._use_proxy, self._enable_local_tracing = use_proxy, enable_local_tracing
        self._tracer, self._trace_metadata = tracer, dict(trace_metadata or {})
        super().__init__(**kwargs)

    async def request(self, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None) -> Any:
        call = _Call(self, options)
        response = await super().request(cast_to, _redirect(options, call.url), stream=stream, stream_cls=stream_cls)
        if not (self._enable_local_tracing and _is_chat_completions(options.url)):
            return response
        if stream:
            return _AsyncRecordedStream(response, lambda payload: self._record(call, payload))
        await self._record(call, _as_dict(response))
        return response

    @property
    def with_raw_response(self) -> Any:
        """OpenAI's, plus `create` (LangChain's `ChatOpenAI(async_client=...)` calls it)."""
        return _RawResponses(self, super().with_raw_response)

    async def _record(self, call: _Call, payload: dict) -> None:
        if not call.sessions:
            return
        calls = None
        if call.calls_url is not None:
            try:
                calls = (await self._client.get(call.calls_url)).json()
            except Exception:  # not a gateway after all: the trace has no token ids
                calls = None
        call.store(call.trace(payload, call.matching_record(calls, payload)))


class _RawResponses:
    """`client.with_raw_response` with a `create` that is `client.chat.completions.with_raw_response.create`."""

    def __init__(self, client: Any, raw: Any) -> None:
        self._client, self._raw = client, raw

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self._client.chat.completions.with_raw_response.create(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _Chunks:
    """The reply a stream's chunks add up to, as a chat-completion dict."""

    def __init__(self) -> None:
        self.id, self.model, self.content, self.finish, self.usage = None, None, [], None, None
        self.tool_calls: dict[int, dict] = {}

    def add(self, chunk: Any) -> None:
        data = chunk.model_dump() if hasattr(chunk, "model_dump") else dict(chunk)
        self.id, self.model = self.id or data.get("id"), self.model or data.get("model")
        self.usage = data.get("usage") or self.usage
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            self.content.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                slot = self.tool_calls.setdefault(
                    call.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = slot["id"] or call.get("id")
                function = call.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""
            self.finish = choice.get("finish_reason") or self.finish

    def payload(self) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return {
            "id": self.id,
            "model": self.model,
            "usage": self.usage,
            "choices": [{"message": message, "finish_reason": self.finish}],
        }


class _RecordedStream:
    """An `openai.Stream` that records the call when it is exhausted."""

    def __init__(self, stream: Any, record: Any) -> None:
        self._stream, self._record, self._chunks, self._done = stream, record, _Chunks(), False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._stream)
        except StopIteration:
            self._finish()
            raise
        self._chunks.add(chunk)
        return chunk

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._record(self._chunks.payload())

    def __enter__(self) -> _RecordedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _AsyncRecordedStream:
    """An `openai.AsyncStream` that records the call when it is exhausted."""

    def __init__(self, stream: Any, record: Any) -> None:
        self._stream, self._record, self._chunks, self._done = stream, record, _Chunks(), False

    def __aiter__(self) -> _AsyncRecordedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._stream.__anext__()
        except StopAsyncIteration:
            if not self._done:
                self._done = True
                await self._record(self._chunks.payload())
            raise
        self._chunks.add(chunk)
        return chunk

    async def __aenter__(self) -> _AsyncRecordedStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def ProxyTrackedChatClient(
    *,
    base_url: str | None = None,
    use_proxy: bool = True,
    enable_local_tracing: bool = True,
    tracer: Any = None,
    metadata: dict | None = None,
    **kwargs: Any,
) -> TrackedChatClient:
    return TrackedChatClient(
        base_url=base_url,
        use_proxy=use_proxy,
        enable_local_tracing=enable_local_tracing,
        tracer=tracer,
        trace_metadata=metadata,
        **kwargs,
    )


def AsyncProxyTrackedChatClient(
    *,
    base_url: str | None = None,
    use_proxy: bool = True,
    enable_local_tracing: bool = True,
    tracer: Any = None,
    metadata: dict | None = None,
    **kwargs: Any,
) -> AsyncTrackedChatClient:
    return AsyncTrackedChatClient(
        base_url=base_url,
        use_proxy=use_proxy,
        enable_local_tracing=enable_local_tracing,
        tracer=tracer,
        trace_metadata=metadata,
        **kwargs,
    )


def OpenTelemetryTrackedChatClient(**kwargs: Any) -> TrackedChatClient:
    """rLLM's client for its OpenTelemetry backend: not here (rllm.sdk.session.opentelemetry says what to use)."""
    from rllm.compat.sdk.session.opentelemetry import otel_session

    return otel_session(**kwargs)


AsyncOpenTelemetryTrackedChatClient = OpenTelemetryTrackedChatClient
TrackedAsyncChatClient = AsyncTrackedChatClient
ProxyTrackedAsyncChatClient = AsyncProxyTrackedChatClient
OpenTelemetryTrackedAsyncChatClient = AsyncOpenTelemetryTrackedChatClient
