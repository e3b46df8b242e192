"""rLLM v0.2 / verl config keys -> rllm's `TrainConfig`: the one table behind `rllm.trainer.agent_trainer`.

    translation = translate(hydra_config, workflow=False, train_size=len(train_rows))
    config = translation.train_config()      # rllm's TrainConfig; translation.warnings, .ignored say the rest

`TABLE` lists every key of `rllm/trainer/config/agent_ppo_trainer.yaml` that means something here, with what it
becomes; `NO_OPS` the infrastructure keys (memory, speed, placement, rLLM's hosted services) accepted and ignored;
`translate` is the code of both. Rules:

- A mapped key is always translated, its default included: an rLLM script that does not set
  `actor_rollout_ref.actor.optim.lr` trains with verl's 1e-6, `model.lora_rank` 0 means full fine-tuning, and
  `algorithm.adv_estimator` defaults to verl's `gae` (PPO with a critic).
- A key we cannot honour is an error only when its value changes the algorithm (`algorithm.use_kl_in_reward=True`,
  `rllm.stepwise_advantage.mode=broadcast` with `enable=True`, ...); the message names the key and rllm's nearest
  option. Every such error of a config is reported at once.
- A key that is in no table (added with Hydra's `+key=value`) is an error naming it; a key missing from the yaml
  fails in Hydra itself, as in rLLM ("Key 'x' is not in struct").
- Validation-only differences are warnings, not errors: rllm has no separate validation top_p/top_k (validation
  samples with `rollout.top_p/top_k`), and always validates before training (`trainer.val_before_train=False`).
- `trainer.logger` with wandb (every rLLM script sets `['console','wandb']`): accepted with one warning; rllm does
  not ship wandb, metrics go to the run directory's metrics.jsonl and TensorBoard events (`rllm view` shows them).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.config import ConfigError, TrainConfig, override_config

__all__ = ["NO_OPS", "TABLE", "Translation", "changed_from_default", "default_config", "no_op_entry", "translate"]

AAR = "actor_rollout_ref"
# verl/rLLM key -> what it becomes in rllm (rllm train --help-config documents the right-hand side).
TABLE: dict[str, str] = {
    f"{AAR}.model.path": "model.name",
    "data.train_batch_size": "trainer.tasks_per_step (and algorithm.mini_batches, trainer.total_steps)",
    "data.max_prompt_length": "rollout.max_prompt_length",
    "data.max_response_length": "rollout.max_response_length and rollout.max_tokens (each call gets what is left)",
    "data.train_files": "the training rows when AgentTrainer gets no train_dataset (.json/.jsonl)",
    "data.val_files": "the validation rows when AgentTrainer gets no val_dataset (.json/.jsonl)",
    f"{AAR}.rollout.n": "rollout.n",
    f"{AAR}.rollout.temperature": "rollout.temperature",
    f"{AAR}.rollout.top_p": "rollout.top_p",
    f"{AAR}.rollout.top_k": "rollout.top_k (-1 -> 0, off)",
    f"{AAR}.rollout.val_kwargs.n": "rollout.val_n",
    f"{AAR}.rollout.val_kwargs.temperature": "rollout.val_temperature (0 when do_sample is false)",
    f"{AAR}.rollout.val_kwargs.do_sample": "rollout.val_temperature=0 when false",
    f"{AAR}.rollout.val_kwargs.top_p": "none: validation samples with rollout.top_p (a warning when it differs)",
    f"{AAR}.rollout.val_kwargs.top_k": "none: validation samples with rollout.top_k (a warning when it differs)",
    "algorithm.adv_estimator": "algorithm.advantage: grpo, rloo, remax, gae, reinforce_plus_plus -> reinforce_pp",
    "algorithm.norm_adv_by_std_in_grpo": "algorithm.norm_by_std",
    "algorithm.gamma": "algorithm.gamma",
    "algorithm.lam": "algorithm.lam",
    "algorithm.use_kl_in_reward": "error when true (nearest: actor.use_kl_loss -> algorithm.kl_coef)",
    f"{AAR}.actor.use_kl_loss": "algorithm.kl_coef = kl_loss_coef when true, else 0",
    f"{AAR}.actor.kl_loss_coef": "algorithm.kl_coef (with use_kl_loss)",
    f"{AAR}.actor.kl_loss_type": "algorithm.kl_kind: low_var_kl/k3 -> k3, kl/k1 -> k1, mse/k2 -> k2",
    f"{AAR}.actor.optim.lr": "optim.lr",
    f"{AAR}.actor.optim.weight_decay": "optim.weight_decay",
    f"{AAR}.actor.optim.lr_warmup_steps": "optim.warmup_steps (-1: lr_warmup_steps_ratio * total steps)",
    f"{AAR}.actor.optim.lr_warmup_steps_ratio": "optim.warmup_steps (when lr_warmup_steps is -1)",
    f"{AAR}.actor.optim.warmup_style": "optim.schedule (constant, cosine)",
    f"{AAR}.actor.optim.min_lr_ratio": "error unless 0 (rllm's cosine decays to 0)",
    f"{AAR}.actor.clip_ratio": "algorithm.clip_low/clip_high when clip_ratio_low/high are not set",
    f"{AAR}.actor.clip_ratio_low": "algorithm.clip_low",
    f"{AAR}.actor.clip_ratio_high": "algorithm.clip_high",
    f"{AAR}.actor.clip_ratio_c": "algorithm.dual_clip (verl always applies its dual clip)",
    f"{AAR}.actor.loss_agg_mode": "algorithm.loss_agg",
    f"{AAR}.actor.entropy_coeff": "algorithm.entropy_coef",
    f"{AAR}.actor.ppo_epochs": "algorithm.ppo_epochs",
    f"{AAR}.actor.ppo_mini_batch_size": "algorithm.mini_batches = max(1, train_batch_size // ppo_mini_batch_size)",
    f"{AAR}.actor.ppo_micro_batch_size": "optim.micro_batch_size (when set)",
    f"{AAR}.actor.ppo_micro_batch_size_per_gpu": "optim.micro_batch_size (when set)",
    f"{AAR}.actor.grad_clip": "optim.grad_clip",
    f"{AAR}.actor.strategy": "verl.strategy (trainer.backend=verl); megatron -> error",
    f"{AAR}.actor.ulysses_sequence_parallel_size": "verl.ulysses_sequence_parallel_size (trainer.backend=verl)",
    f"{AAR}.actor.fsdp_config.param_offload": "verl.param_offload (trainer.backend=verl)",
    f"{AAR}.actor.fsdp_config.optimizer_offload": "verl.optimizer_offload (trainer.backend=verl)",
    f"{AAR}.model.lora_rank": "model.lora.enabled (rank > 0) and model.lora.rank; 0 is full fine-tuning",
    f"{AAR}.model.lora_alpha": "model.lora.alpha",
    f"{AAR}.model.target_modules": "model.lora.target_modules (all-linear: every projection, rllm's default)",
    f"{AAR}.model.enable_gradient_checkpointing": "model.gradient_checkpointing",
    "trainer.backend": "trainer.backend (rllm's key: torch, or verl)",
    "trainer.total_epochs": "trainer.total_steps = total_epochs * (len(train_dataset) // train_batch_size)",
    "trainer.total_training_steps": "trainer.total_steps (when set)",
    "trainer.test_freq": "trainer.val_every (-1 -> 0: before and after training only)",
    "trainer.save_freq": "trainer.save_every (-1 -> 0: at the end only)",
    "trainer.val_before_train": "none: rllm always validates first (a warning when false)",
    "trainer.project_name": "trainer.run_dir = checkpoints/<project_name> (via default_local_dir)",
    "trainer.experiment_name": "trainer.name = <experiment_name>-<time> (via default_local_dir)",
    "trainer.default_local_dir": "trainer.run_dir/trainer.name (set: exactly that folder)",
    "trainer.logger": "console: stdout; tensorboard: trainer.tensorboard; wandb and others: one warning",
    "trainer.nnodes": "trainer.nodes (trainer.backend=verl; one process on torch)",
    "trainer.n_gpus_per_node": "trainer.workers_per_node (trainer.backend=verl; one process on torch)",
    "trainer.critic_warmup": "error unless 0",
    "trainer.resume_mode": "resume_path: trainer.resume = resume_from_path; auto/disable: a fresh run",
    "trainer.resume_from_path": "trainer.resume (with resume_mode=resume_path)",
    "rllm.agent.name": "the agent class when AgentTrainer gets none (rLLM's AGENT_CLASS_MAPPING names we have)",
    "rllm.env.name": "the env class when AgentTrainer gets none (rLLM's ENV_CLASS_MAPPING names we have)",
    "rllm.agent.max_steps": "rollout.max_steps",
    "rllm.agent.trajectory_timeout": "rollout.episode_timeout",
    "rllm.agent.overlong_filter": "algorithm.filter_overlong",
    "rllm.mask_truncated_samples": "algorithm.filter_overlong",
    "rllm.agent.agent_args": "agent_args (the config wins over AgentTrainer's)",
    "rllm.env.env_args": "env_args (the config wins; they win over each row's fields, as in rLLM)",
    "rllm.agent.engine_args": "n_parallel_agents -> rollout.n_parallel, retry_limit -> rollout.retry_limit - 1, "
    "trajectory_timeout -> rollout.episode_timeout, max_workers: no-op",
    "rllm.workflow.use_workflow": "with workflow_class: agent/env arguments are refused, as in rLLM",
    "rllm.workflow.name": "none: give workflow_class",
    "rllm.workflow.workflow_args": "workflow_args (non-null config values win; dicts are merged)",
    "rllm.workflow.n_parallel_tasks": "rollout.n_parallel (workflows)",
    "rllm.workflow.retry_limit": "rollout.retry_limit = retry_limit - 1 (rLLM counts attempts; workflows)",
    "rllm.disable_thinking": "error when true (rllm renders with the chat template's defaults)",
    "rllm.accumulate_reasoning": "error when true",
    "rllm.stepwise_advantage.enable": "algorithm.stepwise with mode per_step; broadcast -> error",
    "rllm.stepwise_advantage.mode": "per_step -> algorithm.stepwise; broadcast -> error (when enabled)",
    "rllm.stepwise_advantage.normalize_by_steps": "error when true",
    "rllm.rejection_sample.enable": "algorithm.drop_uniform_groups",
    "rllm.rejection_sample.multiplier": "agent/env: ignored, as rLLM's agent trainer does; workflows: error unless 1",
    "rllm.compact_filtering.enable": "error when true (nearest: rllm.mask_truncated_samples, "
    "algorithm.mask_infra_errors)",
}

# Infrastructure keys: how verl/vLLM use memory and GPUs, or rLLM services we do not have. Accepted, ignored.
NO_OPS: dict[str, str] = {
    "data.tokenizer": "the model's own tokenizer is used",
    "data.prompt_key": "rows are tasks, not verl prompts",
    "data.val_batch_size": "validation runs every validation task",
    "data.gen_batch_size": "derived (train_batch_size * rejection multiplier)",
    "data.shuffle": "tasks are always drawn in seeded shuffled epochs",
    "data.filter_overlong_prompts": "a prompt over the limit ends its episode (TerminationReason)",
    "data.filter_overlong_prompts_workers": "as above",
    "data.truncation": "as above",
    "data.trust_remote_code": "loading",
    "data.return_multi_modal_inputs": "text only",
    f"{AAR}.hybrid_engine": "verl placement",
    f"{AAR}.model.use_remove_padding": "verl kernels",
    f"{AAR}.model.trust_remote_code": "loading",
    f"{AAR}.actor.use_dynamic_bsz": "verl batching by tokens",
    f"{AAR}.actor.ppo_max_token_len_per_gpu": "verl batching by tokens",
    f"{AAR}.actor.shuffle": "verl mini-batch shuffling",
    f"{AAR}.actor.optim.total_training_steps": "derived",
    f"{AAR}.actor.fsdp_config.dtype": "FSDP mixed precision (model.dtype is rllm's)",
    f"{AAR}.ref.fsdp_config.param_offload": "reference model memory",
    f"{AAR}.ref.log_prob_micro_batch_size_per_gpu": "batching",
    f"{AAR}.rollout.name": "the rollout server is rllm's rollout.server",
    f"{AAR}.rollout.mode": "rollouts are always asynchronous",
    f"{AAR}.rollout.dtype": "vLLM",
    f"{AAR}.rollout.gpu_memory_utilization": "vLLM",
    f"{AAR}.rollout.enforce_eager": "vLLM",
    f"{AAR}.rollout.tensor_model_parallel_size": "vLLM",
    f"{AAR}.rollout.load_format": "vLLM",
    f"{AAR}.rollout.calculate_log_probs": "sampled logprobs are always recorded",
    f"{AAR}.rollout.log_prob_micro_batch_size_per_gpu": "batching",
    f"{AAR}.rollout.log_prob_use_dynamic_bsz": "batching",
    f"{AAR}.rollout.agent.num_workers": "verl's agent loop",
    f"{AAR}.rollout.engine_kwargs.": "vLLM/SGLang server arguments",
    "critic.ppo_mini_batch_size": "the critic shares the actor's mini-batches",
    "critic.ppo_micro_batch_size_per_gpu": "batching",
    "algorithm.kl_penalty": "in-reward KL only (use_kl_in_reward)",
    "algorithm.kl_ctrl.": "in-reward KL only (use_kl_in_reward)",
    "trainer.default_hdfs_dir": "no HDFS upload",
    "trainer.max_actor_ckpt_to_keep": "checkpoints: latest + the previous one",
    "trainer.log_episodes": "rllm always writes episodes.jsonl",
    "trainer.episode_log_dir": "episodes go to the run directory",
    "ray_init.": "Ray is started by the verl backend itself",
    "rllm.filter_token_mismatch": "rllm trains on the sampled ids: there is no re-tokenization to mismatch",
    "rllm.compact_filtering.mask_": "read only with compact_filtering.enable",
    "rllm.sdk.": "rLLM's SDK trainer (agent_run_func) is not provided",
    "fireworks.": "the Fireworks backend is not provided",
}

_FREE_DICTS = ("rllm.agent.agent_args", "rllm.env.env_args", "rllm.agent.engine_args", "rllm.workflow.workflow_args")
_ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "remax": "remax", "gae": "gae", "reinforce_plus_plus": "reinforce_pp"}
_KL_KINDS = {"low_var_kl": "k3", "k3": "k3", "kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2"}
_ENGINE_ARGS = ("n_parallel_agents", "retry_limit", "trajectory_timeout", "max_workers")
_CONSOLE_LOGGERS = ("console", "tensorboard")


@dataclass
class Translation:
    """What `translate` made of an rLLM config: rllm `overrides` (dotted key -> value) and where each came from,
    the agent/env/workflow arguments, class names, data files, and what was ignored or warned about."""

    overrides: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    agent_args: dict[str, Any] = field(default_factory=dict)
    env_args: dict[str, Any] = field(default_factory=dict)
    workflow_args: dict[str, Any] = field(default_factory=dict)
    agent_name: str | None = None
    env_name: str | None = None
    use_workflow: bool = False
    train_files: str | None = None
    val_files: str | None = None
    warnings: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def train_config(self) -> TrainConfig:
        """rllm's `TrainConfig`; an invalid value is a ConfigError that also names the rLLM keys it came from."""
        args = [f"{key}={json.dumps(value)}" for key, value in self.overrides.items()]
        try:
            return override_config(TrainConfig(), args, "an rLLM config")
        except ConfigError as exc:
            named = [f"  {ours} <- {self.sources[ours]}" for ours in self.overrides if ours in str(exc)]
            raise ConfigError(f"{exc}\ntranslated from rLLM keys:\n" + "\n".join(named)) from None


