"""rLLM v0.2 / verl config keys -> rllm's `TrainConfig`: the one table behind `rllm.trainer.agent_trainer`.

    translation = translate(hydra_config, workflow=False, train_size=len(train_rows))
    config = translation.train_config()      # rllm's TrainConfig; translation.warnings, .ignored say the rest

`ROWS` is the translation: a row per rLLM key -> rllm key with the function converting its value, and the few
rules that cannot be rows (warnings, epochs -> steps, several keys from one); `translate` runs them in order. `TABLE`,
made from their descriptions, lists every key of `rllm/trainer/config/agent_ppo_trainer.yaml` that means something
here, with what it becomes; `NO_OPS` the infrastructure keys (memory, speed, placement, rLLM's hosted services)
accepted and ignored. Rules:

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.config import ConfigError, TrainConfig, override_config

__all__ = [
    "NO_OPS",
    "ROWS",
    "SKIP",
    "TABLE",
    "Refuse",
    "Row",
    "Rule",
    "Translation",
    "changed_from_default",
    "default_config",
    "no_op_entry",
    "translate",
]

AAR = "actor_rollout_ref"
MODEL, ACTOR, ROLLOUT = f"{AAR}.model", f"{AAR}.actor", f"{AAR}.rollout"
OPTIM, VAL = f"{ACTOR}.optim", f"{ROLLOUT}.val_kwargs"

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
    run = _Run(config, workflow, train_size)
    for row in ROWS:
        row.apply(run)
    _check_the_rest(config, run.translation, run.errors)
    if run.errors:
        raise ConfigError("rLLM config keys rllm cannot honour:\n" + "\n".join(f"  - {e}" for e in run.errors))
    return run.translation


class _Run:
    """One translation under way: the rLLM config it reads, the `Translation` it writes, the refusals it collects."""

    def __init__(self, config: Mapping[str, Any], workflow: bool, train_size: int | None) -> None:
        self.config, self.workflow, self.train_size = config, workflow, train_size
        self.translation, self.errors = Translation(), []

    def get(self, key: str) -> Any:
        return _lookup(self.config, key)

    def put(self, ours: str, value: Any, *keys: str) -> None:
        self.translation.overrides[ours] = value
        self.translation.sources[ours] = ", ".join(f"{key}={_show(self.get(key))}" for key in keys)

    def refuse(self, key: str, why: str) -> None:
        self.errors.append(f"{key}={_show(self.get(key))}: {why}")

    def warn(self, message: str) -> None:
        self.translation.warnings.append(message)


SKIP: Any = object()  # a row's convert answers SKIP when the row does not apply to this config's values


@dataclass(frozen=True)
class Refuse:
    """A row's convert answers this when rllm cannot honour the value: `why` says so and names the nearest option;
    `key` is the rLLM key to name when it is not the row's first."""

    why: str
    key: str | None = None


def _same(value: Any) -> Any:
    return value


def _when_set(value: Any) -> Any:
    return SKIP if value is None else value


def _as_tuple(keys: str | tuple[str, ...]) -> tuple[str, ...]:
    return (keys,) if isinstance(keys, str) else keys


@dataclass(frozen=True)
class Row:
    """One rLLM key (or several) -> one rllm key: `writes` = `convert(*the values of reads)`, where convert answers
    the value, a `Refuse`, or SKIP; `writes=None` makes a check that can only refuse. The override's sources text
    names every key of `reads`, so a condition that is no source of the value (the verl backend, LoRA on, the
    workflow trainer) is `when`, a test of the run. `says` describes the first len(says) keys of `reads` for TABLE
    (a key that several rows read is described on one of them)."""

    reads: str | tuple[str, ...]
    writes: str | None
    convert: Callable[..., Any] = _same
    says: str | tuple[str, ...] = ()
    when: Callable[[_Run], bool] | None = None

    def __post_init__(self) -> None:  # one key or several: stored as tuples either way
        object.__setattr__(self, "reads", _as_tuple(self.reads))
        object.__setattr__(self, "says", _as_tuple(self.says))

    def apply(self, run: _Run) -> None:
        if self.when is not None and not self.when(run):
            return
        answer = self.convert(*(run.get(key) for key in self.reads))
        if isinstance(answer, Refuse):
            run.refuse(answer.key or self.reads[0], answer.why)
        elif answer is not SKIP:
            run.put(self.writes, answer, *self.reads)

    def described(self) -> dict[str, str]:
        return dict(zip(self.reads, self.says, strict=False))  # says may describe only the first keys


