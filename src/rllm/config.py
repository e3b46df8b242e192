"""One typed config tree for training: `TrainConfig`, loaded from YAML plus dotted command-line overrides.

    cfg = load_config("configs/frozenlake_grpo.yaml", ["trainer.total_steps=20", "model.lora.enabled=false"])
    print(dump_config(cfg))      # the resolved config, as written to a run directory
    print(config_help())         # every dotted key with its type, default and description

Design choices:

- Every section is a pydantic model with `extra="forbid"` and a description on every field, so a typo fails loudly
  and `config_help()` documents the whole tree from the code itself (no separate reference to drift).
- Overrides are `dotted.key=value`; the value is parsed as YAML (`20` is an int, `0.7` a float, `false` a bool,
  `null` None, `[q_proj,v_proj]` a list, `{a: 1}` a mapping). Setting a key to a mapping replaces it whole.
  Numbers such as `1e-4` are read as floats (YAML 1.2), not as the string PyYAML's YAML 1.1 rules would give.
- Every failure is a `ConfigError` naming the full dotted key, the value given and what was expected; unknown keys
  get the closest valid names. Rules that span sections (e.g. GRPO needs a group of at least 2 samples) live in
  `TrainConfig`'s validator, so a config built in Python is checked the same way as one loaded from a file. A key
  that the chosen backend, rollout server or device would ignore is refused there too, from the declarations of
  `rllm.support` (those of one command by `check_support`, at the start of `rllm train` and `rllm eval`).
- Defaults describe the embedded CPU setup: the default embedded model with LoRA, fp32, short rollouts.
- Importing this module is light (pydantic and pyyaml only); the built-in task registry is consulted lazily.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from rllm.errors import RllmError
from rllm.inference.options import DEFAULT_PREFIX_CACHE_TOKENS, InferenceOptions
from rllm.models.base import SamplingParams
from rllm.runtime import RuntimeOptions
from rllm.support import refusal

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "DPOConfig",
    "DataConfig",
    "DistillConfig",
    "InferenceConfig",
    "LoraConfig",
    "ModelConfig",
    "OpenAIEndpointConfig",
    "OptimConfig",
    "RFTConfig",
    "RoleAlgorithmConfig",
    "RolloutConfig",
    "SFTConfig",
    "TrainConfig",
    "TrainerConfig",
    "VLLMConfig",
    "check_support",
    "config_help",
    "dump_config",
    "inference_options",
    "load_config",
    "override_config",
]

# Same string as `rllm.models.registry.DEFAULT_MODEL` (a test pins it); copied so this module imports no registry.
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
# Estimators whose baseline is the other samples of the same task: a group of one has no baseline.
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo")


class ConfigError(RllmError, ValueError):
    """A config file or override is invalid; the message names the dotted key, the value and what was expected."""


_NUMBER_TYPES = (int, float, int | None, float | None)


class _Section(BaseModel):
    # coerce_numbers_to_str: `trainer.name=2024` on the command line means the string "2024".
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic would read `total_steps: true` as 1; a bool where a number belongs is a mistake.
        if isinstance(value, bool) and cls.model_fields[info.field_name].annotation in _NUMBER_TYPES:
            raise ValueError("expected a number, not a bool")
        return value


# --------------------------------------------------------------------------------------------------------- sections


class LoraConfig(_Section):
    """LoRA adapters (peft): train small low-rank matrices instead of every weight."""

    enabled: bool = Field(True, description="Train LoRA adapters; false trains every weight (full fine-tuning).")
    rank: int = Field(16, ge=1, description="Rank r of each adapter.")
    alpha: float = Field(32.0, gt=0, description="Scaling numerator: adapters are scaled by alpha / rank.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input during training.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="Module names that get adapters (default: attention and MLP projections).",
    )


class ModelConfig(_Section):
    """The policy model and how it is fine-tuned."""

    name: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        description="Embedded model name (see `rllm fetch`) or a local transformers folder.",
    )
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Weight dtype for training and rollouts.")
    lora: LoraConfig = Field(
        default_factory=LoraConfig, description="LoRA adapters (peft): train small low-rank matrices, not every weight."
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    device: str = Field(
        "cpu",
        pattern=r"^(cpu|cuda(:\d+)?)$",
        description="Where the torch backend trains and the "
        "local rollout model samples: cpu, or one GPU (cuda, cuda:N).",
    )
    vision_tower: Literal["frozen", "trainable"] = Field(
        "frozen",
        description="A vision-language model's image side (vision encoder and connector): frozen, or "
        "trained whole (beside LoRA adapters of the language model).",
    )
    init_from: str | None = Field(
        None,
        description="Start from the weights another run trained (its directory or "
        "a checkpoint; LoRA merged in), e.g. GRPO after rllm sft; null: the base "
        "model.",
    )


class VLLMConfig(_Section):
    """The vLLM server of `rollout.server: vllm` (rllm.models.vllm_server, rllm.models.weight_sync)."""

    base_url: str | None = Field(
        None,
        description="Attach to this running server (http://host:port/v1, started "
        "with VLLM_SERVER_DEV_MODE=1 to train); null: rllm starts one for the run.",
    )
    python: str | None = Field(
        None,
        description="Python that runs vLLM; null: $RLLM_VLLM_PYTHON, ./.venv-vllm "
        "(make vllm), or this one if it has vllm.",
    )
    sync: Literal["reload", "lora", "nccl"] = Field(
        "reload",
        description="Weight sync: reload (whole model from safetensors), lora (hot-load the adapter), nccl (GPU slot).",
    )
    dtype: str = Field("float32", description="Server dtype; float32 matches the CPU trainer's logprobs.")
    max_model_len: int | None = Field(None, ge=1, description="Context length of the server; null: the model's.")
    max_lora_rank: int = Field(16, ge=1, description="Largest adapter rank the server accepts (sync: lora).")
    logprob_tolerance: float = Field(
        0.02,
        gt=0,
        description="Most |server - trainer| logprob difference on the probe after a sync; more fails the run.",
    )
    startup_timeout: float = Field(600.0, gt=0, description="Seconds to wait for the server to come up.")
    extra_args: list[str] = Field(default_factory=list, description="More `vllm serve` arguments.")


class OpenAIEndpointConfig(_Section):
    """Any OpenAI-compatible endpoint, for `rllm eval` (`rollout.server: openai`; rllm.models.openai)."""

    base_url: str | None = Field(
        None, description="The endpoint, e.g. https://api.openai.com/v1 or http://host:8000/v1."
    )
    model: str | None = Field(None, description="The served model's name; null: model.name.")
    tokenizer: str | None = Field(
        None,
        description="Tokenizer name or folder for token-in/token-out (exact ids and "
        "logprobs, vLLM/SGLang); null: chat mode, no token ids.",
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    timeout: float = Field(60.0, gt=0, description="Seconds one request may take before it is retried.")
    max_retries: int = Field(
        5,
        ge=0,
        description="Retries of a failed request (429, 5xx, no answer), with exponential backoff, before the "
        "episode is an infra error.",
    )


class RolloutConfig(_Section):
    """How episodes are sampled from the policy during training, validation and `rllm eval`."""

    server: Literal["local", "vllm", "openai"] = Field(
        "local",
        description="Who samples: local (LocalModel; in "
        "training it shares the trainer's weights), vllm (a vLLM "
        "server; weights synced in training) or openai (any "
        "OpenAI-compatible endpoint; eval only).",
    )
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="The vLLM server (server: vllm).")
    openai: OpenAIEndpointConfig = Field(
        default_factory=OpenAIEndpointConfig, description="The endpoint (server: openai)."
    )

    n: int = Field(4, ge=1, description="Samples per task: the group size of grpo/dr_grpo/rloo.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature for training rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens; 0 disables.")
    max_tokens: int = Field(128, ge=1, description="Most new tokens per model call.")
    max_steps: int = Field(8, ge=1, description="Most agent turns (model calls) per episode.")
    n_parallel: int = Field(32, ge=1, description="Episodes in flight at once.")
    max_prompt_length: int = Field(2048, ge=1, description="Longest first prompt in tokens; longer ends the episode.")
    max_response_length: int = Field(
        2048,
        ge=1,
        description="Most tokens after the first prompt (model replies and "
        "observations) per trajectory; more ends the episode.",
    )
    step_timeout: float | None = Field(None, gt=0, description="Seconds for one model call + env step; null: none.")
    episode_timeout: float | None = Field(None, gt=0, description="Seconds for one whole episode; null: none.")
    retry_limit: int = Field(2, ge=0, description="Retries of an episode that hit an infrastructure error.")
    val_temperature: float = Field(0.0, ge=0, description="Temperature for validation and eval; 0 is greedy.")
    val_n: int = Field(1, ge=1, description="Samples per task in validation and eval.")
    max_staleness: int = Field(
        0,
        ge=0,
        description="Asynchronous training: rollouts for steps k+1..k+s are sampled "
        "while step k trains, each step's with the weights of s updates before (its tokens "
        "are at most s versions old); 0 is synchronous (rollout, then update).",
    )
    dtype: Literal["float32", "bfloat16"] | None = Field(
        None,
        description="Dtype the local rollout model samples in; null: the training weights' (float32, shared with "
        "the trainer). bfloat16 keeps its own bf16 copy, synced after every update: faster where the hardware "
        "has bf16 matmuls (GPUs, AMX CPUs), and its log-probs differ from the trainer's (see mismatch/*).",
    )
    partial_rollouts: bool = Field(
        False,
        description="With max_staleness > 0: a weight push does not wait for the rollouts in flight; they go on with "
        "the new weights (LocalModel records a version per token), so fewer tokens are stale, but a run no longer "
        "reproduces exactly.",
    )

    def to_sampling(self, *, validation: bool = False, seed: int | None = None) -> SamplingParams:
        """Sampling parameters for one model call; `validation=True` uses `val_temperature`."""
        temperature = self.val_temperature if validation else self.temperature
        return SamplingParams(
            temperature=temperature, top_p=self.top_p, top_k=self.top_k, max_tokens=self.max_tokens, seed=seed
        )

    def engine_kwargs(self, *, validation: bool = False) -> dict[str, Any]:
        """Keyword arguments for `AgentWorkflowEngine` (the model and the workflow are the caller's; `max_steps` and
        `step_timeout` belong to the agent/env workflow's arguments, see `rllm.workflows.resolve`)."""
        return {
            "sampling": self.to_sampling(validation=validation),
            "n_parallel": self.n_parallel,
            "max_prompt_length": self.max_prompt_length,
            "max_response_length": self.max_response_length,
            "episode_timeout": self.episode_timeout,
            "retry_limit": self.retry_limit,
        }


AdvantageName = Literal["grpo", "dr_grpo", "rloo", "remax", "reinforce_pp", "reinforce", "gae"]


class OffPolicyConfig(_Section):
    """Off-policy corrections (algorithm.off_policy): which policy anchors the PPO ratio and how the sampler's tokens
    are reweighted or masked (rllm.training.off_policy; verl: algorithm.rollout_correction)."""

    mode: Literal["bypass", "decoupled"] = Field(
        "bypass",
        description="bypass: the PPO ratio is taken against the sampler's log-probs; decoupled: against the trainer's "
        "own, recomputed before the update, with pi_prox / pi_sampler importance weights.",
    )
    is_level: Literal["token", "sequence", "geometric"] | None = Field(
        None,
        description="Importance-sampling level: per token, the product over the row, or its geometric mean; null: "
        "no correction.",
    )
    is_mode: Literal["truncate", "mask"] = Field(
        "truncate",
        description="truncate: weights above is_high are cut to it (TIS); mask: tokens or rows outside "
        "[is_low, is_high] leave the loss (IcePop / MIS). bypass mode masks only.",
    )
    is_high: float = Field(2.0, gt=1, description="Upper bound of the importance weight.")
    is_low: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Lower bound of the importance weight; null: none for truncate, 1 / is_high for mask.",
    )
    mismatch_threshold: float = Field(
        0.2,
        gt=0,
        description="Metric mismatch/frac_beyond counts tokens whose |trainer - sampler| log-prob exceeds this (0.2: "
        "about the PPO clip range).",
    )

    @model_validator(mode="after")
    def _bypass_masks_only(self) -> OffPolicyConfig:
        if self.mode == "bypass" and self.is_level is not None and self.is_mode == "truncate":
            raise ValueError(
                "algorithm.off_policy.is_mode=truncate with mode=bypass: in bypass mode the PPO ratio "
                "pi_theta / pi_sampler already is the importance weight, so there is nothing to "
                "truncate; set algorithm.off_policy.mode=decoupled (ratio against the trainer's own "
                "log-probs, truncated pi_prox / pi_sampler weights) or is_mode=mask"
            )
        return self


