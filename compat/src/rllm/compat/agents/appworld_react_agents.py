"""rLLM v0.2's `AppWorldReactAgent`: a ReAct agent that writes Python against AppWorld's `apis.<app>.<api>(...)`.

The first observation (AppWorldEnv's reset: `instruction`, `user_info`, `app_descriptions`) becomes the prompt: a
system message with the rules of the game and a user message with the supervisor's details and the task (this
project's own wording). Each later observation is a code execution result (`success`, `output`, `stdout`,
`stderr`, `error`) shown as one user message ("Output: ...", or "Error: ..."). Each reply becomes one step whose
action is the reply's Python code: the first fenced block, else the lines after a "Code:" marker, else the whole
reply. `text_to_messages` splits a "USER:/ASSISTANT:/SYSTEM:" transcript into chat messages, as rLLM's does.

The environment (`rllm.environments.appworld.appworld_env.AppWorldEnv`) needs the `appworld` library; this agent
does not.
"""

from __future__ import annotations

import re
from typing import Any

from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory

__all__ = ["AppWorldReactAgent"]

_ROLE_MARKER = re.compile(r"(USER|ASSISTANT|SYSTEM):\n", flags=re.IGNORECASE)
_FENCED = re.compile(r"```(?:python)?\s*(.*?)\s*```", flags=re.DOTALL)
_DEFAULT_USER = {"first_name": "User", "last_name": "Test", "email": "user@example.com", "phone_number": "+1234567890"}
_NO_APPS = "(the environment listed no apps; ask apis.api_docs.show_app_descriptions())"

_PROMPT = """SYSTEM:
You act for a user on their apps (music, mail, notes, payments, ...) by writing Python that a REPL runs for you.
The REPL holds an object `apis`: call an app's API as `apis.<app>.<api>(...)` and print what you need to see.
Find your way with the documentation APIs:
- apis.api_docs.show_app_descriptions(): the apps you can use;
- apis.api_docs.show_api_descriptions(app_name='<app>'): the APIs of one app;
- apis.api_docs.show_api_doc(app_name='<app>', api_name='<api>'): the parameters of one API.
Rules:
1. Each reply: a short thought, then exactly one block of code fenced with ```python and ```.
2. Variables persist between blocks. Read an API's doc before calling it.
3. The supervisor app holds the user's account passwords and profile; the phone app their contacts.
4. Many APIs return one page at a time: loop over page_index until a page comes back empty.
5. When done, call apis.supervisor.complete_task(answer=<answer>) if the task asks for information, else
apis.supervisor.complete_task().

The apps:
{apps}
USER:
I am {first_name} {last_name}. My email is {email} and my phone number is {phone_number}.
Task: {task}"""


class AppWorldReactAgent(BaseAgent):
    """rLLM's AppWorld ReAct agent (see the module docstring)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        self.messages: list[dict[str, Any]] = []
        self.current_observation: Any = None
        self.task_instruction: str | None = None
        self.user_info: dict | None = None
        self.initialized = False

    # ---- the rLLM agent protocol ------------------------------------------------------------------------------

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        self.current_observation = observation
        if not self.initialized and isinstance(observation, dict) and "instruction" in observation:
            self._initialize_from_task(observation, **kwargs)
            self.initialized = True
            return
        if isinstance(observation, dict):
            text = self._format_execution_result(observation)
        else:
            text = observation if isinstance(observation, str) else str(observation)
        self.messages.append({"role": "user", "content": text})
        if self._trajectory.steps:
            last = self._trajectory.steps[-1]
            last.reward, last.done = reward, done
            last.info.update(info or {})

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        code = self._extract_code_from_response(response)
        self.messages.append({"role": "assistant", "content": response})
        step = Step(
            chat_completions=list(self.messages),
            action=code,
            model_response=response,
            observation=self.current_observation,
        )
        self._trajectory.steps.append(step)
        return Action(action=code)

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        return self.messages

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    # ---- prompt and parsing -------------------------------------------------------------------------------------

    def _initialize_from_task(self, observation: dict, **kwargs: Any) -> None:
        """The prompt for the task in `observation` (its `user_info`, else `kwargs["user_info"]`, else a default
        user)."""
        self.user_info = observation.get("user_info") or kwargs.get("user_info") or dict(_DEFAULT_USER)
        self.task_instruction = observation.get("instruction", "")
        user = {**_DEFAULT_USER, **self.user_info}
        prompt = _PROMPT.format(
            apps=observation.get("app_descriptions") or _NO_APPS,
            task=self.task_instruction,
            **{key: user[key] for key in _DEFAULT_USER},
        )
        self.messages = self.text_to_messages(prompt)

    def text_to_messages(self, input_str: str) -> list[dict]:
        """Chat messages from a transcript whose turns start with a "USER:", "ASSISTANT:" or "SYSTEM:" line."""
        markers = list(_ROLE_MARKER.finditer(input_str))
        if not markers or markers[0].start() != 0:
            head = input_str[: markers[0].start()] if markers else input_str
            raise ValueError(f"the transcript must start with a role line (USER:, ASSISTANT:, SYSTEM:): {head[:80]!r}")
        ends = [m.start() for m in markers[1:]] + [len(input_str)]
        return [
            {"role": m.group(1).lower(), "content": input_str[m.end() : end]}
            for m, end in zip(markers, ends, strict=True)
        ]

    def _format_execution_result(self, observation: dict) -> str:
        if not observation.get("success", True):
            return f"Error: {observation.get('error', 'Unknown error')}\n{observation.get('stderr', '')}"
        parts = [
            f"{label}: {observation[key]}"
            for key, label in (("output", "Output"), ("stdout", "Stdout"), ("stderr", "Stderr"))
            if observation.get(key)
        ]
        return "\n".join(parts) or "Code executed successfully (no output)"

    def _extract_code_from_response(self, response: str) -> str:
        """The first fenced block; else the lines after a "Code:" line (up to the next "Label:" line); else the
        whole reply."""
        fenced = _FENCED.findall(response)
        if fenced:
            return fenced[0].strip()
        marked = _after_code_marker(response)
        return marked if marked else response.strip()


def _after_code_marker(response: str) -> str:
    lines: list[str] = []
    inside = False
    for line in response.split("\n"):
        if not inside:
            if "Code:" in line or "code:" in line:
                inside = True
                rest = line.split(":", 1)[1].strip()
                lines += [rest] if rest else []
            continue
        stripped = line.strip()
        if stripped and stripped[0].isupper() and ":" in stripped:  # the next section ("Thought: ...")
            break
        lines.append(line)
    return "\n".join(lines).strip()
