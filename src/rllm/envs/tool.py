"""`ToolEnvironment`: the env side of tool use; `MCPEnvironment`: the same with the tools of MCP servers.

Per step the action (from `ToolAgent`) holds parsed tool calls, the text outside them, and parse errors:
- calls: each runs through the registry (`ToolRegistry.call`: argument checks against the schema, a per-call
  timeout, capped results; never raises) and its result is a `role: "tool"` message in the next observation.
  A call named `finish` ends the episode with its `answer` argument as the final answer.
- a call repeated with the same arguments is not run again: the model is given the earlier result and told to use
  it (small models loop on one call); it counts as `repeated_call` in `info["tool_error_kinds"]`.
- malformed calls (truncated JSON, unknown tool, wrong argument types, huge arguments, ...) never crash anything: each
  becomes an error message the model sees, is counted in `info["tool_errors"]` (and `info["tool_error_kinds"]`), and
  the step gets `malformed_reward` (default 0.0; a small negative value teaches well-formed calls).
- no calls and no errors: the reply is the final answer, scored by `reward_fn(task, answer)`; the episode ends.
Rewards: the final answer's reward (plus any `malformed_reward`s), so the trajectory reward is what the answer earned.
`result_hint` (env arg; default none) is appended to every successful tool result, e.g. "If this answers the question,
reply with the answer": small models otherwise call the same tool again instead of answering (the embedded 0.5B
model: 24 of 24 samples after a lookup that answered the question; with the hint they answer).
`info["success"]` on the last step says whether the answer was correct; `info["tool_call_counts"]` counts, per tool of
the registry, the calls so far and those that returned without an error (`rllm.metrics`: `tool/<name>/...`).

`MCPEnvironment` starts the task's MCP server at `reset` (`MCPConnection`: stdio or streamable HTTP, an allow-listed
environment), exposes its discovered tools, re-checks them after every step (a tool whose description or schema
changed is disabled and reported in `info["disabled_tools"]`), and closes the server at `close` (no orphans).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.errors import InfraError
from rllm.rewards.base import to_reward_output
from rllm.tools.base import run_coroutine

__all__ = ["MCPEnvironment", "ToolEnvironment"]

FINISH_TOOL = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "Give your final answer and end.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    },
}


class ToolEnvironment(BaseEnv):
    """Subclasses (or env args) provide `reward_fn(task, answer)` and `make_tools(task) -> list[Tool]`."""

    reward_fn: Callable[..., Any]

    def __init__(
        self,
        task: dict,
        *,
        tool_timeout_s: float = 10.0,
        malformed_reward: float = 0.0,
        max_result_chars: int = 2000,
        result_hint: str | None = None,
    ) -> None:
        self.task, self.tool_timeout_s, self.malformed_reward = task, tool_timeout_s, malformed_reward
        self.max_result_chars, self.result_hint = max_result_chars, result_hint
        self.registry: Any = None
        self.errors: Counter[str] = Counter()
        self.results: dict[str, str] = {}  # call (name + arguments) -> its result, to answer a repeated call
        self.calls: dict[str, dict[str, int]] = {}  # tool -> {"calls", "ok"}: what info["tool_call_counts"] reports

    @classmethod
    def from_dict(cls, task: dict) -> ToolEnvironment:
        task = dict(task)
        options = {
            k: task.pop(k)
            for k in ("tool_timeout_s", "malformed_reward", "max_result_chars", "result_hint")
            if k in task
        }
        return cls(task, **options)

    def make_tools(self) -> list:
        raise NotImplementedError(f"{type(self).__name__} must define make_tools(self) -> list[Tool]")

    def reset(self) -> tuple[Any, dict]:
        from rllm.tools.base import ToolRegistry

        self.registry, self.errors, self.results, self.calls = ToolRegistry(self.make_tools()), Counter(), {}, {}
        return str(self.task["question"]), {"tools": [*self.registry.schemas(), FINISH_TOOL]}

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        action = action if isinstance(action, dict) else {"tool_calls": [], "content": str(action or ""), "errors": []}
        calls, errors = action.get("tool_calls") or [], action.get("errors") or []
        finish = next((c for c in calls if c.get("name") == "finish"), None)
        if finish is not None:
            arguments = finish.get("arguments")
            return self._final(str(arguments.get("answer", "")) if isinstance(arguments, dict) else str(arguments))
        if not calls and not errors:
            return self._final(str(action.get("content") or ""))
        messages = [self._run(call) for call in calls]
        for error in errors:
            self.errors[error.get("kind", "malformed")] += 1
            messages.append({"role": "tool", "content": f"Error: {error.get('message', 'malformed tool call')}"})
        reward = self.malformed_reward * (len(errors) + sum(m.get("is_error", False) for m in messages))
        for message in messages:
            message.pop("is_error", None)
        return messages, reward, False, self._info()

    def close(self) -> None:
        self.registry = None

    # ---- helpers ----------------------------------------------------------------------------------------------

    def _run(self, call: dict) -> dict:
        name = str(call.get("name"))
        key = json.dumps([name, call.get("arguments")], sort_keys=True, default=str)
        if key in self.results:  # small models loop on one call: say so instead of running it again
            self.errors["repeated_call"] += 1
            self._count_call(name, ok=False)
            content = f"{self.results[key]}\n(You already made this exact call. Use the result: answer now.)"
            return {"role": "tool", "name": name, "content": content, "is_error": True, **_call_id(call)}
        result = run_coroutine(
            self.registry.call(
                name, call.get("arguments") or {}, timeout_s=self.tool_timeout_s, max_result_chars=self.max_result_chars
            )
        )
        if result.error_kind == "infra":  # the tool server failed (lost connection, protocol error): ours, retried
            raise InfraError(f"tool {name!r}: {result.content}")
        if result.is_error:
            self.errors[result.error_kind or "exception"] += 1
        content = result.content
        if not result.is_error:
            self.results[key] = content
            content = f"{content}\n{self.result_hint}" if self.result_hint else content
        self._count_call(name, ok=not result.is_error)
        return {"role": "tool", "name": name, "content": content, "is_error": result.is_error, **_call_id(call)}

    def _count_call(self, name: str, *, ok: bool) -> None:
        """Per-tool counts for `info["tool_call_counts"]`; a name the registry does not know (a hallucinated tool) is
        counted in `tool_error_kinds` only, so metric names stay the tools' own."""
        if name not in self.registry:
            return
        counts = self.calls.setdefault(name, {"calls": 0, "ok": 0})
        counts["calls"] += 1
        counts["ok"] += int(ok)

    def _final(self, answer: str) -> tuple[Any, float, bool, dict]:
        reward_fn = type(self).reward_fn
        result = to_reward_output(reward_fn(self.task, answer), reward_fn)
        return "done", result.reward, True, {**self._info(), "success": result.correct, "answer": answer}

    def _info(self) -> dict:
        return {
            "tool_errors": sum(self.errors.values()),
            "tool_error_kinds": dict(self.errors),
            "tool_call_counts": {name: dict(counts) for name, counts in self.calls.items()},
        }


def _call_id(call: dict) -> dict:
    """OpenAI-style servers match a tool result to its call by id."""
    return {"tool_call_id": call["id"]} if call.get("id") else {}


class MCPEnvironment(ToolEnvironment):
    """Tools from an MCP server; subclasses define `server_spec(task) -> MCPServerSpec`."""

    def server_spec(self):
        raise NotImplementedError(f"{type(self).__name__} must define server_spec(self) -> MCPServerSpec")

    def make_tools(self) -> list:
        from rllm.tools.mcp import MCPConnection

        self.connection = MCPConnection(self.server_spec())
        return self.connection.open()

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        observation, reward, done, info = super().step(action)
        if not done:
            for name in self.connection.refresh():  # changed since discovery: disabled, reported
                self.registry.disable(name, "its description or schema changed after discovery")
            info["disabled_tools"] = sorted(getattr(self.registry, "disabled", {}) or [])
        return observation, reward, done, info

    def close(self) -> None:
        connection, self.connection = getattr(self, "connection", None), None
        if connection is not None:
            connection.close()
        super().close()
