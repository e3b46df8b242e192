"""The trainer's vLLM rollouts (`rollout.server: vllm`): start or attach the server, sync the trainer's
weights into it before the first rollout, and hand back the client the engines sample from.

The server starts from a checkpoint the trainer writes itself (`<run>/vllm/served-model`), not from the model's
name: whatever the trainer loaded (an embedded model, a local folder, a resumed LoRA run) is exactly what is served.
The first `sync_weights` runs before any rollout, so a server that does not reproduce the trainer's logprobs stops the
run at step 0 instead of after hours of off-policy samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rllm.config import ConfigError, TrainConfig
from rllm.models.vllm_rollout import VLLMRolloutClient
from rllm.models.vllm_server import VLLMServer
from rllm.training.backends.serving import TorchWeightSource

__all__ = ["start_vllm_rollout"]


def start_vllm_rollout(cfg: TrainConfig, backend: Any, run_dir: Path) -> VLLMRolloutClient:
    settings = cfg.rollout.vllm
    vision = getattr(backend, "vision", None)  # a VLM's processor (torch backend), None for a text model
    if settings.sync == "lora" and vision is not None and cfg.model.vision_tower == "trainable":
        raise ConfigError(
            "rollout.vllm.sync=lora hot-loads LoRA adapters only, and model.vision_tower=trainable "
            "trains the image tower whole: the server would sample with the untrained tower. Use "
            "rollout.vllm.sync=reload (or model.vision_tower=frozen)"
        )
    source = TorchWeightSource(backend)
    workdir = run_dir / "vllm"

    def served() -> Path:  # with sync=lora the server holds the base weights; the adapter is hot-loaded on top
        return source.save_model(workdir / "served-model", merge_lora=settings.sync != "lora")

    server, owns = VLLMServer.from_config(
        settings, served, log_path=workdir / "server.log", enable_lora=settings.sync == "lora"
    )
    client = VLLMRolloutClient(
        server,
        backend.tokenizer,
        sync=settings.sync,
        workdir=workdir,
        vision=vision,
        logprob_tolerance=settings.logprob_tolerance,
        owns_server=owns,
        max_connections=max(cfg.rollout.n_parallel, 8),
    )
    try:
        client.sync_weights(source, backend.weight_version)
    except BaseException:
        client.close()
        raise
    return client
