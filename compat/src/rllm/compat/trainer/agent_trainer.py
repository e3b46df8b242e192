"""rLLM v0.2's `AgentTrainer`, so rLLM training scripts run unchanged:

    @hydra.main(config_path="pkg://rllm.trainer.config", config_name="agent_ppo_trainer", version_base=None)
    def main(config):
        trainer = AgentTrainer(agent_class=FrozenLakeAgent, env_class=FrozenLakeEnv, config=config,
                               train_dataset=DatasetRegistry.load_dataset("frozenlake", "train"),
                               val_dataset=DatasetRegistry.load_dataset("frozenlake", "test"))
        trainer.train()

    python train_frozenlake_agent.py actor_rollout_ref.model.path=<model> data.train_batch_size=64 ...

It is rllm's `rllm.training.AgentTrainer` (one trainer) with rLLM v0.2.1's constructor; the rLLM/verl config keys
are translated by `rllm.trainer.translate` (its `TABLE`), and `self.config` is the resulting rllm `TrainConfig`.

- `config`: the Hydra `DictConfig` rLLM scripts pass; also a dict (nested, or dotted keys) or a list of `"k=v"`
  strings, applied over the shipped `agent_ppo_trainer.yaml` (a key not in it fails as in Hydra's struct mode,
  except under the four free dicts `rllm.agent.agent_args`, `rllm.env.env_args`, `rllm.agent.engine_args`,
  `rllm.workflow.workflow_args`; `+key=value` adds a key, which the translation then rejects unless it is a no-op).
  None: the yaml's defaults.
- `backend="verl"` (rLLM's default, and its only GPU trainer) means "rLLM's trainer": rllm's trainer with the
  backend the config's `trainer.backend` names, `torch` by default (embedded, CPU or one GPU). Set
  `trainer.backend=verl` (a key of the shipped yaml) to train on verl's FSDP workers (`make verl`). A user running an
  rLLM script expects it to train where they are; rllm's verl backend needs its own venv, so it is opt-in.
  `backend="fireworks"`/`"tinker"` and `agent_run_func=` (rLLM's SDK trainer) are errors naming what rllm has.
- Datasets: rLLM `Dataset`s (or lists of rows). As in rLLM, each env is built by `env_class.from_dict({**row,
  **env_args})`: the env args win over a row's own fields (rllm's own `AgentTrainer` lets the row win), and the
  config's `rllm.env.env_args` / `rllm.agent.agent_args` win over the constructor's. No `val_dataset`: no validation.
  No `train_dataset`: `data.train_files` (.json/.jsonl), else an error.
- Workflows: `workflow_args` get the config's `rllm.workflow.workflow_args` (non-null values win, dicts merged), so
  every workflow also receives `timeout`, `gamma`, `reward_bonus_coeff`, `agent_args`, `env_args` as in rLLM. With
  `rllm.workflow.use_workflow=True`, agent/env arguments next to `workflow_class` are a ValueError, as in rLLM.
- Without `agent_class`/`env_class`, `rllm.agent.name` / `rllm.env.name` pick them from rLLM's mappings, for the
  names rllm has (`AGENT_CLASSES`, `ENV_CLASSES`).
- `train()` blocks and returns rllm's result (validation before/after, run directory); rLLM returns None.
  The run directory is `trainer.default_local_dir` (default `checkpoints/<project>/<experiment>-<time>`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rllm.compat.trainer.env_agent_mappings import AGENT_CLASSES, ENV_CLASSES, resolve
from rllm.compat.trainer.translate import changed_from_default, translate
from rllm.config import ConfigError, TrainConfig

__all__ = ["AGENT_CLASSES", "ENV_CLASSES", "AgentTrainer", "compose_config"]

_FREE_DICTS = ("rllm.agent.agent_args", "rllm.env.env_args", "rllm.agent.engine_args", "rllm.workflow.workflow_args")
_COMPAT = "rLLM's training scripts need hydra-core and omegaconf: pip install 'rllm[compat]'"


class AgentTrainer:
    """rLLM v0.2.1's `AgentTrainer` over rllm's trainer. See the module docstring."""

    def __init__(
        self,
        workflow_class: type | None = None,
        workflow_args: dict[str, Any] | None = None,
        agent_class: type | None = None,
        env_class: type | None = None,
        agent_args: dict[str, Any] | None = None,
        env_args: dict[str, Any] | None = None,
        config: Any = None,
        train_dataset: Any = None,
        val_dataset: Any = None,
        backend: str = "verl",
        agent_run_func: Callable | None = None,
    ) -> None:
        _refuse_unsupported(backend, agent_run_func)
        rllm_config = compose_config(config)
        if workflow_class is not None and rllm_config["rllm"]["workflow"]["use_workflow"]:
            given = {"agent_class": agent_class, "agent_args": agent_args, "env_class": env_class, "env_args": env_args}
            for name, value in given.items():
                if value is not None:  # rLLM's own check and wording
                    raise ValueError(
                        f"{name} is not supported when using workflow, use workflow_args['agent_cls'] / "
                        "workflow_args['env_cls'] / workflow_args['agent_args'] / workflow_args["
                        "'env_args'] instead"
                    )
        train_rows = _rows(train_dataset, rllm_config, "train")
        val_rows = _rows(val_dataset, rllm_config, "val") if val_dataset is not None else None
        translation = translate(rllm_config, workflow=workflow_class is not None, train_size=len(train_rows))
        if val_rows is None:
            val_rows = _rows(None, rllm_config, "val") if translation.val_files else []
        for message in translation.warnings:
            warnings.warn(message, UserWarning, stacklevel=2)
        self.translation = translation
        self.config: TrainConfig = translation.train_config()
        self.rllm_config = rllm_config
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        if workflow_class is not None:
            classes = {
                "workflow_class": workflow_class,
                "workflow_args": _merge_workflow_args(workflow_args, translation.workflow_args),
            }
        else:
            agent_class = agent_class or _named_class(translation.agent_name, AGENT_CLASSES, "rllm.agent.name")
            env_class = env_class or _named_class(translation.env_name, ENV_CLASSES, "rllm.env.name")
            agent_args = {**(agent_args or {}), **translation.agent_args}
            env_args = {**(env_args or {}), **translation.env_args}
            # rLLM builds each env from {**row, **env_args}: the env args win over the row's own fields. They stay
            # out of the rows (a reward function in env_args cannot be logged with the episode's task).
            classes = {
                "agent_class": agent_class,
                "env_class": env_class,
                "agent_args": agent_args,
                "env_args": env_args,
                "workflow_args": {"env_args_win": True},
            }
        from rllm.training.trainer import AgentTrainer as _Trainer

        self.trainer = _Trainer(config=self.config, train_dataset=train_rows, val_dataset=val_rows, **classes)

    def train(self) -> dict[str, Any]:
        """Train to the end (blocks); returns rllm's result: validation before/after, the run directory, the last
        step's metrics."""
        return self.trainer.train()


