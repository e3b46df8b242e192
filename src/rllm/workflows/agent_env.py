"""`AgentEnvWorkflow`: the agent/env loop (`BaseAgent` + `BaseEnv`) as a workflow. `AgentExecutionEngine` is the
`AgentWorkflowEngine` running this workflow, so there is one rollout core.

The loop: build the agent, the env from `{**env_args, **task}` (a dataset row's own value beats the default;
`env_args_win=True` gives rLLM's order, `{**task, **env_args}`, for its engine and trainer),
`reset`, then up to `max_steps` times: model call on the agent's messages → `agent.update_from_model` → `env.step`
→ `agent.update_from_env`. It ends with `ENV_DONE` when the env says done and `MAX_TURNS` after `max_steps`.

Choices:
- rLLM v0.2's agents (`rllm.agents.agent.BaseAgent`) get the reply's text in `update_from_model`, and their current
  step then gets the sampled `ModelOutput`; a step such an agent created for a call that never came (in
  `update_from_env` after the last one) is left out of the trajectory, as rLLM does.
- A reply the agent rejects (it raised in `update_from_model`, e.g. a `PolicyError`) is still recorded as a step
  (action None): the configured policy-error reward needs the tokens it applies to.
- When the length budget cut a completion short (`finish_reason == "length"` with the row full) the step is still
  given to the agent and recorded (its tokens are trainable) but the env is not stepped with a truncated action;
  the episode ends with `MAX_RESPONSE_LENGTH`.
- After `agent.update_from_env` the env's `reward`, `done` and `info` are written onto the step the action came
  from (and the observation if the agent left it empty): the env is the source of truth for step rewards.
- `step_timeout` bounds one model call + env step; it ends the episode with `TIMEOUT`, keeping the steps so far.
  Python cannot interrupt a thread, so a timed-out env call keeps running in its worker until it returns;
  `env.close()` is still called.
- An env with rLLM's `compute_final_reward()` hook gives the last step's reward after an episode that ended
  `ENV_DONE` or `MAX_TURNS` (not after errors, timeouts or a spent length budget).
- Correctness: an env that reports `info["success"]` on its last step decides; otherwise a positive reward counts.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from rllm.agents.base import speaks_text
from rllm.rewards.base import refuse_reward
from rllm.types import Action, Episode, ModelOutput, Step, TerminationReason
from rllm.workflows.base import AgentOutputError, Workflow, agent_trajectory
from rllm.workflows.runtime import TerminationEvent, tag_site

__all__ = ["AgentEnvWorkflow"]

_Reason = TerminationReason


class AgentEnvWorkflow(Workflow):
    def __init__(
        self,
        agent_class: type,
        env_class: type,
        agent_args: dict[str, Any] | None = None,
        env_args: dict[str, Any] | None = None,
        max_steps: int = 10,
        step_timeout: float | None = None,
        env_args_win: bool = False,
    ) -> None:
        self.agent_class, self.env_class = agent_class, env_class
        self.agent_args, self.env_args = dict(agent_args or {}), dict(env_args or {})
        self.max_steps, self.step_timeout = max_steps, step_timeout
        self.env_args_win = env_args_win

    @classmethod
    def env_policy(cls, workflow_args: dict[str, Any]) -> tuple[bool, bool]:
        env_class = workflow_args["env_class"]
        return getattr(env_class, "blocking", True), env_class.is_multithread_safe()

    def reset(self, task: dict, uid: str) -> None:
        self.agent: Any = None
        self.env: Any = None
        self.last_env_info: dict | None = None
        self.phase = "agent"  # which code is running, to say where a step timeout hit

    async def run(self, task: dict, uid: str) -> None:
        await self._start(task)
        for _ in range(self.max_steps):
            if self.step_timeout is None:
                done = await self._step()
            else:
                done = await self._timed_step(self.step_timeout)
            if done:
                await self._final_reward()
                return
        await self._final_reward()
        raise TerminationEvent(_Reason.MAX_TURNS)

    async def _final_reward(self) -> None:
        """rLLM's env hook: an env with `compute_final_reward()` gives the last step's reward once the episode is
        over (its SWE env runs the tests then)."""
        hook = getattr(self.env, "compute_final_reward", None)
        steps = agent_trajectory(self.agent).steps
        if hook is not None and steps:
            self.phase = "env"
            steps[-1].reward = _finite_reward(await self.call_env(hook), self.env)

    async def cleanup(self) -> None:
        """Close the env (always, once). A failing close does not change the outcome: the rollout's data is
        complete; the error is reported in `info["close_error"]`."""
        if self.env is None:
            return
        env, self.env = self.env, None
        try:
            await self.call_env(env.close)
        except Exception as exc:
            self.episode_info["close_error"] = f"{type(exc).__name__}: {exc}"

    def assign_episode_correctness(self, episode: Episode) -> bool:
        if self.last_env_info and "success" in self.last_env_info:
            return bool(self.last_env_info["success"])
        return super().assign_episode_correctness(episode)

    # ---- the loop -------------------------------------------------------------------------------------------

    async def _start(self, task: dict) -> None:
        self.agent = _agent_call(self.agent_class, **self.agent_args)
        self.commit(agent=self.agent)
        self.phase = "env"
        spec = {**task, **self.env_args} if self.env_args_win else {**self.env_args, **task}
        self.env = await self.call_env(self.env_class.from_dict, spec)
        observation, info = await self.call_env(self.env.reset)
        self.phase = "agent"
        _agent_call(self.agent.reset)
        _agent_call(self.agent.update_from_env, observation, 0.0, False, info)

    async def _timed_step(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout) as deadline:
                return await self._step()
        except TimeoutError:
            if not deadline.expired():
                raise  # a TimeoutError raised by user code: classified by where it came from
            message = f"step timed out after {timeout}s (in {self.phase} code)"
            raise TerminationEvent(_Reason.TIMEOUT, message) from None

    async def _step(self) -> bool:
        agent = self.agent
        self.phase = "agent"
        messages = _agent_call(lambda: agent.chat_completions)
        n_messages = len(messages)
        self.phase = "model"
        # An agent that speaks text writes its tools into its own messages: its `tools` is not a schema list.
        tools = None if speaks_text(agent) else getattr(agent, "tools", None)
        output = await self.generate(messages, tools=tools)
        self.phase = "agent"
        n_steps = len(agent_trajectory(agent).steps)
        try:
            action = _update_from_model(agent, output)
        except Exception as exc:
            # Keep the sampled reply even when the agent rejects it: a policy error's reward needs its tokens.
            tag_site(exc, "agent")
            self._own_step(n_steps, messages, n_messages, output, None)
            raise
        action = action.action if isinstance(action, Action) else action
        step = self._own_step(n_steps, messages, n_messages, output, action)
        if self.conversation().row_full and output.finish_reason == "length":
            raise TerminationEvent(_Reason.MAX_RESPONSE_LENGTH)

        self.phase = "env"
        observation, reward, done, info = await self.call_env(self.env.step, action)
        reward = _finite_reward(reward, self.env)
        self.last_env_info = info
        self.phase = "agent"
        _agent_call(agent.update_from_env, observation, reward, done, info)
        step.reward, step.done = float(reward), bool(done)
        if info:
            step.info.update(info)
        if step.observation is None:
            step.observation = observation
        return bool(done)

    def _own_step(self, n_steps: int, messages: list[dict], n_messages: int, output: ModelOutput, action: Any) -> Step:
        """The step this model call made, with what the agent left out filled in (a custom agent may record less,
        or no step at all). The messages the model saw are the first `n_messages` of the list the agent handed
        out (it may have appended its reply since); they are copied only when the agent did not record them."""
        steps = agent_trajectory(self.agent).steps
        if len(steps) == n_steps and not (steps and steps[-1].model_output is output):
            steps.append(Step(chat_completions=messages[:n_messages], model_output=output, action=action))
            return steps[-1]
        step = steps[-1]
        if step.model_output is None:
            step.model_output = output
        if not step.chat_completions:
            step.chat_completions = messages[:n_messages]
        return step


def _update_from_model(agent: Any, output: ModelOutput) -> Any:
    """The agent's action for `output`. An rLLM-protocol agent (`rllm.agents.agent`) gets the reply's text; its
    current step then gets the exact output, so it trains on the sampled ids whichever method made the step."""
    if not speaks_text(agent):
        return agent.update_from_model(output)
    action = agent.update_from_model(output.text)
    step = agent.get_current_state()
    if step is None:
        raise AgentOutputError(
            f"{type(agent).__name__}.update_from_model recorded no step: rLLM agents append a Step "
            "to their trajectory in update_from_env or update_from_model"
        )
    step.model_output = output
    step.model_response = step.model_response or output.text
    return action


def _finite_reward(reward: Any, env: Any) -> float:
    """The env's reward as a float, refused (`RewardError`, naming the env class) unless it is a finite number."""
    try:
        value = float(reward)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise refuse_reward(f"{type(env).__name__}.step returned the reward {reward!r}; rewards must be finite numbers")
    return value


def _agent_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call agent code, marking where an exception came from."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        tag_site(exc, "agent")
        raise