class RoleAlgorithmConfig(_Section):
    """Advantage and policy-loss settings for the trajectories of one role (`Trajectory.name`); null inherits
    `algorithm.<key>`."""

    advantage: AdvantageName | None = Field(None, description="Estimator for this role; null: algorithm.advantage.")
    norm_by_std: bool | None = Field(
        None, description="grpo only: divide by the group's reward std; null: algorithm.norm_by_std."
    )
    stepwise: bool | None = Field(None, description="Per-step rewards for this role; null: algorithm.stepwise.")
    gamma: float | None = Field(None, ge=0, le=1, description="Discount across steps; null: algorithm.gamma.")
    policy_loss: Literal["ppo", "gspo", "cispo"] | None = Field(
        None, description="This role's policy-gradient loss; null: algorithm.policy_loss."
    )
    clip_low: float | None = Field(
        None, ge=0, lt=1, description="This role's ratio clip below; null: algorithm.clip_low."
    )
    clip_high: float | None = Field(None, ge=0, description="This role's ratio clip above; null: algorithm.clip_high.")


class AlgorithmConfig(_Section):
    """Advantage estimation and the policy loss."""

    advantage: AdvantageName = Field(
        "grpo",
        description="Advantage estimator; gae trains a critic (PPO), the "
        "others need none; reinforce is the raw reward (no baseline).",
    )
    norm_by_std: bool = Field(
        True,
        description="grpo only: divide advantages by the group's reward std (dr_grpo never does; that is its point).",
    )
    stepwise: bool = Field(
        False, description="Use per-step rewards (discounted by gamma) instead of one reward per trajectory."
    )
    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor across tokens/steps.")
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda (gae only).")
    policy_loss: Literal["ppo", "gspo", "cispo"] = Field(
        "ppo",
        description="The policy-gradient loss: ppo (clipped "
        "per-token ratio), gspo (per-sequence ratio and clip; clip_low/high ~3e-4/4e-4, loss_agg seq-mean-token-mean), "
        "cispo (REINFORCE with clipped, detached per-token importance weights).",
    )
    clip_low: float = Field(0.2, ge=0, lt=1, description="PPO ratio clip below: ratio >= 1 - clip_low.")
    clip_high: float = Field(0.2, ge=0, description="PPO ratio clip above: ratio <= 1 + clip_high (DAPO uses 0.28).")
    dual_clip: float | None = Field(
        None, gt=1, description="Dual-clip constant c > 1 bounding the loss of negative advantages; null: off."
    )
    loss_agg: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How token losses become one number: mean over all tokens, or per sequence first."
    )
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL penalty to the reference model; 0 loads none.")
    kl_kind: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator (Schulman's k1/k2/k3).")
    entropy_coef: float = Field(0.0, ge=0, description="Weight of the entropy bonus; 0 disables.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each batch of rollouts.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per PPO epoch (the batch is split this many ways).")
    filter_overlong: bool = Field(False, description="Mask episodes cut off by a length limit out of the loss.")
    drop_uniform_groups: bool = Field(False, description="Drop groups whose rewards are all equal (no signal, DAPO).")
    max_sampling_rounds: int = Field(
        1,
        ge=1,
        description="DAPO's dynamic sampling, with drop_uniform_groups: while "
        "fewer than trainer.tasks_per_step tasks have a group with differing rewards, "
        "sample that many more tasks, up to this many rounds a step (1: none).",
    )
    overlong_buffer: int | None = Field(
        None,
        ge=1,
        description="DAPO's soft overlong punishment: a reply within this "
        "many tokens of rollout.max_tokens loses up to overlong_penalty, linearly "
        "(rllm.rewards.shaping.soft_overlong_penalty); null: off.",
    )
    overlong_penalty: float = Field(1.0, ge=0, description="The overlong punishment at rollout.max_tokens.")
    mask_infra_errors: bool = Field(
        True, description="Keep episodes that failed on our side (infra errors) out of the loss and of group baselines."
    )
    policy_error_reward: float | None = Field(
        None,
        description="Reward for episodes ended by a policy error (bad "
        "format, bad tool call); null keeps the env's reward.",
    )
    value_coef: float = Field(0.5, ge=0, description="Weight of the critic's value loss (gae only).")
    value_clip: float | None = Field(0.5, gt=0, description="Clip range of value updates (gae only); null: off.")
    off_policy: OffPolicyConfig = Field(
        default_factory=OffPolicyConfig, description="Off-policy corrections and the train-inference mismatch metric."
    )
    roles: dict[str, RoleAlgorithmConfig] = Field(
        default_factory=dict,
        description="Per-role overrides keyed by trajectory name, e.g. {judge: {advantage: reinforce}}; each may set "
        "advantage, norm_by_std, stepwise, gamma, policy_loss, clip_low and clip_high (unset: the values above). gae "
        "is all roles or none; loss_agg, KL and entropy are shared.",
    )

    @field_validator("dual_clip")
    @classmethod
    def _dual_clip_is_ppos(cls, dual_clip: float | None, info: ValidationInfo) -> float | None:
        if dual_clip is not None and info.data.get("policy_loss", "ppo") != "ppo":
            raise ValueError(
                f"algorithm.dual_clip bounds PPO's loss of negative advantages; policy_loss="
                f"{info.data['policy_loss']!r} has no such branch: drop algorithm.dual_clip"
            )
        return dual_clip

    @field_validator("roles")
    @classmethod
    def _gae_is_all_or_nothing(cls, roles: dict[str, RoleAlgorithmConfig], info: ValidationInfo) -> dict:
        # A field validator, not a model one, so load_config's message names algorithm.roles and shows this text.
        # GAE trains one critic over every row of the batch; mixing it with critic-free roles is not supported.
        advantage = info.data.get("advantage")  # absent when it failed its own validation
        for role, settings in roles.items():
            if advantage is None or settings.advantage is None or (settings.advantage == "gae") == (advantage == "gae"):
                continue
            if settings.advantage == "gae":
                fix = f"set algorithm.advantage=gae (all roles then use the critic) or give {role!r} another one"
            else:
                fix = f"drop algorithm.roles.{role}.advantage (it inherits gae) or change algorithm.advantage"
            raise ValueError(
                f"algorithm.roles.{role}.advantage={settings.advantage!r} with algorithm.advantage="
                f"{advantage!r}: gae (a critic) is for all roles or none; {fix}"
            )
        return roles

    @field_validator("roles")
    @classmethod
    def _dual_clip_is_ppos_per_role(cls, roles: dict[str, RoleAlgorithmConfig], info: ValidationInfo) -> dict:
        if info.data.get("dual_clip") is None:
            return roles
        for role, settings in roles.items():
            if settings.policy_loss not in (None, "ppo"):
                raise ValueError(
                    f"algorithm.dual_clip bounds PPO's loss of negative advantages; algorithm.roles."
                    f"{role}.policy_loss={settings.policy_loss!r} has no such branch: drop "
                    "algorithm.dual_clip or keep that role on ppo"
                )
        return roles

    def for_role(self, role: str) -> AlgorithmConfig:
        """The effective settings for trajectories named `role`: these, with the role's non-null overrides applied
        (and `roles` emptied, so the result describes one role)."""
        settings = self.roles.get(role)
        overrides = settings.model_dump(exclude_none=True) if settings is not None else {}
        return self.model_copy(update={**overrides, "roles": {}})

    def roles_override_policy_loss(self) -> bool:
        """Whether some role sets its own policy_loss, clip_low or clip_high (rows then need their roles)."""
        return any(
            r.policy_loss is not None or r.clip_low is not None or r.clip_high is not None for r in self.roles.values()
        )

    def uses_advantage(self, name: str) -> bool:
        """Whether estimator `name` is used globally or by any role (e.g. "remax" needs greedy rollouts)."""
        return self.advantage == name or any(r.advantage == name for r in self.roles.values())


class OptimConfig(_Section):
    """The optimizer (AdamW), its schedule and batching."""

    lr: float = Field(5e-5, gt=0, description="Peak learning rate.")
    critic_lr: float = Field(
        1e-4,
        gt=0,
        description="Peak learning rate of the critic's value head (advantage gae; the shared trunk follows lr).",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas (b1, b2), each in [0, 1).")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    grad_clip: float | None = Field(1.0, gt=0, description="Clip the gradient's global norm to this; null: off.")
    warmup_steps: int = Field(0, ge=0, description="Steps of linear warmup from 0 to lr.")
    schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="Learning rate after warmup.")
    micro_batch_size: int = Field(
        4,
        ge=1,
        description="Rows per forward/backward; gradients accumulate over micro-batches up to one optimizer step.",
    )

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"each beta must be in [0, 1), got {list(betas)}")
        return betas