def compose_config(config: Any) -> dict[str, Any]:
    """rLLM's config as a resolved nested dict: a Hydra/OmegaConf config as it is; a dict or a list of `"k=v"`
    overrides applied over the shipped `agent_ppo_trainer.yaml`; None: that yaml."""
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError as exc:
        raise ImportError(_COMPAT) from exc
    from rllm.compat.trainer.config import CONFIG_DIR, register_resolvers

    register_resolvers()
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)
    base = OmegaConf.load(CONFIG_DIR / "agent_ppo_trainer.yaml")
    OmegaConf.set_struct(base, True)
    for key in _FREE_DICTS:  # rLLM scripts add to these with `+key=value`; here the `+` is optional
        OmegaConf.set_struct(OmegaConf.select(base, key), False)
    for key, value in _overrides(config):
        add = key.startswith("+")  # Hydra's `+key=value` adds a key the yaml does not have
        key = key.lstrip("+")
        try:
            OmegaConf.update(base, key, value, merge=True, force_add=add)
        except Exception as exc:  # omegaconf's ConfigAttributeError/ConfigKeyError: a key not in struct
            raise ConfigError(f"rLLM config override {key}={value!r}: {exc}".splitlines()[0]) from None
    return OmegaConf.to_container(base, resolve=True)


