"""The torch backend's weights, written the way an inference server loads them (see `rllm.models.weight_sync`).

- `save_model(path)`: the whole model as a plain transformers checkpoint (config, safetensors, tokenizer): LoRA
  merged into the weights it adapts (W + scale * B @ A, computed into new tensors; the training model is not
  touched), names of the un-wrapped base model, tied output embeddings left to the config as transformers does.
  It is both the folder a server starts from and the folder `reload` syncs from.
- `save_adapter(path)`: the LoRA adapter in peft's format (`adapter_config.json` + `adapter_model.safetensors`).
- `logprobs(ids)`: log p(ids[i] | ids[:i]) for i >= 1 at temperature 1, in float32, with the adapters active:
  what the server's prompt logprobs must match after a sync.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from rllm.training.backends.torch_model import merged_lora_state
from rllm.training.checkpoint import plain_state_name

__all__ = ["TorchWeightSource"]


class TorchWeightSource:
    def __init__(self, backend: Any) -> None:
        self.backend = backend

    @property
    def has_lora(self) -> bool:
        return bool(self.backend.lora)

    def save_model(self, path: str | os.PathLike, *, merge_lora: bool = True) -> Path:
        """`merge_lora=False` writes the base weights alone: the model a server hot-loads the adapter onto."""
        from safetensors.torch import save_file

        model, tokenizer = self.backend.model, self.backend.tokenizer
        base = model.get_base_model() if self.has_lora else model
        state = _plain_state(model, base.config, merge_lora=merge_lora)
        with _fresh_directory(Path(path)) as tmp:
            save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            base.config.save_pretrained(tmp)
            if getattr(base, "generation_config", None) is not None:
                base.generation_config.save_pretrained(tmp)
            vision = getattr(self.backend, "vision", None)  # a VLM's server needs its processor to take images
            (vision.processor if vision is not None else tokenizer).save_pretrained(tmp)
        return Path(path)

    def save_adapter(self, path: str | os.PathLike) -> Path:
        if not self.has_lora:
            raise ValueError("save_adapter needs LoRA training (model.lora.enabled=true)")
        with _fresh_directory(Path(path)) as tmp:
            self.backend.model.save_pretrained(tmp)
        return Path(path)

    @torch.no_grad()
    def logprobs(self, ids: list[int]) -> list[float]:
        model = self.backend.model
        tokens = torch.tensor([ids], device=self.backend.device)
        logits = model(input_ids=tokens).logits[0, :-1].float()
        chosen = logits.gather(-1, tokens[0, 1:, None])[:, 0]
        return (chosen - torch.logsumexp(logits, dim=-1)).tolist()


def _plain_state(model: Any, config: Any, *, merge_lora: bool) -> dict[str, torch.Tensor]:
    """Every base weight under its plain name, LoRA merged if asked; contiguous copies (safetensors wants owned
    storage)."""
    state = {}
    for name, tensor in model.state_dict().items():
        if "lora_" in name or ".original_module." in name:  # peft's frozen copy of a module it trains whole
            continue
        state[plain_state_name(name)] = tensor
    if merge_lora:
        state.update(merged_lora_state(model))
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # the embedding matrix serves both; transformers saves it once
    return {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in state.items()}


@contextlib.contextmanager
def _fresh_directory(target: Path) -> Iterator[Path]:
    """Write into a staging folder that replaces `target` in one rename, so a server never reads half a checkpoint.
    No fsync: these files are read back at once and are not kept (checkpoints are `rllm.training.checkpoint`)."""
    staging = target.with_name(f".{target.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
