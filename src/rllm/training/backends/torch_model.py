"""Model-side helpers of the embedded torch backend: LoRA setup, the forward pass at loss positions, merged LoRA
weights for an inference server, and the learning-rate schedule. Small functions; `TorchBackend` composes them.

The forward pass ("train only where the loss is"). A causal LM's output layer maps every position's hidden state to
V logits; with Qwen's V = 151,936 the logits of 8 x 256 tokens are 1.2 GB of float32, and their log-softmax and its
backward as much again, although the loss needs only the completion positions. `forward_targets` runs the backbone
alone, gathers the hidden states at the requested positions, and applies the output layer and log-softmax there
only. The output layer (and the value head) run in float32 with autocast off, so the log-probs entering the PPO
ratio carry no bf16 rounding from the [N, V] matmul. Architectures whose logits are not simply `head(hidden)`
(logit soft-capping, logit scales) or that expose no backbone/head take the plain `model(...).logits` path.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rllm.config import LoraConfig
from rllm.cpus import governor, set_torch_threads
from rllm.errors import ImageError
from rllm.images import VLM_NEEDED
from rllm.inference.lm_head import backbone_and_head, output_logits
from rllm.models.vision import image_spans, inputs_embeds, is_vision_model, vision_modules
from rllm.training.backends.shared_prefix import plan_shared_prefixes, shared_prefix_states
from rllm.training.losses import entropy_from_logits, token_logprobs

__all__ = [
    "TargetOutputs",
    "apply_lora",
    "attach_images",
    "backbone_and_head",
    "forward_targets",
    "freeze_vision_tower",
    "linear_module_names",
    "lr_factor",
    "merged_lora_state",
]

governor(torch.get_num_threads())  # measure the load from now: the first decision spans model loading

logger = logging.getLogger(__name__)

# ---- LoRA and the image tower --------------------------------------------------------------------------------


def linear_module_names(model: nn.Module) -> list[str]:
    """The distinct leaf names of the model's `nn.Linear` modules (`q_proj`, `lm_head`, ...), sorted."""
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, nn.Linear)})


def apply_lora(model: nn.Module, lora: LoraConfig, *, seed: int, vision_tower: str = "frozen") -> nn.Module:
    """Wrap `model` in peft LoRA adapters on the configured target modules that exist in it.

    Target names the model lacks are dropped with a warning (a config written for Llama still works on a model
    that names its projections differently, as long as some match); none matching is an error that lists the
    names that exist. A vision-language model gets adapters in its language model only; its image tower is frozen,
    or trained whole with `vision_tower="trainable"`. The adapters' random init (lora_A; lora_B starts at 0, so the
    wrapped model computes the same function) is seeded and leaves the global RNG untouched.
    """
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    available = linear_module_names(model)
    if is_vision_model(model):  # a VLM: only the language model gets adapters (see `configure_vision_tower`)
        available = linear_module_names(model.get_decoder())
    targets = [name for name in lora.target_modules if name in available]
    missing = [name for name in lora.target_modules if name not in available]
    if not targets:
        raise ValueError(
            f"model.lora.target_modules {lora.target_modules} match no linear module of this model; "
            f"its linear modules are named: {', '.join(available)}"
        )
    if missing:
        logger.warning("LoRA: this model has no modules named %s; adapting %s", missing, targets)
    modules_to_save = None
    if is_vision_model(model):
        decoder = model.get_decoder()
        prefix = next(name for name, module in model.named_modules() if module is decoder)
        targets = sorted(
            {
                f"{prefix}.{name}"
                for name, module in decoder.named_modules()
                if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in targets
            }
        )
        # a trainable tower is trained whole beside the adapters (peft keeps a trained copy of it)
        modules_to_save = list(vision_modules(model)) if vision_tower == "trainable" else None
    config = PeftLoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
        modules_to_save=modules_to_save,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def freeze_vision_tower(model: nn.Module) -> None:
    """Full fine-tuning of a VLM with `model.vision_tower=frozen`: its image side gets no gradient."""
    if is_vision_model(model):
        for module in vision_modules(model).values():
            module.requires_grad_(False)


def _lora_layers(model: nn.Module) -> list[tuple[str, Any]]:
    """(plain module name, LoraLayer) for every adapted module of a peft model; [] for a plain model."""
    if not hasattr(model, "get_base_model"):
        return []
    from peft.tuners.lora import LoraLayer

    return [(name, module) for name, module in model.get_base_model().named_modules() if isinstance(module, LoraLayer)]


@torch.no_grad()
def merged_lora_state(model: nn.Module) -> dict[str, Tensor]:
    """`{plain name: W + scale * B @ A}` for every LoRA-adapted weight, named as in the un-wrapped base model
    (`model.layers.0.self_attn.q_proj.weight`), so a plain copy of the base model (another process, vLLM) can load
    it. Computed into new tensors: the training model is not modified (no merge/unmerge round trip)."""
    state = {}
    for name, layer in _lora_layers(model):
        base = layer.get_base_layer().weight
        wide = torch.promote_types(base.dtype, torch.float32)  # bf16 weights are merged in float32, then cast back
        weight = base.detach().to(wide, copy=True)
        if not layer.merged:  # never merged by the backend; a user who merged by hand already has W' in place
            for adapter in layer.active_adapters:
                weight += layer.get_delta_weight(adapter).to(wide)
        state[f"{name}.weight"] = weight.to(base.dtype)
    return state


