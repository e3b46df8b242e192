"""`WebAgent`: a multi-turn agent for `WebEnv` (MiniWoB++ in a real browser), BrowserGym-style in plain text.

Each turn the model sees the goal and the page (its accessibility tree, elements named by refs such as `[ref=e5]`),
and replies with calls such as `click('e5')` or `fill('e6', 'Jerald')` inside ```` ``` ````: the env parses them
(rllm.tasks.web.actions), so the agent hands it the reply's text. An action that failed comes back in the next
observation as `last_action_error`. The whole conversation is kept (each turn's prompt extends the previous one, so
training rows stay token-exact: docs/architecture.md, "Token exactness"); `max_observation_chars` cuts a long page on
arrival.

With `WebEnv(screenshot=True)` (`env_args: {screenshot: true}`) each observation also carries the page as a PNG: the
agent then shows it after the page's text as an image part, for a vision-language model (`rllm.models.vision`). The
screenshot is only taken when asked for, so a text-only model never meets an image.
"""

from __future__ import annotations

from typing import Any

from rllm.agents.base import BaseAgent
from rllm.images import image_part
from rllm.tasks.web.actions import describe_actions
from rllm.tasks.web.env import observation_text

__all__ = ["WEB_SYSTEM_PROMPT", "WebAgent"]

WEB_SYSTEM_PROMPT = (
    "You operate a web page to reach a goal. You see the page as an accessibility tree: one line per element with "
    "its role, its name and a ref such as [ref=e12]. You act on elements by their ref with these calls:\n"
    f"{describe_actions()}\n\n"
    "Reply with a short thought, then the calls to do next inside ``` ```, one per line. For example, if the goal "
    'were to type "hi" and submit, and the page showed `textbox [ref=e31]` and `button "Submit" [ref=e32]`, '
    "you would reply:\nThe text field is e31 and the Submit button is e32.\n```\nfill('e31', 'hi')\nclick('e32')\n```\n"
    "Use the refs of the page you are given, never the ones of this example."
)


class WebAgent(BaseAgent):
    system_prompt = WEB_SYSTEM_PROMPT

    def __init__(self, max_observation_chars: int = 6000, **kwargs: Any) -> None:
        if max_observation_chars < 200:
            raise ValueError(f"WebAgent(max_observation_chars={max_observation_chars}): at least 200")
        self.max_observation_chars = int(max_observation_chars)
        super().__init__(**kwargs)

    def format_observation(self, observation: Any) -> str | list[dict[str, Any]]:
        if not isinstance(observation, dict) or "axtree" not in observation:
            raise TypeError(
                f"WebAgent.format_observation: expected WebEnv's observation dict (goal, axtree, ...), "
                f"got {type(observation).__name__}"
            )
        text = observation_text(observation)
        if len(text) > self.max_observation_chars:
            text = text[: self.max_observation_chars] + f"\n[... page cut: {len(text)} characters in all]"
        if not observation.get("screenshot"):
            return text
        picture = image_part("data:image/png;base64," + observation["screenshot"])
        return [{"type": "text", "text": text + "\n\nThe page:"}, picture]