@dataclass(frozen=True)
class Rule:
    """What cannot be a row (it warns, needs train_size or writes several rllm keys from one rLLM value): a function
    of the run, and its descriptions of the rLLM keys it reads for TABLE."""

    apply: Callable[[_Run], None]
    says: dict[str, str]

    def described(self) -> dict[str, str]:
        return self.says


def _refuse_if(test: Callable[[Any], bool], why: str) -> Callable[[Any], Any]:
    """The convert of a check row: refuse the value when `test` holds."""
    return lambda value: Refuse(why) if test(value) else SKIP


def _on_verl(run: _Run) -> bool:
    return run.get("trainer.backend") == "verl"


def _lora_on(run: _Run) -> bool:
    return int(run.get(f"{MODEL}.lora_rank") or 0) > 0


def _kl_loss_on(run: _Run) -> bool:
    return bool(run.get(f"{ACTOR}.use_kl_loss"))


def _workflow_trainer(run: _Run) -> bool:
    return run.workflow


def _val_temperature(temperature: Any, do_sample: Any) -> float:
    return float(temperature) if do_sample else 0.0


def _estimator(name: Any) -> Any:
    if name in _ESTIMATORS:
        return _ESTIMATORS[name]
    return Refuse(
        f"not available; rllm has {', '.join(_ESTIMATORS)} (algorithm.advantage also offers dr_grpo and reinforce)"
    )


def _target_modules(modules: Any) -> Any:
    if modules == "all-linear":  # every projection: rllm's default already
        return SKIP
    return [modules] if isinstance(modules, str) else list(modules)


def _stepwise(enable: Any, mode: Any) -> Any:
    if not enable:
        return SKIP
    if mode == "per_step":
        return True
    return Refuse(
        "broadcast (the last step's advantage copied to every step) is not available; the nearest is mode=per_step "
        "(rllm's algorithm.stepwise)",
        key="rllm.stepwise_advantage.mode",
    )


def _trainer_inputs(run: _Run) -> None:
    """What AgentTrainer itself takes from the config: data files, agent/env/workflow classes and arguments."""
    t, get = run.translation, run.get
    t.train_files = changed_from_default(run.config, "data.train_files")
    t.val_files = changed_from_default(run.config, "data.val_files")
    t.agent_args = dict(get("rllm.agent.agent_args") or {})
    t.env_args = dict(get("rllm.env.env_args") or {})
    t.agent_name, t.env_name = get("rllm.agent.name"), get("rllm.env.name")
    t.use_workflow = bool(get("rllm.workflow.use_workflow"))
    t.workflow_args = {k: v for k, v in (get("rllm.workflow.workflow_args") or {}).items() if v is not None}


def _validation_sampling(run: _Run) -> None:
    """A warning per validation top_p/top_k that differs from training's: rllm validates with training's."""
    temperature = _val_temperature(run.get(f"{VAL}.temperature"), run.get(f"{VAL}.do_sample"))
    for name in ("top_p", "top_k"):
        given, train = run.get(f"{VAL}.{name}"), run.get(f"{ROLLOUT}.{name}")
        if temperature > 0 and float(given) != float(train):  # greedy validation ignores both
            run.warn(
                f"{VAL}.{name}={given}: rllm has no separate validation {name}; validation samples "
                f"with {ROLLOUT}.{name}={train} (rollout.{name})"
            )


def _clip_ratios(run: _Run) -> None:
    """verl's clip_ratio_low/high, each falling back to clip_ratio when null; a clip_ratio changed from its default
    overrides a low/high left at theirs (verl 0.6 read clip_ratio as the default)."""
    clip = run.get(f"{ACTOR}.clip_ratio")
    clip_changed = changed_from_default(run.config, f"{ACTOR}.clip_ratio") is not None
    for side in ("low", "high"):
        ours, key = f"algorithm.clip_{side}", f"{ACTOR}.clip_ratio_{side}"
        value = run.get(key)
        run.put(ours, float(clip if value is None else value), key)
        if clip_changed and not changed_from_default(run.config, key):
            run.put(ours, float(clip), f"{ACTOR}.clip_ratio")


