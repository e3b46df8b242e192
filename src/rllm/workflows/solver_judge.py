"""`SolverJudgeWorkflow`: k solver attempts at a task, then a judge that picks the best; both roles train.

    SolverJudgeWorkflow(prompt_fn=countdown_prompt, reward_fn=countdown_reward, n_solutions=2)

Per episode: `n_solutions` solver trajectories (role "solver", sampled concurrently, each its own conversation), each
scored by `reward_fn(task, reply)`; then one judge trajectory (role "judge") that sees the problem and the candidate
replies and answers with the number of the one it picks inside `<answer></answer>` (e.g. `<answer>2</answer>`).

Rewards: a solver gets its reward function's reward; the judge gets 1 if the reply it picked is correct, else 0 (an
unreadable or out-of-range choice is 0 and counted in `info["judge_parse_error"]`). The episode is correct when the
judge picked a correct solution, which is the workflow's answer to the task. When no candidate is correct the judge
cannot earn anything; its reward is still 0 (with a baseline-free estimator such as `reinforce` that step then has no
gradient, which is what we want: there was no right choice).

Both roles are the same model with different prompts; train them with one config and per-role estimators
(`algorithm.roles`: e.g. solver grpo over its n×k attempts per task, judge reinforce).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from rllm.rewards.base import RewardOutput
from rllm.types import Episode, Step, Trajectory
from rllm.workflows.base import Workflow
from rllm.workflows.single_turn import build_messages, reply_text, score_step

__all__ = ["SolverJudgeWorkflow", "parse_choice"]

JUDGE_PROMPT = (
    "{problem}\n\nHere are {k} candidate answers.\n\n{candidates}\n\n"
    "Which candidate is correct? Reply with its number only, inside <answer></answer>, for example <answer>1</answer>."
)
_CHOICE = re.compile(r"<answer>\s*(\d+)\s*</answer>")
_MAX_CANDIDATE_CHARS = 2000  # a runaway solver reply must not blow up the judge's prompt


class SolverJudgeWorkflow(Workflow):
    def __init__(
        self,
        prompt_fn: Callable[[dict], str],
        reward_fn: Callable[[dict, str], float | RewardOutput],
        n_solutions: int = 2,
        system_prompt: str | None = None,
        judge_prompt: str = JUDGE_PROMPT,
        solver_name: str = "solver",
        judge_name: str = "judge",
    ) -> None:
        if n_solutions < 1:
            raise ValueError(f"n_solutions must be >= 1, got {n_solutions}")
        self.prompt_fn, self.reward_fn, self.n_solutions = prompt_fn, reward_fn, n_solutions
        self.system_prompt, self.judge_prompt = system_prompt, judge_prompt
        self.solver_name, self.judge_name = solver_name, judge_name

    def reset(self, task: dict, uid: str) -> None:
        self.picked_correct = False

    async def run(self, task: dict, uid: str) -> None:
        problem = self.prompt_fn(task)
        solvers = [Trajectory(name=self.solver_name) for _ in range(self.n_solutions)]
        for trajectory in solvers:
            self.commit(trajectory)
        await asyncio.gather(*(self._solve(task, problem, i, t) for i, t in enumerate(solvers)))
        await self._judge(problem, solvers)

    def assign_episode_correctness(self, episode: Episode) -> bool:
        return self.picked_correct

    async def _solve(self, task: dict, problem: str, index: int, trajectory: Trajectory) -> None:
        messages = build_messages(self.system_prompt, problem)
        output = await self.generate(messages, conversation=f"{self.solver_name}{index}")
        step = Step(chat_completions=messages, model_output=output, action=reply_text(output), done=True)
        trajectory.steps.append(step)
        trajectory.is_correct = (await score_step(self, step, task)).correct

    async def _judge(self, problem: str, solvers: list[Trajectory]) -> None:
        candidates = "\n\n".join(
            f"Candidate {i + 1}:\n{str(t.steps[0].action)[:_MAX_CANDIDATE_CHARS]}" for i, t in enumerate(solvers)
        )
        prompt = self.judge_prompt.format(problem=problem, k=len(solvers), candidates=candidates)
        messages = build_messages(self.system_prompt, prompt)
        judge = Trajectory(name=self.judge_name)
        self.commit(judge)
        output = await self.generate(messages, conversation=self.judge_name)
        choice = parse_choice(reply_text(output), len(solvers))
        self.picked_correct = choice is not None and bool(solvers[choice].is_correct)
        reward = 1.0 if self.picked_correct else 0.0
        info = {"choice": choice, "picked_correct": self.picked_correct}
        judge.steps.append(
            Step(chat_completions=messages, model_output=output, action=choice, reward=reward, done=True, info=info)
        )
        judge.is_correct = self.picked_correct
        if choice is None:
            self.episode_info["judge_parse_error"] = True


def parse_choice(text: str, k: int) -> int | None:
    """The 0-based index the judge picked: the last `<answer>N</answer>` with 1 <= N <= k; None otherwise."""
    found = _CHOICE.findall(text or "")
    if not found:
        return None
    number = int(found[-1])
    return number - 1 if 1 <= number <= k else None