class TrainerConfig(_Section):
    """The training loop: length, validation, checkpoints, logging and where the run is written."""

    backend: Literal["torch", "verl"] = Field(
        "torch",
        description="Training backend: torch (embedded: transformers + peft, CPU or one GPU) or verl (FSDP "
        "workers on Ray; see the verl section).",
    )
    nodes: int = Field(1, ge=1, description="Ray nodes the verl backend's workers span.")
    workers_per_node: int = Field(
        1, ge=1, description="verl training workers (processes; one GPU each on GPUs, one CPU each on CPUs) per node."
    )
    total_steps: int = Field(20, ge=1, description="Training steps (each: rollout, update, push weights).")
    tasks_per_step: int = Field(8, ge=1, description="Tasks per step; each is rolled out rollout.n times.")
    val_every: int = Field(0, ge=0, description="Validate every this many steps; 0: only before and after training.")
    save_every: int | None = Field(
        None,
        ge=0,
        description="Checkpoint every this many steps; null: automatic (every step with LoRA, and with full "
        "fine-tuning or asynchronous training the first step that ends trainer.save_every_minutes after the last "
        "save); 0: only at the end. Ctrl-C and SIGTERM save the state too (rllm.training.interrupt).",
    )
    save_every_minutes: float = Field(
        10.0,
        gt=0,
        description="Automatic checkpoints (save_every: null) with full fine-tuning or asynchronous training: at "
        "most one per this many minutes (a full checkpoint holds the weights and two AdamW moments).",
    )
    keep_checkpoints: int | None = Field(
        3,
        ge=1,
        description="Keep this many newest checkpoints on disk, removing older ones after each save; null: keep all.",
    )
    seed: int = Field(0, description="Seed for sampling, shuffling and initialisation.")
    run_dir: str = Field("runs", min_length=1, description="Parent folder of run directories.")
    name: str | None = Field(
        None,
        description="Run directory name under run_dir; null: made from the kind (train "
        "or eval), task, estimator and time.",
    )
    resume: str | None = Field(None, description="Run directory or checkpoint to resume from; null: start fresh.")
    stop_after: int | None = Field(
        None,
        ge=1,
        description="Stop this invocation after this many steps (a "
        "checkpoint is written); resume continues. For preemptible jobs and tests.",
    )
    tensorboard: bool = Field(
        True,
        description="Also write TensorBoard events to run_dir/<run>/tensorboard "
        "(needs the tensorboard package, part of the torch extra).",
    )
    log_episodes: bool = Field(True, description="Write every episode to the run's episodes JSONL.")
    max_nonfinite_updates: int = Field(
        3,
        ge=1,
        description="Stop the run after this many updates in a row whose "
        "loss or gradient was not finite (each is skipped: the weights never take a "
        "NaN).",
    )


