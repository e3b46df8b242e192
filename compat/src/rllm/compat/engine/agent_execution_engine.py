"""rLLM v0.2's `AgentExecutionEngine`, for scripts written against rLLM:

    engine = AgentExecutionEngine(agent_class=MyAgent, env_class=MyEnv, engine_name="openai", tokenizer=tokenizer,
                                  rollout_engine_args={"base_url": "http://localhost:30000/v1", "api_key": "None"},
                                  sampling_params={"temperature": 0.6, "top_p": 0.95, "model": model_name},
                                  max_response_length=4096, max_prompt_length=2048, n_parallel_agents=64)
    trajectories = asyncio.run(engine.execute_tasks(tasks))

It is rllm's `AgentExecutionEngine` (one rollout core) with rLLM's constructor and return value: `execute_tasks` is a
coroutine returning one `Trajectory` per task, in task order, each with `task`, `reward` (the sum of its step
rewards) and every step's `mc_return` (discounted with `gamma`, 0.2 by default as in rLLM). The episodes behind them
(termination reasons, metrics, token counts) are in `engine.episodes` after the call.

How rLLM's arguments map (anything else is an error naming the argument):

- `engine_name="openai"` with `rollout_engine_args` (`base_url`, `api_key`, `model`) → `rllm.models.OpenAIClient`.
  With `tokenizer` the prompt is rendered by the tokenizer's chat template and sent as token ids, and the sampled
  ids and logprobs come back exactly (rLLM re-tokenizes the returned text); without it, chat completions (text
  only, evaluation only). The model name is `rollout_engine_args["model"]`, else `sampling_params["model"]`.
- `sampling_params` → `SamplingParams` (temperature, top_p, top_k, max_tokens, seed, stop); `max_tokens` per call is
  also bounded by what is left of `max_response_length`, as in rLLM.
- `n_parallel_agents` → `n_parallel`, `max_workers` → `env_workers`, `trajectory_timeout` → `episode_timeout`,
  `api_retries` → the client's retries, `retry_limit` (rLLM counts attempts) → `retry_limit - 1` rollout retries of
  infra errors.
- `env_args` are merged into each task as rLLM does: `from_dict({**task, **env_args})`, env_args winning.
- Accepted as rLLM has them and meaning the same here: `max_steps`, `max_prompt_length`, `max_response_length`,
  `agent_args`, `gamma`; `config=None`, `chat_parser=None`, `enforce_max_prompt_length`, `overlong_filter` (rllm
  always bounds each row's prompt, and overlong masking is a training option: `algorithm.overlong`).
- `engine_name="verl"`/`"tinker"` and `rollout_engine=`: not here; the error names rllm's equivalent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rllm.engine.execution import AgentExecutionEngine as _Engine
from rllm.models.base import SamplingParams
from rllm.types import Episode, Trajectory

__all__ = ["AgentExecutionEngine", "AsyncAgentExecutionEngine", "compute_mc_return"]

_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "stop")
_CLIENT_KEYS = ("base_url", "api_key", "model", "sampling_params")


class AgentExecutionEngine(_Engine):
    """rLLM v0.2's engine over rllm's. See the module docstring for the argument mapping."""

    def __init__(
        self,
        engine_name: str = "openai",
        tokenizer: Any = None,
        rollout_engine: Any = None,
        chat_parser: Any = None,
        n_parallel_agents: int = 128,
        trajectory_timeout: float | None = None,
        gamma: float = 0.2,
        api_retries: int = 3,
        retry_limit: int = 3,
        max_steps: int = 5,
        max_response_length: int = 8192,
        max_prompt_length: int = 1024,
        config: Any = None,
        agent_class: type | None = None,
        env_class: type | None = None,
        agent_args: dict[str, Any] | None = None,
        rollout_engine_args: dict[str, Any] | None = None,
        env_args: dict[str, Any] | None = None,
        max_workers: int = 64,
        enforce_max_prompt_length: bool = False,
        overlong_filter: bool = False,
        sampling_params: dict[str, Any] | None = None,
        **unknown: Any,
    ) -> None:
        _refuse_unsupported(engine_name, rollout_engine, chat_parser, config, unknown)
        if agent_class is None or env_class is None:
            raise TypeError("AgentExecutionEngine needs agent_class= and env_class= (a rLLM BaseAgent and BaseEnv)")
        sampling_params = dict(sampling_params or {})
        client_args = dict(rollout_engine_args or {})
        model = _openai_client(client_args, sampling_params, tokenizer, api_retries)
        super().__init__(
            agent_class=agent_class,
            env_class=env_class,
            model=model,
            agent_args=agent_args,
            env_args=env_args,
            max_steps=max_steps,
            sampling=_sampling(sampling_params, max_response_length),
            n_parallel=n_parallel_agents,
            max_prompt_length=max_prompt_length,
            max_response_length=max_response_length,
            episode_timeout=trajectory_timeout or None,
            retry_limit=max(retry_limit - 1, 0),
            env_workers=max_workers,
        )
        self.gamma = gamma
        self.tokenizer = tokenizer
        self.enforce_max_prompt_length = enforce_max_prompt_length
        self.overlong_filter = overlong_filter
        self.episodes: list[Episode] = []

    async def execute_tasks(self, tasks: Iterable[dict]) -> list[Trajectory]:  # type: ignore[override]
        """One trajectory per task, in task order (rLLM's return value); the episodes are kept in `self.episodes`."""
        tasks = list(tasks)
        try:
            self.episodes = await self.execute_tasks_async(tasks)
        finally:
            if hasattr(self.model, "aclose"):  # its HTTP session belongs to this call's event loop
                await self.model.aclose()
        return [_result(episode, task, self.gamma) for episode, task in zip(self.episodes, tasks, strict=True)]

    def shutdown(self) -> None:
        """rLLM frees its thread pool here; rllm's engine holds none between calls."""

    def _workflow_spec(self) -> tuple[type, dict[str, Any]]:
        workflow_class, args = super()._workflow_spec()
        return workflow_class, {**args, "env_args_win": True}  # rLLM: from_dict({**task, **env_args})


AsyncAgentExecutionEngine = AgentExecutionEngine


def compute_mc_return(trajectory: Trajectory, gamma: float) -> None:
    """Each step's `mc_return`: its reward plus `gamma` times the next step's return (rLLM's definition)."""
    running = 0.0
    for step in reversed(trajectory.steps):
        running = step.reward + gamma * running
        step.mc_return = running


def _result(episode: Episode, task: dict, gamma: float) -> Trajectory:
    """The agent's trajectory as rLLM's engine returns it. An episode that produced none (it failed before the
    agent's first step) gives an empty trajectory with the episode's error in `info`, instead of dropping it."""
    trajectory = episode.trajectories[0] if episode.trajectories else Trajectory()
    trajectory.task = task
    trajectory.reward = trajectory.total_step_reward()
    trajectory.info.setdefault("termination_reason", episode.termination_reason.value)
    if "error" in episode.info:
        trajectory.info.setdefault("error", episode.info["error"])
    compute_mc_return(trajectory, gamma)
    return trajectory


def _refuse_unsupported(engine_name: str, rollout_engine: Any, chat_parser: Any, config: Any, unknown: dict) -> None:
    if engine_name != "openai":
        raise ValueError(
            f"engine_name={engine_name!r} is rLLM's {engine_name} rollout engine, which rllm does not have: evaluate "
            "against any OpenAI-compatible server with engine_name='openai' (vLLM, SGLang), and train with "
            "AgentTrainer, whose trainer.backend=verl runs verl's workers"
        )
    if rollout_engine is not None:
        raise ValueError(
            "rollout_engine= (verl's AgentLoopManager) is not used here: give engine_name='openai' and "
            "rollout_engine_args={'base_url': ...}, or train with AgentTrainer"
        )
    if chat_parser is not None:
        raise ValueError(
            "chat_parser= is not used: rllm renders prompts with the tokenizer's own chat template "
            "(pass tokenizer= only)"
        )
    if config is not None:
        raise ValueError("config= is not read by the evaluation engine here; training configs go to AgentTrainer")
    if unknown:
        raise TypeError(
            f"AgentExecutionEngine() got arguments rLLM v0.2's engine does not take, or that rllm does "
            f"not support: {sorted(unknown)}"
        )


def _openai_client(client_args: dict, sampling_params: dict, tokenizer: Any, api_retries: int) -> Any:
    from rllm.models.openai import OpenAIClient

    unknown = sorted(set(client_args) - set(_CLIENT_KEYS))
    if unknown:
        raise TypeError(f"rollout_engine_args: {unknown} not supported (rllm takes {list(_CLIENT_KEYS)})")
    sampling_params.update(client_args.get("sampling_params") or {})
    model = client_args.get("model") or sampling_params.get("model") or ""
    return OpenAIClient(
        client_args.get("base_url", "https://api.openai.com/v1"),
        model,
        api_key=client_args.get("api_key"),
        tokenizer=tokenizer,
        max_retries=api_retries,
        allow_missing_token_ids=tokenizer is None,
    )


def _sampling(sampling_params: dict, max_response_length: int) -> SamplingParams:
    unknown = sorted(set(sampling_params) - {*_SAMPLING_KEYS, "model"})
    if unknown:
        raise TypeError(f"sampling_params: {unknown} not supported (rllm takes {list(_SAMPLING_KEYS)})")
    values = {key: sampling_params[key] for key in _SAMPLING_KEYS if key in sampling_params}
    values.setdefault("max_tokens", max_response_length)
    if isinstance(values.get("stop"), str):
        values["stop"] = [values["stop"]]
    return SamplingParams(**values)
