"""`check_endpoint(base_url)`: one cheap request that tells whether an OpenAI-compatible endpoint is there before
any rollout is sent to it.

Without it an unreachable URL costs every episode its full retry budget (about 35 s with the defaults), and the run
then reports a success rate of 0 that looks like a real score. The check is one `GET {base_url}/models` with a short
timeout, no retries:

- no answer (connection refused, unknown host, timeout) or a `base_url` that is not an http(s) URL: `EndpointError`
  naming the URL and the failure;
- a 4xx other than 429 (401/403: a wrong or missing key; 404: often the API prefix `/v1` missing from the URL): the
  server is there but will refuse every request, so `EndpointError` with the status and the server's own words;
- 429 and 5xx: the server is there and busy or failing now; the rollouts' own retries deal with that, and a run whose
  every episode still fails stops with the cause (`rllm.engine.failures.raise_if_all_failed`);
- 200: the served model names, so a caller can say which names would work.

Stdlib only (urllib): it runs once, before the client's connection pool exists, from sync and async code alike.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request

from rllm.errors import RllmError

__all__ = ["EndpointError", "check_endpoint"]

PROBE_TIMEOUT_S = 5.0
_BODY_CHARS = 200
# No proxy from the environment: the client this check stands for (aiohttp) does not use one either.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class EndpointError(RllmError):
    """The endpoint cannot serve the run: unreachable, not a URL, or refusing requests (the message says which)."""


def check_endpoint(
    base_url: str,
    *,
    api_key: str | None = None,
    key_hint: str = "",
    what: str = "base_url",
    timeout: float = PROBE_TIMEOUT_S,
) -> list[str]:
    """The model names `base_url` serves (empty when its `/models` lists none or is busy), after one request; or
    `EndpointError`. `what` names the setting the URL came from and `key_hint` where the API key came from, so the
    message points at what to fix."""
    url = base_url.rstrip("/") + "/models"
    parsed = urllib.parse.urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        example = "e.g. http://localhost:8000/v1"
        raise EndpointError(f"{what}={base_url!r} is not an http(s) URL; give a server's API prefix, {example}")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with _DIRECT.open(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        return _served_anyway(exc, url, what, key_hint)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        failure = f"GET {url} failed: {_reason(exc, timeout)}"
        message = f"cannot reach {what}={base_url}: {failure}; is the server running and the URL right?"
        raise EndpointError(message) from None
    return _model_names(body)


def _served_anyway(exc: urllib.error.HTTPError, url: str, what: str, key_hint: str) -> list[str]:
    """A busy or failing server is there (the rollouts retry); a refusing one is an error."""
    if exc.code == 429 or exc.code >= 500:
        return []
    detail = _summary(exc.read())
    if exc.code in (401, 403):
        hint = f"; check the API key{f' ({key_hint})' if key_hint else ''}"
    elif exc.code == 404:
        hint = f"; is the API prefix (e.g. /v1) missing from {what}?"
    else:
        hint = ""
    raise EndpointError(f"{what}: GET {url} was refused with HTTP {exc.code} {exc.reason}: {detail}{hint}") from None


def _reason(exc: BaseException, timeout: float) -> str:
    reason = getattr(exc, "reason", exc)  # URLError wraps the socket's error
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer in {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return f"unknown host ({reason.strerror or reason})"
    return str(reason) or type(reason).__name__


def _summary(raw: bytes) -> str:
    """The server's own words: `error.message` (OpenAI, vLLM, SGLang), else the start of the body, on one line."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        text = str(error.get("message") if isinstance(error, dict) else error or data.get("detail") or text)
    text = " ".join(text.split()) or "(empty body)"
    return text if len(text) <= _BODY_CHARS else text[:_BODY_CHARS] + "..."


def _model_names(body: bytes) -> list[str]:
    try:
        data = json.loads(body)
        return [str(card["id"]) for card in data["data"] if isinstance(card, dict) and "id" in card]
    except (ValueError, KeyError, TypeError):
        return []  # a 200 that is not a model list: the server is there, which is what was asked