class VerlConfig(_Section):
    """The verl backend (`trainer.backend: verl`): verl's FSDP actor (and reference) workers on a Ray cluster."""

    strategy: Literal["fsdp2", "fsdp"] = Field("fsdp2", description="verl's FSDP version (fsdp, FSDP1, is GPU-only).")
    param_offload: bool = Field(False, description="Keep parameters on the CPU between uses (GPU memory).")
    optimizer_offload: bool = Field(False, description="Keep optimizer states on the CPU between uses (GPU memory).")
    micro_batch_size: int | None = Field(
        None, ge=1, description="Rows per forward/backward on each worker; null: optim.micro_batch_size."
    )
    ulysses_sequence_parallel_size: int = Field(1, ge=1, description="Ulysses sequence parallelism across workers.")
    attn_implementation: str | None = Field(
        None, description="transformers attention; null: sdpa on CPU, verl's default (flash_attention_2) on GPU."
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join (host:port or ray://); null: $RAY_ADDRESS, "
        "else a local Ray started (and stopped) by the run.",
    )
    placement_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds to wait for the workers' CPUs/GPUs before "
        "failing (a cluster too small never places them).",
    )
    overrides: list[str] = Field(
        default_factory=list,
        description="More verl (hydra) overrides of its ppo_trainer "
        "config, e.g. actor_rollout_ref.actor.fsdp_config.forward_prefetch=true.",
    )


