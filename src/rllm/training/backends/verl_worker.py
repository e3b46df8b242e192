"""What runs inside verl's Ray workers for `rllm.training.backends.verl`: our loss, our LR schedule, weight export.

- `RllmActorLoss` is installed with verl's `set_loss_fn`: the PPO loss of `rllm.training.losses.actor_loss`, the one
  the torch backend uses, computed on verl's model outputs. verl back-propagates each micro-batch's loss as it is and
  averages gradients over the data-parallel ranks, so the loss is scaled here by the micro-batch's share of what
  `loss_agg` averages over in the whole mini-batch (loss tokens, or rows holding one; the driver sends the totals)
  times the data-parallel size: the summed gradient is the mini-batch's, however it is split over ranks and
  micro-batches, exactly as in `TorchBackend.update`.
- `RllmVerlWorker` is verl's `ActorRolloutRefWorker` plus two calls: `set_lr_schedule` (our warm-up/decay,
  `torch_model.lr_factor`, instead of verl's slightly different one) and `export_weights` (the full weights, LoRA
  merged, gathered from the FSDP shards and written by rank 0 to one safetensors file for the rollout side; a file
  because a 650 MB state dict returned through Ray's object store is slow, `../shared/research/verl-cpu.md`).

Imported only in the verl environment (it imports verl at module level).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import torch
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.utils.padding import no_padding_2_padding

from rllm.cpus import usable_cores
from rllm.training.losses import actor_loss
from rllm.training.off_policy import MISMATCH_SUM_KEYS, mismatch_sums

__all__ = ["RllmActorLoss", "RllmVerlWorker"]


class RllmActorLoss:
    """verl loss function `(model_output, data, dp_group) -> (loss, metrics)`; pickled to every worker."""

    def __init__(self, algorithm: Any) -> None:
        self.algorithm = algorithm

    def __call__(self, model_output: Any, data: Any, dp_group: Any = None) -> tuple[torch.Tensor, dict[str, float]]:
        logprobs = no_padding_2_padding(model_output["log_probs"], data)
        entropy = no_padding_2_padding(model_output["entropy"], data)
        fields = ["response_mask", "old_log_probs", "advantages"] + (["ref_log_prob"] if "ref_log_prob" in data else [])
        padded = data.select(*fields).to_padded_tensor()
        mask = padded["response_mask"].to(logprobs.dtype)
        loss, losses, token_means = actor_loss(
            logprobs,
            entropy,
            padded["old_log_probs"],
            padded["advantages"],
            mask,
            self.algorithm,
            norm_length=tu.get(data, "rllm_norm_length", default=None),
            ref_logprobs=padded.get("ref_log_prob", None),
        )
        units = mask.sum() if self.algorithm.loss_agg == "token-mean" else (mask.sum(-1) > 0).sum()
        unit_share = float(units) / tu.get(data, "rllm_units")
        token_share = float(mask.sum()) / max(tu.get(data, "rllm_tokens"), 1)
        # Pre-weighted by their share of the mini-batch, so the driver sums them over micro-batches and ranks.
        metrics = {f"rllm/{k}": v * unit_share for k, v in losses.items()}
        metrics.update({f"rllm/{k}": v * token_share for k, v in token_means.items()})
        # the sampler's log-probs against this forward's (the driver keeps those of its first optimizer step)
        sums = mismatch_sums(
            logprobs, padded["old_log_probs"], mask, threshold=self.algorithm.off_policy.mismatch_threshold
        )
        metrics.update({f"mismatch_sums/{k}": float(v) for k, v in zip(MISMATCH_SUM_KEYS, sums, strict=True)})
        return loss * (unit_share * tu.get(data, "dp_size")), metrics


class RllmVerlWorker(ActorRolloutRefWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if os.environ.get("VERL_PLATFORM") == "cpu":
            # Ray starts workers with OMP_NUM_THREADS=1; on CPUs the node's cores are the compute: share them out
            # between the node's workers (measured: one worker on 2 cores is 2x slower with a single thread).
            local_workers = int(os.environ.get("RAY_LOCAL_WORLD_SIZE", "1"))
            torch.set_num_threads(max(1, usable_cores() // local_workers))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_lr_schedule(self, schedule: str, warmup: int, total: int) -> None:
        from rllm.training.backends.torch_model import lr_factor

        engine = self.actor.engine
        engine.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            engine.optimizer, partial(lr_factor, schedule=schedule, warmup=warmup, total=total)
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_weights(self, path: str) -> int:
        """Every rank takes part in gathering the full tensors; rank 0 writes them (write, then rename).
        Returns the number of tensors written (0 on the other ranks)."""
        from safetensors.torch import save_file

        params, _ = self.actor.engine.get_per_tensor_param()
        rank0 = torch.distributed.get_rank() == 0
        state = {
            name: tensor.detach().to("cpu", torch.float32).contiguous().clone() if rank0 else None
            for name, tensor in params
        }
        if not rank0:
            return 0
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.{os.getpid()}")
        save_file(state, str(staging), metadata={"format": "pt"})
        os.replace(staging, target)
        return len(state)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def process_id(self) -> int:
        return os.getpid()
