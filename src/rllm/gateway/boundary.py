"""Checks at the HTTP boundary, shared by the gateway (`rllm serve gateway`) and the viewer (`rllm view`): what a
request must be before any of it is served. Pure functions, no server: both servers call them, tests call them
directly.

Threat model (docs/agents/openai-sdk.md, "Security: who can reach the gateway"): both servers listen on 127.0.0.1
by default, for the user's own processes. What can still reach them is a web page in the user's browser: it can
send "simple" cross-site requests (a POST with a `text/plain` body needs no CORS preflight) and, by DNS rebinding,
make its own domain name resolve to 127.0.0.1 so that its requests count as same-origin. Hence:

- `HostCheck`: the `Host` header must name the server itself (a loopback name when bound to loopback, the bound
  address otherwise, any IP literal when bound to every interface) or a name the user allowed. A rebound page
  sends its own domain name there, so it is refused; an IP literal cannot be rebound.
- `parse_json_body`: the body must be JSON with finite numbers (no NaN/Infinity), nested at most `MAX_JSON_DEPTH`
  deep, with no lone UTF-16 surrogates in its strings (they cannot be encoded: rendering or logging them would fail).
- `json_safe`: what the servers send back is strict JSON too: non-finite numbers are written as the strings
  "NaN", "Infinity", "-Infinity" (the encoding `rllm view` already used), so `jq`, browsers and strict parsers read it.
"""

from __future__ import annotations

import ipaddress
import json
import math
import socket
from collections.abc import Iterable
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "BodyError", "HostCheck", "json_safe", "parse_json_body"]

MAX_JSON_DEPTH = 64  # a chat request is ~6 deep (messages, parts, tool calls, arguments); far below any recursion limit
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})


class BodyError(ValueError):
    """A request body that is not what the server accepts; `param` names the field when one is at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


# ---- Host ---------------------------------------------------------------------------------------------------------


class HostCheck:
    """Which `Host` headers a server bound to `bound_host` answers (module docstring). `allowed`: more names (a
    reverse proxy's, a machine name); "*" turns the check off."""

    def __init__(self, bound_host: str, allowed: Iterable[str] = ()) -> None:
        self.bound_host = bound_host
        extra = {_normalize(name) for name in allowed if name.strip()}
        self.off = "*" in extra
        self.any_ip = bound_host in _ANY_ADDRESS
        names = set(extra)
        if self.any_ip:
            names |= _LOOPBACK_NAMES | {_normalize(socket.gethostname())}
        elif _is_loopback(bound_host):
            names |= _LOOPBACK_NAMES | {_normalize(bound_host)}
        else:
            names.add(_normalize(bound_host))
        self.names = frozenset(names)

    def refusal(self, host_header: str | None) -> str | None:
        """None when `host_header` may be served, else the one-line reason (for a 403 body)."""
        if self.off or host_header is None:  # no Host: not a browser (every browser sends one)
            return None
        name = _host_name(host_header)
        if name in self.names or (self.any_ip and _is_ip(name)):
            return None
        return (
            f"Host {host_header!r} is not this server's address (a page of another site may be reaching it through "
            f"DNS rebinding); use http://{_url_host(self.bound_host)}:<port>, or allow the name with --allow-host"
        )


def _host_name(header: str) -> str:
    """The name of a `Host` header: `[::1]:8090` -> `::1`, `LocalHost.:80` -> `localhost`."""
    header = header.strip()
    if header.startswith("["):
        return _normalize(header[1:].partition("]")[0])
    if header.count(":") == 1:
        header = header.partition(":")[0]
    return _normalize(header)


def _normalize(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    name = _normalize(host)
    return name == "localhost" or (_is_ip(name) and ipaddress.ip_address(name).is_loopback)


def _url_host(host: str) -> str:
    if host in _ANY_ADDRESS:
        return "<this machine's address>"
    return f"[{host}]" if ":" in host else host


# ---- request bodies -----------------------------------------------------------------------------------------------


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, or `BodyError` saying what is wrong with it (module docstring)."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BodyError(f"the request body is nested too deep (at most {MAX_JSON_DEPTH} levels)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise BodyError(f"the request body is not valid JSON ({exc})") from None
    _check_tree(value)
    return value


def _check_tree(value: Any) -> None:
    """Depth, non-finite numbers (`NaN`, `Infinity`, `1e999`: Python's parser takes them, strict JSON has none) and
    lone surrogates, each named by its path; walked without recursion (a deep value must not overflow the walker)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BodyError(f"the request body is nested too deep (at most {MAX_JSON_DEPTH} levels)")
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, float) and not math.isfinite(item):
            raise BodyError(f"`{path or 'the request body'}` is {item}, not a finite number", param=_field(path))
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, path or "a key")
                stack.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = path or "the request body"
        raise BodyError(
            f"{where} contains a lone UTF-16 surrogate ({text[exc.start]!r}), which is not Unicode text: "
            "send valid UTF-8 (pair the surrogate or drop it)",
            param=_field(path),
        ) from None


def _field(path: str) -> str | None:
    """The top-level field of a path (`messages[0].content` -> `messages`): OpenAI errors name that one."""
    return path.partition(".")[0].partition("[")[0] or None


# ---- responses ----------------------------------------------------------------------------------------------------


def json_safe(value: Any) -> Any:
    """`value` with NaN and infinities as the strings "NaN", "Infinity", "-Infinity", so `json.dumps(...,
    allow_nan=False)` accepts it (module docstring)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value