# task generator arguments the data section sets itself (data.task_args must not)
_SET_BY_DATA = {
    "n": "data.train_size / data.val_size",
    "seed": "data.seed / data.val_seed",
    "split": "data.train_size / data.val_size (each split is made by its own call)",
    "data_dir": "data.data_dir",
}


class DataConfig(_Section):
    """Which tasks to train and validate (and `rllm eval`) on."""

    task: str = Field(
        "frozenlake",
        description="The task: a built-in task name, a benchmark of the catalog (`rllm datasets list`), or an "
        "environment hub's 'hub:name' (e.g. reasoning_gym:leg_counting).",
    )
    data_dir: str | None = Field(
        None,
        description="A catalog benchmark's local copy: a folder holding <source>/ as `rllm datasets pull` writes it "
        "(default: $RLLM_DATA; neither: the Hugging Face hub).",
    )
    train_size: int = Field(256, ge=1, description="Training tasks to generate.")
    val_size: int = Field(32, ge=0, description="Validation (and eval) tasks to generate; 0: no validation.")
    seed: int = Field(0, description="Seed of the training task generator.")
    val_seed: int = Field(1, description="Seed of the validation task generator (differs from seed so they differ).")
    task_args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the task generator.")
    reward_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments bound to the task's "
        "reward function (e.g. countdown's format_reward); prompt/reward workflows "
        "only.",
    )

    @field_validator("task")
    @classmethod
    def _known_task(cls, task: str) -> str:
        from rllm.tasks import REGISTRY, get_task, is_task_name  # light, but only needed here
        from rllm.tasks.catalog import CATALOG

        if not is_task_name(task):
            known = [*REGISTRY, *CATALOG]
            raise ValueError(
                f"unknown task {task!r}{_did_you_mean(task, known)}; built-in tasks: {', '.join(sorted(REGISTRY))}; "
                "benchmarks: `rllm datasets list`; environment hubs: hub:name (e.g. reasoning_gym:leg_counting)"
            )
        if ":" in task:
            get_task(task)  # the hub checks the environment's name (and that its package is installed)
        return task

    def make_tasks(self, split: Literal["train", "val"]) -> list[dict]:
        """The split's rows from the task's generator: `train_size` rows from `seed`, or `val_size` from `val_seed`.
        A generator with a `split` parameter is told which split it makes (e.g. swe: its splits are packages)."""
        import inspect

        from rllm.tasks import get_task

        size, seed = (self.train_size, self.seed) if split == "train" else (self.val_size, self.val_seed)
        make = get_task(self.task).make_tasks
        takes = inspect.signature(make).parameters
        extra = {"split": split} if "split" in takes else {}
        if self.data_dir is not None:
            if "data_dir" not in takes:
                raise ValueError(f"data.data_dir is set but task {self.task!r} reads no data files; remove it")
            extra["data_dir"] = self.data_dir
        self._check_task_args(make)
        return make(size, seed=seed, **extra, **self.task_args) if size else []

    def _check_task_args(self, make: Any) -> None:
        """A key the generator does not take: one line with the valid ones, not a TypeError from inside it."""
        from rllm.arguments import accepted_keywords, check_keywords

        generator = f"{self.task}'s task generator"
        accepted = accepted_keywords(make)
        check_keywords(self.task_args, accepted, setting="data.task_args", goes_to=generator, reserved=_SET_BY_DATA)


class _OfflineConfig(_Section):
    """What `rllm sft` and `rllm dpo` share: a run's episodes as data, and epochs, batches and the length limit."""

    episodes: str | None = Field(
        None,
        description="A run directory or its episodes.jsonl (training or eval): "
        "train on the sampled token ids of its trajectories.",
    )
    split: Literal["train", "val", "eval"] | None = Field(
        None, description="episodes: keep this split only; null: all."
    )
    roles: list[str] | None = Field(
        None, description="episodes: keep trajectories with these names (roles); null: all."
    )
    epochs: int = Field(
        1,
        ge=1,
        description="Passes over the data; the run's steps = ceil(epochs * examples / "
        "batch_size) (trainer.total_steps is not used).",
    )
    batch_size: int = Field(
        16,
        ge=1,
        description="Examples (sft: rows, dpo: pairs) per optimizer step, split into optim.micro_batch_size rows.",
    )
    max_length: int = Field(2048, ge=2, description="Longest row in tokens (prompt and every turn).")
    overlong: Literal["error", "truncate", "drop"] = Field(
        "error", description="A longer row: error (with counts), truncate (keep its first tokens) or drop it."
    )


class SFTConfig(_OfflineConfig):
    """Supervised fine-tuning (`rllm sft`, rllm.training.sft): what to train on. The rest of the config (model,
    optim, trainer, rollout and data for validation) means what it means for `rllm train`."""

    messages: str | None = Field(
        None,
        description="A JSONL of OpenAI-format conversations: {messages, tools?} "
        "trains every assistant turn, {prompt, completion} the completion's.",
    )
    packing: bool = Field(
        False,
        description="Pack each step's rows into sequences of up to max_length tokens "
        "(no padding; rows never attend to each other) instead of micro-batches of "
        "optim.micro_batch_size rows.",
    )
    correct_only: bool = Field(
        True, description="episodes: keep successful trajectories only (is_correct, else reward > 0)."
    )
    min_reward: float | None = Field(None, description="episodes: keep trajectories with reward >= this; null: off.")
    task_pass_rate: Literal["any", "mixed"] = Field(
        "any",
        description="episodes: mixed keeps tasks with 0 < pass rate < 1 over their episodes (rejection sampling).",
    )
    max_per_task: int | None = Field(
        None, ge=1, description="episodes: keep at most this many trajectories a task (first in file order); null: all."
    )


