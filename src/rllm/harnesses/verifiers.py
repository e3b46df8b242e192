"""`VerifiersWorkflow`: a verifiers environment's own rollout loop as a gateway rollout, the workflow of the
`verifiers:ENV_ID` tasks (`rllm.tasks.hubs.verifiers`, whose docstring says why the gateway).

Each episode runs on the engine's event loop, as verifiers runs its own rollouts (many at once on one loop,
`asyncio.gather` in its `generate`): the environment of the row (`env_id`, `env_args`; loaded once per process,
`rllm.tasks.hubs.verifiers.load_env`, and shared by the episodes as verifiers shares one environment between its
rollouts) runs `env.run_rollout(row, client, "policy", {})`: its loop, its stop conditions, its tools, then its
rubric. The client is verifiers' `OpenAIChatCompletionsClient` over an `openai.AsyncOpenAI` on the episode's gateway
session, one per episode. The environment's own synchronous code (a sync tool or reward function) runs on that loop
as it does in verifiers. Every model call is a step of the trajectory (the gateway's); the rubric's reward is the
reward of the last, correct when at least the environment's `pass_threshold`, with the rubric's metrics, the stop
condition and any error verifiers recorded in its info.

Errors verifiers catches into the rollout's state: an `InfraError` of its own (a sandbox, a tunnel) is rllm's
`InfraError` (retried); a call that the gateway failed re-raises the gateway's own failure (the length budget, ...)
when the rollout returns (`RolloutWorkflow.run`); the others (a tool that raised, a reply that was not a valid tool
call) are the model's doing: the rubric scores the rollout as verifiers would, and the error is in the info.
"""

from __future__ import annotations

from typing import Any

from rllm.errors import InfraError
from rllm.gateway.rollout import RolloutWorkflow
from rllm.rewards.base import RewardOutput
from rllm.tasks.hubs.verifiers import HUB, load_env, package

__all__ = ["VerifiersWorkflow"]


class VerifiersWorkflow(RolloutWorkflow):
    """A verifiers environment playing one of its rows through the gateway (module docstring)."""

    default_name = "verifiers"

    async def play(self, task: dict, base_url: str) -> Any:
        return await _rollout(task, base_url)


async def _rollout(task: dict, base_url: str) -> RewardOutput:
    env_id = task["env_id"]
    vf = package(f"{HUB}:{env_id}")
    from openai import AsyncOpenAI

    env = load_env(env_id, dict(task.get("env_args") or {}))
    row: dict[str, Any] = {key: task[key] for key in ("prompt", "example_id", "answer", "info", "task") if key in task}
    async with AsyncOpenAI(base_url=base_url, api_key="rllm", max_retries=0) as openai_client:
        client = vf.OpenAIChatCompletionsClient(openai_client)
        output = await env.run_rollout(row, client, "policy", {})
    error = output.get("error")
    if _is_infra(vf, error):
        raise InfraError(f"{HUB}:{env_id}: {_describe(error)}")
    reward = float(output.get("reward") or 0.0)
    info: dict[str, Any] = {
        "metrics": _json(output.get("metrics") or {}),
        "stop_condition": output.get("stop_condition"),
        "is_truncated": bool(output.get("is_truncated")),
    }
    if error is not None:
        info["verifiers_error"] = _describe(error)
    return RewardOutput(reward, is_correct=reward >= float(getattr(env, "pass_threshold", 0.5)), info=info)


def _is_infra(vf: Any, error: Any) -> bool:
    if isinstance(error, BaseException):
        return isinstance(error, vf.errors.InfraError)
    if isinstance(error, dict):  # serialised by verifiers: {"error": class name, ...}
        chain = " ".join(str(value) for value in error.values())
        return any(name in chain for name in ("InfraError", "SandboxError", "TunnelError"))
    return False


def _describe(error: Any) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"[:500]
    return str(error)[:500]


def _json(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))
