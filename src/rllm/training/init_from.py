"""`model.init_from`: start a run (or an eval) from the weights another run trained, e.g. GRPO after an SFT warm
start (`rllm sft` then `rllm train ... model.init_from=runs/sft-...`).

    model = registry.load_causal_lm(name)
    source = apply_init_weights(model, "runs/sft-attempts-20261126-121500")   # in place; returns the checkpoint

The source is a run directory (its newest intact checkpoint) or one checkpoint folder. Its trained weights become
the new run's base weights: LoRA adapters are merged (W + alpha / rank * B @ A, alpha and rank read from the source
run's config.yaml), fully fine-tuned weights are copied. The new run then trains as configured on top: fresh LoRA
adapters (so with LoRA the KL reference, the adapters disabled, is the warm-started model, as an SFT model is the
reference in RLHF), or every weight; the optimizer starts fresh. A resumed run applies the same source again before
loading its own checkpoint, so the source must still exist. The value head of a PPO source is not carried over.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from rllm.errors import RllmError

__all__ = ["InitFromError", "apply_init_weights", "resolve_init_checkpoint"]

_LORA_A, _LORA_B = ".lora_A.", ".lora_B."


class InitFromError(RllmError, ValueError):
    """`model.init_from` does not name usable trained weights for this model."""


def resolve_init_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint folder `path` names: itself (verified), or a run directory's newest intact checkpoint."""
    from rllm.training.checkpoint import CheckpointError, find_resumable_checkpoint, verify_checkpoint

    path = Path(path)
    try:
        if (path / "manifest.json").exists() and path.parent.name == "checkpoints":
            verify_checkpoint(path)
            return path
        found, notes = find_resumable_checkpoint(path)
    except CheckpointError as exc:
        raise InitFromError(f"model.init_from={path}: {exc}") from None
    for note in notes:
        warnings.warn(f"model.init_from={path}: {note}", RuntimeWarning, stacklevel=3)
    if found is None:
        raise InitFromError(
            f"model.init_from={path}: no checkpoint there (expected a run directory with "
            "checkpoints/latest, or a checkpoints/step_N folder)"
        )
    return found


def apply_init_weights(model: Any, path: str | os.PathLike) -> Path:
    """Load the trained weights `path` names into the plain (not LoRA-wrapped) `model`, in place; returns the
    checkpoint folder used."""
    import torch

    from rllm.config import load_config
    from rllm.training.checkpoint import STATE_FILE, plain_state_name

    checkpoint = resolve_init_checkpoint(path)
    if not (checkpoint / STATE_FILE).exists():
        raise InitFromError(
            f"model.init_from={path}: {checkpoint} holds no {STATE_FILE} (a torch backend "
            "checkpoint); a verl run's checkpoint cannot seed a run yet"
        )
    trained = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)["trainable"]
    lora = load_config(checkpoint.parent.parent / "config.yaml").model.lora
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in trained.items():
            if _LORA_B in name:
                continue  # merged with its lora_A
            if _LORA_A in name:
                target = plain_state_name(name.split(_LORA_A)[0]) + ".weight"
                delta = trained[name.replace(_LORA_A, _LORA_B)] @ value * (lora.alpha / lora.rank)
                _parameter(params, target, delta, path).add_(delta.to(params[target].dtype))
            else:
                _parameter(params, plain_state_name(name), value, path).copy_(value)
    return checkpoint


def _parameter(params: dict[str, Any], name: str, value: Any, path: Any) -> Any:
    """The model's parameter `name`, checked to take `value`: a mismatch means another base model."""
    if name not in params or params[name].shape != value.shape:
        found = f"shape {tuple(params[name].shape)}" if name in params else "no such weight"
        raise InitFromError(
            f"model.init_from={path} trained {name} with shape {tuple(value.shape)}, this model "
            f"has {found}: it was trained from another base model; set model.name to that "
            "run's"
        )
    return params[name]
