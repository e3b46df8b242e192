"""rLLM v0.2's MCP environment (`rllm.environments.tools.mcp_env`): `MCPEnvironment` and `MCPConnectionManager`,
for code written against rLLM:

    env_args = {"mcp_server_command": "npx", "mcp_server_args": ["-y", "tavily-mcp@0.2.4"],
                "mcp_server_env": {"TAVILY_API_KEY": key}, "reward_fn": my_reward_fn}
    AgentExecutionEngine(agent_class=MCPToolAgent, env_class=MCPEnvironment, env_args=env_args, ...)
    ...
    MCPEnvironment.cleanup_global_resources()          # stops the server

The MCP protocol work is rllm's own client (`rllm.tools.mcp.MCPConnection`: the SDK's stdio transport on rllm's
background loop, an allow-listed server environment, no orphan servers), and each tool call runs through rllm's
`ToolRegistry` (JSON arguments parsed and checked against the tool's schema, a timeout). This module keeps rLLM's
shape around them:

- `MCPConnectionManager(command, args=None, env=None)` owns one connection. `start()` starts a worker thread and
  waits (through a `queue.Queue`) until the server is up and its tools are listed in `tool_map` (rLLM `MCPTool`s,
  `rllm.tools.mcp_tool`; a name with "-" is also listed with "_"). `execute_tool_calls(calls)` hands OpenAI-style
  calls (`{"id", "function": {"name", "arguments"}}`, arguments a JSON string or a dict) to the worker and returns
  `{call_id: text}`; `stop()` closes the server.
- `MCPEnvironment(task=None, mcp_server_command=None, mcp_server_args=None, mcp_server_env=None, reward_fn=None,
  max_steps=10)` shares one manager per process (a class attribute, made by the first env that names a command).
  `reset()` returns the task dict. `step(action)`: a string, a call named "finish" or the `max_steps`-th step ends
  the episode and scores the final text (the string, the finish call's `arguments["response"]`, or `str(action)`)
  with `reward_fn(task_info=task, action=text)`: `({}, reward, True, {"response", "metadata", "is_correct"})`;
  otherwise the calls run and the step returns `({"tool_outputs": {call_id: text}}, 0.0, False, {"response",
  "metadata": {}})`. `close()` leaves the shared server running; `cleanup_global_resources()` stops it.

Where rLLM and this module differ:
- the calls of one `execute_tool_calls` run at once, and so do those of several environments (rLLM's worker runs
  one request at a time); each call gets 30 s of its own (`CALL_TIMEOUT_S`);
- a call whose arguments are not valid JSON, or that names no known tool, gets an error text under its id (rLLM:
  the whole step's outputs are lost); a tool's own error is its text, as in rLLM;
- a lost server raises `rllm.errors.InfraError` from `step` (the engine retries the rollout) where rLLM returns
  empty tool outputs; any other failure of the manager still gives `{"tool_outputs": {}}`, as in rLLM;
- a second environment naming another server than the shared one raises (rLLM silently uses the first);
- the server's environment is `mcp_server_env` over the allow-listed variables of `rllm.tools.mcp.MCPServerSpec`
  (PATH, HOME, LANG, LC_ALL, PYTHONPATH, TMPDIR), not the SDK's default set;
- `reward_fn` may return a float as well as a `RewardOutput`; with no task the final text is scored against `{}`
  (rLLM then gives 0.0 without calling it); `from_dict` does not empty the dict it is given.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import sys
import threading
import warnings
from typing import Any

from rllm.compat.environments.base.base_env import BaseEnv
from rllm.errors import InfraError, RllmError
from rllm.rewards.base import to_reward_output
from rllm.tools.base import ToolRegistry, ToolResult, run_coroutine

__all__ = ["MCPConnectionManager", "MCPEnvironment"]

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 30.0  # rLLM's wait for the server to start
CALL_TIMEOUT_S = 30.0  # per tool call (rLLM: 30 s for a whole request)
_GRACE_S = 15.0  # on top, for the hops between threads and the client's own cancellation
_STOP_JOIN_S = 5  # rLLM's wait for the worker thread at stop()

Request = tuple[str, Any, "queue.Queue[tuple[str, Any]] | None"]


class MCPToolExecutionError(InfraError):
    """The MCP server could not answer a tool call (it died, or the connection broke): ours, not the policy's."""