# ---- the forward pass at loss positions -----------------------------------------------------------------------


@dataclass
class TargetOutputs:
    """Per requested position (flattened in row-major order of the `[B, L-1]` selection): float32 log-probs, and
    when asked the entropy of softmax(logits / temperature) and the final hidden state (for a value head)."""

    logprobs: Tensor  # [N]
    entropy: Tensor | None = None  # [N]
    hidden: Tensor | None = None  # [N, H] float32


def _checkpointing(backbone: nn.Module) -> bool:
    return bool(getattr(backbone, "gradient_checkpointing", False)) and backbone.training


def _autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def forward_targets(
    model: nn.Module,
    batch: dict[str, Tensor],
    positions: Tensor,
    *,
    temperature: float,
    entropy: bool = False,
    entropy_grad: bool = True,
    hidden: bool = False,
    autocast_dtype: torch.dtype | None = None,
    gather: bool = True,
    share_prefix: bool = True,
) -> TargetOutputs:
    """Log-probs of `batch["target_ids"]` at the `positions` (bool `[B, L-1]`, the shifted view of `collate`)
    under softmax(logits / temperature), keeping `token_logprobs`' semantics (float32, gather - logsumexp).

    `gather=True` applies the output layer only at `positions` (see the module docstring); `gather=False`, or a
    model without a reachable backbone/head, computes the full `[B, L, V]` logits and picks the positions after.
    `share_prefix` runs rows that share a prompt through `shared_prefix_states` (each prompt once) when it
    applies (with `gather`).
    """
    device = batch["input_ids"].device
    if device.type == "cpu":  # this forward and its backward use the cores other processes leave free
        set_torch_threads()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    images = batch.get("image_spans")
    if images:  # a VLM's rows: the image features replace the image tokens' embeddings (rllm.models.vision)
        with _autocast(device, autocast_dtype):
            inputs["inputs_embeds"] = inputs_embeds(
                model, inputs.pop("input_ids"), images, image_token_id=batch["image_token_id"]
            )
    parts = backbone_and_head(model) if gather else None
    targets = batch["target_ids"][positions]
    if parts is None:
        with _autocast(device, autocast_dtype):
            out = model(**inputs, use_cache=False, output_hidden_states=hidden)
        logits = out.logits[:, :-1][positions].float()
        states = out.hidden_states[-1][:, :-1][positions].float() if hidden else None
    else:
        backbone, head = parts
        # gradient checkpointing turns the cache off, which the shared-prefix forward needs
        plan = plan_shared_prefixes(batch, positions) if share_prefix and not _checkpointing(backbone) else None
        with _autocast(device, autocast_dtype):
            if plan is None:
                states = backbone(**inputs, use_cache=False).last_hidden_state[:, :-1][positions]
            else:
                states = shared_prefix_states(backbone, batch, positions, plan, embeds=inputs.get("inputs_embeds"))
        with torch.autocast(device.type, enabled=False):
            states = states.float()
            logits = output_logits(head, states).float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    ent = None
    if entropy:  # as a metric only (entropy_grad=False) it builds no graph
        with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
            ent = entropy_from_logits(logits)
    # token_logprobs on [N, V] logits and [N] ids: the same numbers as on the [B, T, V] view.
    return TargetOutputs(logprobs=token_logprobs(logits, targets), entropy=ent, hidden=states if hidden else None)


def attach_images(batch: dict[str, Any], rows: Sequence[Any], vision: Any) -> dict[str, Any]:
    """`batch` (of `rows`, in order: padded or packed) with the image spans `forward_targets` needs when the rows
    hold images: each row's images, up to the image tokens it kept (a cut row keeps a prefix of them)."""
    if vision is None:
        if any(row.images for row in rows):
            raise ImageError(
                f"training rows hold images but the model is text-only (it has no vision processor): {VLM_NEEDED}"
            )
        return batch
    spans = []  # (a row with image tokens but no images is refused here, not trained on placeholder embeddings)
    for row in rows:
        count = sum(1 for t in row.input_ids if t == vision.image_token_id)
        spans += image_spans(vision.images(row.images), count)
    if not spans:
        return batch
    # the shared-prefix forward groups rows by these: image tokens keyed by their image (vision.prefix_key)
    keys = batch["input_ids"].clone()
    for b, row in enumerate(rows) if batch["input_ids"].shape[0] == len(rows) else ():
        keyed = vision.prefix_key(row.input_ids, row.images)
        keys[b, : len(keyed)] = torch.tensor(keyed, dtype=keys.dtype)
    return {**batch, "image_spans": spans, "image_token_id": vision.image_token_id, "image_key_ids": keys}


# ---- learning-rate schedule ------------------------------------------------------------------------------------


def lr_factor(step: int, *, schedule: str, warmup: int, total: int) -> float:
    """Multiplier of the peak lr at optimizer step `step` (0-based): linear warmup over `warmup` steps that reaches
    the peak AT step `warmup - 1` (the first step already moves, lr/warmup: no step is wasted at lr 0), then
    constant, linear to 0, or cosine to 0 at `total` (never reached: the last step's lr is small but > 0)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr schedule {schedule!r}; choose constant, linear or cosine")
