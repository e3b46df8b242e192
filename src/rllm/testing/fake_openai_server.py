"""A fake OpenAI-compatible HTTP server for tests and benchmarks: real sockets, real HTTP, scripted answers.

It speaks the subset of the OpenAI/vLLM protocol that rllm uses:

- `GET  /v1/models`
- `POST /v1/completions` with a token-id prompt (or a string), vLLM-style `return_token_ids` (per-choice
  `prompt_token_ids` and `token_ids`) and `logprobs` (`token_logprobs`/`tokens`/`top_logprobs`/`text_offset`);
- `POST /v1/chat/completions` in the OpenAI shape, with optional `logprobs` (`choices[].logprobs.content`),
  `tool_calls`, `reasoning_content`, and vLLM's `return_token_ids` (top-level `prompt_token_ids`, per-choice
  `token_ids`).

Answers are deterministic. By default the reply is a short fixed text whose "tokens" are its characters (token id =
`ord(char)`, so a fake tokenizer with `encode = map(ord)` agrees with it), cut to `max_tokens` (then
`finish_reason="length"`). A string prompt is "tokenized" the same way. Scripted replies (`queue_replies`) or a
`reply_fn(endpoint, body) -> FakeReply` replace the default.

With a `tokenizer` (a transformers tokenizer, or a name or folder for `rllm.models.registry.load_tokenizer`) the
completions endpoint answers as a served model would for a client rendering with that tokenizer: the default reply's
ids are the tokenizer's ids of its text followed by the EOS token that ended the turn (vLLM's `token_ids` hold the
stop token; the text does not), cut to `max_tokens` like a sampled reply (the text is then what those ids decode to),
and string prompts are tokenized by it. So a client that renders each turn as a token delta (`ChatRenderer`) sees
its sampled ids decode to the reply it stored, as with vLLM; with `ord` ids and a real tokenizer every turn would
be a mismatch and re-encoded in full.

Latency is an `asyncio.sleep`, so slow requests never block others; aiohttp.web was picked over uvicorn+starlette
because it measured less per-request overhead here and is a single dependency (the `dev` extra). Model requests and
replies go through orjson (the same JSON; json's encoding and decoding were a fifth of the server's CPU): in
`benchmarks/engine_concurrency.py` the server shares the cores with the client it measures.

Faults (`inject`) apply to the next model requests in order: an HTTP status (with an optional `Retry-After`),
a hang, a malformed JSON body, or a dropped connection. When the server runs in its own process they are injected
through `POST /fake/faults`; `GET /fake/stats` counts requests.

Two ways to run it:
    with run_fake_server(latency_s=0.05) as server:      # in-process, on a background thread and event loop
        client = OpenAIClient(server.base_url, server.model)
    with spawn_fake_server(latency_ms=50) as server:     # its own process, so it does not share the client's loop
        ...
    python -m rllm.testing.fake_openai_server --port 0 --latency-ms 50   # prints its base URL on the first line
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
from aiohttp import web

__all__ = [
    "FakeOpenAIServer",
    "FakeReply",
    "Fault",
    "RemoteFakeServer",
    "read_first_line",
    "run_fake_server",
    "spawn_fake_server",
]

DEFAULT_REPLY_TEXT = "Hello from the fake server."


@dataclass
class FakeReply:
    """One scripted completion. `token_ids`/`logprobs` default to `ord(char)` per character and a fixed ramp."""

    text: str = DEFAULT_REPLY_TEXT
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments" (dict or str), "id"?}
    reasoning: str | None = None

    def ids(self) -> list[int]:
        return self.token_ids if self.token_ids is not None else [ord(c) for c in self.text]

    def token_logprobs(self) -> list[float]:
        if self.logprobs is not None:
            return self.logprobs
        return [-0.1 - 0.01 * i for i in range(len(self.ids()))]


@dataclass
class Fault:
    """A failure for one upcoming model request. Build with the class methods."""

    kind: str  # "http" | "hang" | "malformed_json" | "drop_connection"
    status: int = 500
    retry_after: str | None = None
    message: str = "injected fault"
    seconds: float = 0.0

    @classmethod
    def http(cls, status: int, *, retry_after: float | str | None = None, message: str | None = None) -> Fault:
        retry = None if retry_after is None else str(retry_after)
        return cls("http", status=status, retry_after=retry, message=message or f"injected HTTP {status}")

    @classmethod
    def hang(cls, seconds: float) -> Fault:
        """Sleep `seconds` before answering normally (a client timeout should fire first)."""
        return cls("hang", seconds=seconds)

    @classmethod
    def malformed_json(cls) -> Fault:
        return cls("malformed_json")

    @classmethod
    def drop_connection(cls) -> Fault:
        return cls("drop_connection")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ReplyFn = Callable[[str, dict[str, Any]], FakeReply]


class FakeOpenAIServer:
    """The server's state and handlers. Start it with `run_fake_server`, `spawn_fake_server` or `await start()`."""

    def __init__(
        self,
        *,
        model: str = "fake-model",
        latency_s: float = 0.0,
        reply_fn: ReplyFn | None = None,
        supports_token_ids: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        tokenizer: Any = None,
    ) -> None:
        if isinstance(tokenizer, str):
            from rllm.models.registry import load_tokenizer  # transformers: only for a server that asks for it

            tokenizer = load_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self._tokenized_replies: dict[int | None, FakeReply] = {}  # the default reply per max_tokens
        self.model = model
        self.latency_s = latency_s
        self.reply_fn = reply_fn
        self.supports_token_ids = supports_token_ids  # False mimics a server that ignores `return_token_ids`
        self._initial_supports_token_ids = supports_token_ids
        self.host, self.port = host, port
        self.faults: deque[Fault] = deque()  # deque append/popleft are thread-safe: tests inject from another thread
        self.replies: deque[FakeReply] = deque()
        self.requests: deque[tuple[str, dict[str, Any]]] = deque(maxlen=256)  # recent (path, body), for asserts
        self.authorizations: deque[str | None] = deque(maxlen=256)  # their Authorization headers
        self.request_count = 0
        self._ids = itertools.count()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def reset(self) -> None:
        """Forget the faults and replies not yet served and what a test changed of `supports_token_ids`: one server
        can serve many tests."""
        self.faults.clear()
        self.replies.clear()
        self.supports_token_ids = self._initial_supports_token_ids

    def inject(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def queue_replies(self, *replies: FakeReply) -> None:
        self.replies.extend(replies)

    # ---- lifecycle -------------------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/fake/faults", self._admin_faults)
        app.router.add_get("/fake/stats", self._admin_stats)
        return app

    async def start(self) -> None:
        # handler_cancellation: a hung handler stops when its client gives up, so shutdown is prompt.
        self._runner = web.AppRunner(self.make_app(), access_log=None, handler_cancellation=True, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=4096, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # port 0 -> the one the OS picked

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- handlers --------------------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": self.model, "object": "model", "created": 0, "owned_by": "rllm-fake"}
        return web.json_response({"object": "list", "data": [card]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_model_request(request, self._completion_body)

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_model_request(request, self._chat_body)

    async def _serve_model_request(self, request: web.Request, build: Callable) -> web.StreamResponse:
        self.request_count += 1
        try:
            body = orjson.loads(await request.read())
        except ValueError:
            return _error(400, "request body is not valid JSON")
        self.requests.append((request.path, body))
        self.authorizations.append(request.headers.get("Authorization"))
        if self.faults:
            fault = self.faults.popleft()
            response = await self._apply_fault(fault, request)
            if response is not None:
                return response
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        problem = self._validate(body)
        if problem is not None:
            return problem
        return _json_response(build(body))

    async def _apply_fault(self, fault: Fault, request: web.Request) -> web.StreamResponse | None:
        if fault.kind == "http":
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
            return _error(fault.status, fault.message, headers=headers)
        if fault.kind == "hang":
            await asyncio.sleep(fault.seconds)
            return None
        if fault.kind == "malformed_json":
            return web.Response(text='{"choices": [{"text": "trunc', content_type="application/json")
        if fault.kind == "drop_connection":
            request.transport.close()
            raise asyncio.CancelledError  # nothing more can be written to a closed socket
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _validate(self, body: dict[str, Any]) -> web.Response | None:
        model = body.get("model")
        if model is not None and model != self.model:
            return _error(404, f"The model `{model}` does not exist.", error_type="NotFoundError")
        if body.get("stream"):
            return _error(400, "stream=true is not supported by the fake server")
        if "prompt" not in body and "messages" not in body:
            return _error(400, "either `prompt` or `messages` is required")
        return None

    def _next_reply(self, endpoint: str, body: dict[str, Any]) -> FakeReply:
        if self.replies:
            return self.replies.popleft()
        if self.reply_fn is not None:
            return self.reply_fn(endpoint, body)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if self.tokenizer is not None and endpoint == "completions":
            return self._tokenized_reply(max_tokens)
        if max_tokens is not None and len(DEFAULT_REPLY_TEXT) > max_tokens:
            return FakeReply(text=DEFAULT_REPLY_TEXT[:max_tokens], finish_reason="length")
        return FakeReply()

    def _tokenized_reply(self, max_tokens: int | None) -> FakeReply:
        """The default reply as the tokenizer's model would sample it (module docstring); built once per limit."""
        reply = self._tokenized_replies.get(max_tokens)
        if reply is None:
            tokenizer = self.tokenizer
            ids = tokenizer.encode(DEFAULT_REPLY_TEXT, add_special_tokens=False) + [tokenizer.eos_token_id]
            if max_tokens is None or len(ids) <= max_tokens:
                reply = FakeReply(text=DEFAULT_REPLY_TEXT, token_ids=ids)
            else:
                text = tokenizer.decode(ids[:max_tokens], skip_special_tokens=True)
                reply = FakeReply(text=text, token_ids=ids[:max_tokens], finish_reason="length")
            self._tokenized_replies[max_tokens] = reply
        return reply

    # ---- response bodies -------------------------------------------------------------------------------------

    def _completion_body(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt_ids = _prompt_ids(body["prompt"], self.tokenizer)
        reply = self._next_reply("completions", body)
        choice: dict[str, Any] = {
            "index": 0,
            "text": reply.text,
            "logprobs": _completion_logprobs(reply) if body.get("logprobs") is not None else None,
            "finish_reason": reply.finish_reason,
            "stop_reason": None,
        }
        if body.get("return_token_ids") and self.supports_token_ids:
            choice["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = reply.ids()
        return self._envelope("cmpl", "text_completion", choice, len(prompt_ids), reply, body)

    def _chat_body(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = self._next_reply("chat.completions", body)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [_tool_call_json(i, call) for i, call in enumerate(reply.tool_calls)]
        finish = "tool_calls" if reply.tool_calls and reply.finish_reason == "stop" else reply.finish_reason
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": _chat_logprobs(reply) if body.get("logprobs") else None,
            "finish_reason": finish,
        }
        prompt_ids = [ord(c) for c in _flatten_messages(body["messages"])]
        result = self._envelope("chatcmpl", "chat.completion", choice, len(prompt_ids), reply, body)
        if body.get("return_token_ids") and self.supports_token_ids:
            choice["token_ids"] = reply.ids()
            result["prompt_token_ids"] = prompt_ids
        return result

    def _envelope(self, prefix, kind, choice, n_prompt, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        n = int(body.get("n") or 1)
        choices = [choice] + [{**choice, "index": i} for i in range(1, n)]
        n_completion = len(reply.ids()) * n
        return {
            "id": f"{prefix}-{next(self._ids)}",
            "object": kind,
            "created": int(time.time()),
            "model": self.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_completion,
                "total_tokens": n_prompt + n_completion,
            },
        }

    # ---- admin (for a server in another process) -------------------------------------------------------------

    async def _admin_faults(self, request: web.Request) -> web.Response:
        specs = await request.json()
        self.inject(*(Fault(**spec) for spec in specs))
        return web.json_response({"queued": len(self.faults)})

    async def _admin_stats(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.request_count, "faults_pending": len(self.faults)})


def _error(status: int, message: str, *, headers=None, error_type: str | None = None) -> web.Response:
    # The OpenAI error shape; vLLM and SGLang answer the same way.
    error = {"message": message, "type": error_type or _error_type(status), "param": None, "code": status}
    return _json_response({"error": error}, status=status, headers=headers)


def _json_response(data: Any, *, status: int = 200, headers=None) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, headers=headers, content_type="application/json")


def _error_type(status: int) -> str:
    if status == 429:
        return "RateLimitError"
    return "BadRequestError" if status < 500 else "InternalServerError"


def _prompt_ids(prompt: Any, tokenizer: Any = None) -> list[int]:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        return list(prompt[0])  # a batch: the fake answers for its first prompt only
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special_tokens=False) if tokenizer is not None else [ord(c) for c in prompt]
    return list(prompt)


def _flatten_messages(messages: list[dict[str, Any]]) -> str:
    return "".join(f"{m.get('role', '')}: {m.get('content') or ''}\n" for m in messages)


def _completion_logprobs(reply: FakeReply) -> dict[str, Any]:
    ids, values = reply.ids(), reply.token_logprobs()
    tokens = [_token_text(i) for i in ids]
    offsets = list(itertools.accumulate((len(t) for t in tokens[:-1]), initial=0)) if tokens else []
    return {
        "text_offset": offsets,
        "token_logprobs": values,
        "tokens": tokens,
        "top_logprobs": [{t: v} for t, v in zip(tokens, values, strict=True)],
    }


def _chat_logprobs(reply: FakeReply) -> dict[str, Any]:
    content = []
    for token_id, value in zip(reply.ids(), reply.token_logprobs(), strict=True):
        token = _token_text(token_id)
        content.append({"token": token, "logprob": value, "bytes": list(token.encode()), "top_logprobs": []})
    return {"content": content}


def _tool_call_json(index: int, call: dict[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    function = {"name": call["name"], "arguments": arguments}
    return {"id": call.get("id") or f"call_{index}", "type": "function", "function": function}


# ---- running it ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def run_fake_server(server: FakeOpenAIServer | None = None, **kwargs: Any) -> Iterator[FakeOpenAIServer]:
    """Run `server` (default: a `FakeOpenAIServer(**kwargs)`) on a background thread with its own event loop; yields
    it started."""
    server = server if server is not None else FakeOpenAIServer(**kwargs)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-openai-server", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=30)
        yield server
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


class RemoteFakeServer:
    """A handle on a fake server running in another process."""

    def __init__(self, base_url: str, process: subprocess.Popen, model: str) -> None:
        self.base_url, self.process, self.model = base_url, process, model

    def inject(self, *faults: Fault) -> None:
        import httpx

        httpx.post(self.base_url.removesuffix("/v1") + "/fake/faults", json=[f.to_dict() for f in faults])

    def stats(self) -> dict[str, Any]:
        import httpx

        return httpx.get(self.base_url.removesuffix("/v1") + "/fake/stats").json()


@contextlib.contextmanager
def spawn_fake_server(
    *, latency_ms: float = 0.0, model: str = "fake-model", timeout: float = 30.0, tokenizer: str | None = None
):
    """Run the fake server in a child process (so it does not compete for the caller's event loop). `tokenizer` is a
    name or folder: replies carry its ids (module docstring)."""
    command = [sys.executable, "-m", "rllm.testing.fake_openai_server", "--port", "0"]
    command += ["--latency-ms", str(latency_ms), "--model", model]
    command += ["--tokenizer", tokenizer] if tokenizer is not None else []
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        base_url = read_first_line(process, timeout)
        yield RemoteFakeServer(base_url, process, model)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def read_first_line(process: subprocess.Popen, timeout: float) -> str:
    """The URL a server subprocess prints on its first stdout line (it is killed if none comes in `timeout` s)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not lines or not lines[0].startswith("http"):
        process.kill()
        stderr = process.stderr.read()[-2000:] if process.stderr is not None else ""
        raise RuntimeError(f"the server did not start within {timeout}s (got {lines!r}) {stderr}")
    return lines[0].strip()


async def _serve_forever(server: FakeOpenAIServer) -> None:
    await server.start()
    print(server.base_url, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake OpenAI-compatible server for tests and benchmarks.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed latency added to every model request")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--no-token-ids", action="store_true", help="ignore return_token_ids like an old server")
    parser.add_argument("--tokenizer", help="answer with this tokenizer's ids (a name or folder, see load_tokenizer)")
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(
        model=args.model,
        latency_s=args.latency_ms / 1000.0,
        supports_token_ids=not args.no_token_ids,
        host=args.host,
        port=args.port,
        tokenizer=args.tokenizer,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(server))


def _token_text(token_id: int) -> str:
    """A stand-in token string: the id's code point, or `<id>` where that is no character JSON can carry (beyond
    Unicode, or a surrogate, 0xD800-0xDFFF: Qwen's "(area" is 55702)."""
    if 0 <= token_id < 0x110000 and not 0xD800 <= token_id < 0xE000:
        return chr(token_id)
    return f"<{token_id}>"


if __name__ == "__main__":
    main()