class MCPConnectionManager:
    """One MCP server and its tools, served to any thread through a request queue and a worker thread."""

    def __init__(
        self,
        mcp_server_command: str,
        mcp_server_args: list[str] | None = None,
        mcp_server_env: dict[str, str] | None = None,
    ) -> None:
        self.mcp_server_command = mcp_server_command
        self.mcp_server_args = list(mcp_server_args or [])
        self.mcp_server_env = mcp_server_env
        # `queue.Queue` / `threading.Thread` are looked up on their modules (not imported by name), as rLLM's
        # tests patch them there.
        self.request_queue: queue.Queue[Request] = queue.Queue()
        self.worker_thread: threading.Thread | None = None
        self.connection: Any = None  # rllm.tools.mcp.MCPConnection, once started
        self.registry = ToolRegistry()  # the server's tools, under their own names; runs the calls
        self.tool_map: dict[str, Any] = {}  # name (and "_" alias) -> rLLM MCPTool, for MCPToolAgent's prompt
        self.aliases: dict[str, str] = {}  # "_" alias -> the server's name
        self.running = False

    def __repr__(self) -> str:
        return f"MCPConnectionManager({' '.join([self.mcp_server_command, *self.mcp_server_args])!r})"

    # ---- rLLM's API

    def start(self) -> None:
        """Start the worker and wait until the server is up and its tools are listed. Idempotent."""
        if self.running:
            return
        self.running = True
        self.worker_thread = threading.Thread(target=self._run_worker, name="rllm-mcp-manager", daemon=True)
        self.worker_thread.start()
        status, detail = self._ask("init", None, STARTUP_TIMEOUT_S + _GRACE_S)
        if status == "error":
            self.stop()
            from rllm.tools.mcp import MCPConnectionError

            raise MCPConnectionError(f"Failed to initialize MCP connection: {detail}")

    def stop(self) -> None:
        """Close the server and end the worker. Idempotent."""
        if not self.running:
            return
        self.running = False
        self.request_queue.put(("stop", None, None))
        if self.worker_thread:
            self.worker_thread.join(timeout=_STOP_JOIN_S)

    def execute_tool_calls(self, tool_calls: list[dict[str, Any]]) -> dict[str, str]:
        """Run OpenAI-style tool calls (all at once); return `{call_id: the tool's text}`."""
        if not self.running:
            raise MCPToolExecutionError("Connection manager not running: call start() first")
        status, detail = self._ask("execute", tool_calls, CALL_TIMEOUT_S + _GRACE_S)
        if status == "error":
            raise MCPToolExecutionError(f"Tool execution failed: {detail}")
        return detail

    # ---- the worker

    def _ask(self, command: str, data: Any, timeout_s: float) -> tuple[str, Any]:
        reply: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.request_queue.put((command, data, reply))
        try:
            return reply.get(timeout=timeout_s)
        except queue.Empty:
            return "error", f"no answer from {self!r} within {timeout_s:g} s"

    def _run_worker(self) -> None:
        """Serve requests in order until "stop"; a tool-call request is answered from its own thread, so a slow
        call does not hold up the others."""
        try:
            while True:
                command, data, reply = self.request_queue.get()
                if command == "stop":
                    return
                if command == "init":
                    self._answer(reply, self._connect)
                elif command == "execute":
                    threading.Thread(
                        target=self._answer, args=(reply, self._execute, data), name="rllm-mcp-call", daemon=True
                    ).start()
        finally:
            self._disconnect()

    @staticmethod
    def _answer(reply: queue.Queue | None, work: Any, *args: Any) -> None:
        try:
            result = ("success", work(*args))
        except Exception as exc:
            result = ("error", str(exc) or type(exc).__name__)
        if reply is not None:
            reply.put(result)

    def _connect(self) -> dict[str, Any]:
        from rllm.compat.tools.mcp_tool import MCPTool
        from rllm.tools.mcp import MCPConnection, MCPServerSpec

        spec = MCPServerSpec(
            command=self.mcp_server_command,
            args=tuple(self.mcp_server_args),
            env=self.mcp_server_env,
            startup_timeout_s=STARTUP_TIMEOUT_S,
            call_timeout_s=CALL_TIMEOUT_S,
        )
        self.connection = MCPConnection(spec)
        tools = self.connection.open()
        self.registry = ToolRegistry(tools)
        for tool in tools:
            rllm_tool = MCPTool(self.connection, tool.name, tool.description, tool.parameters)
            self.tool_map[tool.name] = rllm_tool
            alias = tool.name.replace("-", "_")
            if alias != tool.name:  # rLLM lists "tavily-search" as "tavily_search" too; calls go to the real name
                self.tool_map[alias] = rllm_tool
                self.aliases[alias] = tool.name
        logger.info("connected to MCP server %r with tools %s", self, self.registry.names())
        return self.tool_map

    def _disconnect(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.close()

    def _execute(self, tool_calls: list[dict[str, Any]]) -> dict[str, str]:
        if not isinstance(tool_calls, list):
            raise TypeError(f"tool calls must be a list of OpenAI-style calls, not {type(tool_calls).__name__}")
        results = run_coroutine(self._call_all(tool_calls))
        lost = next((result for _, result in results if result.error_kind == "infra"), None)
        if lost is not None:
            raise MCPToolExecutionError(lost.content)
        return {call_id: result.content for call_id, result in results}

    async def _call_all(self, tool_calls: list) -> list[tuple[str, ToolResult]]:
        return await asyncio.gather(*(self._call(index, call) for index, call in enumerate(tool_calls)))

    async def _call(self, index: int, call: Any) -> tuple[str, ToolResult]:
        call = call if isinstance(call, dict) else {}
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        name = function.get("name")
        name = self.aliases.get(name, name) if isinstance(name, str) else name
        arguments = function.get("arguments") or {}
        # no cap on the text: rLLM passes a tool's whole output on
        result = await self.registry.call(name, arguments, timeout_s=CALL_TIMEOUT_S + 1.0, max_result_chars=sys.maxsize)
        return str(call.get("id", index)), result  # a call without an id is answered under its position


class MCPEnvironment(BaseEnv):
    """rLLM's MCP tool environment: the task is the first observation, tool calls run on the shared MCP server, and
    the final answer is scored by `reward_fn`."""

    # one server per process, shared by every env (as in rLLM); `cleanup_global_resources()` stops it
    _connection_manager: MCPConnectionManager | None = None
    _manager_lock = threading.Lock()
    _server: tuple | None = None  # which server the shared manager runs (command, args, env)

    def __init__(
        self,
        task: dict[str, Any] | None = None,
        mcp_server_command: str | None = None,
        mcp_server_args: list[str] | None = None,
        mcp_server_env: dict[str, str] | None = None,
        reward_fn: Any = None,
        max_steps: int = 10,
    ) -> None:
        self.step_count = 0
        self.max_steps = max_steps
        self.task = task
        if reward_fn is None:
            from rllm.compat.rewards.reward_fn import zero_reward

            warnings.warn("No reward function specified, will get 0 reward.", stacklevel=2)
            reward_fn = zero_reward
        self.reward_fn = reward_fn
        self.mcp_server_command = mcp_server_command
        self.mcp_server_args = list(mcp_server_args or [])
        self.mcp_server_env = mcp_server_env
        if mcp_server_command is not None:
            self._share_manager()

    def _share_manager(self) -> None:
        server = (
            self.mcp_server_command,
            tuple(self.mcp_server_args),
            tuple(sorted((self.mcp_server_env or {}).items())),
        )
        with MCPEnvironment._manager_lock:
            if MCPEnvironment._connection_manager is None:
                manager = MCPConnectionManager(self.mcp_server_command, self.mcp_server_args, self.mcp_server_env)
                manager.start()
                MCPEnvironment._connection_manager, MCPEnvironment._server = manager, server
            elif MCPEnvironment._server is not None and MCPEnvironment._server != server:
                raise RllmError(
                    f"MCPEnvironment shares one MCP server per process and runs {MCPEnvironment._server[0]!r} "
                    f"{list(MCPEnvironment._server[1])}; call MCPEnvironment.cleanup_global_resources() before "
                    "switching to another server"
                )

    def reset(self) -> tuple[Any, dict]:
        self.step_count = 0
        return (self.task if self.task is not None else {}), {}

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        if action is None:
            action = []
        if isinstance(action, dict):
            action = [action]
        self.step_count += 1
        finish = _finish_call(action)
        if isinstance(action, str) or finish is not None or self.step_count >= self.max_steps:
            return self._final(action, finish)
        return {"tool_outputs": self._run_tools(action)}, 0.0, False, {"response": action, "metadata": {}}

    def close(self) -> None:
        """Nothing to release: the server is shared (see `cleanup_global_resources`)."""

    @staticmethod
    def cleanup_global_resources() -> None:
        """Stop the shared MCP server (rLLM's examples call this once, after the engine is done)."""
        with MCPEnvironment._manager_lock:
            manager, MCPEnvironment._connection_manager = MCPEnvironment._connection_manager, None
            MCPEnvironment._server = None
            if manager is not None:
                manager.stop()

    @staticmethod
    def is_multithread_safe() -> bool:
        return True

    @staticmethod
    def from_dict(env_args: dict[str, Any]) -> MCPEnvironment:
        """The env for one row: the MCP server settings, `reward_fn` and `max_steps` are taken out, the rest is the
        task."""
        task = dict(env_args)
        options = {
            name: task.pop(name)
            for name in ("mcp_server_command", "mcp_server_args", "mcp_server_env", "reward_fn", "max_steps")
            if name in task
        }
        return MCPEnvironment(task=task, **options)

    # ---- helpers ----------------------------------------------------------------------------------------------

    def _run_tools(self, tool_calls: list) -> dict[str, str]:
        manager = MCPEnvironment._connection_manager
        if manager is None or not isinstance(tool_calls, list):  # rLLM: a non-list action gets no outputs either
            return {}
        try:
            return manager.execute_tool_calls(tool_calls)
        except InfraError:
            raise
        except Exception as exc:  # rLLM's behaviour: the step goes on with no outputs
            logger.warning("MCP tool execution failed: %s", exc)
            return {}

    def _final(self, action: Any, finish: dict | None) -> tuple[Any, float, bool, dict]:
        response = action if isinstance(action, str) else _finish_text(finish) if finish else str(action)
        task_info = self.task if self.task is not None else {}
        output = to_reward_output(self.reward_fn(task_info=task_info, action=response), self.reward_fn)
        info = {"response": action, "metadata": output.metadata, "is_correct": output.is_correct}
        return {}, output.reward, True, info


def _function(call: Any) -> dict:
    function = call.get("function") if isinstance(call, dict) else None
    return function if isinstance(function, dict) else {}


def _finish_call(action: Any) -> dict | None:
    if not isinstance(action, list):
        return None
    return next((call for call in action if _function(call).get("name") == "finish"), None)


def _finish_text(finish: dict) -> str:
    """The finish call's `arguments["response"]`; its arguments may be a dict (rLLM's ToolAgent) or JSON text."""
    arguments = _function(finish).get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return str(arguments.get("response", "")) if isinstance(arguments, dict) else str(arguments)
