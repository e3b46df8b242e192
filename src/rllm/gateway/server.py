"""`Gateway`: an OpenAI-compatible HTTP server in front of rllm's model clients, so agent code that only knows
`openai.OpenAI(base_url=...)` can be rolled out and trained token-exactly.

    gateway = await Gateway(model).start()                    # standalone: sessions open on first use
    client = openai.OpenAI(base_url=gateway.session_url("ep-1"), api_key="none")
    ...
    await gateway.stop()

Routes (every rollout gets its own session URL `http://host:port/sessions/{sid}/v1`):

    POST   /sessions/{sid}/v1/chat/completions   OpenAI chat completions (stream or not)
    POST   /sessions/{sid}/v1/responses          the OpenAI Responses API (`rllm.gateway.responses_format`)
    POST   /sessions/{sid}/v1/messages           the Anthropic Messages API (`rllm.gateway.anthropic_format`); also
                                                 at /v1/v1/messages, where the `anthropic` SDK lands when given the
                                                 OpenAI-style session URL (it appends /v1/messages itself)
    GET    /sessions/{sid}/v1/models             the served model's name
    GET    /sessions/{sid}/calls                 the recorded calls as JSON (ids, logprobs, text, ...)
    DELETE /sessions/{sid}                       forget a session
    GET    /health

Two kinds of sessions, the same serving path (`rllm.gateway.session`):

- Standalone (a `model` given, `auto_sessions`): a session is created on first use, with its own conversation over
  the gateway's model. It renders, budgets and seeds exactly as a workflow's `generate` does, because it IS a
  workflow's `generate` (a bare `Workflow` per session, uid "gateway"). Request temperature/top_p/seed are honoured
  by default; a request seed is combined with the call's position in the session, as workflows derive seeds.
- Supplied (`open_session(handler)`): the rollout workflow (`rllm.gateway.rollout`) hands its own `generate`,
  so gateway calls are part of the episode like native ones. Unknown sessions are 404 then.

All three flavours go through the same `GatewaySession.complete` (one chat rendering, one token record): a turn's
prompt extends the previous turn's tokens whichever API each turn used. The Responses API's `previous_response_id`
is resolved within the session (each response keeps its conversation as chat messages, for the session's life).

Failures become error objects in the flavour's own shape (OpenAI's, or Anthropic's on /messages): a spent length
budget is a 400 worded as the APIs word it ("This model's maximum context length is ...", code
`context_length_exceeded`; Anthropic's "prompt is too long"), so clients such as litellm recognise a context-length
error and stop instead of retrying; a model or infrastructure failure 502, a bug 500; the session keeps the first
such failure for its rollout to re-raise. Any route not served answers a JSON 404 that lists the routes served.

A client that talks to two sessions is seen by the gateway when one of its HTTP connections (a keep-alive connection
of its pool) carries calls of both while both are open: each session then records the other in `shared_with`. A
client created per conversation never does that; one shared by concurrent rollouts (the Agents SDK's
`set_default_openai_client`, a module-level `OpenAI()` whose base_url each episode resets) mixes their calls, and
the rollout fails such episodes, naming the cause (`rllm.gateway.rollout`). The
API key is taken from `Authorization: Bearer` or from `x-api-key` (the header the `anthropic` SDK sends).

`shared_gateway()` gives the one gateway of the running event loop, started on first use on 127.0.0.1 with a free
port and stopped when the loop's `asyncio.run` ends (a keeper task that the shutdown cancels), so rollouts never
leave "Unclosed" servers behind. It serves supplied sessions only.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, Self

from aiohttp import web

from rllm.errors import InfraError
from rllm.gateway.anthropic_format import anthropic_error_body, message_body, message_events, parse_messages_request
from rllm.gateway.boundary import BodyError, HostCheck, json_safe, parse_json_body
from rllm.gateway.openai_format import RequestError, completion_body, error_body, parse_request, stream_chunks
from rllm.gateway.responses_format import parse_responses_request, reply_message, response_body, response_events
from rllm.gateway.session import GatewaySession, Handler, SessionClosedError
from rllm.models.base import ModelClient, SamplingParams
from rllm.types import TerminationReason
from rllm.workflows.base import Workflow, WorkflowServices
from rllm.workflows.runtime import EnvRunner, TerminationEvent, error_site

__all__ = ["CLOSED_SESSION_WORDS", "SHARED_CLIENT_ADVICE", "UNKNOWN_SESSION_WORDS", "Gateway", "shared_gateway"]

logger = logging.getLogger(__name__)

_NO_LIMIT = 1 << 30
_CLOSED_REMEMBERED = 4096  # closed session ids kept, to tell a late call why its session is gone
API_KEY_ENV = "RLLM_GATEWAY_API_KEY"
_OPEN_ROUTES = frozenset({"/health"})  # answered without the API key (a liveness probe learns nothing else)
_LENGTH_REASONS = {TerminationReason.MAX_PROMPT_LENGTH, TerminationReason.MAX_RESPONSE_LENGTH}


class Gateway:
    """An OpenAI-compatible server over `model` (standalone) and/or sessions supplied by rollouts. See the module
    docstring. `sampling` is the standalone sessions' base sampling, `honor_sampling` whether a request's
    temperature/top_p/top_k/seed override it; the length limits bound each standalone conversation as a training
    row would be (default: no limit but the model's own). `api_key`: when set, every route but /health needs
    `Authorization: Bearer <api_key>`; `allowed_hosts`: `Host` names served besides the bound address's own
    (`rllm.gateway.boundary.HostCheck`; "*" allows any)."""

    def __init__(
        self,
        model: ModelClient | None = None,
        *,
        sampling: SamplingParams | None = None,
        honor_sampling: bool = True,
        model_name: str | None = None,
        max_prompt_length: int | None = None,
        max_response_length: int | None = None,
        auto_sessions: bool | None = None,
        api_key: str | None = None,
        allowed_hosts: tuple[str, ...] | list[str] = (),
    ) -> None:
        self.model = model
        self.api_key = api_key or None
        self.allowed_hosts = tuple(allowed_hosts)
        self._host_check = HostCheck("127.0.0.1", self.allowed_hosts)
        self.sampling = sampling or SamplingParams()
        self.honor_sampling = honor_sampling
        served = getattr(model, "model", None)  # OpenAIClient's served name (LocalModel's is the torch module)
        self.model_name = model_name or (served if isinstance(served, str) else None) or "rllm"
        self.max_prompt_length = max_prompt_length or _NO_LIMIT
        self.max_response_length = max_response_length or _NO_LIMIT
        self.auto_sessions = model is not None if auto_sessions is None else auto_sessions
        if self.auto_sessions and model is None:
            raise ValueError("auto_sessions=True needs a model to serve them: Gateway(model, ...)")
        self.sessions: dict[str, GatewaySession] = {}
        self._connection_sessions: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._closed_sids: dict[str, None] = {}  # the last sessions closed, oldest first
        self.host, self.port = "127.0.0.1", 0
        self._runner: web.AppRunner | None = None

    # ---- lifecycle --------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._runner is None:
            raise RuntimeError("the gateway is not started: `await gateway.start()` first")
        return f"http://{self.host}:{self.port}"

    def session_url(self, sid: str) -> str:
        """The `base_url` an `openai.OpenAI` client of session `sid` uses."""
        return f"{self.base_url}/sessions/{sid}/v1"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Self:
        """Listen on host:port (0: a free port, read it back from `.port` / `.base_url`)."""
        self._host_check = HostCheck(host, self.allowed_hosts)
        app = web.Application(client_max_size=64 * 1024**2, middlewares=[self._guard])
        app.router.add_post("/sessions/{sid}/v1/chat/completions", self._chat_completions)
        app.router.add_post("/sessions/{sid}/v1/responses", self._responses)
        app.router.add_post("/sessions/{sid}/v1/messages", self._messages)
        app.router.add_post("/sessions/{sid}/v1/v1/messages", self._messages)
        app.router.add_get("/sessions/{sid}/v1/models", self._models)
        app.router.add_get("/sessions/{sid}/calls", self._calls)
        app.router.add_delete("/sessions/{sid}", self._delete)
        app.router.add_get("/health", self._health)
        app.router.add_route("*", "/v1/{tail:.*}", self._no_session)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=4096, reuse_address=True)
        await site.start()
        self.host, self.port = host, site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start() if self._runner is None else self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # ---- sessions ---------------------------------------------------------------------------------------------

    def open_session(
        self,
        handler: Handler | None = None,
        *,
        sid: str | None = None,
        tokenizer: Any = None,
        sampling: SamplingParams | None = None,
        honor_sampling: bool | None = None,
    ) -> GatewaySession:
        """A new session (id `sid` or a fresh one). Without `handler` it talks to the gateway's model."""
        sid = sid or uuid.uuid4().hex
        if sid in self.sessions:
            raise ValueError(f"session {sid!r} is already open on this gateway")
        if handler is None:
            if self.model is None:
                raise ValueError("open_session() without a handler needs a gateway model: Gateway(model)")
            handler = self._standalone_handler()
        if tokenizer is None and self.model is not None:
            tokenizer = getattr(self.model, "tokenizer", None)
        session = GatewaySession(
            sid,
            handler,
            tokenizer=tokenizer,
            sampling=sampling or self.sampling,
            honor_sampling=self.honor_sampling if honor_sampling is None else honor_sampling,
        )
        self.sessions[sid] = session
        return session

    def close_session(self, sid: str) -> GatewaySession | None:
        session = self.sessions.pop(sid, None)
        if session is not None:
            session.close()
            self._closed_sids[sid] = None  # a later call for it is told why (`_call_for_closed_session`)
            if len(self._closed_sids) > _CLOSED_REMEMBERED:
                del self._closed_sids[next(iter(self._closed_sids))]
        return session

    def _standalone_handler(self) -> Handler:
        """A bare Workflow's `generate`: the rendering, budget and seeding path of every rollout."""
        workflow = _ConversationWorkflow()
        services = WorkflowServices(
            self.model,
            self.sampling,
            EnvRunner(None, serialize=False),
            self.max_prompt_length,
            self.max_response_length,
        )
        workflow.start_episode(services, {}, "gateway")

        async def complete(messages: list[dict], tools: list[dict] | None, overrides: dict[str, Any]):
            return await workflow.generate(messages, tools=tools, **overrides)

        return complete

    def _session(self, sid: str) -> GatewaySession | None:
        session = self.sessions.get(sid)
        if session is None and self.auto_sessions:
            session = self.open_session(sid=sid)
        return session

    # ---- routes -----------------------------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """What every request must pass first: a `Host` naming this server, the API key when one is set, and a JSON
        content type on POST (a cross-site page can send `text/plain` or untyped bodies without a CORS preflight,
        but not `application/json`). See `rllm.gateway.boundary` for the threat model."""
        error = _error_for(request.path)
        refusal = self._host_check.refusal(request.headers.get("Host"))
        if refusal is not None:
            return error(403, refusal, code="host_not_allowed")
        if self.api_key is not None and request.path not in _OPEN_ROUTES and not self._authorized(request):
            return error(
                401,
                "this gateway needs its API key: send `Authorization: Bearer <key>` (openai.OpenAI(api_key=...)) or "
                f"`x-api-key: <key>` (anthropic.Anthropic(api_key=...)), the key given to `rllm serve gateway "
                f"--api-key` or ${API_KEY_ENV}",
                code="invalid_api_key",
            )
        if request.method == "POST" and request.content_type != "application/json":
            return error(
                415,
                f"send the body as JSON with `Content-Type: application/json` (got {request.content_type!r})",
                code="unsupported_media_type",
            )
        try:
            return await handler(request)
        except _Refused as refused:
            return refused.response
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:  # aiohttp's own answer is a plain-text page
            return error(exc.status, self._not_served(request), code="not_found")

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            token = request.headers.get("x-api-key", "")
        return hmac.compare_digest(token.strip().encode(), self.api_key.encode())

    def _not_served(self, request: web.Request) -> str:
        where = self.base_url if self._runner is not None else "http://host:port"
        return (
            f"{request.method} {request.path} is not served by this gateway; it serves POST "
            f"{where}/sessions/<id>/v1/chat/completions, /v1/responses and /v1/messages (Anthropic), "
            "GET /sessions/<id>/v1/models and /sessions/<id>/calls, DELETE /sessions/<id>, GET /health"
        )

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        session, body = await self._open(request, _error)
        chat = _checked(parse_request, body, error=_error)
        reply = await _complete(session, chat, _error)
        meta = {
            "completion_id": f"chatcmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": chat.model or self.model_name,
            "logprobs": chat.logprobs,
        }
        if not chat.stream:
            return _json_response(completion_body(reply, **meta))
        chunks = stream_chunks(reply, include_usage=chat.include_usage, **meta)
        return await _stream(request, [f"data: {_strict_dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"])

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        session, body = await self._open(request, _error)
        wanted = _checked(parse_responses_request, body, error=_error)
        history = _checked(_response_history, session, wanted.previous_response_id, error=_error)
        chat = wanted.chat_request(history)
        reply = await _complete(session, chat, _error)
        response_id = f"resp_{uuid.uuid4().hex}"
        session.responses[response_id] = [*history, *wanted.input_messages, reply_message(reply)]
        meta = {"response_id": response_id, "created_at": int(time.time()), "model": chat.model or self.model_name}
        if not chat.stream:
            return _json_response(response_body(reply, wanted, **meta))
        return await _stream(request, [_event(event) for event in response_events(reply, wanted, **meta)])

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        session, body = await self._open(request, _anthropic_error)
        chat = _checked(parse_messages_request, body, error=_anthropic_error)
        reply = await _complete(session, chat, _anthropic_error)
        meta = {"message_id": f"msg_{uuid.uuid4().hex}", "model": chat.model or self.model_name}
        if not chat.stream:
            return _json_response(message_body(reply, **meta))
        return await _stream(request, [_event(event) for event in message_events(reply, **meta)])

    async def _open(self, request: web.Request, error: Callable[..., web.Response]) -> tuple[GatewaySession, Any]:
        """(the session of the URL, the JSON body) of a model call, or `_Refused` with the error to send."""
        sid = request.match_info["sid"]
        try:
            body = parse_json_body(await request.read())
        except BodyError as exc:
            raise _Refused(error(400, str(exc), param=exc.param)) from None
        session = self._session(sid)
        if session is None and sid in self._closed_sids:
            raise _Refused(error(404, _call_for_closed_session(sid), code="session_closed"))
        if session is None:
            raise _Refused(_unknown_session(sid, error))
        self._note_connection(request, session)
        return session, body

    def _note_connection(self, request: web.Request, session: GatewaySession) -> None:
        """One HTTP connection that carries the calls of two open sessions comes from one client used by two
        conversations: for rollouts, a client shared between concurrent episodes (module docstring). Both sessions
        are told (`GatewaySession.shared_with`); what that means is the rollout's to say."""
        transport = request.transport
        if transport is None:
            return
        previous = self._connection_sessions.get(transport)
        self._connection_sessions[transport] = session.sid
        other = self.sessions.get(previous) if previous not in (None, session.sid) else None
        if other is not None and not other.closed:
            other.shared_with.add(session.sid)
            session.shared_with.add(other.sid)

    async def _models(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        if sid not in self.sessions and not self.auto_sessions:
            return _unknown_session(sid)
        card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "rllm"}
        return _json_response({"object": "list", "data": [card]})

    async def _calls(self, request: web.Request) -> web.Response:
        session = self.sessions.get(request.match_info["sid"])
        if session is None:
            return _unknown_session(request.match_info["sid"])
        return _json_response(session.to_json())  # logprobs can be NaN/-inf: written as strings, never bare

    async def _delete(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        if self.close_session(sid) is None:
            return _unknown_session(sid)
        return _json_response({"id": sid, "deleted": True})

    async def _health(self, request: web.Request) -> web.Response:
        return _json_response({"status": "ok", "sessions": len(self.sessions)})

    async def _no_session(self, request: web.Request) -> web.Response:
        where = self.base_url if self._runner is not None else "http://host:port"
        return _error_for(request.path)(
            404,
            f"this gateway serves per-session URLs: use base_url={where}/sessions/<any id>/v1 "
            "(one id per conversation or rollout)",
        )


class _ConversationWorkflow(Workflow):
    """A Workflow used only for `generate` (standalone sessions); it never runs episodes."""


def _strict_dumps(value: Any) -> str:
    """Strict JSON (`rllm.gateway.boundary.json_safe`: non-finite numbers as "NaN"/"Infinity"/"-Infinity"). Almost
    every body holds no such number: it is dumped as it is (C speed), and only one that holds one is walked in
    Python (that walk was most of a streamed reply's cost: 18 us a chunk)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(json_safe(value), allow_nan=False)


_json_response = functools.partial(web.json_response, dumps=_strict_dumps)


def _error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> web.Response:
    """An OpenAI error object (chat completions, responses, and every route but Anthropic's)."""
    return _json_response(error_body(message, status=status, param=param, code=code), status=status)


def _anthropic_error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> web.Response:
    """An Anthropic error object; it has no `param`/`code`, so the field at fault is named in the message."""
    if param is not None and f"`{param}" not in message and param not in message:
        message = f"{param}: {message}"
    return _json_response(anthropic_error_body(message, status=status), status=status)


class _Refused(Exception):
    """Raised by a route's steps to answer with `response` at once (caught by the `_guard` middleware)."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def _checked(parse: Callable[..., Any], *args: Any, error: Callable[..., web.Response]) -> Any:
    """`parse(*args)`, a `RequestError` becoming the flavour's error response."""
    try:
        return parse(*args)
    except RequestError as exc:
        raise _Refused(error(exc.status, str(exc), param=exc.param, code=exc.code)) from None


async def _complete(session: GatewaySession, chat: Any, error: Callable[..., web.Response]) -> Any:
    """The session's reply to `chat`, or `_Refused` with the flavour's error for a failure while serving it."""
    try:
        return await session.complete(chat)
    except SessionClosedError as exc:
        raise _Refused(error(404, str(exc), code="session_closed")) from None
    except Exception as exc:
        raise _Refused(_failure_response(exc, error)) from None


def _error_for(path: str) -> Callable[..., web.Response]:
    return _anthropic_error if path.endswith("/messages") else _error


async def _stream(request: web.Request, lines: list[str]) -> web.StreamResponse:
    """Server-sent events: the reply is complete before the first line (streaming is emulated), so the events go out
    in one write (one transport call, not one per token: the same bytes)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    await response.write("".join(lines).encode())
    await response.write_eof()
    return response


def _event(event: dict) -> str:
    """An SSE event named by its type (the Responses and Messages APIs name theirs)."""
    return f"event: {event['type']}\ndata: {_strict_dumps(event)}\n\n"


def _response_history(session: GatewaySession, previous_response_id: str | None) -> list[dict]:
    """The conversation of the response a Responses request continues (module docstring)."""
    if previous_response_id is None:
        return []
    history = session.responses.get(previous_response_id)
    if history is None:
        raise RequestError(
            f"previous_response_id {previous_response_id!r} is not a response of this session: responses are kept "
            "per session (one per rollout), for its life; send the whole conversation as `input` instead",
            status=404,
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return history


# What a call for a session that is not (or no longer) open is told, and what a rollout recognises it by.
CLOSED_SESSION_WORDS = "is closed: its episode has ended"
UNKNOWN_SESSION_WORDS = "rollouts open one per episode"
SHARED_CLIENT_ADVICE = (
    "a client shared between episodes (a process-global client such as the Agents SDK's set_default_openai_client, "
    "or a module-level OpenAI() whose base_url each episode resets) follows whichever episode set it last; create "
    "the client inside the rollout function, once per episode, with the base_url it is given"
)


def _call_for_closed_session(sid: str) -> str:
    return f"session {sid!r} {CLOSED_SESSION_WORDS}, so this call comes from a client that outlived it: " + (
        SHARED_CLIENT_ADVICE
    )


def _unknown_session(sid: str, error: Callable[..., web.Response] = _error) -> web.Response:
    return error(
        404,
        f"no session {sid!r} on this gateway: {UNKNOWN_SESSION_WORDS} and close it when the "
        "episode ends; use the base_url your rollout function was given",
        code="session_not_found",
    )


def _failure_response(exc: Exception, error: Callable[..., web.Response] = _error) -> web.Response:
    """The error for a failure while serving a call, in the flavour's shape (module docstring)."""
    if isinstance(exc, TerminationEvent) and exc.reason not in _LENGTH_REASONS:
        return error(400, f"the rollout ended: {exc.reason.value} ({exc})", code=exc.reason.value)
    if isinstance(exc, TerminationEvent) or type(exc).__name__ == "PromptTooLongError":  # LocalModel's (pulls torch)
        return error(400, _context_length_message(exc, error), param="messages", code="context_length_exceeded")
    status = getattr(exc, "status", None)
    if isinstance(status, int) and 400 <= status < 500:  # the upstream server refused the request
        return error(status, str(exc))
    if isinstance(exc, (InfraError, OSError)) or error_site(exc) == "model":
        return error(502, f"the model failed: {type(exc).__name__}: {exc}", code="model_error")
    logger.error("gateway call failed", exc_info=exc)
    return error(500, f"{type(exc).__name__}: {exc}", code="internal_error")


def _context_length_message(exc: Exception, error: Callable[..., web.Response]) -> str:
    """Worded as OpenAI ("This model's maximum context length is") and Anthropic ("prompt is too long") word it:
    clients recognise a context-length error by these words (litellm reads the message, not the code)."""
    why = f"{exc.reason.value}: {exc}" if isinstance(exc, TerminationEvent) else str(exc)
    if error is _anthropic_error:
        return f"prompt is too long: the conversation is over its token budget ({why})"
    return f"This model's maximum context length is reached for this conversation: it is over its token budget ({why})"


# ---- one gateway per running event loop -----------------------------------------------------------------------

_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future] = weakref.WeakKeyDictionary()
_KEEPERS: set[asyncio.Task] = set()  # strong references: the loop keeps only weak ones to its tasks


async def shared_gateway() -> Gateway:
    """The running loop's gateway (supplied sessions only), started on first use; see the module docstring."""
    loop = asyncio.get_running_loop()
    future = _SHARED.get(loop)
    if future is None:
        future = loop.create_future()
        _SHARED[loop] = future
        keeper = loop.create_task(_keep(future), name="rllm-gateway")
        _KEEPERS.add(keeper)
        keeper.add_done_callback(_KEEPERS.discard)
    return await asyncio.shield(future)


async def _keep(future: asyncio.Future) -> None:
    """Start the gateway, then hold it until the loop shuts down (asyncio.run cancels leftover tasks)."""
    gateway = Gateway(auto_sessions=False)
    try:
        await gateway.start()
    except BaseException as exc:
        _SHARED.pop(asyncio.get_running_loop(), None)
        if isinstance(exc, Exception):
            future.set_exception(exc)
            return
        future.cancel()
        raise
    future.set_result(gateway)
    try:
        await asyncio.Event().wait()
    finally:
        _SHARED.pop(asyncio.get_running_loop(), None)
        await gateway.stop()
