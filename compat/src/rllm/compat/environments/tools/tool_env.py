"""rLLM v0.2's `ToolEnvironment` (`rllm.environments.tools.tool_env`), for code written against rLLM:

    env_args = {"tools": ["python"], "reward_fn": math_reward_fn}
    AgentExecutionEngine(agent_class=ToolAgent, env_class=ToolEnvironment, env_args=env_args, ...)

It is the env side of rLLM's `ToolAgent` (`rllm.agents.tool_agent`) and follows rLLM's protocol, which differs from
rllm's own `rllm.envs.ToolEnvironment`: the first observation is the task dict itself; an action is a list of
OpenAI-style tool calls (`{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}`), one such
dict, or a string. `self.tools` is a `MultiTool` (`rllm.tools.multi_tool`) of `tools=[names]` or `tool_map=`
(rLLM `Tool` subclasses, or rllm's own tools). Per `step`:

- a call named "finish", a string action, or the `max_steps`-th step (default 10) ends the episode: the final text
  (the string, the finish call's `arguments["response"]`, or `str(action)`) is scored by
  `reward_fn(task_info=task, action=text)` and the step returns `({}, reward, True, {"response": action,
  "metadata": ..., "is_correct": ...})`;
- otherwise `_execute_tool_calls(calls)` runs every call, each in its own thread, through `self.tools.forward`, and
  the step returns `({"tool_outputs": {call_id: text}}, 0, False, {"response": action, "metadata": {}})`.

Where rLLM fails silently this env tells the model instead: a call whose arguments are not a JSON object, that has
no "function", or whose tool raised gets an error text under its id (rLLM loses that call's output); a finish call
whose arguments are a JSON string (rLLM raises) is read. A `reward_fn` may return a float as well as a
`RewardOutput` (`rllm.rewards.to_reward_output`); without one every reward is 0, with a warning, as in rLLM. A tool
the machine cannot run (the python tool without a sandbox: its output's `metadata["error_kind"]` is "infra") raises
`InfraError`, so the rollout is retried, not scored; an `RllmError` a tool raises (a configuration error) propagates.
"""

from __future__ import annotations

import json
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rllm.compat.environments.base.base_env import BaseEnv
from rllm.compat.tools.multi_tool import MultiTool
from rllm.errors import InfraError, RllmError
from rllm.rewards.base import to_reward_output

__all__ = ["MultiTool", "ToolEnvironment"]


class ToolEnvironment(BaseEnv):
    def __init__(
        self,
        task: dict | None = None,
        tools: list[str] | None = None,
        tool_map: dict[str, Any] | None = None,
        reward_fn: Any = None,
        max_steps: int = 10,
    ) -> None:
        if tool_map is not None and tools is not None:
            raise ValueError("Cannot specify both 'tools' and 'tool_map' parameters")
        self.step_count = 0
        self.max_steps = max_steps
        if tool_map is not None:
            self.tools = MultiTool(tool_map=tool_map)
        else:
            self.tools = MultiTool(tools=tools if tools is not None else [])
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
        outputs = self._execute_tool_calls(action)
        return {"tool_outputs": outputs}, 0, False, {"response": action, "metadata": {}}

    @staticmethod
    def from_dict(env_args: dict) -> ToolEnvironment:
        env_args = dict(env_args)
        tools = env_args.pop("tools", None)
        tool_map = env_args.pop("tool_map", None)
        reward_fn = env_args.pop("reward_fn", None)
        max_steps = env_args.pop("max_steps", 10)
        return ToolEnvironment(task=env_args, tools=tools, tool_map=tool_map, max_steps=max_steps, reward_fn=reward_fn)

    def _execute_tool_calls(self, tool_calls: list[dict[str, Any]]) -> dict[str, str]:
        """{call id: the text the model reads} for each call, the calls run concurrently (one thread each)."""
        if not tool_calls:
            return {}
        with ThreadPoolExecutor(max_workers=len(tool_calls), thread_name_prefix="rllm-tool-call") as pool:
            futures = [pool.submit(self._run_call, index, call) for index, call in enumerate(tool_calls)]
            return dict(future.result() for future in futures)

    # ---- helpers ----------------------------------------------------------------------------------------------

    def _run_call(self, index: int, call: Any) -> tuple[str, str]:
        call = call if isinstance(call, dict) else {}
        call_id = str(call.get("id", index))
        function = _function(call)
        name = function.get("name")
        arguments = function.get("arguments") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                return call_id, f"Error: the arguments of {name!r} are not valid JSON: {exc}"
        if not isinstance(arguments, dict):
            return call_id, f"Error: the arguments of {name!r} must be a JSON object"
        if not isinstance(name, str):
            return call_id, 'Error: a tool call needs {"function": {"name": <tool name>, "arguments": {...}}}'
        try:
            output = self.tools.forward(tool_name=name, **arguments)
        except RllmError:
            raise
        except Exception as exc:  # the tool failed on the model's arguments: the model reads why
            return call_id, f"Error: {type(exc).__name__} - {exc}"
        metadata = getattr(output, "metadata", None)
        if isinstance(metadata, dict) and metadata.get("error_kind") == "infra":
            raise InfraError(f"tool {name!r}: {getattr(output, 'error', output)}")
        return call_id, output.to_string() if hasattr(output, "to_string") else str(output)

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


def _function(call: dict) -> dict:
    function = call.get("function")
    return function if isinstance(function, dict) else {}
