"""`oracle` (`--agent oracle`): plays a task with its own reference solution instead of a model, then grades it as
any agent's work is graded. It checks a task set rather than an agent: every task should score 1 (a task that
does not has a broken solution, verifier or environment), e.g. `rllm eval path/to/harbor/tasks --agent oracle`.

It fits tasks whose environment can run their solution: a workspace env with `run_solution()` (Harbor task folders,
`rllm.tasks.harbor.HarborEnv`: solution/solve.sh at /solution, run in the working directory). No model is called,
so its episodes have one step without tokens: evaluation only, nothing to train on. The env is opened with
`oracle=True` (a task whose solve.sh needs the network then needs Docker, as its tests would), `run_solution()`
runs, and `compute_final_reward()` is the episode's reward; a verifier that gives none ends the episode as a
refused reward (an error), as it does for a model.
"""

from __future__ import annotations

from typing import Any

from rllm.types import Step, Trajectory
from rllm.workflows.base import Workflow

__all__ = ["OracleWorkflow"]


class OracleWorkflow(Workflow):
    def __init__(self, env_class: type, env_args: dict[str, Any] | None = None) -> None:
        self.env_class, self.env_args = env_class, dict(env_args or {})
        self.env: Any = None

    @classmethod
    def for_task(cls, task_spec: Any, agent_args: dict[str, Any]) -> dict[str, Any]:
        """The workflow's arguments for `task_spec` (what `rllm.harnesses.harness_workflow` calls); a task whose
        env cannot run a reference solution is refused in one line."""
        from rllm.harnesses.base import HarnessError

        env = getattr(task_spec, "env", None)
        if env is None or not callable(getattr(env, "run_solution", None)):
            raise HarnessError(
                f"the 'oracle' harness runs a task's reference solution, and task {task_spec.name!r} has none to run; "
                "it plays Harbor task folders (rllm eval path/to/tasks --agent oracle)"
            )
        if agent_args:
            raise HarnessError(f"the 'oracle' harness takes no agent_args, got {sorted(agent_args)}")
        return {"env_class": env}

    def reset(self, task: dict, uid: str) -> None:
        self.env = None

    async def run(self, task: dict, uid: str) -> None:
        self.env = await self.call_env(self.env_class.from_dict, {**self.env_args, **task, "oracle": True})
        instruction, _ = await self.call_env(self.env.reset)
        ran = await self.call_env(self.env.run_solution)
        step = Step(chat_completions=[{"role": "user", "content": str(instruction)}], action="solution", info=ran)
        trajectory = Trajectory(name="oracle", steps=[step])
        self.commit(trajectory)
        reward = float(await self.call_env(self.env.compute_final_reward))
        grade = getattr(self.env, "result", None)
        step.reward, step.done = reward, True
        step.info.update(success=bool(getattr(grade, "resolved", reward > 0)), rewards=getattr(grade, "rewards", {}))
        trajectory.reward = reward
        trajectory.is_correct = bool(getattr(grade, "resolved", reward > 0))

    async def cleanup(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            try:
                await self.call_env(env.close)
            except Exception as exc:
                self.episode_info["close_error"] = f"{type(exc).__name__}: {exc}"
