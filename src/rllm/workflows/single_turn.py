"""`SingleTurnWorkflow`: one model call on a task's prompt, scored by a reward function.

    SingleTurnWorkflow(prompt_fn=countdown_prompt, reward_fn=countdown_reward, system_prompt=None)

`prompt_fn(task)` returns the user message's text (or a full message list); `reward_fn(task, response_text)` returns
a float or a `RewardOutput` (rllm.rewards). The trajectory is named `name` ("agent" by default) and has one step
whose reward is the reward function's; the reply's text is the step's action. A reply cut off by `max_tokens` is
still scored (a truncated answer usually earns nothing, which is the signal to be shorter).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllm.rewards.base import RewardOutput, to_reward_output
from rllm.types import ModelOutput, Step, Trajectory
from rllm.workflows.base import Workflow

__all__ = ["SingleTurnWorkflow", "build_messages", "reply_text"]


class SingleTurnWorkflow(Workflow):
    def __init__(
        self,
        prompt_fn: Callable[[dict], str | list[dict]],
        reward_fn: Callable[[dict, str], float | RewardOutput],
        system_prompt: str | None = None,
        name: str = "agent",
    ) -> None:
        self.prompt_fn, self.reward_fn = prompt_fn, reward_fn
        self.system_prompt, self.name = system_prompt, name

    async def run(self, task: dict, uid: str) -> None:
        messages = build_messages(self.system_prompt, self.prompt_fn(task))
        trajectory = Trajectory(name=self.name)
        self.commit(trajectory)
        output = await self.generate(messages)
        step = Step(chat_completions=messages, model_output=output, action=reply_text(output), done=True)
        trajectory.steps.append(step)
        trajectory.is_correct = (await score_step(self, step, task)).correct


async def score_step(workflow: Workflow, step: Step, task: dict) -> RewardOutput:
    """Score a one-step trajectory's reply with `workflow.reward_fn`; the step and trajectory carry the result."""
    result = to_reward_output(await workflow.call_reward(workflow.reward_fn, task, step.action), workflow.reward_fn)
    step.reward = result.reward
    step.info.update(result.info, is_correct=result.correct)
    return result


def build_messages(system_prompt: str | None, prompt: str | list[dict]) -> list[dict[str, Any]]:
    if isinstance(prompt, list):
        return list(prompt)
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*messages, {"role": "user", "content": prompt}]


def reply_text(output: ModelOutput) -> str:
    """The reply without reasoning when the client separated it, else the whole text."""
    return output.content if output.content is not None else output.text
