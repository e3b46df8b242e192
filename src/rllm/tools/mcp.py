"""MCP client: the tools of a Model Context Protocol server as rllm `Tool`s, usable from sync code in any thread.

    spec = MCPServerSpec(command=sys.executable, args=("-m", "rllm.tasks.mcp_kb"))
    with MCPConnection(spec) as conn:
        tools = conn.open()                      # list[Tool]; register them in a ToolRegistry
        conn.call("lookup", {"entity": "Dexsen", "attribute": "moons"})   # -> ToolResult

How it runs. The SDK's transports and sessions are anyio async context managers that must be entered and exited
in the same task, while environments call tools from a thread pool. So one daemon thread runs one asyncio loop for
the whole process (started on first use), and each connection is one long-lived task on it (`_serve`): it enters
the transport and the `ClientSession`, initializes, lists the tools, reports ready, then serves requests from a
queue (each request a child task, so a slow call does not block the others) until `close()` asks it to stop, and
exits the contexts in that same task. Sync methods hand work over with `run_coroutine_threadsafe` and wait with a
timeout; `Tool.acall` awaits the same future from the caller's own loop without blocking it.

Failures (the `error_kind` names of `rllm.tools.base`, plus "infra"). A call that outlives its timeout returns
"timeout"; the SDK cancels the request and the session stays usable. A tool that reports `isError` (the server's
own argument validation included) returns "exception" with the server's text, which the policy should see. A
protocol error or a lost connection is "infra" (our side, not the policy's). A server that does not start within
`startup_timeout_s` raises `MCPConnectionError` (an `InfraError`) from `open()`.

Tool changes ("rug pulls"). Tools are pinned at discovery: `refresh()` lists them again and disables every tool
whose description or input schema changed, or that disappeared; a tool that appeared later is never exposed. A
disabled or unknown tool's call returns `error_kind="disabled"` / `"unknown_tool"` without reaching the server.

Cleanup (no orphan servers). The SDK's stdio transport closes the server's stdin on exit, then SIGTERMs and
SIGKILLs its process group (it starts the server in a new session). We also keep the server's pid (read from the
transport's generator frame: the SDK does not expose the process; a test pins this) and, after the contexts have
exited or when the serving task cannot be stopped, check it and kill the group ourselves if anything survives.
`close()` is idempotent; `close_all()` closes every open connection and runs at interpreter exit (atexit). If the
trainer is SIGKILLed no hook runs, but a stdio server sees EOF on stdin and exits on its own.

Environment. The server gets only the variables named in `spec.allow_env` (copied from `os.environ` when set) plus
`spec.env` - never the trainer's environment (API keys!). The SDK always adds its own "safe default" set under
that (POSIX: HOME, LOGNAME, PATH, SHELL, TERM, USER; Windows: APPDATA, PATH, USERPROFILE, ...); the ones not
allow-listed are removed by launching the server through `env -u NAME ... -- command args` (the `env` exec()s
the server, so the pid is the server's). Where no `env` program exists (Windows) those defaults do leak, and a
warning says so. HTTP servers are not ours to start, so none of this applies to `url=` specs.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Self

from rllm.errors import InfraError
from rllm.tools.base import Tool, ToolResult

__all__ = ["MCPConnection", "MCPConnectionError", "MCPServerSpec", "MCPTool", "close_all"]

logger = logging.getLogger(__name__)

_GRACE_S = 5.0  # on top of a call's own timeout, for the hop through the loop and the SDK's cancellation
_CLOSE_TIMEOUT_S = 10.0  # the SDK's stdio shutdown is bounded by ~6.5 s (2 s EOF + 2 s TERM + 2 s KILL + flush)


class MCPConnectionError(InfraError):
    """The MCP server could not be started, reached or initialized."""


@dataclass(frozen=True)
class MCPServerSpec:
    """How to reach one MCP server: `command` (+ `args`, `env`) for stdio, or `url` for streamable HTTP."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None  # set in the server's environment on top of the allow-listed names
    url: str | None = None
    allow_env: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR")
    startup_timeout_s: float = 30.0
    call_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("MCPServerSpec needs exactly one of command= (stdio) or url= (streamable HTTP)")

    def server_env(self) -> dict[str, str]:
        """The server's whole environment: the allow-listed names that are set here, then `env`."""
        base = {name: os.environ[name] for name in self.allow_env if name in os.environ}
        return base | dict(self.env or {})


