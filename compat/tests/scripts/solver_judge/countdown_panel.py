"""A two-role workflow for countdown puzzles, written against rLLM's `Workflow` API: several solver calls propose an
expression each, then one judge call reads the proposals and picks one. Every call is one `Step` in a `Trajectory`
named after its role; the episode is correct when the judge picked a right expression."""

import asyncio
import re

from rllm.agents.agent import Episode, Step, Trajectory
from rllm.engine import ModelOutput, RolloutEngine
from rllm.rewards.reward_fn import RewardFunction
from rllm.workflows.workflow import Workflow

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
JUDGE_BRIEF = (
    "Several people tried the puzzle below. Check each proposal and decide which one is right.\n\n"
    "Puzzle: {puzzle}\n\n{proposals}\n\n"
    "Reply with the number of the right proposal inside <answer></answer>."
)


def last_answer(text: str) -> str | None:
    """The content of the reply's last <answer> tag, or None when it has none."""
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


def one_call_trajectory(role: str, messages: list[dict], output: ModelOutput, action: str) -> Trajectory:
    step = Step(
        chat_completions=[*messages, {"role": "assistant", "content": output.text}],
        model_output=output,
        model_response=output.text,
        action=action,
    )
    return Trajectory(name=role, steps=[step])


class CountdownPanel(Workflow):
    def __init__(
        self,
        rollout_engine: RolloutEngine,
        n_solutions: int = 2,
        reward_function: RewardFunction | None = None,
        **kwargs,
    ):
        super().__init__(rollout_engine, **kwargs)
        self.n_solutions = n_solutions
        self.reward_function = reward_function

    async def ask(self, role: str, prompt: str) -> tuple[Trajectory, str]:
        messages = [{"role": "user", "content": prompt}]
        output = await self.rollout_engine.get_model_response(messages)
        expression = last_answer(output.text) or ""
        return one_call_trajectory(role, messages, output, f"<answer>{expression}</answer>"), expression

    def grade(self, task: dict, trajectory: Trajectory) -> float:
        step = trajectory.steps[0]
        step.reward = self.reward_function(task, step.action).reward
        return step.reward

    def judge_prompt(self, puzzle: str, expressions: list[str]) -> str:
        proposals = "\n".join(f"Proposal {i}: {expression}" for i, expression in enumerate(expressions, 1))
        return JUDGE_BRIEF.format(puzzle=puzzle, proposals=proposals)

    async def run(self, task: dict, uid: str, **kwargs) -> Episode:
        self.reset(task, uid)
        puzzle = task["question"]
        attempts = await asyncio.gather(*(self.ask("solver", puzzle) for _ in range(self.n_solutions)))
        solver_rewards = [self.grade(task, trajectory) for trajectory, _ in attempts]

        expressions = [expression for _, expression in attempts]
        judge, pick = await self.ask("judge", self.judge_prompt(puzzle, expressions))
        chosen = expressions[int(pick) - 1] if pick and pick.isdigit() and 0 < int(pick) <= len(expressions) else ""
        judge.steps[0].action = f"<answer>{chosen}</answer>"
        judge_reward = self.grade(task, judge)

        return Episode(
            id=uid,
            task=task,
            trajectories=[trajectory for trajectory, _ in attempts] + [judge],
            is_correct=judge_reward > 0,
            metrics={"solver_acc": sum(solver_rewards) / len(solver_rewards), "judge_acc": judge_reward},
        )