def default_config() -> dict[str, Any]:
    """The shipped agent_ppo_trainer.yaml, resolved, as a plain dict (a fresh copy)."""
    return copy.deepcopy(_defaults())


@functools.cache
def _defaults() -> dict[str, Any]:
    from omegaconf import OmegaConf

    from rllm.compat.trainer.config import CONFIG_DIR, register_resolvers

    register_resolvers()
    return OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "agent_ppo_trainer.yaml"), resolve=True)


def translate(config: Mapping[str, Any], *, workflow: bool = False, train_size: int | None = None) -> Translation:
    """Translate a resolved rLLM config (a nested dict) into rllm's; `workflow`: a workflow class is trained (some
    keys differ between rLLM's agent and workflow trainers); `train_size`: rows in the training set (for epochs)."""
    t, errors = Translation(), []

    def get(key: str) -> Any:
        return _lookup(config, key)

    def put(ours: str, value: Any, *keys: str) -> None:
        t.overrides[ours] = value
        t.sources[ours] = ", ".join(f"{key}={_show(get(key))}" for key in keys)

    def refuse(key: str, why: str) -> None:
        errors.append(f"{key}={_show(get(key))}: {why}")

    model, actor, rollout, optim = f"{AAR}.model", f"{AAR}.actor", f"{AAR}.rollout", f"{AAR}.actor.optim"
    backend = get("trainer.backend")
    put("trainer.backend", backend, "trainer.backend")
    put("model.name", os.path.expanduser(str(get(f"{model}.path"))), f"{model}.path")

    # data and sampling
    tasks = get("data.train_batch_size")
    put("trainer.tasks_per_step", tasks, "data.train_batch_size")
    put("rollout.max_prompt_length", get("data.max_prompt_length"), "data.max_prompt_length")
    for ours in ("rollout.max_response_length", "rollout.max_tokens"):
        put(ours, get("data.max_response_length"), "data.max_response_length")
    t.train_files, t.val_files = (
        changed_from_default(config, "data.train_files"),
        changed_from_default(config, "data.val_files"),
    )
    put("rollout.n", get(f"{rollout}.n"), f"{rollout}.n")
    put("rollout.temperature", float(get(f"{rollout}.temperature")), f"{rollout}.temperature")
    put("rollout.top_p", float(get(f"{rollout}.top_p")), f"{rollout}.top_p")
    put("rollout.top_k", max(int(get(f"{rollout}.top_k")), 0), f"{rollout}.top_k")
    val = f"{rollout}.val_kwargs"
    put("rollout.val_n", get(f"{val}.n"), f"{val}.n")
    val_temperature = float(get(f"{val}.temperature")) if get(f"{val}.do_sample") else 0.0
    put("rollout.val_temperature", val_temperature, f"{val}.temperature", f"{val}.do_sample")
    for name in ("top_p", "top_k"):
        given, train = get(f"{val}.{name}"), get(f"{rollout}.{name}")
        if val_temperature > 0 and float(given) != float(train):
            t.warnings.append(
                f"{val}.{name}={given}: rllm has no separate validation {name}; validation samples "
                f"with {rollout}.{name}={train} (rollout.{name})"
            )

    # the advantage and the loss
    estimator = get("algorithm.adv_estimator")
    if estimator in _ESTIMATORS:
        put("algorithm.advantage", _ESTIMATORS[estimator], "algorithm.adv_estimator")
    else:
        refuse(
            "algorithm.adv_estimator",
            f"not available; rllm has {', '.join(_ESTIMATORS)} (algorithm.advantage also offers dr_grpo and reinforce)",
        )
    put("algorithm.norm_by_std", bool(get("algorithm.norm_adv_by_std_in_grpo")), "algorithm.norm_adv_by_std_in_grpo")
    put("algorithm.gamma", float(get("algorithm.gamma")), "algorithm.gamma")
    put("algorithm.lam", float(get("algorithm.lam")), "algorithm.lam")
    if get("algorithm.use_kl_in_reward"):
        refuse(
            "algorithm.use_kl_in_reward",
            "a KL penalty inside the reward is not available; the nearest is the KL "
            f"loss: {actor}.use_kl_loss=True {actor}.kl_loss_coef=<c> (rllm's algorithm.kl_coef)",
        )
    use_kl = bool(get(f"{actor}.use_kl_loss"))
    kl_keys = (f"{actor}.use_kl_loss", f"{actor}.kl_loss_coef")
    put("algorithm.kl_coef", float(get(f"{actor}.kl_loss_coef")) if use_kl else 0.0, *kl_keys)
    kl_type = get(f"{actor}.kl_loss_type")
    if kl_type in _KL_KINDS:
        put("algorithm.kl_kind", _KL_KINDS[kl_type], f"{actor}.kl_loss_type")
    elif use_kl:
        refuse(f"{actor}.kl_loss_type", f"not available; rllm has {', '.join(_KL_KINDS)} (algorithm.kl_kind k1/k2/k3)")
    clip_low, clip_high, clip = (get(f"{actor}.{name}") for name in ("clip_ratio_low", "clip_ratio_high", "clip_ratio"))
    put("algorithm.clip_low", float(clip if clip_low is None else clip_low), f"{actor}.clip_ratio_low")
    put("algorithm.clip_high", float(clip if clip_high is None else clip_high), f"{actor}.clip_ratio_high")
    if changed_from_default(config, f"{actor}.clip_ratio") is not None and not changed_from_default(
        config, f"{actor}.clip_ratio_low"
    ):
        put("algorithm.clip_low", float(clip), f"{actor}.clip_ratio")  # verl 0.6 read clip_ratio as the default
    if changed_from_default(config, f"{actor}.clip_ratio") is not None and not changed_from_default(
        config, f"{actor}.clip_ratio_high"
    ):
        put("algorithm.clip_high", float(clip), f"{actor}.clip_ratio")
    put("algorithm.dual_clip", float(get(f"{actor}.clip_ratio_c")), f"{actor}.clip_ratio_c")
    put("algorithm.loss_agg", get(f"{actor}.loss_agg_mode"), f"{actor}.loss_agg_mode")
    put("algorithm.entropy_coef", float(get(f"{actor}.entropy_coeff")), f"{actor}.entropy_coeff")
    put("algorithm.ppo_epochs", get(f"{actor}.ppo_epochs"), f"{actor}.ppo_epochs")
    mini = get(f"{actor}.ppo_mini_batch_size")
    put("algorithm.mini_batches", max(1, tasks // mini), f"{actor}.ppo_mini_batch_size", "data.train_batch_size")
    for key in (f"{actor}.ppo_micro_batch_size_per_gpu", f"{actor}.ppo_micro_batch_size"):
        if get(key) is not None:
            put("optim.micro_batch_size", get(key), key)
            break
    grad_clip = get(f"{actor}.grad_clip")
    put("optim.grad_clip", float(grad_clip) if grad_clip and grad_clip > 0 else None, f"{actor}.grad_clip")

    # the optimizer and the model
    put("optim.lr", float(get(f"{optim}.lr")), f"{optim}.lr")
    put("optim.weight_decay", float(get(f"{optim}.weight_decay")), f"{optim}.weight_decay")
    style = get(f"{optim}.warmup_style")
    if style in ("constant", "cosine"):
        put("optim.schedule", style, f"{optim}.warmup_style")
    else:
        refuse(f"{optim}.warmup_style", "not available; rllm has constant and cosine (optim.schedule; also linear)")
    if float(get(f"{optim}.min_lr_ratio") or 0) != 0:
        refuse(f"{optim}.min_lr_ratio", "rllm's cosine schedule decays to 0; set it to 0")
    rank = int(get(f"{model}.lora_rank") or 0)
    put("model.lora.enabled", rank > 0, f"{model}.lora_rank")
    if rank > 0:
        put("model.lora.rank", rank, f"{model}.lora_rank")
        put("model.lora.alpha", float(get(f"{model}.lora_alpha")), f"{model}.lora_alpha")
        modules = get(f"{model}.target_modules")
        if modules != "all-linear":
            put(
                "model.lora.target_modules",
                [modules] if isinstance(modules, str) else list(modules),
                f"{model}.target_modules",
            )
    checkpointing = bool(get(f"{model}.enable_gradient_checkpointing"))
    put("model.gradient_checkpointing", checkpointing, f"{model}.enable_gradient_checkpointing")

    # the loop, its run directory and logs
    steps = get("trainer.total_training_steps")
    if steps is None:
        epochs = get("trainer.total_epochs")
        if train_size is not None:
            steps = epochs * (train_size // tasks)
            if steps < 1:
                refuse(
                    "trainer.total_epochs",
                    f"makes 0 training steps: {train_size} training rows hold no full "
                    f"batch of data.train_batch_size={tasks} (verl drops the partial last batch); lower "
                    "data.train_batch_size or set trainer.total_training_steps",
                )
        put("trainer.total_steps", steps, "trainer.total_epochs", "data.train_batch_size")
    else:
        put("trainer.total_steps", steps, "trainer.total_training_steps")
    warmup = get(f"{optim}.lr_warmup_steps")
    if warmup is None or warmup < 0:
        warmup = int(float(get(f"{optim}.lr_warmup_steps_ratio") or 0) * (steps or 0))
    put("optim.warmup_steps", warmup, f"{optim}.lr_warmup_steps", f"{optim}.lr_warmup_steps_ratio")
    put("trainer.val_every", max(get("trainer.test_freq") or 0, 0), "trainer.test_freq")
    put("trainer.save_every", max(get("trainer.save_freq") or 0, 0), "trainer.save_freq")
    if not get("trainer.val_before_train"):
        t.warnings.append(
            "trainer.val_before_train=False: rllm always validates before training (the baseline of "
            "val/ metrics); an empty val_dataset skips validation"
        )
    _run_dir(config, put)
    _loggers(get("trainer.logger"), t, put)
    if backend == "verl":
        put("trainer.nodes", get("trainer.nnodes"), "trainer.nnodes")
        put("trainer.workers_per_node", get("trainer.n_gpus_per_node"), "trainer.n_gpus_per_node")
        put(
            "verl.ulysses_sequence_parallel_size",
            get(f"{actor}.ulysses_sequence_parallel_size"),
            f"{actor}.ulysses_sequence_parallel_size",
        )
        put("verl.param_offload", bool(get(f"{actor}.fsdp_config.param_offload")), f"{actor}.fsdp_config.param_offload")
        put(
            "verl.optimizer_offload",
            bool(get(f"{actor}.fsdp_config.optimizer_offload")),
            f"{actor}.fsdp_config.optimizer_offload",
        )
        if get(f"{actor}.strategy") in ("fsdp", "fsdp2"):
            put("verl.strategy", get(f"{actor}.strategy"), f"{actor}.strategy")
    if get(f"{actor}.strategy") not in ("fsdp", "fsdp2"):
        refuse(f"{actor}.strategy", "rllm's verl backend runs FSDP only (fsdp, fsdp2); megatron is not available")
    if get("trainer.critic_warmup"):
        refuse("trainer.critic_warmup", "not available (the critic trains with the actor from step 1); set it to 0")
    if get("trainer.resume_mode") == "resume_path":
        put("trainer.resume", get("trainer.resume_from_path"), "trainer.resume_mode", "trainer.resume_from_path")

    # rLLM's own section
    _rllm_section(config, workflow, t, put, refuse)
    _check_the_rest(config, t, errors)
    if errors:
        raise ConfigError("rLLM config keys rllm cannot honour:\n" + "\n".join(f"  - {e}" for e in errors))
    return t


def _rllm_section(config: Mapping, workflow: bool, t: Translation, put, refuse) -> None:
    def get(key: str) -> Any:
        return _lookup(config, key)

    put("rollout.max_steps", get("rllm.agent.max_steps"), "rllm.agent.max_steps")
    put("rollout.episode_timeout", get("rllm.agent.trajectory_timeout") or None, "rllm.agent.trajectory_timeout")
    overlong = bool(get("rllm.agent.overlong_filter") or get("rllm.mask_truncated_samples"))
    put("algorithm.filter_overlong", overlong, "rllm.agent.overlong_filter", "rllm.mask_truncated_samples")
    t.agent_args = dict(get("rllm.agent.agent_args") or {})
    t.env_args = dict(get("rllm.env.env_args") or {})
    t.agent_name, t.env_name = get("rllm.agent.name"), get("rllm.env.name")
    t.use_workflow = bool(get("rllm.workflow.use_workflow"))
    t.workflow_args = {k: v for k, v in (get("rllm.workflow.workflow_args") or {}).items() if v is not None}
    tasks, n = get("data.train_batch_size"), get(f"{AAR}.rollout.n")
    if workflow:
        put("rollout.n_parallel", get("rllm.workflow.n_parallel_tasks"), "rllm.workflow.n_parallel_tasks")
        put("rollout.retry_limit", max(get("rllm.workflow.retry_limit") - 1, 0), "rllm.workflow.retry_limit")
        if float(get("rllm.rejection_sample.multiplier")) != 1:
            refuse(
                "rllm.rejection_sample.multiplier",
                "oversampling tasks is not available; rllm drops uniform "
                "groups without replacing them (rejection_sample.enable: drop_uniform_groups)",
            )
    else:
        engine_args = dict(get("rllm.agent.engine_args") or {})
        key = "rllm.agent.engine_args"
        put("rollout.n_parallel", engine_args.pop("n_parallel_agents", None) or tasks * n, key, "data.train_batch_size")
        if "retry_limit" in engine_args:
            put("rollout.retry_limit", max(int(engine_args.pop("retry_limit")) - 1, 0), key)
        if "trajectory_timeout" in engine_args:
            put("rollout.episode_timeout", engine_args.pop("trajectory_timeout") or None, key)
        engine_args.pop("max_workers", None)
        for name in engine_args:
            refuse(f"{key}.{name}", f"not an engine argument rllm has; it takes {', '.join(_ENGINE_ARGS)}")
    for key in ("rllm.disable_thinking", "rllm.accumulate_reasoning"):
        if get(key):
            refuse(
                key,
                "not available: rllm renders prompts with the chat template's defaults and keeps the "
                "messages the agent gives",
            )
    if get("rllm.stepwise_advantage.enable"):
        if get("rllm.stepwise_advantage.mode") == "per_step":
            put("algorithm.stepwise", True, "rllm.stepwise_advantage.enable", "rllm.stepwise_advantage.mode")
        else:
            refuse(
                "rllm.stepwise_advantage.mode",
                "broadcast (the last step's advantage copied to every step) is "
                "not available; the nearest is mode=per_step (rllm's algorithm.stepwise)",
            )
        if get("rllm.stepwise_advantage.normalize_by_steps"):
            refuse("rllm.stepwise_advantage.normalize_by_steps", "not available; set it to False")
    put("algorithm.drop_uniform_groups", bool(get("rllm.rejection_sample.enable")), "rllm.rejection_sample.enable")
    if get("rllm.compact_filtering.enable"):
        refuse(
            "rllm.compact_filtering.enable",
            "masking episodes by termination reason is not available; the nearest "
            "are rllm.mask_truncated_samples=True (algorithm.filter_overlong) and rllm's "
            "algorithm.mask_infra_errors (on by default)",
        )


def _run_dir(config: Mapping, put) -> None:
    project, experiment = _lookup(config, "trainer.project_name"), _lookup(config, "trainer.experiment_name")
    folder = Path(os.path.expanduser(str(_lookup(config, "trainer.default_local_dir"))))
    keys = ("trainer.default_local_dir", "trainer.project_name", "trainer.experiment_name")
    if folder == Path("checkpoints", str(project), str(experiment)):  # the default: a new run each time
        put("trainer.run_dir", str(folder.parent), *keys)
        put("trainer.name", f"{folder.name}-{time.strftime('%Y%m%d-%H%M%S')}", *keys)
    else:
        put("trainer.run_dir", str(folder.parent), "trainer.default_local_dir")
        put("trainer.name", folder.name, "trainer.default_local_dir")


def _loggers(value: Any, t: Translation, put) -> None:
    loggers = [value] if isinstance(value, str) else list(value or [])
    if "tensorboard" in loggers:
        put("trainer.tensorboard", True, "trainer.logger")
    others = [name for name in loggers if name not in _CONSOLE_LOGGERS]
    if others:
        t.warnings.append(
            f"trainer.logger={loggers}: {', '.join(others)} not available in rllm; metrics go to the run "
            "directory's metrics.jsonl and TensorBoard events (`rllm view <run dir>`)"
        )


def _check_the_rest(config: Mapping, t: Translation, errors: list[str]) -> None:
    """Keys no rule above reads: no-ops (noted when changed) or unknown (an error naming them)."""
    defaults = _flatten(_defaults())
    for key, value in _flatten(config).items():
        if key in TABLE or any(key == free or key.startswith(free + ".") for free in _FREE_DICTS):
            continue
        no_op = no_op_entry(key)
        if no_op is not None:
            if key not in defaults or defaults[key] != value:
                t.ignored.append(f"{key}={_show(value)} ({NO_OPS[no_op]})")
        elif key not in defaults:
            errors.append(f"{key}={_show(value)}: not an rLLM/verl key rllm knows (see rllm.trainer.translate.TABLE)")
        elif defaults[key] != value:
            errors.append(f"{key}={_show(value)}: not available in rllm")


def no_op_entry(key: str) -> str | None:
    """The NO_OPS entry covering `key` (an entry ending in "." or "_" covers every key it begins), or None."""
    return next((k for k in NO_OPS if key == k or (k[-1] in "._" and key.startswith(k))), None)


def _lookup(config: Mapping, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def changed_from_default(config: Mapping, key: str) -> Any:
    """The value of `key` when it differs from the shipped default, else None."""
    value = _lookup(config, key)
    return value if value != _lookup(_defaults(), key) else None


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, Mapping) or (prefix and not node):
        return {prefix: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (bool, type(None))) else str(value)
