"""rLLM v0.2's `MiniWobAgent`, for `rllm.environments.browsergym.browsergym.BrowserGymEnv` (MiniWoB++ in rllm's web
environment, whose observation is `rllm.tasks.web.env.WebEnv`'s: `goal`, `axtree`, `url`, `last_action_error`).

As in rLLM:
- The first observation opens the conversation with a system message (how to act, then the goal); every observation
  adds a user message: the open tab, the page's accessibility tree (`use_axtree`), the actions so far, the last
  action's error, the action space, and a request for the next action.
- A reply's action is the content of its last ```` ``` ```` block (the whole reply when it has none); each reply is
  one step. `cot_prompt` asks for a thought before the action.
- `chat_completions`: the whole conversation (`use_full_conversation`), else the system message and the messages
  since the last reply; without `use_accumulate_thinking`, earlier replies lose their `<think>` part.
- `use_reward_shaping`: at the end, -0.5 on the trajectory's reward when a reply had no ``` ``` block or an action
  failed.
Different here: the page is shown as Playwright's accessibility snapshot (elements named by refs such as `[ref=e5]`),
which carries what BrowserGym's pruned HTML showed, so `use_html` adds nothing of its own. `use_screenshot` shows the
page as an image part when the env takes screenshots (`BrowserGymEnv(..., screenshot=True)`). `chat_mode` is
accepted and unused (as in rLLM). The prompts are this project's own wording.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from rllm.compat.agents._thinking import without_earlier_thinking
from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory

__all__ = ["MiniWobAgent"]

_BLOCK = re.compile(r"```(.*?)```", flags=re.DOTALL)
_SYSTEM = (
    "You are operating a web browser to reach a goal. Each turn you see the page as an accessibility tree: one line "
    "per element with its role, its name and a ref such as [ref=e12]. You act on an element through its ref. Answer "
    "with one action at a time, written inside ``` ```."
)
_NEXT = (
    "# Next action\nThe goal is not reached yet. Look at the page, the actions so far and any error, then give "
    "the one next action in the format of the action space above."
)
_PENALTY = -0.5


def _action_space(cot: bool) -> str:
    from rllm.tasks.web.actions import describe_actions

    if cot:
        example = (
            "Thought: The Submit button has ref e12, so I click it.\nAction: ```click('e12')```\n"
            "Thought: The name field is e7.\nAction: ```fill('e7', 'Ada')```"
        )
        return f"# Action space (give a thought, then one of these)\n{describe_actions()}\nExamples:\n{example}\n"
    examples = "Action: ```click('e12')```\nAction: ```fill('e7', 'Ada')```"
    return f"# Action space\n{describe_actions()}\nExamples:\n{examples}\n"


class MiniWobAgent(BaseAgent):
    def __init__(
        self,
        chat_mode: bool = False,
        use_html: bool = True,
        use_axtree: bool = True,
        use_screenshot: bool = False,
        use_accumulate_thinking: bool = True,
        cot_prompt: bool = False,
        use_full_conversation: bool = True,
        use_reward_shaping: bool = False,
    ) -> None:
        self.chat_mode, self.use_html, self.use_axtree, self.use_screenshot = (
            chat_mode,
            use_html,
            use_axtree,
            use_screenshot,
        )
        self.accumulate_thinking, self.cot_prompt = use_accumulate_thinking, cot_prompt
        self.full_conversation, self.reward_shaping = use_full_conversation, use_reward_shaping
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        self.messages: list[dict[str, Any]] = []
        self.action_history: list[str] = []
        self.step = 0
        self.current_observation: dict[str, Any] | None = None

    # ---- the rLLM agent protocol ------------------------------------------------------------------------------

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        if not isinstance(observation, dict) or "axtree" not in observation:
            raise TypeError(
                "MiniWobAgent: expected BrowserGymEnv's observation (goal, axtree, url, ...), got "
                f"{type(observation).__name__}"
            )
        if self._trajectory.steps:
            last = self._trajectory.steps[-1]
            last.reward, last.done = float(reward), bool(done)
            last.info["last_action_error"] = observation.get("last_action_error")
        if not self.messages:
            self.messages.append({"role": "system", "content": f"{_SYSTEM}\n\n# Goal\n{observation.get('goal', '')}"})
        self.messages.append({"role": "user", "content": self._page_message(observation)})
        self.current_observation = observation
        if done and self.reward_shaping:
            shaped = self._trajectory.total_step_reward()
            if not all(self.validate_step(step) for step in self._trajectory.steps):
                shaped += _PENALTY
            self._trajectory.reward = shaped

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        action = self._parse_model_response(response)
        self.messages.append({"role": "assistant", "content": response})
        self.step += 1
        step = Step(
            chat_completions=copy.deepcopy(self.chat_completions),
            action=action,
            model_response=response,
            observation=self.current_observation,
        )
        self._trajectory.steps.append(step)
        self.action_history.append(action if action != response else "(the reply had no ``` ``` block)")
        return Action(action=action)

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        messages = without_earlier_thinking(self.messages, self.accumulate_thinking)
        if self.full_conversation or not messages:
            return messages
        last_reply = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=0)
        return [messages[0], *messages[max(last_reply + 1, 1) :]]

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    def get_current_state(self) -> Step:
        if not self._trajectory.steps:
            raise ValueError("MiniWobAgent.get_current_state before the first reply")
        return self._trajectory.steps[-1]

    # ---- prompt and parsing -------------------------------------------------------------------------------------

    def _page_message(self, observation: dict) -> str | list[dict[str, Any]]:
        parts = [f"# Open tab (active)\nURL: {observation.get('url', '')}\n"]
        if self.use_axtree:
            parts.append(f"# The page (accessibility tree)\n{observation['axtree']}\n")
        if self.action_history:
            done = [f"{i + 1}. {action}" for i, action in enumerate(self.action_history)]
            parts.append("# Actions so far\n" + "\n".join(done) + "\n")
        if observation.get("last_action_error"):
            parts.append(f"# Error of the last action\n{observation['last_action_error']}\n")
        parts += [_action_space(self.cot_prompt), _NEXT]
        text = "\n".join(parts)
        if not (self.use_screenshot and observation.get("screenshot")):
            return text
        from rllm.images import image_part

        picture = image_part("data:image/png;base64," + observation["screenshot"])
        return [{"type": "text", "text": text}, picture]

    def _parse_model_response(self, response: str) -> str:
        """The content of the last ``` ``` block; the whole reply when there is none."""
        blocks = _BLOCK.findall(response)
        return blocks[-1] if blocks else response

    def validate_step(self, step: Step | dict) -> bool:
        """False when the reply had no ``` ``` block (its action is the whole reply) or its action failed."""
        step = step if isinstance(step, Step) else Step(**step)
        if step.action == step.model_response:
            return False
        return not step.info.get("last_action_error")
