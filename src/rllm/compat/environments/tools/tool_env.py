"""rLLM v0.2's `ToolEnvironment` (`rllm.environments.tools.tool_env`), for code written against rLLM:

    env_args = {"tools": ["python"], "reward_fn": math_reward_fn}
    AgentExecutionEngine(agent_class=ToolAgent, env_class=ToolEnvironment, env_args=env_args, ...)

It is the env side of rLLM's `ToolAgent` (`rllm.agents.tool_agent`) and follows rLLM's protocol, which differs from
rllm's own `rllm.envs.ToolEnvironment`: the first observation is the task dict itself; an action is a list of
OpenAI-style tool calls (`{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}`), one such
dict, or a string. Per `step`:

- a call named "finish", a string action, or the `max_steps`-th step (default 10) ends the episode: the final text
  (the string, the finish call's `arguments["response"]`, or `str(action)`) is scored by
  `reward_fn(task_info=task, action=text)` and the step returns `({}, reward, True, {"response": action,
  "metadata": ..., "is_correct": ...})`;
- otherwise every call runs (concurrently) and the step returns `({"tool_outputs": {call_id: text}}, 0, False,
  {"response": action, "metadata": {}})`.

The tools are rllm's, run by rllm's `ToolRegistry` (see `rllm.environments.tools.tool_set` for the names and the
python tool, which runs in rllm's sandbox). Where rLLM fails silently this env tells the model instead: a call whose
arguments are not valid JSON (rLLM drops that call's output), a call without "id" or "function" (rLLM loses it)
or naming an unknown tool gets an error text under its id; a finish call whose arguments are a JSON string (rLLM
raises) is read. A `reward_fn` may return a float as well as a `RewardOutput` (`rllm.rewards.to_reward_output`);
without one every reward is 0, with a warning, as in rLLM. A tool the machine cannot run (no sandbox) raises
`InfraError`: the rollout is retried, not scored.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

from rllm.compat.environments.base.base_env import BaseEnv
from rllm.compat.environments.tools.tool_set import make_tool_registry
from rllm.errors import InfraError
from rllm.rewards.base import to_reward_output
from rllm.tools.base import run_coroutine

__all__ = ["ToolEnvironment"]

# Above the python tool's own limit (its `timeout`, at most 60 s), so a long program is reported by the sandbox.
TOOL_TIMEOUT_S = 75.0


class ToolEnvironment(BaseEnv):
    def __init__(
        self,
        task: dict | None = None,
        tools: list[str] | None = None,
        tool_map: dict[str, Any] | None = None,
        reward_fn: Any = None,
        max_steps: int = 10,
    ) -> None:
        self.step_count = 0
        self.max_steps = max_steps
        self.tool_registry = make_tool_registry(tools, tool_map)
        self.task = task
        if reward_fn is None:
            from rllm.compat.rewards.reward_fn import zero_reward

            warnings.warn("No reward function specified, will get 0 reward.", stacklevel=2)
            reward_fn = zero_reward
        self.reward_fn = reward_fn

    def reset(self) -> tuple[Any, dict]:
        self.step_count = 0
        return self.task, {}

    def step(self, action: list[dict] | str | dict | None) -> tuple[Any, float, bool, dict]:
        if action is None:
            action = []
        if isinstance(action, dict):
            action = [action]
        self.step_count += 1
        finish = None
        if isinstance(action, list):
            finish = next((c for c in action if isinstance(c, dict) and _function(c).get("name") == "finish"), None)
        if self.step_count >= self.max_steps or isinstance(action, str) or finish is not None:
            return self._final(action, finish)
        outputs = run_coroutine(self._run_calls(action))
        return {"tool_outputs": outputs}, 0.0, False, {"response": action, "metadata": {}}

    @staticmethod
    def from_dict(env_args: dict) -> ToolEnvironment:
        env_args = dict(env_args)
        tools = env_args.pop("tools", None)
        tool_map = env_args.pop("tool_map", None)
        reward_fn = env_args.pop("reward_fn", None)
        max_steps = env_args.pop("max_steps", 10)
        return ToolEnvironment(task=env_args, tools=tools, tool_map=tool_map, max_steps=max_steps, reward_fn=reward_fn)

    # ---- helpers ----------------------------------------------------------------------------------------------

    def _final(self, action: Any, finish: dict | None) -> tuple[Any, float, bool, dict]:
        if isinstance(action, str):
            response = action
        elif finish is not None:
            arguments = _function(finish).get("arguments", {})
            if isinstance(arguments, str):  # a finish call the model wrote itself: the arguments are JSON text
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {}
            response = arguments.get("response", "") if isinstance(arguments, dict) else ""
        else:
            response = str(action)
        task_info = self.task if self.task is not None else {}
        output = to_reward_output(self.reward_fn(task_info=task_info, action=response), self.reward_fn)
        return (
            {},
            output.reward,
            True,
            {"response": action, "metadata": output.metadata, "is_correct": output.is_correct},
        )

    async def _run_calls(self, calls: list) -> dict[str, str]:
        async def run(index: int, call: Any) -> tuple[str, str]:
            call = call if isinstance(call, dict) else {}
            function = _function(call)
            result = await self.tool_registry.call(
                function.get("name"), function.get("arguments") or {}, timeout_s=TOOL_TIMEOUT_S
            )
            if result.error_kind == "infra":
                raise InfraError(f"tool {function.get('name')!r}: {result.content}")
            return str(call.get("id", index)), result.content

        return dict(await asyncio.gather(*(run(i, call) for i, call in enumerate(calls))))


def _function(call: dict) -> dict:
    function = call.get("function")
    return function if isinstance(function, dict) else {}