class DPOConfig(_OfflineConfig):
    """Direct preference optimisation (`rllm dpo`, rllm.training.dpo): pairs and loss. The rest of the config means
    what it means for `rllm train`."""

    preferences: str | None = Field(
        None,
        description="A JSONL of TRL preference records: {prompt, chosen, "
        "rejected} as lists of messages (tools optional).",
    )
    max_pairs_per_task: int = Field(
        1,
        ge=1,
        description="episodes: pairs a task (and role) gives at most: its "
        "successes and failures matched in file order.",
    )
    loss: Literal["sigmoid", "ipo", "hinge"] = Field(
        "sigmoid", description="DPO loss: sigmoid (DPO), ipo (per-token log-ratios, as TRL), hinge (SLiC)."
    )
    beta: float = Field(0.1, gt=0, description="Strength of the pull towards the reference (IPO's tau).")
    reference: Literal["precomputed", "live"] = Field(
        "precomputed",
        description="Reference log-probs: computed "
        "once before training from the starting weights, or live "
        "every step with the LoRA adapters off (LoRA only).",
    )


class RFTConfig(_Section):
    """Rejection-sampling fine-tuning (`rllm rft`, rllm.rft): the attempts it samples before its SFT."""

    attempts: int = Field(4, ge=2, description="Sampled attempts a training task (the pass rate's denominator).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the attempts.")
    tasks: int | None = Field(
        None, ge=1, description="Attempt the first this many training tasks; null: all (data.train_size)."
    )


class DistillConfig(_Section):
    """On-policy distillation in `rllm train` (rllm.training.distill): a teacher scores every token the student
    sampled; the per-token reverse KL becomes the advantage."""

    teacher: str | None = Field(
        None,
        description="Teacher model: an embedded name or a transformers folder with "
        "the student's tokenizer (with endpoint.base_url: its tokenizer, for the check); "
        "null: no distillation.",
    )
    endpoint: OpenAIEndpointConfig = Field(
        default_factory=OpenAIEndpointConfig,
        description="Score with a served "
        "teacher instead (vLLM's prompt_logprobs): base_url, model (null: "
        "distill.teacher), api_key_env.",
    )
    coef: float = Field(1.0, gt=0, description="Weight of the per-token advantage log p_teacher - log p_student.")
    reward_weight: float = Field(
        0.0, ge=0, description="Weight of the task's reward advantage (algorithm) added to it; 0: pure distillation."
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Dtype the local teacher scores in (bfloat16: under autocast, as model.dtype trains)."
    )


class RuntimeConfig(_Section):
    """Process-wide tuning (rllm.runtime) that rllm train, eval, sft, dpo and rft turn on: each key true by
    default; a library user opts in with rllm.runtime.enable()."""

    gc_tuning: bool = Field(
        True, description="During rollouts, freeze the objects made before and collect the young generation less."
    )
    eager_request_writes: bool = Field(
        True, description="Python 3.11: a task factory on the client's event loop writes request bodies at once."
    )
    packed_linears: bool = Field(
        True, description="fp32 CPU linear layers through oneDNN with weights packed once (private torch ops)."
    )
    thread_governor: bool = Field(
        True, description="Set torch's threads before each decode step and micro-batch to the cores left free."
    )
    fixed_training_threads: bool = Field(
        True,
        description="Training holds one torch thread count for the whole run (recorded, kept by --resume: bitwise "
        "resume); false: it follows the load (thread_governor), faster on a busy machine.",
    )
    fast_chat_templates: bool = Field(
        True, description="Render plain chats with transformers' compiled template directly (private helpers)."
    )
    trim_freed_memory: bool = Field(
        True, description="After each training step, return the memory freed during it to the system (glibc)."
    )

    def options(self) -> RuntimeOptions:
        """These settings as the options `rllm.runtime.enable` takes."""
        return RuntimeOptions(**self.model_dump())


class InferenceConfig(_Section):
    """The local engine's settings (rllm.inference.InferenceOptions) for rollouts, rllm eval and the gateway. These
    belong to one model, not to the process; packed linears run only where runtime.packed_linears is on too."""

    max_batch_size: int | None = Field(
        None, ge=1, description="Rows the local model decodes together; null: rollout.n_parallel."
    )
    prefix_cache_tokens: int = Field(
        DEFAULT_PREFIX_CACHE_TOKENS,
        ge=0,
        description="Bound of the K/V kept from finished sequences for prompts sharing a prefix; 0: no store.",
    )
    cuda_graphs: bool = Field(True, description="On a GPU, replay the local model's decode steps from CUDA graphs.")
    packed_linears: bool = Field(
        True, description="fp32 CPU linear layers through oneDNN, where runtime.packed_linears is on as well."
    )
    num_threads: int | None = Field(
        None, ge=1, description="torch's threads on the model's worker; null: chosen from the cores left free."
    )


