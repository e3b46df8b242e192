"""Weight sync: make a vLLM server sample from the weights the trainer just produced, then prove it did.

Three strategies, picked by name (`rollout.vllm.sync`):

- `reload` (the reference; works on CPU): the trainer writes the whole model as safetensors, and the server
  reloads it in place (`POST /collective_rpc` `reload_weights(weights_path=...)`). The whole model, because vLLM's
  layerwise reload resets what a partial checkpoint leaves out. LoRA is merged into the weights it adapts.
  Known limit (vLLM 0.32, CPU build): an output layer tied to the input embedding is not refreshed by the reload
  ("ParallelLMHead: Failed to load weights" in the server log). LoRA training never changes the embedding, so it is
  exact; full fine-tuning of a tied model changes it, and the logprob check below stops the run.
- `lora` (LoRA training only): the trainer writes its adapter (peft format) and the server hot-loads it under a new
  name (`POST /v1/load_lora_adapter`); rollouts then ask for that name and the previous adapter is unloaded. Only
  the adapter travels, so it is the cheap one for big models.
- `nccl`: the slot for GPU-to-GPU transfer through vLLM's weight-transfer API (`/init_weight_transfer_engine`,
  `/start_weight_update`, `/update_weights`, `/finish_weight_update`). It needs GPUs and a process group shared
  with the trainer, which the CPU path has no use for; it raises with that explanation.

Every sync pauses the server (`/pause?mode=wait`: requests in flight finish on the old weights, new ones wait),
swaps, stamps the new version (`/update_weight_version`) and resumes, even when the swap fails. Then the server's
logprobs of a fixed probe sequence are compared with the trainer's (both at temperature 1); the largest absolute
difference is recorded, and above `tolerance` the sync fails with `WeightSyncError` instead of training on
rollouts from the wrong weights.

The weight source is duck-typed (the training backend's; see `rllm.training.backends.serving`):
`save_model(path)`, `save_adapter(path)`, `logprobs(ids) -> list[float]`, `has_lora`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from rllm.errors import RllmError

__all__ = ["LoRASync", "NCCLSync", "ReloadSync", "WeightSync", "WeightSyncError", "check_logprobs", "make_sync"]


class WeightSyncError(RllmError):
    """The server did not end up with the trainer's weights (or the strategy cannot run here)."""


class WeightSync:
    """Push the source's weights to the server as `version`; return the model name rollouts must ask for."""

    name = ""

    def __init__(self, workdir: str | Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._previous: Path | None = None

    def push(self, server: Any, source: Any, version: int) -> str:
        raise NotImplementedError

    def _swap(self, server: Any, version: int, swap) -> None:
        server.pause("wait")
        try:
            swap()
            server.set_weight_version(version)
        finally:
            server.resume()

    def _forget_previous(self, current: Path) -> None:
        """Delete the last push's files: the server no longer reads them (one model's worth of disk, not one per
        step)."""
        if self._previous is not None and self._previous != current:
            shutil.rmtree(self._previous, ignore_errors=True)
        self._previous = current


class ReloadSync(WeightSync):
    name = "reload"

    def push(self, server: Any, source: Any, version: int) -> str:
        path = self.workdir / f"weights-v{version}"
        source.save_model(path)
        self._swap(server, version, lambda: server.reload_weights(path))
        self._forget_previous(path)
        return server.served_name


class LoRASync(WeightSync):
    name = "lora"

    def __init__(self, workdir: str | Path) -> None:
        super().__init__(workdir)
        self._loaded: str | None = None

    def push(self, server: Any, source: Any, version: int) -> str:
        if not source.has_lora:
            raise WeightSyncError("rollout.vllm.sync=lora needs LoRA training (model.lora.enabled=true); use reload")
        path = self.workdir / f"adapter-v{version}"
        source.save_adapter(path)
        name = f"{server.served_name}-lora-v{version}"
        self._swap(server, version, lambda: server.load_lora_adapter(name, path))
        if self._loaded is not None and self._loaded != name:
            server.unload_lora_adapter(self._loaded)
        self._loaded = name
        self._forget_previous(path)
        return name


class NCCLSync(WeightSync):
    name = "nccl"

    def push(self, server: Any, source: Any, version: int) -> str:
        raise WeightSyncError(
            "rollout.vllm.sync=nccl is the slot for GPU-to-GPU transfer (vLLM's /init_weight_transfer_engine and "
            "/update_weights with a process group shared with the trainer); it is not implemented in this release. "
            "Use sync=reload (any machine) or sync=lora (LoRA training)."
        )


_SYNCS = {cls.name: cls for cls in (ReloadSync, LoRASync, NCCLSync)}


def make_sync(name: str, workdir: str | Path) -> WeightSync:
    if name not in _SYNCS:
        raise ValueError(f"unknown weight sync {name!r}; choose one of: {', '.join(_SYNCS)}")
    return _SYNCS[name](workdir)


def check_logprobs(server: Any, source: Any, model: str, probe_ids: list[int], tolerance: float) -> float:
    """The largest |server logprob - trainer logprob| over the probe's tokens; raises above `tolerance`."""
    served = server.prompt_logprobs(probe_ids, model=model)
    trained = source.logprobs(probe_ids)
    if len(served) != len(trained):
        raise WeightSyncError(f"probe logprobs: server gave {len(served)} values, trainer {len(trained)}")
    diff = max(abs(a - b) for a, b in zip(served, trained, strict=True))
    if diff > tolerance:
        raise WeightSyncError(
            f"after the weight sync the server's logprobs differ from the trainer's by up to {diff:.4g} "
            f"(tolerance {tolerance:g}) on a fixed probe of {len(probe_ids)} tokens: the server is not sampling "
            "from the trained weights. Check that both use the same dtype (rollout.vllm.dtype); with full "
            "fine-tuning of a model whose output layer is tied to its embedding, vLLM's reload misses the tied "
            "layer: train LoRA (model.lora.enabled=true) instead. Raise rollout.vllm.logprob_tolerance only if "
            "the difference is numerical (bf16 kernels)."
        )
    return diff


def timed_push(sync: WeightSync, server: Any, source: Any, version: int) -> tuple[str, float]:
    started = time.perf_counter()
    model = sync.push(server, source, version)
    return model, time.perf_counter() - started
