"""`SWEAgent`: a multi-turn tool-calling agent that fixes a repository (R2E-Gym/DeepSWE style), for `SWEEnv`.

It is `ToolAgent` (tool schemas rendered by the model's own chat template, or appended to the system message where
the template ignores them, as SmolLM2's does: `rllm.models.chat.describe_ignored_tools`; calls parsed from
`<tool_call>` blocks or taken from an OpenAI-compatible server's parsed calls) with a software-engineering system
prompt and two kinds of context management for long tool outputs:
- `max_observation_chars`: each tool result is cut to this size as it arrives (head and tail kept, a marker says how
  much was cut). The env cuts too (`max_output_chars`); this is the agent's own, tighter budget. Cutting on arrival
  keeps every turn's prompt an extension of the previous one (docs/architecture.md, "Token exactness": a turn that
  extends the last merges into the same training row).
- `context_chars`: when set, once the tool results in the conversation exceed this many characters, the oldest
  ones (all but the last two) are replaced by a one-line note. That rewrites history, so the next turn's prompt no
  longer extends the previous one and training starts a new row there (counted as `rows_split`): off by default.
"""

from __future__ import annotations

import json
from typing import Any

from rllm.agents.tool import ToolAgent
from rllm.types import ModelOutput

__all__ = ["SWE_SYSTEM_PROMPT", "SWEAgent"]

SWE_SYSTEM_PROMPT = (
    "You are a software engineer working in a Python repository through tools. You can view and edit files, search "
    "the code, and run bash commands (there is no network). Resolve the issue you are given by changing the "
    "library's source code, never its tests. Keep each step small: look at the code the issue is about, reproduce "
    "the problem with a short script, make the smallest fix, check it with the script, then call finish. Call "
    "exactly one tool per reply."
)
_ELIDED = "[earlier tool output elided to save context; run the call again if you need it]"


class SWEAgent(ToolAgent):
    system_prompt = SWE_SYSTEM_PROMPT

    def __init__(self, max_observation_chars: int = 4000, context_chars: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_observation_chars < 200:
            raise ValueError(
                f"SWEAgent(max_observation_chars={max_observation_chars}): too small to be useful (at least 200)"
            )
        self.max_observation_chars, self.context_chars = int(max_observation_chars), context_chars

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict) -> None:
        if isinstance(observation, list):
            observation = [self._cut(message) for message in observation]
        super().update_from_env(observation, reward, done, info)
        if self.context_chars and not done:
            self._elide_old_outputs()

    def parse_action(self, output: ModelOutput) -> dict:
        action = super().parse_action(output)
        if action["tool_calls"] or action["errors"]:
            return action
        first = _leading_json_call(output.text)
        return {"tool_calls": [first], "content": "", "errors": []} if first else action

    def _cut(self, message: Any) -> Any:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            return message
        text, cap = message["content"], self.max_observation_chars
        if len(text) <= cap:
            return message
        head, tail = cap * 2 // 3, cap - cap * 2 // 3
        cut = f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[len(text) - tail :]}"
        return {**message, "content": cut}

    def _elide_old_outputs(self) -> None:
        """New message dicts, not edits in place: earlier steps keep the messages they were actually given."""
        indexes = [i for i, m in enumerate(self.messages) if m.get("role") == "tool"]
        total = sum(len(str(self.messages[i].get("content", ""))) for i in indexes)
        for i in indexes[:-2]:
            if total <= self.context_chars:
                return
            if self.messages[i].get("content") != _ELIDED:
                total -= len(str(self.messages[i]["content"])) - len(_ELIDED)
                self.messages[i] = {**self.messages[i], "content": _ELIDED}


def _leading_json_call(text: str) -> dict | None:
    """The JSON object a reply starts with, when it is a call (has a string "name"); None otherwise."""
    body = (text or "").lstrip()
    if body.startswith("```"):
        body = body.lstrip("`").removeprefix("json").lstrip()
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    return {"id": "call_0", "name": value["name"], "arguments": arguments if isinstance(arguments, dict) else {}}
