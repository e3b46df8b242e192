"""`ToolAgent`: a multi-turn agent that calls tools and ends with a final answer.

The env's first observation is the question, and its info carries the tools' JSON schemas (`info["tools"]`), which
the engine renders into the prompt with the model's own chat template (`tools=` of `apply_chat_template`; a template
that ignores them, SmolLM2's, gets them in the system message: `rllm.models.chat.describe_ignored_tools`). Each reply
is parsed for tool calls: the calls an OpenAI-compatible server already parsed (`ModelOutput.tool_calls`) are used as
they are; otherwise they are parsed from the text for the template's family (`rllm.tools.parsing`, Qwen/Hermes
`<tool_call>` JSON), and a reply that is nothing but one JSON call without the tags counts as that call (small
models write it so). The action handed to the env is `{"tool_calls": [...], "content": str, "errors": [...]}`; a
reply without calls is the final answer. Tool results come back as `role: "tool"` messages.

The assistant message keeps the reply's exact text (tool-call blocks included), so every turn's prompt extends the
previous one token for token (docs/architecture.md, "Token exactness": such turns train as one row of the sampled
ids).
"""

from __future__ import annotations

import json
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.types import Action, ModelOutput, Step

__all__ = ["TOOL_SYSTEM_PROMPT", "ToolAgent"]

TOOL_SYSTEM_PROMPT = (
    "You answer questions using the tools: you do not know the facts, so look them up. Once a tool result gives "
    "you what you need, do not call the tool again: reply with the final answer only."
)


class ToolAgent(BaseAgent):
    system_prompt = TOOL_SYSTEM_PROMPT
    family = "hermes"  # how tool calls are written in the text (Qwen2.5 and Hermes templates)

    def reset(self) -> None:
        super().reset()
        self.tools: list[dict] | None = None

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict) -> None:
        if info.get("tools") is not None:
            self.tools = info["tools"]
        if self._trajectory.steps:
            step = self._trajectory.steps[-1]
            step.observation, step.reward, step.done, step.info = observation, float(reward), done, dict(info)
        if done:
            return
        if isinstance(observation, list):  # tool results (or error notes) for the calls of the last reply
            self.messages.extend(observation)
        else:
            self.messages.append({"role": "user", "content": str(observation)})

    def update_from_model(self, output: ModelOutput) -> Action:
        action = self.parse_action(output)
        self._trajectory.steps.append(Step(chat_completions=list(self.messages), model_output=output, action=action))
        message: dict[str, Any] = {"role": "assistant", "content": output.text}
        if output.tool_calls:  # a chat-mode server parsed them: it expects them back with the next request
            message["tool_calls"] = [_openai_call(call, i) for i, call in enumerate(output.tool_calls)]
        self.messages.append(message)
        return Action(action=action)

    def parse_action(self, output: ModelOutput) -> dict:
        if output.tool_calls:  # parsed by the server
            calls = [{**call.model_dump(), "id": call.id or f"call_{i}"} for i, call in enumerate(output.tool_calls)]
            return {"tool_calls": calls, "content": output.content or "", "errors": []}
        from rllm.tools.parsing import parse_bare_call, parse_tool_calls

        parsed = parse_tool_calls(output.text, family=self.family)
        bare = None if parsed.calls or parsed.errors else parse_bare_call(output.text)
        if bare is not None:  # a call written without the tags
            return {"tool_calls": [bare.model_dump()], "content": "", "errors": []}
        return {
            "tool_calls": [call.model_dump() for call in parsed.calls],
            "content": parsed.content,
            "errors": [{"kind": e.kind, "message": e.message} for e in parsed.errors],
        }


def _openai_call(call: Any, index: int) -> dict:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    return {
        "id": call.id or f"call_{index}",
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }
