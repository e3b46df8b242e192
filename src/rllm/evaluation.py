"""`evaluate(config)`: the validation pass of training, run on its own (what `rllm eval` calls).

    summary, run_dir = evaluate(load_config("configs/math_grpo.yaml", ["data.val_size=100"]))

It reads the same config tree as training, so an eval and a training run of one config cannot drift: the tasks are
the config's validation split (`data.val_size` rows from `data.val_seed`), each rolled out `rollout.val_n` times with
the validation sampling (`rollout.val_temperature`, seeded by `trainer.seed`), played by what training would use
(`rllm.harnesses.workflow_for_config`: the harness named by `agent`, else the workflow). The model is
`rollout.server`'s:

- `local`: the embedded model or local folder `model.name` (`LocalModel`, `model.dtype`), with another run's trained
  weights when `model.init_from` names one (`rllm.training.init_from`);
- `vllm`: a vLLM server on `model.name`'s folder, started for the run (or attached: `rollout.vllm.base_url`),
  token-in/token-out with the model's own tokenizer;
- `openai`: any OpenAI-compatible endpoint (`rollout.openai.base_url`, `.model`, `.tokenizer`, `.api_key_env`).

The run directory (`rllm.runs`) holds config.yaml, manifest.json, episodes.jsonl (split "eval"), summary.json
(`rllm.metrics` vocabulary, plus `wall_time_s`) and exactness.json (the token-exactness report's counts of the
episodes, `rllm.exactness`: prefix breaks by cause, round trips, re-tokenizations).

Before any rollout, the config's `agent_args`, `env_args` and `workflow_args` are checked against what they go to
(`rllm.workflows.resolve.check_config_args`) and an `openai` endpoint gets one request (`rllm.models.endpoint`): a
typo or an unreachable URL is one line at once. An eval whose every episode ends in an error (infrastructure or agent)
raises `AllEpisodesFailedError` with the cause after writing its episodes (`rllm.engine.failures`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from time import perf_counter
from typing import Any

from rllm.config import ConfigError, TrainConfig, check_support, inference_options
from rllm.engine.failures import raise_if_all_failed
from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.exactness import episode_counts
from rllm.harnesses import workflow_for_config
from rllm.metrics import summarize_episodes
from rllm.models.base import close_model
from rllm.runs import RunLog, create_run_dir, holds_nothing, write_exactness, write_json, write_manifest
from rllm.workflows.resolve import check_config_args

__all__ = ["evaluate", "evaluate_async", "make_eval_model"]


def evaluate(config: TrainConfig, **kwargs: Any) -> tuple[dict[str, Any], Path]:
    """Blocking form of `evaluate_async`."""
    import asyncio

    return asyncio.run(evaluate_async(config, **kwargs))


async def evaluate_async(
    config: TrainConfig,
    *,
    workflow_class: Any = None,
    workflow_args: dict | None = None,
    tasks: list[dict] | None = None,
    progress: bool = False,
) -> tuple[dict[str, Any], Path]:
    """Evaluate `config` (module docstring); `tasks` replaces the generated validation split. Returns the summary
    and the run directory."""
    check_support(config, "eval")  # a key this eval would ignore: one line before any task or model
    workflow_class, workflow_args = workflow_for_config(
        config, workflow_class=workflow_class, workflow_args=workflow_args
    )
    tasks = config.data.make_tasks("val") if tasks is None else tasks
    if not tasks:
        raise ConfigError("nothing to evaluate: data.val_size is 0 (set it to the number of tasks)")
    check_config_args(config, workflow_class, workflow_args, tasks)
    _check_endpoint(config)  # before the run directory: an unreachable endpoint leaves nothing behind
    run_dir = create_run_dir(config.trainer.run_dir, config.trainer.name, "eval", config.data.task)
    write_manifest(run_dir, "eval", config)
    try:
        model = make_eval_model(config, run_dir)
    except BaseException:  # a model that cannot load (or Ctrl-C meanwhile): no empty run directory stays behind
        if holds_nothing(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        with _progress(progress, len(tasks) * config.rollout.val_n) as bar:
            engine = AgentWorkflowEngine(
                workflow_class=workflow_class,
                workflow_args=workflow_args,
                model=model,
                on_episode_done=lambda _: bar.update(),
                **config.rollout.engine_kwargs(validation=True),
            )
            sampling = config.rollout.to_sampling(validation=True, seed=config.trainer.seed)
            started = perf_counter()
            episodes = await engine.execute_tasks_async(tasks, n_rollouts=config.rollout.val_n, sampling=sampling)
            wall = perf_counter() - started
    finally:
        await close_model(model)
    summary = {**summarize_episodes(episodes, wall), "wall_time_s": wall}
    RunLog(run_dir).log_episodes(0, episodes, "eval")
    write_json(run_dir / "summary.json", summary)
    write_exactness(run_dir, "eval", [{"step": 0, **episode_counts(episodes)}])
    raise_if_all_failed(episodes, "this eval", kept_in=str(run_dir / "episodes.jsonl"))
    return summary, run_dir


def _check_endpoint(config: TrainConfig) -> None:
    """With `rollout.server=openai`: one request to the endpoint before any rollout (`rllm.models.endpoint`), so a
    wrong URL, a server that is down or a wrong key is one line at once, not retried rollouts and a score of 0.
    The embedded model and vLLM (which checks the server it attaches to itself) are not probed."""
    endpoint = config.rollout.openai
    if config.rollout.server != "openai":
        return
    if not endpoint.base_url:
        raise ConfigError("rollout.server=openai needs rollout.openai.base_url (e.g. http://localhost:8000/v1)")
    from rllm.models.endpoint import check_endpoint

    key_hint = f"${endpoint.api_key_env}, named by rollout.openai.api_key_env"
    check_endpoint(endpoint.base_url, api_key=_api_key(config), key_hint=key_hint, what="rollout.openai.base_url")


def _api_key(config: TrainConfig) -> str | None:
    """The key the client sends (`OpenAIClient`: the configured variable, else $OPENAI_API_KEY)."""
    return os.environ.get(config.rollout.openai.api_key_env) or os.environ.get("OPENAI_API_KEY")


def make_eval_model(config: TrainConfig, run_dir: Path) -> Any:
    """The model client `rollout.server` names, for evaluation (module docstring)."""
    check_support(config, "eval")  # e.g. model.init_from with vLLM: a key this eval would ignore
    rollout = config.rollout
    if rollout.server == "openai":
        from rllm.models.openai import OpenAIClient

        if not rollout.openai.base_url:
            raise ConfigError("rollout.server=openai needs rollout.openai.base_url (e.g. http://localhost:8000/v1)")
        return OpenAIClient(
            rollout.openai.base_url,
            rollout.openai.model or config.model.name,
            api_key=os.environ.get(rollout.openai.api_key_env),
            tokenizer=rollout.openai.tokenizer,
            max_connections=max(rollout.n_parallel, 8),
            timeout=rollout.openai.timeout,
            max_retries=rollout.openai.max_retries,
        )
    if rollout.server == "vllm":
        from rllm.models import registry
        from rllm.models.vllm_rollout import VLLMRolloutClient
        from rllm.models.vllm_server import VLLMServer

        server, owns = VLLMServer.from_config(
            rollout.vllm,
            lambda: registry.resolve_model_path(config.model.name),
            log_path=run_dir / "vllm" / "server.log",
        )
        return VLLMRolloutClient(
            server,
            registry.load_tokenizer(config.model.name),
            workdir=run_dir / "vllm",
            owns_server=owns,
            max_connections=max(rollout.n_parallel, 8),
            vision=registry.load_vision(config.model.name),
        )
    from rllm.inference.model import LocalModel

    if config.model.init_from:  # another run's trained weights (rllm.training.init_from)
        import torch

        from rllm.models import registry
        from rllm.training.init_from import apply_init_weights

        model = registry.load_causal_lm(config.model.name, dtype="float32", device=config.model.device)
        apply_init_weights(model, config.model.init_from)  # merged in float32, then cast to model.dtype
        return LocalModel(
            model.to(getattr(torch, config.model.dtype)),
            registry.load_tokenizer(config.model.name),
            inference_options(config),
        )
    return LocalModel.from_pretrained(config.model.name, inference_options(config), dtype=config.model.dtype)


def _progress(enabled: bool, total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="eval", unit="ep", disable=not enabled)
