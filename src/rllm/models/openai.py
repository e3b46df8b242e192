"""A `ModelClient` for any OpenAI-compatible server (vLLM, SGLang, OpenAI, ...).

Two modes, chosen per call:

- **Token-in/token-out** (the mode training needs): when the prompt is token ids, or messages and the client has a
  tokenizer (messages are rendered with `rllm.models.chat.render_messages`). The ids go to `POST /completions` as
  `"prompt": [ids]` with `return_token_ids: true` and `logprobs: 0` (the sampled token's logprob only). The server's
  `token_ids` are used as the completion ids: they are the ids the model sampled, EOS included, whatever the text
  looks like. `skip_special_tokens` stays true (it only shapes the text, which stays clean for parsers and for
  `ChatRenderer`, while the ids keep the EOS) and the stop string is kept in the text (`include_stop_str_in_output`
  on vLLM, `no_stop_trim` on SGLang) so the text matches the ids, as `SamplingParams.stop` promises. Text is never
  re-tokenized: a server that returns no `token_ids` raises `TokenIdsUnavailableError`, unless
  `allow_missing_token_ids=True` (then the ids are None and the output can be evaluated but not trained on).
  Servers that return them: vLLM >= 0.10.2 and SGLang releases whose OpenAI API has `return_token_ids`.
- **Chat** (evaluation against any endpoint): messages without a tokenizer go to `POST /chat/completions`. The
  reply's `content`, `reasoning_content` and `tool_calls` are parsed; ids are None (warned once per client).
- **Images, token-in/token-out** (vision-language models): an `ImagePrompt` (ids with each image expanded to its
  placeholder tokens, rendered by a conversation with the client's `vision` processor) goes to vLLM's
  `POST /inference/v1/generate` (a server started with `--enable-scale-out`, which `VLLMServer.launch` adds for a
  VLM folder) as the ids with each image's expansion collapsed back to its one image token, plus the images as
  `content_parts`; the server expands them again and answers with its prompt ids, the sampled ids and their
  logprobs. So every turn's prompt is the previous prompt + the sampled ids + the new turn, exactly as with text,
  and a multi-turn episode trains as one row.
- **Images through chat** (any other server, or messages with images given directly): the messages go to
  `POST /chat/completions` with `return_token_ids: true` and `logprobs: true`; vLLM answers with the prompt ids it
  rendered and the sampled ids. The server renders the history from text here, so an earlier reply that does not
  re-tokenize to its sampled ids makes the next turn a new training row (counted, not silent).
  Either way the server's prompt ids are the output's (they are what was sampled from; where they differ from the
  ids sent, a warning says so once) and the image URLs in placeholder order are `prompt_images`, so the output
  trains like a local VLM's.

Transport: one pooled `aiohttp.ClientSession` per event loop, created on first use. aiohttp was measured against
httpx on this workload (2000 calls, 64 concurrent, fake server in its own process): about 0.25 ms/call for aiohttp
against 3.4 ms/call for httpx's `AsyncClient`, whose connection pool dominates at high concurrency. Bodies are
encoded and decoded with orjson (about 4 us a call against 20 us for the stdlib's `json` on a 150-token prompt and
its reply, on every model call of every rollout), falling back to `json` for what orjson refuses (integers beyond
64 bits, `NaN`/`Infinity` in a reply, which Python servers can write), so what is sent and read does not change.
uvloop was measured too and left out: it did not change the client's CPU per call beyond the noise (±5%), which
goes to aiohttp's own Python code and the socket calls, not to the event loop. On Python 3.11 the session's loop
gets `eager_writes.install`: each request's body is written when it is posted, not after every callback already
waiting on the loop (aiohttp does so itself from 3.12; many rollouts' requests otherwise go out in lockstep bursts).

Failures: 429, 500, 502, 503, 504, connection errors, timeouts and malformed JSON bodies are retried up to
`max_retries` times (so `max_retries + 1` attempts) with exponential backoff and jitter, honouring `Retry-After`
(capped at `backoff_max`); then `InfraError`. Any other 4xx is the request's fault: `ModelRequestError` at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
import warnings
from typing import Any, Literal, Self

try:
    import aiohttp
    import orjson
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"OpenAIClient needs aiohttp and orjson: pip install {exc.name}") from exc

from rllm.errors import InfraError, RllmError
from rllm.images import has_images, message_image_urls, normalize_images
from rllm.models import eager_writes
from rllm.models.base import ImagePrompt, Prompt, SamplingParams
from rllm.types import ModelOutput, ToolCall

__all__ = ["ModelRequestError", "OpenAIClient", "TokenIdsUnavailableError", "TokenIdsUnavailableWarning"]

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
_SNIPPET_CHARS = 300


class ModelRequestError(RllmError):
    """The server rejected the request (a 4xx other than 429): a bad model name, parameter or prompt. Not retried."""

    def __init__(self, message: str, *, status: int, url: str) -> None:
        super().__init__(message)
        self.status, self.url = status, url


class TokenIdsUnavailableError(RllmError):
    """Token-in/token-out was asked of a server that does not return token ids."""


class TokenIdsUnavailableWarning(UserWarning):
    """Outputs of this client carry no token ids, so they can be evaluated but not trained on."""


class _RetryableFailure(Exception):
    """One failed attempt that is worth another try."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