def _total_steps(run: _Run) -> None:
    """trainer.total_training_steps when set, else total_epochs of full batches (verl drops the partial last one)."""
    steps = run.get("trainer.total_training_steps")
    if steps is not None:
        run.put("trainer.total_steps", steps, "trainer.total_training_steps")
        return
    tasks = run.get("data.train_batch_size")
    if run.train_size is not None:  # without it (no dataset yet) the steps stay unknown: None
        steps = run.get("trainer.total_epochs") * (run.train_size // tasks)
        if steps < 1:
            run.refuse(
                "trainer.total_epochs",
                f"makes 0 training steps: {run.train_size} training rows hold no full "
                f"batch of data.train_batch_size={tasks} (verl drops the partial last batch); lower "
                "data.train_batch_size or set trainer.total_training_steps",
            )
    run.put("trainer.total_steps", steps, "trainer.total_epochs", "data.train_batch_size")


def _warmup_steps(run: _Run) -> None:
    """lr_warmup_steps, or when it is -1 lr_warmup_steps_ratio of the total steps (the row before wrote them)."""
    warmup = run.get(f"{OPTIM}.lr_warmup_steps")
    if warmup is None or warmup < 0:
        steps = run.translation.overrides["trainer.total_steps"]
        warmup = int(float(run.get(f"{OPTIM}.lr_warmup_steps_ratio") or 0) * (steps or 0))
    run.put("optim.warmup_steps", warmup, f"{OPTIM}.lr_warmup_steps", f"{OPTIM}.lr_warmup_steps_ratio")


def _validates_first(run: _Run) -> None:
    if not run.get("trainer.val_before_train"):
        run.warn(
            "trainer.val_before_train=False: rllm always validates before training (the baseline of "
            "val/ metrics); an empty val_dataset skips validation"
        )


def _run_dir(run: _Run) -> None:
    """verl's default_local_dir: its default (checkpoints/<project>/<experiment>) makes a new run each time."""
    project, experiment = run.get("trainer.project_name"), run.get("trainer.experiment_name")
    folder = Path(os.path.expanduser(str(run.get("trainer.default_local_dir"))))
    keys = ("trainer.default_local_dir", "trainer.project_name", "trainer.experiment_name")
    if folder == Path("checkpoints", str(project), str(experiment)):
        run.put("trainer.run_dir", str(folder.parent), *keys)
        run.put("trainer.name", f"{folder.name}-{time.strftime('%Y%m%d-%H%M%S')}", *keys)
    else:
        run.put("trainer.run_dir", str(folder.parent), "trainer.default_local_dir")
        run.put("trainer.name", folder.name, "trainer.default_local_dir")


def _loggers(run: _Run) -> None:
    value = run.get("trainer.logger")
    loggers = [value] if isinstance(value, str) else list(value or [])
    if "tensorboard" in loggers:
        run.put("trainer.tensorboard", True, "trainer.logger")
    others = [name for name in loggers if name not in _CONSOLE_LOGGERS]
    if others:
        run.warn(
            f"trainer.logger={loggers}: {', '.join(others)} not available in rllm; metrics go to the run "
            "directory's metrics.jsonl and TensorBoard events (`rllm view <run dir>`)"
        )


def _engine_args(run: _Run) -> None:
    """rLLM's agent trainer's engine arguments (a free dict; workflows have their own keys): each known one
    becomes its rollout key, an unknown one is refused by name."""
    if run.workflow:
        return
    key = "rllm.agent.engine_args"
    engine_args = dict(run.get(key) or {})
    tasks, n = run.get("data.train_batch_size"), run.get(f"{ROLLOUT}.n")
    run.put("rollout.n_parallel", engine_args.pop("n_parallel_agents", None) or tasks * n, key, "data.train_batch_size")
    if "retry_limit" in engine_args:  # rLLM counts attempts, rllm retries
        run.put("rollout.retry_limit", max(int(engine_args.pop("retry_limit")) - 1, 0), key)
    if "trajectory_timeout" in engine_args:
        run.put("rollout.episode_timeout", engine_args.pop("trajectory_timeout") or None, key)
    engine_args.pop("max_workers", None)
    for name in engine_args:
        run.refuse(f"{key}.{name}", f"not an engine argument rllm has; it takes {', '.join(_ENGINE_ARGS)}")


_FSDP = ("fsdp", "fsdp2")
_RENDERING = (
    "not available: rllm renders prompts with the chat template's defaults and keeps the messages the agent gives"
)

# The translation, in the order of the rLLM config's sections (which orders the overrides, warnings and errors): a
# Row per rLLM key -> rllm key, a Rule where one cannot be. A key two rows read is described on one of them.
ROWS: tuple[Row | Rule, ...] = (
    Row("trainer.backend", "trainer.backend", says="trainer.backend (rllm's key: torch, or verl)"),
    Row(f"{MODEL}.path", "model.name", lambda path: os.path.expanduser(str(path)), "model.name"),
    # data and sampling
    Row(
        "data.train_batch_size",
        "trainer.tasks_per_step",
        says="trainer.tasks_per_step (and algorithm.mini_batches, trainer.total_steps)",
    ),
    Row("data.max_prompt_length", "rollout.max_prompt_length", says="rollout.max_prompt_length"),
    Row(
        "data.max_response_length",
        "rollout.max_response_length",
        says="rollout.max_response_length and rollout.max_tokens (each call gets what is left)",
    ),
    Row("data.max_response_length", "rollout.max_tokens"),
    Row(f"{ROLLOUT}.n", "rollout.n", says="rollout.n"),
    Row(f"{ROLLOUT}.temperature", "rollout.temperature", float, "rollout.temperature"),
    Row(f"{ROLLOUT}.top_p", "rollout.top_p", float, "rollout.top_p"),
    Row(f"{ROLLOUT}.top_k", "rollout.top_k", lambda k: max(int(k), 0), "rollout.top_k (-1 -> 0, off)"),
    Row(f"{VAL}.n", "rollout.val_n", says="rollout.val_n"),
    Row(
        (f"{VAL}.temperature", f"{VAL}.do_sample"),
        "rollout.val_temperature",
        _val_temperature,
        ("rollout.val_temperature (0 when do_sample is false)", "rollout.val_temperature=0 when false"),
    ),
    Rule(
        _validation_sampling,
        {
            f"{VAL}.top_p": "none: validation samples with rollout.top_p (a warning when it differs)",
            f"{VAL}.top_k": "none: validation samples with rollout.top_k (a warning when it differs)",
        },
    ),
    # the advantage and the loss
    Row(
        "algorithm.adv_estimator",
        "algorithm.advantage",
        _estimator,
        "algorithm.advantage: grpo, rloo, remax, gae, reinforce_plus_plus -> reinforce_pp",
    ),
    Row("algorithm.norm_adv_by_std_in_grpo", "algorithm.norm_by_std", bool, "algorithm.norm_by_std"),
    Row("algorithm.gamma", "algorithm.gamma", float, "algorithm.gamma"),
    Row("algorithm.lam", "algorithm.lam", float, "algorithm.lam"),
    Row(
        "algorithm.use_kl_in_reward",
        None,
        _refuse_if(
            bool,
            "a KL penalty inside the reward is not available; the nearest is the KL "
            f"loss: {ACTOR}.use_kl_loss=True {ACTOR}.kl_loss_coef=<c> (rllm's algorithm.kl_coef)",
        ),
        "error when true (nearest: actor.use_kl_loss -> algorithm.kl_coef)",
    ),
    Row(
        (f"{ACTOR}.use_kl_loss", f"{ACTOR}.kl_loss_coef"),
        "algorithm.kl_coef",
        lambda use_kl, coef: float(coef) if use_kl else 0.0,
        ("algorithm.kl_coef = kl_loss_coef when true, else 0", "algorithm.kl_coef (with use_kl_loss)"),
    ),
    Row(
        f"{ACTOR}.kl_loss_type",
        "algorithm.kl_kind",
        lambda kind: _KL_KINDS.get(kind, SKIP),
        "algorithm.kl_kind: low_var_kl/k3 -> k3, kl/k1 -> k1, mse/k2 -> k2",
    ),
    Row(  # an unknown kind matters only when the KL loss is on
        f"{ACTOR}.kl_loss_type",
        None,
        _refuse_if(
            lambda kind: kind not in _KL_KINDS,
            f"not available; rllm has {', '.join(_KL_KINDS)} (algorithm.kl_kind k1/k2/k3)",
        ),
        when=_kl_loss_on,
    ),
    Rule(
        _clip_ratios,
        {
            f"{ACTOR}.clip_ratio": "algorithm.clip_low/clip_high when clip_ratio_low/high are not set",
            f"{ACTOR}.clip_ratio_low": "algorithm.clip_low",
            f"{ACTOR}.clip_ratio_high": "algorithm.clip_high",
        },
    ),
    Row(
        f"{ACTOR}.clip_ratio_c", "algorithm.dual_clip", float, "algorithm.dual_clip (verl always applies its dual clip)"
    ),
    Row(f"{ACTOR}.loss_agg_mode", "algorithm.loss_agg", says="algorithm.loss_agg"),
    Row(f"{ACTOR}.entropy_coeff", "algorithm.entropy_coef", float, "algorithm.entropy_coef"),
    Row(f"{ACTOR}.ppo_epochs", "algorithm.ppo_epochs", says="algorithm.ppo_epochs"),
    Row(
        (f"{ACTOR}.ppo_mini_batch_size", "data.train_batch_size"),
        "algorithm.mini_batches",
        lambda mini, tasks: max(1, tasks // mini),
        "algorithm.mini_batches = max(1, train_batch_size // ppo_mini_batch_size)",
    ),
    # the micro batch, when set; the per-GPU one wins when both are, its row coming second
    Row(f"{ACTOR}.ppo_micro_batch_size", "optim.micro_batch_size", _when_set, "optim.micro_batch_size (when set)"),
    Row(
        f"{ACTOR}.ppo_micro_batch_size_per_gpu",
        "optim.micro_batch_size",
        _when_set,
        "optim.micro_batch_size (when set)",
    ),
    Row(
        f"{ACTOR}.grad_clip",
        "optim.grad_clip",
        lambda clip: float(clip) if clip and clip > 0 else None,
        "optim.grad_clip",
    ),
    # the optimizer and the model
    Row(f"{OPTIM}.lr", "optim.lr", float, "optim.lr"),
    Row(f"{OPTIM}.weight_decay", "optim.weight_decay", float, "optim.weight_decay"),
    Row(
        f"{OPTIM}.warmup_style",
        "optim.schedule",
        lambda style: (
            style
            if style in ("constant", "cosine")
            else Refuse("not available; rllm has constant and cosine (optim.schedule; also linear)")
        ),
        "optim.schedule (constant, cosine)",
    ),
    Row(
        f"{OPTIM}.min_lr_ratio",
        None,
        _refuse_if(lambda ratio: float(ratio or 0) != 0, "rllm's cosine schedule decays to 0; set it to 0"),
        "error unless 0 (rllm's cosine decays to 0)",
    ),
    Row(
        f"{MODEL}.lora_rank",
        "model.lora.enabled",
        lambda rank: int(rank or 0) > 0,
        "model.lora.enabled (rank > 0) and model.lora.rank; 0 is full fine-tuning",
    ),
    Row(f"{MODEL}.lora_rank", "model.lora.rank", lambda rank: int(rank or 0), when=_lora_on),
    Row(f"{MODEL}.lora_alpha", "model.lora.alpha", float, "model.lora.alpha", when=_lora_on),
    Row(
        f"{MODEL}.target_modules",
        "model.lora.target_modules",
        _target_modules,
        "model.lora.target_modules (all-linear: every projection, rllm's default)",
        when=_lora_on,
    ),
    Row(f"{MODEL}.enable_gradient_checkpointing", "model.gradient_checkpointing", bool, "model.gradient_checkpointing"),
    # the loop, its run directory and logs
    Rule(
        _total_steps,
        {
            "trainer.total_epochs": "trainer.total_steps = total_epochs * (len(train_dataset) // train_batch_size)",
            "trainer.total_training_steps": "trainer.total_steps (when set)",
        },
    ),
    Rule(
        _warmup_steps,
        {
            f"{OPTIM}.lr_warmup_steps": "optim.warmup_steps (-1: lr_warmup_steps_ratio * total steps)",
            f"{OPTIM}.lr_warmup_steps_ratio": "optim.warmup_steps (when lr_warmup_steps is -1)",
        },
    ),
    Row(
        "trainer.test_freq",
        "trainer.val_every",
        lambda every: max(every or 0, 0),
        "trainer.val_every (-1 -> 0: before and after training only)",
    ),
    Row(
        "trainer.save_freq",
        "trainer.save_every",
        lambda every: max(every or 0, 0),
        "trainer.save_every (-1 -> 0: at the end only)",
    ),
    Rule(_validates_first, {"trainer.val_before_train": "none: rllm always validates first (a warning when false)"}),
    Rule(
        _run_dir,
        {
            "trainer.project_name": "trainer.run_dir = checkpoints/<project_name> (via default_local_dir)",
            "trainer.experiment_name": "trainer.name = <experiment_name>-<time> (via default_local_dir)",
            "trainer.default_local_dir": "trainer.run_dir/trainer.name (set: exactly that folder)",
        },
    ),
    Rule(
        _loggers, {"trainer.logger": "console: stdout; tensorboard: trainer.tensorboard; wandb and others: one warning"}
    ),
    # the verl backend's placement and memory; the torch backend runs one process
    Row(
        "trainer.nnodes",
        "trainer.nodes",
        says="trainer.nodes (trainer.backend=verl; one process on torch)",
        when=_on_verl,
    ),
    Row(
        "trainer.n_gpus_per_node",
        "trainer.workers_per_node",
        says="trainer.workers_per_node (trainer.backend=verl; one process on torch)",
        when=_on_verl,
    ),
    Row(
        f"{ACTOR}.ulysses_sequence_parallel_size",
        "verl.ulysses_sequence_parallel_size",
        says="verl.ulysses_sequence_parallel_size (trainer.backend=verl)",
        when=_on_verl,
    ),
    Row(
        f"{ACTOR}.fsdp_config.param_offload",
        "verl.param_offload",
        bool,
        "verl.param_offload (trainer.backend=verl)",
        when=_on_verl,
    ),
    Row(
        f"{ACTOR}.fsdp_config.optimizer_offload",
        "verl.optimizer_offload",
        bool,
        "verl.optimizer_offload (trainer.backend=verl)",
        when=_on_verl,
    ),
    Row(
        f"{ACTOR}.strategy",
        "verl.strategy",
        lambda strategy: strategy if strategy in _FSDP else SKIP,
        "verl.strategy (trainer.backend=verl); megatron -> error",
        when=_on_verl,
    ),
    Row(
        f"{ACTOR}.strategy",
        None,
        _refuse_if(
            lambda strategy: strategy not in _FSDP,
            "rllm's verl backend runs FSDP only (fsdp, fsdp2); megatron is not available",
        ),
    ),
    Row(
        "trainer.critic_warmup",
        None,
        _refuse_if(bool, "not available (the critic trains with the actor from step 1); set it to 0"),
        "error unless 0",
    ),
    Row(
        ("trainer.resume_mode", "trainer.resume_from_path"),
        "trainer.resume",
        lambda mode, path: path if mode == "resume_path" else SKIP,
        (
            "resume_path: trainer.resume = resume_from_path; auto/disable: a fresh run",
            "trainer.resume (with resume_mode=resume_path)",
        ),
    ),
    # rLLM's own section
    Row("rllm.agent.max_steps", "rollout.max_steps", says="rollout.max_steps"),
    Row(
        "rllm.agent.trajectory_timeout",
        "rollout.episode_timeout",
        lambda seconds: seconds or None,
        "rollout.episode_timeout",
    ),
    Row(
        ("rllm.agent.overlong_filter", "rllm.mask_truncated_samples"),
        "algorithm.filter_overlong",
        lambda overlong, truncated: bool(overlong or truncated),
        ("algorithm.filter_overlong", "algorithm.filter_overlong"),
    ),
    Rule(
        _trainer_inputs,
        {
            "data.train_files": "the training rows when AgentTrainer gets no train_dataset (.json/.jsonl)",
            "data.val_files": "the validation rows when AgentTrainer gets no val_dataset (.json/.jsonl)",
            "rllm.agent.name": "the agent class when AgentTrainer gets none (rLLM's AGENT_CLASS_MAPPING names we have)",
            "rllm.env.name": "the env class when AgentTrainer gets none (rLLM's ENV_CLASS_MAPPING names we have)",
            "rllm.agent.agent_args": "agent_args (the config wins over AgentTrainer's)",
            "rllm.env.env_args": "env_args (the config wins; they win over each row's fields, as in rLLM)",
            "rllm.workflow.use_workflow": "with workflow_class: agent/env arguments are refused, as in rLLM",
            "rllm.workflow.name": "none: give workflow_class",
            "rllm.workflow.workflow_args": "workflow_args (non-null config values win; dicts are merged)",
        },
    ),
    Row(
        "rllm.workflow.n_parallel_tasks",
        "rollout.n_parallel",
        says="rollout.n_parallel (workflows)",
        when=_workflow_trainer,
    ),
    Row(
        "rllm.workflow.retry_limit",
        "rollout.retry_limit",
        lambda attempts: max(attempts - 1, 0),
        "rollout.retry_limit = retry_limit - 1 (rLLM counts attempts; workflows)",
        when=_workflow_trainer,
    ),
    Row(  # rLLM's agent trainer ignores it too
        "rllm.rejection_sample.multiplier",
        None,
        _refuse_if(
            lambda multiplier: float(multiplier) != 1,
            "oversampling tasks is not available; rllm drops uniform "
            "groups without replacing them (rejection_sample.enable: drop_uniform_groups)",
        ),
        "agent/env: ignored, as rLLM's agent trainer does; workflows: error unless 1",
        when=_workflow_trainer,
    ),
    Rule(
        _engine_args,
        {
            "rllm.agent.engine_args": "n_parallel_agents -> rollout.n_parallel, "
            "retry_limit -> rollout.retry_limit - 1, trajectory_timeout -> rollout.episode_timeout, max_workers: no-op"
        },
    ),
    Row(
        "rllm.disable_thinking",
        None,
        _refuse_if(bool, _RENDERING),
        "error when true (rllm renders with the chat template's defaults)",
    ),
    Row("rllm.accumulate_reasoning", None, _refuse_if(bool, _RENDERING), "error when true"),
    Row(
        ("rllm.stepwise_advantage.enable", "rllm.stepwise_advantage.mode"),
        "algorithm.stepwise",
        _stepwise,
        (
            "algorithm.stepwise with mode per_step; broadcast -> error",
            "per_step -> algorithm.stepwise; broadcast -> error (when enabled)",
        ),
    ),
    Row(
        ("rllm.stepwise_advantage.normalize_by_steps", "rllm.stepwise_advantage.enable"),
        None,
        lambda normalize, enable: Refuse("not available; set it to False") if enable and normalize else SKIP,
        "error when true",
    ),
    Row("rllm.rejection_sample.enable", "algorithm.drop_uniform_groups", bool, "algorithm.drop_uniform_groups"),
    Row(
        "rllm.compact_filtering.enable",
        None,
        _refuse_if(
            bool,
            "masking episodes by termination reason is not available; the nearest "
            "are rllm.mask_truncated_samples=True (algorithm.filter_overlong) and rllm's "
            "algorithm.mask_infra_errors (on by default)",
        ),
        "error when true (nearest: rllm.mask_truncated_samples, algorithm.mask_infra_errors)",
    ),
)


def _descriptions(rows: tuple[Row | Rule, ...]) -> dict[str, str]:
    """Each rLLM key the rows read, with what it becomes: described once (a second description would drift)."""
    table: dict[str, str] = {}
    for row in rows:
        for key, says in row.described().items():
            if key in table:
                raise ValueError(f"{key} is described by two rows of ROWS; keep its description on one")
            table[key] = says
    return table


# verl/rLLM key -> what it becomes in rllm (rllm train --help-config documents the right-hand side).
TABLE: dict[str, str] = _descriptions(ROWS)


def _check_the_rest(config: Mapping, t: Translation, errors: list[str]) -> None:
    """Keys no row of ROWS reads: no-ops (noted when changed) or unknown (an error naming them)."""
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