# --------------------------------------------------------------------------- the background loop

_loop: asyncio.AbstractEventLoop | None = None
_loop_thread: threading.Thread | None = None
_lock = threading.Lock()
_open_connections: set[MCPConnection] = set()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _loop_thread
    with _lock:
        if _loop is None or not _loop_thread or not _loop_thread.is_alive():
            _loop = asyncio.new_event_loop()
            _loop_thread = threading.Thread(target=_loop.run_forever, name="rllm-mcp-loop", daemon=True)
            _loop_thread.start()
        return _loop


def close_all() -> None:
    """Close every open connection (registered with atexit, so interpreter exit leaves no server behind)."""
    with _lock:
        connections = list(_open_connections)
    for step in ("_begin_close", "_finish_close"):  # all at once: each server may take seconds to stop
        for conn in connections:
            try:
                getattr(conn, step)()
            except Exception:
                logger.exception("closing MCP connection %s failed", conn)


atexit.register(close_all)


# --------------------------------------------------------------------------- processes


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _kill_tree(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the SDK starts the server as a session (and group) leader
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _errlog() -> Any:
    """A stream with a file descriptor for the server's stderr (pytest's capsys replaces sys.stderr with one
    without)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            stream.fileno()
            return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # lives as long as the process


def _stdio_parameters(spec: MCPServerSpec):
    from mcp.client.stdio import StdioServerParameters, get_default_environment

    env = spec.server_env()
    command = spec.command
    if not os.path.isabs(command):
        command = shutil.which(command, path=env.get("PATH", os.defpath)) or command
    args = list(spec.args)
    extra = sorted(set(get_default_environment()) - set(env))
    if extra:
        env_program = shutil.which("env", path=os.defpath) or shutil.which("env")
        if env_program:
            unset = [part for name in extra for part in ("-u", name)]
            command, args = env_program, [*unset, "--", command, *args]
        else:
            logger.warning("no `env` program: the MCP server also inherits %s (the SDK's defaults)", extra)
    return StdioServerParameters(command=command, args=args, env=env)


# --------------------------------------------------------------------------- tools and results


def _to_tool_result(result: Any) -> ToolResult:
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'non-text')} content omitted]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    content = "\n".join(parts)
    if result.is_error:
        return ToolResult(content or "the tool reported an error", is_error=True, error_kind="exception")
    return ToolResult(content)


class MCPTool(Tool):
    """One tool of an MCP server, as discovered; calls go through its connection."""

    def __init__(self, connection: MCPConnection, name: str, description: str, parameters: dict[str, Any]):
        self.name = name
        self.description = description
        self.parameters = parameters
        self.connection = connection

    def call(self, **kwargs: Any) -> ToolResult:
        return self.connection.call(self.name, kwargs)

    async def acall(self, **kwargs: Any) -> ToolResult:
        return await self.connection.acall(self.name, kwargs)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r})"


# --------------------------------------------------------------------------- the connection


class MCPConnection:
    """One live MCP session, usable from sync code in any thread (and from async code via `acall`)."""

    def __init__(self, spec: MCPServerSpec):
        self.spec = spec
        self.pid: int | None = None  # the stdio server's pid while it runs
        self.disabled: dict[str, str] = {}  # tool name -> why
        self.new_tools: list[str] = []  # listed after discovery; never exposed
        self._pinned: dict[str, tuple[str, str]] = {}  # name -> (description, canonical input schema)
        self._tools: list[MCPTool] = []
        self._ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        self._serving: concurrent.futures.Future[None] | None = None
        self._queue: asyncio.Queue | None = None
        self._closed = False
        self._open_lock = threading.Lock()

    def __repr__(self) -> str:
        target = self.spec.url or " ".join([self.spec.command or "", *self.spec.args])
        return f"MCPConnection({target!r}, pid={self.pid})"

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- sync API

    def open(self) -> list[Tool]:
        """Start (or connect to) the server, initialize, and discover its tools. Idempotent."""
        if self._closed:
            raise MCPConnectionError("this MCPConnection is closed; make a new one")
        with self._open_lock:
            if self._serving is None:
                loop = _background_loop()
                with _lock:
                    _open_connections.add(self)
                self._serving = asyncio.run_coroutine_threadsafe(self._serve(), loop)
        try:
            listed = self._ready.result(timeout=self.spec.startup_timeout_s)
        except concurrent.futures.TimeoutError:
            self.close()
            raise MCPConnectionError(f"{self!r} did not start within {self.spec.startup_timeout_s} s") from None
        except Exception as exc:
            self.close()
            raise MCPConnectionError(f"{self!r} failed to start: {exc!r}") from exc
        if not self._tools:
            for tool in listed:
                self._pinned[tool.name] = _fingerprint(tool)
                schema = tool.input_schema or {"type": "object", "properties": {}}
                self._tools.append(MCPTool(self, tool.name, tool.description or "", schema))
        return list(self._tools)

    @property
    def tools(self) -> list[Tool]:
        return [t for t in self._tools if t.name not in self.disabled]

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float | None = None) -> ToolResult:
        """Call a discovered tool and wait for it; never raises for a tool's or the server's failure."""
        if threading.current_thread() is _loop_thread:
            raise RuntimeError("MCPConnection.call would block the MCP loop; use `await acall(...)` there")
        started = self._start_call(name, arguments, timeout_s)
        if isinstance(started, ToolResult):
            return started
        future, timeout = started
        try:
            return future.result(timeout=timeout + _GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return _timed_out(name, timeout)

    async def acall(self, name: str, arguments: dict[str, Any], timeout_s: float | None = None) -> ToolResult:
        """`call` for async code: awaits from the caller's loop without blocking it."""
        started = self._start_call(name, arguments, timeout_s)
        if isinstance(started, ToolResult):
            return started
        future, timeout = started
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout + _GRACE_S)
        except TimeoutError:
            return _timed_out(name, timeout)

    def _start_call(self, name: str, arguments: dict[str, Any], timeout_s: float | None):
        """The refusal for a tool that may not be called, or (the request's future on the MCP loop, its timeout)."""
        refused = self._refuse(name)
        if refused is not None:
            return refused
        timeout = self.spec.call_timeout_s if timeout_s is None else timeout_s
        request = self._request("call", name, arguments, timeout=timeout)
        return asyncio.run_coroutine_threadsafe(request, _background_loop()), timeout

    def refresh(self) -> list[str]:
        """List the tools again; disable (and return) every discovered tool that changed or vanished."""
        if not self._pinned:
            raise MCPConnectionError("refresh() before open()")
        future = asyncio.run_coroutine_threadsafe(
            self._request("list", timeout=self.spec.call_timeout_s), _background_loop()
        )
        listed = future.result(timeout=self.spec.call_timeout_s + _GRACE_S)
        if isinstance(listed, ToolResult):  # the listing itself failed
            raise MCPConnectionError(f"tools/list failed: {listed.content}")
        now = {tool.name: _fingerprint(tool) for tool in listed}
        changed = []
        for name, pinned in self._pinned.items():
            if name in self.disabled:
                continue
            reason = (
                "removed by the server" if name not in now else "changed since discovery" if now[name] != pinned else ""
            )
            if reason:
                self.disabled[name] = reason
                changed.append(name)
                logger.warning("MCP tool %r %s: disabled", name, reason)
        new = sorted(set(now) - set(self._pinned) - set(self.new_tools))
        if new:
            logger.warning("MCP server added tools %s after discovery: not exposed", new)
            self.new_tools.extend(new)
        return changed

    def close(self) -> None:
        """Stop the session and the server process. Idempotent; safe from any thread but the MCP loop's."""
        self._begin_close()
        self._finish_close()

    def _begin_close(self) -> None:
        self._closed = True
        serving, loop = self._serving, _loop
        if serving is None or loop is None or serving.done():
            return
        if self._queue is not None and self._ready.done():
            loop.call_soon_threadsafe(self._queue.put_nowait, None)  # _serve exits its contexts itself
        else:  # still starting: cancel the task (the SDK's shutdown is shielded); _reap kills what is left
            serving.cancel()

    def _finish_close(self) -> None:
        serving = self._serving
        if serving is not None:
            with contextlib.suppress(Exception, concurrent.futures.CancelledError):
                serving.result(timeout=_CLOSE_TIMEOUT_S)
            if not serving.done():
                logger.warning("%r did not stop within %s s; killing the server", self, _CLOSE_TIMEOUT_S)
                serving.cancel()
        self._reap()
        with _lock:
            _open_connections.discard(self)

    # ---- inside the loop

    def _refuse(self, name: str) -> ToolResult | None:
        if self._closed or self._serving is None:
            return ToolResult("the MCP connection is closed", is_error=True, error_kind="infra")
        if name in self.disabled:
            return ToolResult(f"tool {name!r} is disabled: {self.disabled[name]}", is_error=True, error_kind="disabled")
        if name not in self._pinned:
            known = ", ".join(n for n in self._pinned if n not in self.disabled)
            return ToolResult(f"unknown tool {name!r}; available: {known}", is_error=True, error_kind="unknown_tool")
        return None

    async def _request(self, kind: str, *payload: Any, timeout: float) -> Any:
        if self._queue is None or self._closed:
            return ToolResult("the MCP connection is closed", is_error=True, error_kind="infra")
        done = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((kind, payload, timeout, done))
        return await done

    def _transport(self):
        if self.spec.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.spec.url)
        from mcp.client.stdio import stdio_client

        return stdio_client(_stdio_parameters(self.spec), errlog=_errlog())

    async def _serve(self) -> None:
        import anyio
        from mcp import ClientSession

        self._queue = asyncio.Queue()
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = self._transport()
                read, write = await stack.enter_async_context(transport)
                self.pid = _server_pid(transport)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await _list_all(session)
                self._ready.set_result(listed)
                async with anyio.create_task_group() as group:
                    while (request := await self._queue.get()) is not None:
                        group.start_soon(self._handle, session, *request)
                    group.cancel_scope.cancel()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                logger.warning("MCP session %r ended with an error: %r", self, exc)
        finally:
            self._closed = True
            while not self._queue.empty():
                if (request := self._queue.get_nowait()) is not None and not request[-1].done():
                    request[-1].set_result(ToolResult("the MCP connection closed", is_error=True, error_kind="infra"))

    async def _handle(self, session: Any, kind: str, payload: tuple, timeout: float, done: asyncio.Future) -> None:
        from mcp import MCPError
        from mcp_types import REQUEST_TIMEOUT

        result: Any = ToolResult("the MCP connection closed", is_error=True, error_kind="infra")
        try:
            if kind == "list":
                result = await _list_all(session, timeout)
            else:
                name, arguments = payload
                result = _to_tool_result(await session.call_tool(name, arguments, read_timeout_seconds=timeout))
        except MCPError as exc:
            if exc.error.code == REQUEST_TIMEOUT:
                result = ToolResult(f"timeout: took longer than {timeout:g} s", is_error=True, error_kind="timeout")
            else:
                result = ToolResult(f"MCP error: {exc.error.message}", is_error=True, error_kind="infra")
        except Exception as exc:
            result = ToolResult(f"MCP connection error: {exc!r}", is_error=True, error_kind="infra")
        finally:  # also when close() cancels the call: its caller gets an answer at once
            if not done.done():
                done.set_result(result)

    def _reap(self) -> None:
        pid = self.pid
        if pid is None:
            return
        deadline = time.monotonic() + 2.0
        while _alive(pid) and time.monotonic() < deadline and self._serving is not None and not self._serving.done():
            time.sleep(0.02)
        if _alive(pid):
            logger.warning("MCP server pid %d outlived its session; killing its process group", pid)
            _kill_tree(pid)
            deadline = time.monotonic() + 2.0
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.pid = None


def _fingerprint(tool: Any) -> tuple[str, str]:
    return tool.description or "", json.dumps(tool.input_schema or {}, sort_keys=True)


async def _list_all(session: Any, timeout: float | None = None) -> list[Any]:
    import anyio
    from mcp_types import PaginatedRequestParams

    tools, cursor = [], None
    with anyio.fail_after(timeout) if timeout else contextlib.nullcontext():
        while True:
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            if not (cursor := page.next_cursor):
                return tools


def _server_pid(transport: Any) -> int | None:
    """The stdio server's pid: the SDK keeps the process in its transport generator's frame, and nowhere public."""
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    process = frame.f_locals.get("process") if frame is not None else None
    return getattr(process, "pid", None)


def _timed_out(name: str, timeout: float) -> ToolResult:
    return ToolResult(f"timeout: {name} took longer than {timeout} s", is_error=True, error_kind="timeout")
