"""rLLM v0.2's `ToolAgent` (`rllm.agents.tool_agent`), for code written against rLLM; it pairs with rLLM's
`ToolEnvironment` (`rllm.environments.tools.tool_env`). rllm's own tool agent, with another protocol, is
`rllm.agents.tool.ToolAgent`.

As in rLLM:
- `ToolAgent(system_prompt=TOOL_SYSTEM_PROMPT, parser_name="qwen", tools=None, tool_map=None)`: `self.tools` is a
  `MultiTool` (`rllm.tools.multi_tool`) of the named tools (`tools=["python"]`, looked up in
  `rllm.tools.tool_registry`) or of `tool_map={name: tool}` (rLLM `Tool` subclasses, or rllm's own tools), not
  both; `self.tool_parser` is `get_tool_parser(parser_name)()` ("qwen": `<tool_call>` JSON blocks; "r1":
  DeepSeek-R1's tool tokens).
- The system message is `system_prompt + tools_prompt`, where `tools_prompt` is the parser's description of the
  tools' schemas (`json.dumps(self.tools.json, indent=2)`). The schemas are not passed to the chat template: rllm's
  agent/env loop renders no tools for agents of rLLM's protocol.
- `update_from_env`: a dict with "question" becomes a user message, a dict with "tool_outputs" one
  `{"role": "tool", "content", "tool_call_id"}` message per call, a string (or any other truthy value, as `str`) a
  user message; the last step gets the reward, done and info.
- `update_from_model(response)`: the parsed calls become OpenAI-style calls `{"id": <uuid4>, "type": "function",
  "function": {"name", "arguments": <JSON string>}}`; a reply without calls (or one the parser fails on) becomes
  one "finish" call whose `arguments` is the dict `{"response": <the reply>}`. The assistant message is the reply's
  text (no `tool_calls` key), and a new `Step` records the messages (reply included), the calls, the reply and the
  observation.

The prompt text is this project's own (`rllm.agents.system_prompts.TOOL_SYSTEM_PROMPT`), not rLLM's.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from typing import Any

from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory
from rllm.compat.agents.system_prompts import TOOL_SYSTEM_PROMPT
from rllm.compat.parser import ToolParser, get_tool_parser
from rllm.compat.tools.multi_tool import MultiTool
from rllm.compat.tools.tool_base import Tool

__all__ = ["TOOL_SYSTEM_PROMPT", "MCPToolAgent", "ToolAgent", "get_tool_parser"]

logger = logging.getLogger(__name__)


class ToolAgent(BaseAgent):
    def __init__(
        self,
        system_prompt: str = TOOL_SYSTEM_PROMPT,
        parser_name: str = "qwen",
        tools: list[str] | None = None,
        tool_map: dict[str, type[Tool] | Any] | None = None,
    ) -> None:
        if tool_map is not None and tools is not None:
            raise ValueError("Cannot specify both 'tools' and 'tool_map' parameters")
        self.system_prompt = system_prompt
        self.tools = MultiTool(tool_map=tool_map) if tool_map is not None else MultiTool(tools=tools or [])
        parser_class: type[ToolParser] = get_tool_parser(parser_name=parser_name)
        self.tool_parser = parser_class()
        self.tools_prompt = self.tool_parser.get_tool_prompt(json.dumps(self.tools.json, indent=2))
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
        self.messages.extend(self._format_observation_as_messages(observation))
        self.current_observation = observation
        if self._trajectory.steps:
            step = self._trajectory.steps[-1]
            step.reward, step.done, step.info = reward, done, info

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        tool_calls = self._tool_calls(response) or [_finish_call(response)]
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

    def _tool_calls(self, response: str) -> list[dict[str, Any]]:
        """The reply's calls, OpenAI-style, with the arguments as JSON text; [] when the parser finds none or fails
        (a custom parser's exception is logged: the reply then ends the episode as a final answer, as in rLLM)."""
        try:
            parsed = self.tool_parser.parse(response)
            calls = [{"id": str(uuid.uuid4()), "type": "function", "function": call.to_dict()} for call in parsed]
        except Exception as exc:
            logger.error("Failed to parse tool calls from the response: %s", exc)
            return []
        for call in calls:
            arguments = call["function"].get("arguments")
            if isinstance(arguments, dict):
                call["function"]["arguments"] = json.dumps(arguments)
        return calls

    def _format_observation_as_messages(self, observation: Any) -> list[dict[str, Any]]:
        """The messages an observation adds to the conversation."""
        if isinstance(observation, dict):
            if "question" in observation:
                return [{"role": "user", "content": observation["question"]}]
            if "tool_outputs" in observation:
                return [
                    {"role": "tool", "content": text, "tool_call_id": call_id}
                    for call_id, text in observation["tool_outputs"].items()
                ]
            return []
        if isinstance(observation, str):
            return [{"role": "user", "content": observation}]
        if observation:
            return [{"role": "user", "content": str(observation)}]
        return []


def _finish_call(response: str) -> dict[str, Any]:
    """A reply without tool calls is the final answer: rLLM's "finish" call, with the arguments as a dict."""
    return {
        "id": str(uuid.uuid4()),
        "type": "function",
        "function": {"name": "finish", "arguments": {"response": response}},
    }


class MCPToolAgent(ToolAgent):
    """rLLM v0.2's `MCPToolAgent`: rLLM's `ToolAgent` over the tools
    of an MCP server, the agent side of `rllm.environments.tools.mcp_env.MCPEnvironment`:

        manager = MCPConnectionManager("npx", ["-y", "tavily-mcp@0.2.4"], {"TAVILY_API_KEY": key})
        manager.start()
        agent_args = {"parser_name": "qwen", "system_prompt": SEARCH_SYSTEM_PROMPT, "tool_map": manager.tool_map}
        manager.stop()                                   # the agent only needs the tools' schemas

    `MCPToolAgent(system_prompt=TOOL_SYSTEM_PROMPT, parser_name="qwen", tool_map=...)`: `tool_map` maps names to rLLM
    `MCPTool`s (or other rLLM tools); they become the agent's `tools` (a `MultiTool`), whose `json` schemas go into the
    system prompt through the tool parser's `get_tool_prompt`, as rLLM does. Everything else (parsing the reply's tool
    calls, a reply without calls becoming a "finish" call, the observations `{"question"}` / `{"tool_outputs"}`) is
    `ToolAgent`'s. The agent never calls the tools: the environment does.

    Differences from rLLM: a tool listed under two names (rLLM's manager lists "tavily-search" also as
    "tavily_search", with the same schema) is shown once in the prompt (rLLM shows it twice); `tool_map` may be left
    out (no tools; in rLLM it is required).
    """

    def __init__(
        self, system_prompt: str = TOOL_SYSTEM_PROMPT, parser_name: str = "qwen", tool_map: dict[str, Any] | None = None
    ) -> None:
        self.tool_map = dict(tool_map or {})
        super().__init__(system_prompt=system_prompt, parser_name=parser_name, tool_map=_distinct(self.tool_map))


def _distinct(tool_map: dict[str, Any]) -> dict[str, Any]:
    """`tool_map` without the entries whose schema an earlier entry already has (a tool listed under an alias)."""
    seen: list[Any] = []
    distinct = {}
    for name, tool in tool_map.items():
        schema = None if isinstance(tool, type) else getattr(tool, "json", None)
        if isinstance(schema, dict):  # a tool instance; classes are kept as they are
            if schema in seen:
                continue
            seen.append(schema)
        distinct[name] = tool
    return distinct