class OpenAIClient:
    """Talks to an OpenAI-compatible server. See the module docstring for the two modes and the retry policy.

    `base_url` includes the API prefix (`http://host:8000/v1`). `tokenizer` is a transformers tokenizer, or a name
    or path loaded on first use with `rllm.models.registry.load_tokenizer`. `dialect` picks the server-specific
    field names of the completions request ("vllm" or "sglang"); fields in `extra_body` are added to every
    request and win over the client's own. `vision` (a `rllm.models.vision.VisionProcessor`, or a model name or
    folder loaded on first use with `rllm.models.registry.load_vision`) is the served VLM's processor: with it a
    conversation renders prompts with images exactly, and its tokenizer is the client's when none is given.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        tokenizer: Any = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        max_connections: int = 1024,
        extra_body: dict[str, Any] | None = None,
        allow_missing_token_ids: bool = False,
        dialect: Literal["vllm", "sglang"] = "vllm",
        chat_logprobs: bool = True,
        vision: Any = None,
    ) -> None:
        if dialect not in ("vllm", "sglang"):
            raise ValueError(f"dialect must be 'vllm' or 'sglang', not {dialect!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self.max_connections = max_connections
        self.extra_body = dict(extra_body or {})
        self.allow_missing_token_ids = allow_missing_token_ids
        self.dialect = dialect
        self.chat_logprobs = chat_logprobs  # some endpoints (OpenAI reasoning models) refuse `logprobs`
        self._tokenizer_spec = tokenizer
        self._tokenizer: Any = None if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
        self._vision_spec = vision
        self._vision: Any = None if isinstance(vision, (str, os.PathLike)) else vision
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._warned_no_ids = False
        self._warned_prompt_mismatch = False
        self._tokens_in_images: bool | None = None  # whether the server has /inference/v1/generate (None: not tried)

    # ---- the ModelClient protocol ----------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None and self._tokenizer_spec is not None:
            from rllm.models.registry import load_tokenizer  # heavy (transformers): only when asked for

            self._tokenizer = load_tokenizer(str(self._tokenizer_spec))
        elif self._tokenizer is None and self._vision_spec is not None:
            self._tokenizer = self.vision.tokenizer
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, value: Any) -> None:
        self._tokenizer_spec = self._tokenizer = value

    @property
    def vision(self) -> Any:
        """The served VLM's `VisionProcessor`, or None (a text-only model, or one this client was not told about)."""
        if self._vision is None and self._vision_spec is not None:
            from rllm.models.registry import load_vision

            self._vision = load_vision(str(self._vision_spec))
            if self._vision is None:
                raise RllmError(
                    f"OpenAIClient(vision={str(self._vision_spec)!r}): that model is not a "
                    "vision-language model (its config has no vision tower)"
                )
        return self._vision

    async def generate(self, prompt: Prompt, sampling: SamplingParams | None = None) -> ModelOutput:
        sampling = sampling or SamplingParams()
        if isinstance(prompt, ImagePrompt):
            if self._tokens_in_images is not False and self.vision is not None and self.dialect == "vllm":
                output = await self._generate_tokens_with_images(prompt, sampling)
                if output is not None:
                    return output
            if prompt.messages is None:
                raise RllmError(
                    f"OpenAIClient({self.base_url!r}) got an ImagePrompt without its messages: a server "
                    "takes images in chat messages only; send the messages (or an ImagePrompt that "
                    "carries them, as a Workflow's conversation renders)"
                )
            return await self._generate_chat_with_ids(prompt.messages, sampling, prompt.images, sent=prompt.ids)
        is_messages = bool(prompt) and isinstance(prompt[0], dict)
        if not is_messages:
            return await self._generate_from_ids(prompt if type(prompt) is list else list(prompt), sampling)
        tokenizer = self.tokenizer
        if tokenizer is None:
            return await self._generate_chat(prompt, sampling)
        if has_images(prompt):
            return await self._generate_chat_with_ids(prompt, sampling, message_image_urls(prompt))
        from rllm.models.chat import render_messages

        return await self._generate_from_ids(render_messages(tokenizer, prompt, tools=sampling.tools), sampling)

    async def aclose(self) -> None:
        session, self._session, self._session_loop = self._session, None, None
        if session is not None and not session.closed:
            await session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ---- token-in/token-out ----------------------------------------------------------------------------------

    async def _generate_from_ids(self, prompt_ids: list[int], sampling: SamplingParams) -> ModelOutput:
        body = self._completion_request(prompt_ids, sampling)
        data = await self._post("/completions", body)
        choice = _first_choice(data, self.base_url + "/completions")
        completion_ids = choice.get("token_ids")
        if completion_ids is None and not self.allow_missing_token_ids:
            raise TokenIdsUnavailableError(
                f"{self.base_url}/completions returned no token ids. Token-in/token-out needs a server that honours "
                "`return_token_ids`: vLLM >= 0.10.2, or an SGLang release whose OpenAI API accepts it. Upgrade the "
                "server, or pass allow_missing_token_ids=True to get outputs without ids (they can be evaluated but "
                "not trained on); the text is never re-tokenized, since that would not give the sampled tokens."
            )
        text = choice.get("text") or ""
        return ModelOutput(
            text=text,
            content=text,
            prompt_ids=self._served_prompt_ids(prompt_ids, choice, data) if completion_ids is not None else None,
            completion_ids=completion_ids,
            logprobs=_completion_logprobs(choice, completion_ids),
            finish_reason=choice.get("finish_reason"),
        )

    def _completion_request(self, prompt_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
        body = {
            "model": self.model,
            "prompt": prompt_ids,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,  # 0 = no alternatives; the sampled token's own logprob is always returned
            "return_token_ids": True,
            "skip_special_tokens": True,
        }
        if self.dialect == "vllm":
            body["include_stop_str_in_output"] = True
        else:
            body["no_stop_trim"] = True
        _add_optional_sampling(body, sampling)
        if self.extra_body:
            body.update(self.extra_body)
        return body

    async def _generate_tokens_with_images(self, prompt: ImagePrompt, sampling: SamplingParams) -> ModelOutput | None:
        """vLLM's token-in/token-out endpoint with images (module docstring); None when the server has none."""
        url = self.base_url.removesuffix("/v1") + "/inference/v1/generate"
        params = {
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "skip_special_tokens": True,
            "include_stop_str_in_output": True,
        }
        _add_optional_sampling(params, sampling)
        body = {
            "model": self.model,
            "token_ids": self.vision.collapse(prompt.ids, prompt.images),
            "content_parts": [{"type": "image_url", "url": image} for image in prompt.images],
            "sampling_params": params,
            "output_mode": "text",
            "return_token_ids": True,
        }
        try:
            data = await self._post_url(url, body)
        except ModelRequestError as exc:
            if exc.status not in (403, 404, 405):
                raise
            self._tokens_in_images = False
            warnings.warn(
                f"{url} is not served ({exc}); prompts with images go through /chat/completions, where the "
                "server renders the history from text, so a multi-turn episode may train as several rows. "
                "Start vLLM with --enable-scale-out for token-in/token-out with images.",
                stacklevel=3,
            )
            return None
        self._tokens_in_images = True
        choice = _first_choice(data, url)
        completion_ids = choice.get("token_ids")
        if completion_ids is None:
            raise TokenIdsUnavailableError(f"{url} answered without `token_ids`")
        content_logprobs = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [entry["logprob"] for entry in content_logprobs]
        text = choice.get("text") or ""
        return ModelOutput(
            text=text,
            content=text,
            prompt_ids=self._served_prompt_ids(list(prompt.ids), {}, data),
            completion_ids=completion_ids,
            prompt_images=list(prompt.images),
            finish_reason=choice.get("finish_reason"),
            logprobs=logprobs if completion_ids is not None and len(logprobs) == len(completion_ids) else None,
        )

    def _served_prompt_ids(self, sent: list[int], choice: dict[str, Any], data: dict[str, Any]) -> list[int]:
        """The ids the model saw: the server's echo when it gives one (it wins if it differs), else what we sent."""
        served = choice.get("prompt_token_ids") or data.get("prompt_token_ids")
        if served is None or served == sent:
            return sent
        if not self._warned_prompt_mismatch:
            self._warned_prompt_mismatch = True
            warnings.warn(
                f"{self.base_url} changed the prompt ids it was sent (e.g. added a BOS token); using its ids",
                stacklevel=3,
            )
        return served

    # ---- chat ------------------------------------------------------------------------------------------------

    async def _generate_chat_with_ids(
        self,
        messages: list[dict[str, Any]],
        sampling: SamplingParams,
        images: list[str],
        *,
        sent: list[int] | None = None,
    ) -> ModelOutput:
        """A prompt with images: the server renders the messages and returns the ids (module docstring)."""
        body = self._chat_request(normalize_images(messages), sampling)
        body.update({"logprobs": True, "return_token_ids": True, "skip_special_tokens": True})
        if self.dialect == "vllm":
            body["include_stop_str_in_output"] = True
        if self.extra_body:
            body.update(self.extra_body)
        url = self.base_url + "/chat/completions"
        data = await self._post("/chat/completions", body)
        choice = _first_choice(data, url)
        completion_ids, served = choice.get("token_ids"), data.get("prompt_token_ids")
        if completion_ids is None or served is None:
            raise TokenIdsUnavailableError(
                f"{url} returned no token ids for a prompt with images. Training a vision-language model on a "
                "server's samples needs `return_token_ids` on /chat/completions (vLLM >= 0.10.2); to evaluate only, "
                "give the client no tokenizer (chat mode)."
            )
        output = self._chat_output(choice)
        output.prompt_ids = served if sent is None else self._served_prompt_ids(list(sent), {}, data)
        output.completion_ids = completion_ids
        output.prompt_images = list(images)
        if output.logprobs is not None and len(output.logprobs) != len(completion_ids):
            output.logprobs = None  # a logprob that cannot be matched to its token is worse than none
        return output

    def _chat_request(self, messages: list[dict[str, Any]], sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.tools:
            body["tools"] = sampling.tools  # the server renders them and parses the calls (ModelOutput.tool_calls)
        _add_optional_sampling(body, sampling)
        return body

    def _chat_output(self, choice: dict[str, Any]) -> ModelOutput:
        message = choice.get("message") or {}
        content = message.get("content")
        content_logprobs = (choice.get("logprobs") or {}).get("content")
        return ModelOutput(
            text=content or "",
            content=content,
            reasoning=message.get("reasoning_content") or message.get("reasoning"),
            tool_calls=[_parse_tool_call(call) for call in message.get("tool_calls") or []],
            logprobs=[entry["logprob"] for entry in content_logprobs] if content_logprobs else None,
            finish_reason=choice.get("finish_reason"),
        )

    async def _generate_chat(self, messages: list[dict[str, Any]], sampling: SamplingParams) -> ModelOutput:
        self._warn_no_token_ids()
        body = self._chat_request(messages, sampling)
        if self.chat_logprobs:
            body["logprobs"] = True
        if self.extra_body:
            body.update(self.extra_body)
        data = await self._post("/chat/completions", body)
        return self._chat_output(_first_choice(data, self.base_url + "/chat/completions"))

    def _warn_no_token_ids(self) -> None:
        if self._warned_no_ids:
            return
        self._warned_no_ids = True
        warnings.warn(
            f"OpenAIClient({self.base_url!r}) has no tokenizer, so it uses /chat/completions and its outputs carry "
            "no token ids: they can be evaluated but not trained on. Pass tokenizer=... for token-in/token-out.",
            TokenIdsUnavailableWarning,
            stacklevel=4,
        )

    # ---- HTTP with retries -----------------------------------------------------------------------------------

    def _session_for_this_loop(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is not None and self._session_loop is loop and not self._session.closed:
            return self._session
        if self._session is not None and not self._session.closed:
            _abandon(self._session, self._session_loop)  # it cannot be awaited on this loop
        eager_writes.install(loop)  # Python 3.11: request bodies go out at once, as from 3.12 (module docstring)
        connector = aiohttp.TCPConnector(limit=self.max_connections, ttl_dns_cache=300, keepalive_timeout=60)
        headers = {"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"}
        self._session = aiohttp.ClientSession(
            connector=connector, headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
        )
        self._session_loop = loop
        return self._session

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._post_url(self.base_url + path, body)

    async def _post_url(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        payload = _dumps(body)  # serialized once, reused by every attempt
        session = self._session_for_this_loop()
        last: _RetryableFailure | None = None
        for attempt in range(self.max_retries + 1):
            if last is not None:
                await asyncio.sleep(self._delay(attempt - 1, last.retry_after))
            try:
                return await self._attempt(session, url, payload)
            except _RetryableFailure as failure:
                last = failure
        raise InfraError(
            f"POST {url} failed after {self.max_retries + 1} attempts; last error: {last.reason}",
            retry_after=last.retry_after,
        )

    async def _attempt(self, session: aiohttp.ClientSession, url: str, payload: bytes) -> dict[str, Any]:
        try:
            async with session.post(url, data=payload) as response:
                status, raw = response.status, await response.read()
                retry_after = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            kind = "timed out" if isinstance(exc, TimeoutError) else "connection error"
            raise _RetryableFailure(f"{kind} ({type(exc).__name__}: {exc or 'no detail'})") from exc
        if status == 200:
            try:
                return _loads(raw)
            except ValueError as exc:
                raise _RetryableFailure(f"HTTP 200 with a body that is not valid JSON: {_snippet(raw)!r}") from exc
        if status in RETRYABLE_STATUSES:
            raise _RetryableFailure(f"HTTP {status}: {_snippet(raw)!r}", _parse_retry_after(retry_after))
        raise ModelRequestError(
            f"POST {url} was rejected with HTTP {status}: {_error_message(raw)}", status=status, url=url
        )

    def _delay(self, retry_index: int, retry_after: float | None) -> float:
        """Seconds before the next attempt: the server's `Retry-After` when given, else exponential backoff.

        Jitter only lengthens the wait (never below `Retry-After`), and spreads out many clients retrying at once.
        """
        if retry_after is not None:
            return min(retry_after * (1.0 + 0.1 * random.random()), self.backoff_max)
        ceiling = min(self.backoff_base * 2**retry_index, self.backoff_max)
        return ceiling * (0.5 + 0.5 * random.random())


# ---- helpers --------------------------------------------------------------------------------------------------


def _dumps(body: dict[str, Any]) -> bytes:
    """The request as JSON (module docstring: orjson, the stdlib for what orjson refuses). Non-string keys become
    strings, as `json.dumps` makes them (a `logit_bias` keyed by token id)."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError: a >64-bit int, a lone surrogate, a type only `json` knows
        return json.dumps(body).encode()


def _loads(raw: bytes) -> Any:
    """A reply body; `ValueError` when it is not JSON."""
    try:
        return orjson.loads(raw)
    except ValueError:  # orjson.JSONDecodeError: NaN/Infinity, a >64-bit int, a UTF-16 body; `json` takes these
        return json.loads(raw)


def _add_optional_sampling(body: dict[str, Any], sampling: SamplingParams) -> None:
    # Sent only when set: a plain OpenAI endpoint rejects fields it does not know (top_k).
    if sampling.top_k > 0:
        body["top_k"] = sampling.top_k
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        body["seed"] = sampling.seed


def _first_choice(data: Any, url: str) -> dict[str, Any]:
    try:
        return data["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise InfraError(f"{url} answered without `choices`: {_snippet(json.dumps(data).encode())!r}") from exc


def _completion_logprobs(choice: dict[str, Any], completion_ids: list[int] | None) -> list[float] | None:
    values = (choice.get("logprobs") or {}).get("token_logprobs")
    if values is None or (completion_ids is not None and len(values) != len(completion_ids)):
        return None  # a logprob that cannot be matched to its token is worse than none
    return values


def _parse_tool_call(call: dict[str, Any]) -> ToolCall:
    function = call.get("function") or {}
    arguments = ToolCall.decode_arguments(function.get("arguments"))
    return ToolCall(id=call.get("id"), name=function.get("name") or "", arguments=arguments)


def _parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` is either delay-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(raw: bytes) -> str:
    """The server's own words: OpenAI/vLLM/SGLang put them in `error.message` (older vLLM: top-level `message`)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return _snippet(raw)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if data.get("message"):
            return str(data["message"])
        if data.get("detail"):
            return str(data["detail"])
    return _snippet(raw)


def _snippet(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "..."


def _abandon(session: aiohttp.ClientSession, loop: asyncio.AbstractEventLoop | None) -> None:
    """Let go of a session made on another event loop (a client reused across `asyncio.run` calls).

    If that loop still runs (another thread), the session is closed there. If it is closed, its sockets cannot be
    closed properly any more: the connector is marked closed (what aiohttp does itself for a closed loop) and the
    sockets go with the garbage collector.
    """
    if loop is not None and loop.is_running() and not loop.is_closed():
        asyncio.run_coroutine_threadsafe(session.close(), loop)
        return
    connector = session.connector
    if connector is not None:
        try:
            connector._close()  # the synchronous half of `close()`; the awaitable half needs the old loop
        except RuntimeError:  # the old loop is closed: nothing more can be done from here
            pass
    session._connector = None  # so the session does not warn "Unclosed client session" when collected
