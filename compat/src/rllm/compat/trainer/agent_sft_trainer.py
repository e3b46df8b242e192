"""rLLM v0.2's `AgentSFTTrainer`, so rLLM SFT scripts run unchanged:

    @hydra.main(config_path="pkg://rllm.trainer.config", config_name="agent_sft_trainer", version_base=None)
    def main(config):
        AgentSFTTrainer(config=config).train()

    python train_sft.py model.partial_pretrain=<model> data.train_files=sft.parquet trainer.total_epochs=2 ...

    rows = AgentSFTTrainer.process_trajectories(trajectories, reward_threshold=1.0)   # [{"messages": [...]}, ...]

It is rllm's SFT trainer (`rllm.training.sft.SFTTrainer`, `rllm sft`) with rLLM's constructor: the rows' `messages`
are tokenized by the model's own chat template (`rllm.training.sft_data.rows_from_messages`, the path `rllm sft
sft.messages=...` takes), trained with rllm's SFT loss on its torch backend, in its run directory (checkpoints,
metrics.jsonl, resume). `self.config` is the resulting rllm `TrainConfig`.

- `config`: the Hydra `DictConfig` of the shipped `agent_sft_trainer.yaml` (verl's SFT keys and rLLM's
  `data.rllm.tokenize_and_mask_method`), or a dict (nested or dotted keys) or a list of `"k=v"` strings applied over
  it; None: its defaults. `SFT_TABLE` says what each key becomes; `NO_OPS` lists the keys accepted and not used
  (memory and placement on verl's FSDP workers). A key the yaml does not have is an error.
- `train_dataset`: rLLM `Dataset` or list of rows; without it, `data.train_files` (.parquet, .json, .jsonl, .csv),
  as rLLM's verl backend reads it. Each row holds its conversation under `data.multiturn.messages_key` (default
  `messages`) and optionally its tools under `data.multiturn.tools_key`.
- `tokenize_and_mask_method`: `cumulative` trains every assistant message, `stepwise` only the last one.
- `val_dataset` / `data.val_files`: rLLM computes a validation loss on them; rllm's SFT validates by rollouts on a
  task (`rllm sft` with `data.task`), so here they are not used, with a warning.
- `backend="verl"` (rLLM's default) trains with rllm's torch backend (CPU, or one GPU when `trainer.device=cuda`
  and one is present); `backend="tinker"` is an error naming it.
- `train()` blocks and returns rllm's result (steps, run directory, last metrics); rLLM returns None.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from rllm.config import ConfigError, TrainConfig, override_config

__all__ = ["NO_OPS", "SFT_TABLE", "AgentSFTTrainer", "compose_sft_config"]

# rLLM/verl SFT key -> what it becomes in rllm (`rllm train --help-config` documents the right-hand side).
SFT_TABLE: dict[str, str] = {
    "model.partial_pretrain": "model.name",
    "model.lora_rank": "model.lora.enabled (rank > 0) and model.lora.rank; 0 is full fine-tuning",
    "model.lora_alpha": "model.lora.alpha",
    "model.target_modules": "model.lora.target_modules (a list; all-linear: rllm's default)",
    "model.enable_gradient_checkpointing": "model.gradient_checkpointing",
    "model.fsdp_config.model_dtype": "model.dtype (fp32 -> float32, bf16 -> bfloat16)",
    "data.train_batch_size": "sft.batch_size",
    "data.micro_batch_size_per_gpu": "optim.micro_batch_size (data.micro_batch_size wins when set)",
    "data.max_length": "sft.max_length",
    "data.truncation": "sft.overlong: error -> error, right -> truncate (left: not available)",
    "data.train_files": "the rows, when no train_dataset is given",
    "data.multiturn.messages_key": "the rows' field holding the conversation",
    "data.multiturn.tools_key": "the rows' field holding its tools",
    "data.rllm.tokenize_and_mask_method": "cumulative: every assistant message trains; stepwise: the last one",
    "optim.lr": "optim.lr",
    "optim.betas": "optim.betas",
    "optim.weight_decay": "optim.weight_decay",
    "optim.clip_grad": "optim.grad_clip",
    "optim.warmup_steps_ratio": "optim.warmup_steps = round(ratio * steps)",
    "optim.lr_scheduler": "optim.schedule (cosine, constant)",
    "trainer.total_epochs": "sft.epochs",
    "trainer.total_training_steps": "trainer.stop_after (null: every epoch)",
    "trainer.default_local_dir": "trainer.run_dir/trainer.name",
    "trainer.seed": "trainer.seed",
    "trainer.save_freq": "trainer.save_every (-1 -> 0: at the end only)",
    "trainer.max_ckpt_to_keep": "trainer.keep_checkpoints",
    "trainer.resume_from_path": "trainer.resume (with resume_mode=resume_path)",
    "trainer.device": "model.device (cuda when one is present, else cpu)",
}
NO_OPS: dict[str, str] = {
    "data.micro_batch_size": "read with data.micro_batch_size_per_gpu",
    "data.val_files": "validation loss is not computed (a warning when set)",
    "data.multiturn.enable": "rows are always conversations",
    "model.trust_remote_code": "models load with rllm's loader",
    "ulysses_sequence_parallel_size": "one process trains",
    "use_remove_padding": "rllm's rows are unpadded",
    "trainer.project_name": "read with trainer.default_local_dir",
    "trainer.experiment_name": "read with trainer.default_local_dir",
    "trainer.logger": "metrics go to the run directory's metrics.jsonl and TensorBoard events",
    "trainer.test_freq": "validation loss is not computed",
    "trainer.resume_mode": "read with trainer.resume_from_path",
    "trainer.nnodes": "one process trains",
    "trainer.n_gpus_per_node": "one process trains",
    "trainer.log_episodes": "no episodes in SFT",
    "trainer.episode_log_dir": "no episodes in SFT",
}
_COMPAT = "rLLM's SFT config needs omegaconf: pip install 'rllm[compat]'"


class AgentSFTTrainer:
    """rLLM v0.2.1's `AgentSFTTrainer` over rllm's SFT trainer. See the module docstring."""

    def __init__(
        self, config: Any = None, train_dataset: Any = None, val_dataset: Any = None, backend: str = "verl"
    ) -> None:
        if backend == "tinker":
            raise NotImplementedError(
                "AgentSFTTrainer(backend='tinker'): rLLM's Tinker backend is not available "
                "here; backend='verl' (the default) trains with rllm's torch backend"
            )
        if backend != "verl":
            raise ValueError(f"Unsupported backend: {backend}, must be one of ['verl', 'tinker']")
        self.rllm_config = compose_sft_config(config)
        overrides, self.method, self.keys = _translate(self.rllm_config)
        self.config: TrainConfig = _train_config(overrides)
        self.train_dataset, self.val_dataset, self.backend = train_dataset, val_dataset, backend
        self.records = _records(train_dataset, self.rllm_config, self.keys, self.method)
        if val_dataset is not None or _get(self.rllm_config, "data.val_files"):
            warnings.warn(
                "AgentSFTTrainer: the validation loss rLLM computes on val_dataset / data.val_files is not "
                "computed here; rllm's SFT validates by rollouts on a task (rllm sft with data.task)",
                UserWarning,
                stacklevel=2,
            )

    def train(self) -> dict[str, Any]:
        """Tokenize the rows and train to the end (blocks); returns rllm's result."""
        from rllm.models.registry import load_tokenizer
        from rllm.training.sft import SFTTrainer
        from rllm.training.sft_data import rows_from_messages

        sft = self.config.sft
        tokenizer = load_tokenizer(self.config.model.name)
        rows, _stats = rows_from_messages(self.records, tokenizer, max_length=sft.max_length, overlong=sft.overlong)
        steps = math.ceil(sft.epochs * len(rows) / sft.batch_size)
        ratio = float(_get(self.rllm_config, "optim.warmup_steps_ratio") or 0.0)
        self.config = override_config(self.config, [f"optim.warmup_steps={round(ratio * steps)}"], "an rLLM config")
        trainer = SFTTrainer(config=self.config, rows=rows, tokenizer=tokenizer)
        return trainer.train()

    @staticmethod
    def process_trajectories(trajectories: Iterable[Any], reward_threshold: float) -> list[dict[str, Any]]:
        """SFT rows `{"messages": [...]}` from trajectories whose reward reaches `reward_threshold`: the last step's
        `chat_completions`, keeping each message's role and stripped text content (messages without text are
        dropped), and only conversations of two messages or more (rLLM's rule)."""
        rows, trajectories = [], list(trajectories)
        for trajectory in trajectories:
            if not trajectory or not trajectory.steps or (trajectory.reward or 0.0) < reward_threshold:
                continue
            messages = [
                {"role": message["role"], "content": str(message.get("content") or "").strip()}
                for message in trajectory.steps[-1].chat_completions or []
                if isinstance(message, dict) and message.get("role") and str(message.get("content") or "").strip()
            ]
            if len(messages) >= 2:
                rows.append({"messages": messages})
        print(f"Processed {len(trajectories)} trajectories -> {len(rows)} valid examples")
        return rows