class TrainConfig(_Section):
    """Everything `rllm train` needs, one section per concern."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model and how it is fine-tuned.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="How episodes are sampled.")
    algorithm: AlgorithmConfig = Field(
        default_factory=AlgorithmConfig, description="Advantage estimation and the policy loss."
    )
    optim: OptimConfig = Field(default_factory=OptimConfig, description="The optimizer (AdamW), schedule, batching.")
    trainer: TrainerConfig = Field(
        default_factory=TrainerConfig, description="Loop length, validation, checkpoints, logs and the run folder."
    )
    data: DataConfig = Field(default_factory=DataConfig, description="Which tasks to train and validate on.")
    verl: VerlConfig = Field(default_factory=VerlConfig, description="The verl backend (trainer.backend: verl).")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="Supervised fine-tuning data (rllm sft).")
    dpo: DPOConfig = Field(default_factory=DPOConfig, description="Preference pairs and the DPO loss (rllm dpo).")
    rft: RFTConfig = Field(default_factory=RFTConfig, description="The attempts of rejection sampling (rllm rft).")
    distill: DistillConfig = Field(
        default_factory=DistillConfig, description="On-policy distillation from a teacher (rllm train)."
    )
    runtime: RuntimeConfig = Field(
        default_factory=RuntimeConfig, description="Process-wide tuning the command turns on (rllm.runtime)."
    )
    inference: InferenceConfig = Field(
        default_factory=InferenceConfig, description="The local engine (rollout.server: local, rllm eval, serve)."
    )
    agent: str | None = Field(
        None,
        description="A harness that plays the task through the gateway (rllm.harnesses): react, openai-agents, "
        "anthropic, or your own as 'package.module:function'; null: the workflow's agent.",
    )
    agent_args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the agent class (or the harness: tools, instructions)."
    )
    env_args: dict[str, Any] = Field(
        default_factory=dict, description="Defaults for every env (a task's own fields win)."
    )
    workflow: str | None = Field(
        None,
        description="What plays the task: agent_env, single_turn, solver_judge, or a "
        "Workflow subclass as 'package.module:Class'; null: the task's own.",
    )
    workflow_args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the workflow (e.g. n_solutions of solver_judge)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        n = self.rollout.n
        for advantage in (self.algorithm.advantage, *(r.advantage for r in self.algorithm.roles.values())):
            if advantage in GROUP_ESTIMATORS and n < 2:
                raise ValueError(
                    f"algorithm advantage {advantage!r} needs rollout.n >= 2 (got {n}): its baseline is the other "
                    "samples of the same task, so a group of one has no baseline. Raise rollout.n, or use "
                    "reinforce, reinforce_pp, remax or gae."
                )
        if self.algorithm.drop_uniform_groups and n < 2:
            raise ValueError(
                f"algorithm.drop_uniform_groups=true needs rollout.n >= 2 (got {n}): "
                "a group of one always looks uniform, so every group would be dropped."
            )
        if self.algorithm.max_sampling_rounds > 1 and not self.algorithm.drop_uniform_groups:
            raise ValueError(
                f"algorithm.max_sampling_rounds={self.algorithm.max_sampling_rounds} refills the groups "
                "that algorithm.drop_uniform_groups drops; set algorithm.drop_uniform_groups=true "
                "(DAPO's dynamic sampling is both)"
            )
        buffer = self.algorithm.overlong_buffer
        if buffer is not None and buffer >= self.rollout.max_tokens:
            raise ValueError(
                f"algorithm.overlong_buffer={buffer} must be below rollout.max_tokens="
                f"{self.rollout.max_tokens}: the punishment starts that many tokens before the limit "
                "(DAPO: 4096 of 20480)"
            )
        self._check_support()
        episodes = self.trainer.tasks_per_step * n
        if self.algorithm.mini_batches > episodes:
            raise ValueError(
                f"algorithm.mini_batches={self.algorithm.mini_batches} exceeds the episodes per step "
                f"(trainer.tasks_per_step * rollout.n = {episodes}): every optimizer step needs data."
            )
        return self

    def _check_support(self) -> None:
        # Keys that do nothing on this backend, server or device: rllm.support declares them, for every command.
        refused = refusal(self)
        if refused is not None:
            raise ValueError(refused)


def check_support(config: TrainConfig, command: Literal["train", "eval"]) -> None:
    """Refuse, in one line, a key that `command` would ignore with this config's server (`rllm.support`: e.g.
    `rollout.server=openai` in training, `model.init_from` in an eval on vLLM); called before anything loads."""
    refused = refusal(config, command)
    if refused is not None:
        raise ConfigError(refused)


# ---------------------------------------------------------------------------------------------------------- loading


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads `1e-4` as a float (YAML 1.2) rather than the string YAML 1.1 makes of it."""


_YAML12_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
       |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
       |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
       |[-+]?\.(?:inf|Inf|INF)
       |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))


def inference_options(config: TrainConfig) -> InferenceOptions:
    """The local engine's options from the config: the one place rollouts (the trainer), `rllm eval` and the
    gateway take them from. Requests without a seed derive theirs from `trainer.seed`; the batch holds
    `rollout.n_parallel` rows unless `inference.max_batch_size` says otherwise."""
    section = config.inference
    return InferenceOptions(
        max_batch_size=section.max_batch_size or config.rollout.n_parallel,
        seed=config.trainer.seed,
        num_threads=section.num_threads,
        prefix_cache_tokens=section.prefix_cache_tokens,
        cuda_graphs=section.cuda_graphs,
        packed_linears=section.packed_linears,
    )


def _parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no arbitrary objects


def _yaml_error(path: str, exc: yaml.YAMLError) -> str:
    """`path, line L, column C: <what is wrong> (<what it is inside>)` on one line, for an editor to jump to;
    PyYAML's own message spans lines and names the text `"<unicode string>"` instead of the file."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else path
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Defaults, then the YAML file at `path` (if any), then `key.sub=value` overrides, validated as a whole."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror or exc}") from None
        try:
            loaded = _parse_yaml(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {_yaml_error(str(path), exc)}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {str(path)!r} must be a mapping of sections, got {type(loaded).__name__}")
        data = _empty_sections_to_dicts(loaded or {}, TrainConfig)
    return _validated(data, overrides, source)


def override_config(config: TrainConfig, overrides: Sequence[str], source: str = "a config") -> TrainConfig:
    """`config` with `key.sub=value` overrides applied, validated as a whole like `load_config`; `source` names
    where the overrides came from in error messages."""
    return _validated(config.model_dump(mode="json"), overrides, source)


def _validated(data: dict[str, Any], overrides: Sequence[str], source: str) -> TrainConfig:
    if isinstance(overrides, str):  # a lone string would be split into characters
        overrides = [overrides]
    for override in overrides:
        _apply_override(data, override)
    if overrides:
        source += f" + {len(overrides)} override(s)"
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        problems = "\n".join(f"  - {_describe(error)}" for error in exc.errors())
        raise ConfigError(f"invalid config ({source}):\n{problems}") from None


def _empty_sections_to_dicts(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`trainer:` with every key commented out is None in YAML; it means the section's defaults."""
    for name, field in model.model_fields.items():
        if name in data and _is_model(field.annotation):
            if data[name] is None:
                data[name] = {}
            elif isinstance(data[name], dict):
                _empty_sections_to_dicts(data[name], field.annotation)
    return data