def _overrides(config: Any) -> list[tuple[str, Any]]:
    import yaml

    if config is None:
        return []
    if isinstance(config, Mapping):
        return list(_flat_items(config))
    if isinstance(config, Sequence) and not isinstance(config, str):
        pairs = []
        for item in config:
            key, sep, raw = str(item).partition("=")
            if not sep:
                raise ConfigError(f"rLLM config override {item!r} must look like key=value")
            pairs.append((key.strip(), yaml.safe_load(raw) if raw.strip() else None))
        return pairs
    raise TypeError(
        f"config must be a Hydra DictConfig, a dict or a list of 'key=value' strings, not {type(config).__name__}"
    )


def _flat_items(node: Mapping, prefix: str = ""):
    for key, value in node.items():
        dotted = f"{prefix}.{str(key).lstrip('+')}" if prefix else str(key).lstrip("+")
        if isinstance(value, Mapping) and value and dotted not in _FREE_DICTS:
            yield from _flat_items(value, dotted)
        else:
            yield dotted, value


def _refuse_unsupported(backend: str, agent_run_func: Callable | None) -> None:
    ours = "rllm trains with AgentTrainer(...) and trainer.backend=torch (embedded) or trainer.backend=verl"
    if backend in ("fireworks", "tinker"):
        raise NotImplementedError(
            f"AgentTrainer(backend={backend!r}): rLLM's {backend} backend is not available "
            f"here; {ours} (backend='verl', the default, uses it)"
        )
    if backend != "verl":
        raise ValueError(f"AgentTrainer(backend={backend!r}): rLLM's backends are verl, fireworks and tinker; {ours}")
    if agent_run_func is not None:
        raise NotImplementedError(
            "AgentTrainer(agent_run_func=...): rLLM's SDK trainer is not available here; make the function "
            "`@rllm.rollout def solve(task, base_url)` that builds its client with "
            "rllm.sdk.get_chat_client(base_url=base_url) and returns its reward, and train it with "
            "AgentTrainer(workflow_class=solve) (rllm.gateway.rollout)"
        )


def _rows(dataset: Any, config: Mapping, split: str) -> list[dict]:
    if dataset is None:
        key = "data.train_files" if split == "train" else "data.val_files"
        path = config["data"][f"{split}_files"]
        if changed_from_default(config, key) is None:
            raise ValueError(
                f"AgentTrainer(train_dataset=None): give the training rows (an rLLM Dataset, e.g. "
                f"DatasetRegistry.load_dataset(name, 'train'), which is None when that dataset was "
                f"never registered), or set {key}"
            )
        from rllm.compat.data.dataset import Dataset

        dataset = Dataset.load_data(os.path.expanduser(str(path)))
    rows = dataset.get_data() if hasattr(dataset, "get_data") else list(dataset)
    # rows verl-postprocessed by rLLM's DatasetRegistry ({"prompt": ..., "extra_info": row}) hold the task in extra_info
    return [dict(row["extra_info"]) if "extra_info" in row and "prompt" in row else dict(row) for row in rows]


def _merge_workflow_args(given: dict[str, Any] | None, from_config: dict[str, Any]) -> dict[str, Any]:
    """rLLM's TaskRunner: each non-null config value wins; a dict is merged into the same-named dict argument."""
    merged = dict(given or {})
    for key, value in from_config.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _named_class(name: str | None, table: dict[str, str], key: str) -> type:
    if name is None:
        known = ", ".join(table)
        raise ValueError(f"{key} is not set: give the class (agent_class= / env_class=) or one of: {known}")
    return resolve(name, table, key)
