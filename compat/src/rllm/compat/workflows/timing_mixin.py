"""rLLM v0.2's `TimingTrackingMixin`: `timed_llm_call` and `timed_env_call`, the helpers its built-in workflows call.
rllm times every model, env and reward call of every workflow already (`time_model`, `time_env`, `time_reward`,
`time_total` in each episode's metrics), so these only forward the call."""

from __future__ import annotations

from typing import Any

__all__ = ["TimingTrackingMixin"]


class TimingTrackingMixin:
    async def timed_llm_call(self, *args: Any, **kwargs: Any) -> Any:
        return await self.rollout_engine.get_model_response(*args, **kwargs)

    async def timed_env_call(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        return await self.run_in_executor(func, *args, **kwargs)