def _apply_override(data: dict[str, Any], override: str) -> None:
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {override!r} must look like section.key=value, e.g. trainer.total_steps=20")
    if not raw.strip():
        raise ConfigError(f"override {override!r} has no value after '='; write {key}=null to unset it")
    parts = key.split(".")
    _check_path(parts, override)
    try:
        value = _parse_yaml(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: cannot parse the value {raw!r} as YAML: {exc}") from None
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:  # absent, or an empty `section:` in the file
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {'.'.join(parts[: depth + 1])} is {child!r}, not a section")
        node = child
    node[parts[-1]] = value


def _check_path(parts: list[str], override: str) -> None:
    """Fail on an unknown key before parsing, naming the closest valid ones; keys inside dict fields are free."""
    model: type[BaseModel] | None = TrainConfig
    for depth, part in enumerate(parts):
        if model is None:
            return  # inside a free-form dict such as data.task_args
        dotted = ".".join(parts[: depth + 1])
        if part not in model.model_fields:
            prefix = ".".join(parts[:depth])
            hint = _did_you_mean(part, model.model_fields, prefix)
            where = f"section {prefix!r}" if prefix else "the config"
            raise ConfigError(
                f"override {override!r}: unknown key {dotted!r}{hint}; {where} has: {', '.join(model.model_fields)}"
            )
        annotation = model.model_fields[part].annotation
        if _is_model(annotation):
            model = annotation
        elif _is_dict(annotation):
            model = None
        elif depth < len(parts) - 1:
            raise ConfigError(
                f"override {override!r}: {dotted!r} is a setting ({_type_name(annotation)}), "
                "not a section with keys of its own"
            )


def _describe(error: dict[str, Any]) -> str:
    """One pydantic error as `dotted.key = value: what was expected`."""
    loc = [str(part) for part in error["loc"]]
    dotted = ".".join(loc)
    kind, message = error["type"], error["msg"].removeprefix("Value error, ")
    if not loc:
        return message  # a rule that spans sections: the message names its keys
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        names = list(parent.model_fields) if parent else []
        return f"{dotted}: unknown key{_did_you_mean(loc[-1], names, '.'.join(loc[:-1]))}" + (
            f"; valid keys here: {', '.join(names)}" if names else ""
        )
    value = error.get("input")
    message = message[:1].lower() + message[1:]
    field = _field_at(loc)
    if field is None:
        return f"{dotted} = {_show(value)}: {message}"
    if _is_model(field.annotation):
        if kind == "value_error":  # a rule of the section itself (its validator names the keys)
            return f"{dotted}: {message}"
        return f"{dotted} = {_show(value)}: {dotted} is a section; set its keys instead, e.g. {dotted}.<key>=<value>"
    choices = _literal_choices(field.annotation)
    if choices:  # pydantic already lists the choices
        hint = _did_you_mean(value, choices) if isinstance(value, str) else ""
    elif kind == "value_error":  # the key's own validator: its message says what is wrong and what to do
        hint = ""
    else:
        hint = f" (this key takes {', '.join([_type_name(field.annotation), *_constraints(field)])})"
    return f"{dotted} = {_show(value)}: {message}{hint}"


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML: `true` and `null`, not Python's `True` and `None`."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return repr(value)


def _did_you_mean(name: str, candidates: Sequence[str] | dict, prefix: str = "") -> str:
    from rllm.arguments import did_you_mean  # the one wording, shared with the *_args checks

    return did_you_mean(name, candidates, prefix)


# ------------------------------------------------------------------------------------------------ type introspection


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_dict(annotation: Any) -> bool:
    return annotation is dict or typing.get_origin(annotation) is dict


def _model_at(loc: Sequence[str]) -> type[BaseModel] | None:
    model: Any = TrainConfig
    for part in loc:
        if not _is_model(model) or part not in model.model_fields:
            return None
        model = model.model_fields[part].annotation
    return model if _is_model(model) else None


def _field_at(loc: Sequence[str]) -> Any:
    """The FieldInfo a pydantic error location points into (the innermost named field), or None."""
    model: Any = TrainConfig
    field = None
    for part in loc:
        if not _is_model(model) or part not in model.model_fields:
            break
        field = model.model_fields[part]
        model = field.annotation
    return field


def _literal_choices(annotation: Any) -> list[str]:
    return [str(a) for a in typing.get_args(annotation)] if typing.get_origin(annotation) is Literal else []


def _type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if annotation is type(None):
        return "null"
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _constraints(field: Any) -> list[str]:
    """Bounds from Field(ge=..., lt=...) as text, e.g. ['>= 1']."""
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >="}
    return [
        f"{symbol} {getattr(meta, attr)}"
        for meta in field.metadata
        for attr, symbol in symbols.items()
        if getattr(meta, attr, None) is not None
    ]


# ----------------------------------------------------------------------------------------------- dumping and help


def dump_config(cfg: TrainConfig) -> str:
    """The config as YAML that `load_config` reads back to an equal config (used for a run's resolved config)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)


def config_help() -> str:
    """Every dotted key with its type, constraints, default and description (`rllm train --help-config`)."""
    lines = ["Configuration keys (set in a YAML file or as key=value overrides):", ""]
    _help_lines(TrainConfig, "", lines)
    return "\n".join(lines).rstrip() + "\n"


def _help_lines(model: type[BaseModel], prefix: str, lines: list[str]) -> None:
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        if _is_model(field.annotation):
            lines.append(f"{dotted}: {field.description}")
            _help_lines(field.annotation, f"{dotted}.", lines)
            if not prefix:
                lines.append("")
            continue
        default = field.get_default(call_default_factory=True)
        default = list(default) if isinstance(default, tuple) else default  # safe_dump has no tuples
        default_text = yaml.safe_dump(default, default_flow_style=True, width=10**6).strip().removesuffix("...")
        default_text = default_text.strip()
        kind = ", ".join([_type_name(field.annotation), *_constraints(field)])
        lines.append(f"  {dotted} ({kind}) = {default_text}")
        lines.append(f"      {field.description}")
