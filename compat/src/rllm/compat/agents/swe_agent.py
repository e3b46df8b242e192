"""rLLM v0.2's `SWEAgent` (DeepSWE's agent), for `rllm.environments.swe.swe.SWEEnv`.

As in rLLM:
- `SWEAgent(use_fn_calling=False, format_model_response=False, scaffold="r2egym")`; `scaffold` is "r2egym" or
  "sweagent" (the tools of `SWEEnv`'s scaffold of the same name).
- The conversation starts with a system message describing the tools; the first observation (the issue) is put in a
  user prompt; each later one (a tool's output) is a user message. When the env's info has `max_steps`, the steps
  remaining are appended; with `info["cur_tokens"]` past 28000, a warning to submit.
- A reply's action is its first R2E-Gym XML call (`<function=NAME><parameter=KEY>VALUE</parameter>...</function>`,
  the text before it the thought), handed to the env as that XML. With `use_fn_calling`, the call is read from the
  reply's `<tool_call>{"name": ..., "arguments": ...}</tool_call>` block instead (rllm's Hermes/Qwen parser), and
  the tools are offered to the model as JSON schemas (`tools`), rendered by its chat template; the action handed to
  the env is still the XML. `format_model_response` rewrites the assistant message as thought + XML.
The prompts are this project's own wording (`rllm.agents.swe_agent.system_prompt(scaffold)`).
"""

from __future__ import annotations

import json
from typing import Any

from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory
from rllm.compat.environments.swe.swe import SCAFFOLDS, parse_xml_action, rllm_tool_schemas, xml_action

__all__ = ["TOKEN_WARNING_THRESHOLD", "SWEAgent", "parse_xml_response", "system_prompt"]

TOKEN_WARNING_THRESHOLD = 28000

_INTRO = (
    "You are a software engineer fixing an issue in a Python repository checked out at /testbed (the working "
    "directory; there is no network). You work through the tools you are given, one call per reply."
)
_XML_FORMAT = (
    "Write a short thought, then exactly one call in this format (each value as plain text, no quoting):\n"
    "<function=TOOL_NAME>\n<parameter=PARAMETER_NAME>value</parameter>\n...\n</function>"
)
_FN_FORMAT = "Write a short thought, then exactly one tool call."
_USER_PROMPT = (
    "Here is the issue:\n<github_issue>\n{problem_statement}\n</github_issue>\n\n"
    "Change the non-test source files under /testbed so that the issue is resolved. The tests are taken care of: do "
    "not edit them. A good path: find the code the issue is about, write a small script that shows the problem, "
    "fix the code, run the script again to confirm the fix, think about edge cases, then submit with the {finish} "
    "tool."
)


def system_prompt(scaffold: str, use_fn_calling: bool = False) -> str:
    """The system message: the task, the tools of `scaffold` (their parameters from rllm's schemas), the format."""
    if use_fn_calling:
        return f"{_INTRO}\n\n{_FN_FORMAT}"
    tools = "\n\n".join(_describe(schema["function"]) for schema in rllm_tool_schemas(scaffold))
    return f"{_INTRO}\n\nThe tools:\n\n{tools}\n\n{_XML_FORMAT}"


def _describe(function: dict) -> str:
    lines = [f"## {function['name']}", function["description"]]
    required = set(function["parameters"].get("required", []))
    for name, spec in function["parameters"]["properties"].items():
        kind = spec.get("type", "string")
        choices = f" One of: {', '.join(spec['enum'])}." if "enum" in spec else ""
        need = "required" if name in required else "optional"
        text = f"{spec.get('description', '')}{choices}".strip()
        lines.append(f"- {name} ({kind}, {need})" + (f": {text}" if text else ""))
    return "\n".join(lines)


def parse_xml_response(response_text: str) -> tuple[str, str]:
    """(thought, action): the text before the first `<function=...>...</function>` block, and that call in XML
    ("" when the reply has none; the whole reply is then the thought)."""
    start = response_text.find("<function=")
    name, parameters = parse_xml_action(response_text)
    if not name:
        return response_text.strip(), ""
    return response_text[:start].strip(), xml_action(name, parameters)


def _parse_fn_call(response_text: str) -> tuple[str, str]:
    """(thought, action) from a reply whose call is a `<tool_call>` JSON block (the first call counts)."""
    from rllm.tools.parsing import parse_bare_call, parse_tool_calls

    parsed = parse_tool_calls(response_text, family="hermes")
    call = parsed.calls[0] if parsed.calls else parse_bare_call(response_text)
    if call is None:
        return parsed.content or response_text.strip(), ""
    arguments = call.arguments if isinstance(call.arguments, dict) else _loose_json(call.arguments)
    return parsed.content, xml_action(call.name, arguments)


def _loose_json(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class SWEAgent(BaseAgent):
    def __init__(
        self, use_fn_calling: bool = False, format_model_response: bool = False, scaffold: str = "r2egym"
    ) -> None:
        if scaffold not in SCAFFOLDS:
            raise ValueError(f"Invalid scaffold: {scaffold!r}, must be one of {list(SCAFFOLDS)}")
        self.use_fn_calling, self.format_model_response, self.scaffold = use_fn_calling, format_model_response, scaffold
        self.system_prompt = system_prompt(scaffold, use_fn_calling)
        finish = "submit" if scaffold == "sweagent" else "finish"
        self.user_prompt_template = _USER_PROMPT.replace("{finish}", finish)
        self._trajectory = Trajectory()
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt}]
        self.step = 0
        self.cur_step: Step | None = None

    @property
    def tools(self) -> list[dict] | None:
        """The JSON-schema tools offered to the model (with `use_fn_calling`; None otherwise: they are in the
        system prompt)."""
        return rllm_tool_schemas(self.scaffold) if self.use_fn_calling else None

    # ---- the rLLM agent protocol ------------------------------------------------------------------------------

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        text = str(observation)
        if not self._trajectory.steps:
            text = self.user_prompt_template.format(problem_statement=text)
        text += self._budget_notes(info or {})
        if self._trajectory.steps:
            prior = self._trajectory.steps[-1]
            prior.reward, prior.done, prior.info = reward, done, dict(info or {})
        self.messages.append({"role": "user", "content": text})
        self.cur_step = Step(observation=text)

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        if self.cur_step is None:
            raise RuntimeError("SWEAgent.update_from_model before any observation: call update_from_env first")
        self._trajectory.steps.append(self.cur_step)
        thought, action = _parse_fn_call(response) if self.use_fn_calling else parse_xml_response(response)
        step = self._trajectory.steps[-1]
        step.thought, step.action, step.model_response = thought, action, response
        content = f"{thought}\n\n{action}" if self.format_model_response else response
        self.messages.append({"role": "assistant", "content": content})
        self.step += 1
        return Action(action=action)

    def get_current_state(self) -> Step:
        if not self._trajectory.steps:
            raise RuntimeError("SWEAgent.get_current_state before the first reply")
        return self._trajectory.steps[-1]

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        return self.messages

    def _budget_notes(self, info: dict) -> str:
        notes = ""
        if info.get("max_steps"):
            remaining = info["max_steps"] - self.step - 1
            notes += (
                f"\nSteps remaining: {remaining}"
                if remaining > 0
                else "\nThis is your last step: submit your answer now."
            )
        tokens = info.get("cur_tokens")
        if tokens is not None and tokens >= TOKEN_WARNING_THRESHOLD:
            notes += "\nYou are running out of tokens: submit your answer now."
        return notes