def compose_sft_config(config: Any) -> dict[str, Any]:
    """rLLM's SFT config as a resolved nested dict: a Hydra/OmegaConf config as it is; a dict or a list of `"k=v"`
    overrides applied over the shipped `agent_sft_trainer.yaml` (a key it lacks is an error); None: that yaml."""
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError as exc:
        raise ImportError(_COMPAT) from exc
    from rllm.compat.trainer.agent_trainer import _overrides
    from rllm.compat.trainer.config import CONFIG_DIR

    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)
    base = OmegaConf.load(CONFIG_DIR / "agent_sft_trainer.yaml")
    OmegaConf.set_struct(base, True)
    for key, value in _overrides(config):
        try:
            OmegaConf.update(base, key.lstrip("+"), value, merge=True)
        except Exception as exc:  # omegaconf's ConfigAttributeError/ConfigKeyError: a key not in struct
            raise ConfigError(f"rLLM SFT config override {key}={value!r}: {exc}".splitlines()[0]) from None
    return OmegaConf.to_container(base, resolve=True)


def _translate(config: Mapping[str, Any]) -> tuple[dict[str, Any], str, dict[str, str]]:
    """(rllm overrides, tokenize_and_mask_method, the rows' field names)."""

    def get(key: str) -> Any:
        return _get(config, key)

    _check_keys(config)
    rank = int(get("model.lora_rank") or 0)
    ours: dict[str, Any] = {
        "model.name": os.path.expanduser(str(get("model.partial_pretrain"))),
        "model.lora.enabled": rank > 0,
        "model.gradient_checkpointing": bool(get("model.enable_gradient_checkpointing")),
        "model.dtype": _dtype(get("model.fsdp_config.model_dtype")),
        "model.device": _device(get("trainer.device")),
        "sft.batch_size": get("data.train_batch_size"),
        "optim.micro_batch_size": get("data.micro_batch_size") or get("data.micro_batch_size_per_gpu"),
        "sft.max_length": get("data.max_length"),
        "sft.overlong": _overlong(get("data.truncation")),
        "optim.lr": get("optim.lr"),
        "optim.betas": list(get("optim.betas")),
        "optim.weight_decay": get("optim.weight_decay"),
        "optim.grad_clip": get("optim.clip_grad"),
        "optim.schedule": _schedule(get("optim.lr_scheduler")),
        "sft.epochs": get("trainer.total_epochs"),
        "trainer.seed": get("trainer.seed"),
        "trainer.save_every": max(int(get("trainer.save_freq") or 0), 0),
        "trainer.keep_checkpoints": get("trainer.max_ckpt_to_keep"),
        "data.val_size": 0,  # rLLM's SFT validates a loss, not rollouts
        "trainer.tensorboard": "tensorboard" in _as_list(get("trainer.logger")),
    }
    if rank > 0:
        ours.update({"model.lora.rank": rank, "model.lora.alpha": get("model.lora_alpha")})
    if isinstance(get("model.target_modules"), list):
        ours["model.lora.target_modules"] = get("model.target_modules")
    if get("trainer.total_training_steps"):
        ours["trainer.stop_after"] = get("trainer.total_training_steps")
    if get("trainer.resume_mode") == "resume_path":
        ours["trainer.resume"] = get("trainer.resume_from_path")
    folder = os.path.expanduser(str(get("trainer.default_local_dir")))
    ours["trainer.run_dir"], ours["trainer.name"] = os.path.dirname(folder) or ".", os.path.basename(folder)
    if folder == os.path.join("checkpoints", str(get("trainer.project_name")), str(get("trainer.experiment_name"))):
        ours["trainer.name"] += time.strftime("-%Y%m%d-%H%M%S")  # the default folder: a new run each time
    method = get("data.rllm.tokenize_and_mask_method")
    if method not in ("cumulative", "stepwise"):
        raise ConfigError(f"data.rllm.tokenize_and_mask_method={method!r}: cumulative or stepwise")
    keys = {"messages": get("data.multiturn.messages_key") or "messages", "tools": get("data.multiturn.tools_key")}
    return ours, method, keys


