"""rLLM v0.2's `ToolAgent` (`rllm.agents.tool_agent`), for code written against rLLM; it pairs with rLLM's
`ToolEnvironment` (`rllm.environments.tools.tool_env`). rllm's own tool agent, with another protocol, is
`rllm.agents.tool.ToolAgent`.

As in rLLM:
- `ToolAgent(system_prompt=TOOL_SYSTEM_PROMPT, parser_name="qwen", tools=None, tool_map=None)`; `tools` (names)
  and `tool_map` resolve as in `rllm.environments.tools.tool_set`, not both.
- The system message is `system_prompt + tools_prompt`, the Hermes/Qwen tool block with the tools' schemas as one
  indented JSON array (rLLM's `QwenToolParser.get_tool_prompt`). The schemas are not passed to the chat template.
- `update_from_env`: a dict with "question" becomes a user message, a dict with "tool_outputs" one
  `{"role": "tool", "content", "tool_call_id"}` message per call, a string (or any other truthy value, as `str`) a
  user message; the last step gets the reward, done and info.
- `update_from_model(response)`: the `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks become
  OpenAI-style calls `{"id": <uuid4>, "type": "function", "function": {"name", "arguments": <JSON string>}}`; a
  reply without calls becomes one "finish" call whose `arguments` is the dict `{"response": <the reply>}`. The
  assistant message is the reply's text (no `tool_calls` key), and a new `Step` records the messages (reply
  included), the calls, the reply and the observation.

Parsing is rllm's (`rllm.tools.parsing`, family "hermes", the same format). It differs from rLLM's `QwenToolParser`
only on malformed text: a call without "arguments" is a call with none (rLLM: every call of that reply is
dropped), "arguments" given as a JSON string or spelled "parameters" is accepted, and a block that is not valid
JSON is skipped, keeping the others (as in rLLM). parser_name "r1" (DeepSeek-R1's tool tokens) is not available.

One name differs: rLLM keeps the tools as `self.tools` (a `MultiTool`); here they are `self.tool_registry` (a
`rllm.tools.ToolRegistry`), because rllm's agent/env loop renders an agent's `tools` attribute into the chat
template, and rLLM's prompt already lists them in the system message.
"""

from __future__ import annotations

import copy
import json
import sys
import uuid
from typing import Any

from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory
from rllm.compat.environments.tools.tool_set import make_tool_registry

__all__ = ["TOOL_SYSTEM_PROMPT", "ToolAgent"]

TOOL_SYSTEM_PROMPT = (
    "You are a tool agent. You are given a task to complete. You have a set of tools at your disposal. Before you "
    "use the tools, outputting your thoughts before calling the tools. \n"
)
PARSERS = ("qwen",)


class ToolAgent(BaseAgent):
    def __init__(
        self,
        system_prompt: str = TOOL_SYSTEM_PROMPT,
        parser_name: str = "qwen",
        tools: list[str] | None = None,
        tool_map: dict[str, Any] | None = None,
    ) -> None:
        from rllm.tools.parsing import tools_system_prompt

        if parser_name not in PARSERS:
            nearest = " (DeepSeek-R1's tool-call tokens are not supported)" if parser_name == "r1" else ""
            raise ValueError(
                f"tool parser {parser_name!r} is not available in rllm{nearest}; the parsers are: {', '.join(PARSERS)}"
            )
        self.system_prompt = system_prompt
        self.parser_name = parser_name
        self.tool_registry = make_tool_registry(tools, tool_map)
        schemas = self.tool_registry.schemas()
        self.tools_prompt = "\n\n" + tools_system_prompt(schemas, listing="\n" + json.dumps(schemas, indent=2))
        self._trajectory = Trajectory()
        self.messages: list[dict[str, Any]] = []
        self.current_observation: Any = None
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        self.messages = [{"role": "system", "content": self.system_prompt + self.tools_prompt}]

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        return self.messages

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        self.messages.extend(_observation_messages(observation))
        self.current_observation = observation
        if self._trajectory.steps:
            step = self._trajectory.steps[-1]
            step.reward, step.done, step.info = reward, done, info

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        from rllm.tools.parsing import parse_tool_calls

        parsed = parse_tool_calls(response, family="hermes", max_calls=sys.maxsize)
        tool_calls: list[dict[str, Any]] = [
            {
                "id": str(uuid.uuid4()),
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments_text(call.arguments)},
            }
            for call in parsed.calls
        ]
        if not tool_calls:
            tool_calls = [
                {
                    "id": str(uuid.uuid4()),
                    "type": "function",
                    "function": {"name": "finish", "arguments": {"response": response}},
                }
            ]
        self.messages.append({"role": "assistant", "content": response})
        self._trajectory.steps.append(
            Step(
                chat_completions=copy.deepcopy(self.chat_completions),
                action=tool_calls,
                model_response=response,
                observation=self.current_observation,
            )
        )
        return Action(action=tool_calls)


def _observation_messages(observation: Any) -> list[dict[str, Any]]:
    if isinstance(observation, dict):
        if "question" in observation:
            return [{"role": "user", "content": observation["question"]}]
        if "tool_outputs" in observation:
            return [{"role": "tool", "content": text, "tool_call_id": call_id}
                    for call_id, text in observation["tool_outputs"].items()]  # fmt: skip
        return []
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    if observation:
        return [{"role": "user", "content": str(observation)}]
    return []


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