def _check_keys(config: Mapping[str, Any]) -> None:
    from rllm.compat.trainer.translate import _flatten

    unknown = [key for key in _flatten(config) if key not in SFT_TABLE and key not in NO_OPS]
    if unknown:
        raise ConfigError(
            f"rLLM SFT config keys rllm does not know: {unknown} (see "
            "rllm.trainer.agent_sft_trainer.SFT_TABLE and NO_OPS)"
        )


def _train_config(overrides: dict[str, Any]) -> TrainConfig:
    import json

    args = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    return override_config(TrainConfig(), args, "an rLLM SFT config")


def _records(dataset: Any, config: Mapping[str, Any], keys: dict[str, str], method: str) -> list[dict[str, Any]]:
    """The rows as rllm's conversational records: `{"messages", "tools"?}` (cumulative) or `{"prompt",
    "completion"}` with the last assistant message as the completion (stepwise)."""
    if dataset is None:
        from rllm.compat.data.dataset import Dataset

        dataset = Dataset.load_data(os.path.expanduser(str(_get(config, "data.train_files"))))
    rows = dataset.get_data() if hasattr(dataset, "get_data") else list(dataset)
    records = []
    for number, row in enumerate(rows, 1):
        if keys["messages"] not in row:
            raise ConfigError(
                f"SFT row {number} has no {keys['messages']!r} (data.multiturn.messages_key); its keys: {sorted(row)}"
            )
        messages = _plain(row[keys["messages"]])
        record: dict[str, Any] = {"messages": messages}
        if keys["tools"] and row.get(keys["tools"]) is not None:
            record["tools"] = _plain(row[keys["tools"]])
        if method == "stepwise":
            last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
            if last is None:
                raise ConfigError(f"SFT row {number} has no assistant message to train on (stepwise)")
            record = {
                "prompt": messages[:last],
                "completion": [messages[last]],
                **({"tools": record["tools"]} if "tools" in record else {}),
            }
        records.append(record)
    return records


def _plain(value: Any) -> Any:
    """Rows read from parquet hold numpy arrays where JSON has lists."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _get(config: Mapping[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _as_list(value: Any) -> list:
    return [value] if isinstance(value, str) else list(value or [])


def _dtype(value: Any) -> str:
    return "bfloat16" if str(value).lower() in ("bf16", "bfloat16") else "float32"


def _device(value: Any) -> str:
    if str(value) != "cuda":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _overlong(value: Any) -> str:
    if value == "right":
        return "truncate"
    if value == "error":
        return "error"
    raise ConfigError(f"data.truncation={value!r}: rllm keeps a row's first tokens (right) or refuses it (error)")


def _schedule(value: Any) -> str:
    if value in ("cosine", "constant"):
        return value
    raise ConfigError(f"optim.lr_scheduler={value!r}: rllm has cosine and constant (and linear: optim.schedule)")
