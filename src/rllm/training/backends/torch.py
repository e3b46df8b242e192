"""`TorchBackend`: the embedded training backend (transformers + optional LoRA via peft; CPU or one GPU).

    backend = TorchBackend(cfg.model, cfg.algorithm, cfg.optim, total_steps=cfg.trainer.total_steps, seed=0)
    rollout_model = backend.make_rollout_model(InferenceOptions(max_batch_size=32))   # a LocalModel sharing the weights
    ... roll out with rollout_model, build rows (`rllm.training.batch.build_rows`) ...
    metrics = backend.update(rows, temperature=cfg.rollout.temperature)
    backend.push_weights(rollout_model)                               # bump its weight_version: on-policy again

Choices worth knowing:

- `update` is the whole PPO update on one screen: epochs × mini-batches (one optimizer step each) × micro-batches
  (`split_micro_batches`: sorted by length, little padding), with exact gradient accumulation; `_loss` composes the
  pure loss functions of `rllm.training.losses`. The shuffle generator is saved in `state_dict`, so a resumed run
  shuffles identically. For `seq-mean-token-sum-norm` the horizon must not move with the micro-batch:
  `norm_length` defaults to the longest row of the update minus one (pass the max response length to fix it).
- The PPO ratio is taken against `target_old_logprobs`, the logprobs the tokens were sampled with: on the first
  mini-batch of an on-policy update it is exactly 1 (up to float rounding), which a test checks end to end.
- KL reference: with LoRA, the same model with its adapters disabled (`disable_adapter()`, no extra memory); with
  full fine-tuning, a frozen copy made at construction (only when `kl_coef > 0`). Entropy (full-vocabulary
  softmax at the loss positions, whose logits exist anyway) is always logged and enters the loss only when
  `entropy_coef > 0`. Metrics `kl` and `entropy` are per-token
  means; `loss`/`pg_loss`/`value_loss` are the aggregated mini-batch losses; all are averaged over optimizer steps.
- bf16 (`model.dtype: bfloat16`): weights stay float32 (AdamW master weights) and the forward runs under
  `torch.autocast(dtype=bfloat16)`; the output layer and the value head run in float32 (see `torch_model`). A
  model passed in another dtype is converted to float32 in place. Rollouts through the shared model run in float32.
  Measured on SmolLM2-135M (2-core CPU, LoRA r=16, 8 x 256 tokens): ~1.6x faster per update, but recomputed
  log-probs drift from the float32 sampling ones by 0.02 on average (0.16 at worst; approx_kl 5e-4 before any
  update, against 0 in float32), so float32 stays the default and bf16 is an explicit speed/exactness trade.
- PPO with a critic (`advantage: gae`): a shared-trunk critic, `nn.Linear(hidden, 1)` in float32 on the policy's
  final hidden state; its value loss trains the head and (through the trunk) the same adapters as the policy.
  It costs one small matmul instead of a second model; verl's path is a separate critic model. Value of token t
  is predicted from the hidden state at t - 1, i.e. the state in which token t was chosen. The trainer computes
  `compute_values(rows)` before the update, turns them into advantages and returns with
  `rllm.training.advantages.apply_gae` (which stores them on the rows), and `update` trains the head on
  `row.returns` with the clipped value loss around `row.old_values`. The head's parameters get their own learning
  rate (`optim.critic_lr`, default 1e-4): at a LoRA learning rate (~1e-5) the zero-initialised head would need
  hundreds of steps to reach the scale of the returns. Measured on Qwen2.5-Coder-0.5B with 0/1 rewards: 1e-3
  overshoots (mean value 0 -> 2.2 after one step), 1e-4 tracks the mean return within about six steps.
- Warm-up counts trainer steps like `total_steps` (the config's unit); the schedule itself ticks per optimizer step,
  `total_steps * ppo_epochs * mini_batches` of them (see `torch_model.lr_factor`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from functools import partial, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from rllm.config import AlgorithmConfig, ModelConfig, OptimConfig
from rllm.cpus import governor, in_passing_thread
from rllm.inference.kernels import KernelChoice
from rllm.inference.options import InferenceOptions
from rllm.inference.packed_linears import PackedLinears, packed_linears_available
from rllm.training.backends.base import UpdateLog, mini_batch_order, push_weights_to
from rllm.training.backends.torch_model import (
    apply_lora,
    attach_images,
    forward_targets,
    freeze_vision_tower,
    lr_factor,
    merged_lora_state,
)
from rllm.training.batch import (
    TrainingRow,
    collate,
    collate_packed,
    nonfinite_tokens,
    pack_rows,
    split_micro_batches,
)
from rllm.training.checkpoint import STATE_FILE, plain_state_name, save_torch_file
from rllm.training.losses import actor_loss, dpo_loss, masked_token_mean, sft_loss, value_loss
from rllm.training.off_policy import merge_mismatch_sums, mismatch_metrics, mismatch_sums

if TYPE_CHECKING:
    from rllm.training.dpo_data import PreferencePair

__all__ = ["TorchBackend", "score_rows"]

STATE_FORMAT = 1


def _computing(method: Any) -> Any:
    """Mark the calling thread busy for the method's duration: generation running at the same time (asynchronous
    training) then shares the free cores with it instead of oversubscribing them (`rllm.cpus.ThreadGovernor`). On a
    CPU in fp32 the method's linear layers run through oneDNN with packed weights (`rllm.inference.packed_linears`)."""

    @wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with governor().computing(), self.packed_linears or contextlib.nullcontext():
            return method(self, *args, **kwargs)

    return wrapper


def _checked_device(device: str) -> torch.device:
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"model.device={device}: this torch ({torch.__version__}) sees no GPU "
            "(torch.cuda.is_available() is False); train with model.device=cpu"
        )
    return resolved


def _trainable_policy(model: Any, model_config: ModelConfig, device: torch.device, seed: int) -> Any:
    """The policy as it trains: fp32 master weights on `device` (bf16 runs under autocast), another run's trained
    weights as its base where `init_from` names them, gradient checkpointing, and LoRA adapters or a frozen vision
    tower, as the config says. A given model is changed in place."""
    model = model.to(device=device, dtype=torch.float32)
    if model_config.init_from:  # another run's trained weights become the base (rllm.training.init_from)
        from rllm.training.init_from import apply_init_weights

        apply_init_weights(model, model_config.init_from)
    if model_config.gradient_checkpointing:
        # Non-reentrant: correct with frozen inputs (LoRA) without enable_input_require_grads().
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if model_config.lora.enabled:
        model = apply_lora(model, model_config.lora, seed=seed, vision_tower=model_config.vision_tower)
    elif model_config.vision_tower == "frozen":
        freeze_vision_tower(model)
    return model.eval()


class TorchBackend:
    """Policy (and optional critic head) training on training rows. See the module docstring."""

    def __init__(
        self,
        model_config: ModelConfig,
        algorithm: AlgorithmConfig,
        optim: OptimConfig,
        *,
        total_steps: int,
        seed: int = 0,
        device: str = "cpu",
        model: Any = None,
        tokenizer: Any = None,
        vision: Any = None,
        gather_logits: bool = True,
        kernels: KernelChoice | None = None,
    ) -> None:
        """Loads the model/tokenizer from `model_config.name` through the registry unless given (a given model is
        trained in place, and takes `model_config.init_from`'s weights in place). `gather_logits` False computes
        full `[B, L, V]` logits (for measurements and as a cross-check). `vision` is a vision-language model's
        `VisionProcessor` (loaded with the model when not given; None for a text-only model). `kernels`: which path
        each packed linear shape runs (`rllm.inference.kernels`; None: measured on this machine, or cached)."""
        from rllm.models import registry

        self.model_config, self.algorithm, self.optim = model_config, algorithm, optim
        self.seed = seed
        self.device = _checked_device(device)
        self.gather_logits = gather_logits
        self.tokenizer = tokenizer if tokenizer is not None else registry.load_tokenizer(model_config.name)
        if model is None:
            model = registry.load_causal_lm(model_config.name, dtype="float32", device=device)
            vision = registry.load_vision(model_config.name)
        self.vision = vision
        self.autocast_dtype = torch.bfloat16 if model_config.dtype == "bfloat16" else None
        self.lora = model_config.lora.enabled
        self.model = _trainable_policy(model, model_config, self.device, seed)
        self.reference = None
        if algorithm.kl_coef > 0 and not self.lora:
            self.reference = in_passing_thread(copy.deepcopy, self.model).eval().requires_grad_(False)  # rllm.cpus
        self.value_head = self._make_value_head() if algorithm.advantage == "gae" else None
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        self.total_optimizer_steps = total_steps * algorithm.ppo_epochs * algorithm.mini_batches
        self.optimizer, self.scheduler = self._make_optimizer()
        self.packed_linears = self._pack_linears(kernels)
        self.generator = torch.Generator().manual_seed(seed)  # shuffles; saved in state_dict
        self.updates = 0
        self.weight_version = 0

    def _make_optimizer(self) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
        """AdamW over the trainable weights (and the value head, at its own learning rate), and the learning-rate
        schedule over every optimizer step of the run (the warm-up counted in optimizer steps too)."""
        optim = self.optim
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad]}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": optim.critic_lr})
        optimizer = torch.optim.AdamW(
            groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps, weight_decay=optim.weight_decay
        )
        per_update = self.algorithm.ppo_epochs * self.algorithm.mini_batches
        schedule = partial(
            lr_factor, schedule=optim.schedule, warmup=optim.warmup_steps * per_update, total=self.total_optimizer_steps
        )
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)

    @property
    def kernels(self) -> KernelChoice | None:
        """The `rllm.inference.kernels.KernelChoice` of the packed linears (None where they are off)."""
        return self.packed_linears.kernels if self.packed_linears is not None else None

    def _pack_linears(self, kernels: KernelChoice | None) -> PackedLinears | None:
        """fp32 on a CPU: route the model's (and the reference's) linear layers through oneDNN with packed weights
        while this backend computes, and share the packed weights with `make_rollout_model`'s LocalModel. LoRA's
        frozen base layers gain in the forward and the input gradient; trained weights keep torch's path."""
        if self.device.type != "cpu" or self.autocast_dtype is not None or not packed_linears_available():
            return None
        packed = PackedLinears(kernels)
        for module in (self.model, self.reference):
            if module is not None:
                packed.install(module)
        return packed

    def _make_value_head(self) -> nn.Linear:
        config = self.model.config
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        # Zero init: V = 0 at first (no random offset to unlearn); skip_init draws nothing from the global RNG.
        head = nn.utils.skip_init(nn.Linear, config.hidden_size, 1, device=self.device, dtype=torch.float32)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        return head

    def _trainable_parameters(self) -> list[nn.Parameter]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        return params + (list(self.value_head.parameters()) if self.value_head is not None else [])

    # ------------------------------------------------------------ batches

    def _collate(self, rows: Sequence[TrainingRow]) -> dict[str, Tensor]:
        batch = {k: v.to(self.device) for k, v in collate(rows, pad_id=self.pad_id).items()}
        return attach_images(batch, rows, self.vision)

    def _mini_batch_tensors(
        self, rows: Sequence[TrainingRow], indices: Sequence[int], pack_length: int | None
    ) -> list[dict[str, Tensor]]:
        """A mini-batch's micro-batches as tensors: padded micro-batches of similar lengths, or packed sequences."""
        if pack_length is None:
            batches = []
            for chunk in self._micro_batches(rows, indices):
                batches.append(self._collate([rows[i] for i in chunk]))
                if self.algorithm.roles_override_policy_loss():  # each row's role picks its policy loss
                    batches[-1]["row_roles"] = [rows[i].trajectory_name for i in chunk]
            return batches
        subset = [rows[i] for i in indices]
        packs = [[subset[i] for i in pack] for pack in pack_rows(subset, pack_length)]
        return [
            attach_images(
                {k: v.to(self.device) for k, v in collate_packed(pack, pad_id=self.pad_id).items()}, pack, self.vision
            )
            for pack in packs
        ]

    def _micro_batches(self, rows: Sequence[TrainingRow], indices: Sequence[int]) -> list[list[int]]:
        return _micro_batch_indices(rows, indices, self.optim.micro_batch_size)

    def _units(self, mask: Tensor, objective: str) -> int:
        """What the loss averages over: loss tokens (token-mean, and always for sft) or rows holding a loss token
        (seq-mean-*)."""
        if self.algorithm.loss_agg == "token-mean" or objective == "sft":
            return int(mask.sum().item())
        return int((mask.sum(-1) > 0).sum().item())

    def _forward(self, batch: dict[str, Tensor], mask: Tensor, temperature: float, **kwargs: Any) -> Any:
        return forward_targets(
            self.model,
            batch,
            mask,
            temperature=temperature,
            autocast_dtype=self.autocast_dtype,
            gather=self.gather_logits,
            **kwargs,
        )

    # ------------------------------------------------------------ no-grad queries

    @_computing
    @torch.no_grad()
    def compute_logprobs(
        self, rows: Sequence[TrainingRow], *, temperature: float, reference: bool = False, all_positions: bool = False
    ) -> list[list[float]]:
        """Per-row, token-aligned logprobs under the current weights (like `row.old_logprobs`: entry t is
        log p(token t | tokens < t); 0.0 at t = 0 and off the loss mask unless `all_positions`). `reference=True`
        uses the KL reference (LoRA adapters disabled, or the frozen copy)."""
        model, context = self.model, contextlib.nullcontext()
        if reference and self.lora:
            context = self.model.disable_adapter()
        elif reference:
            if self.reference is None:
                raise RuntimeError("full fine-tuning keeps a reference model only when algorithm.kl_coef > 0")
            model = self.reference
        with context:
            return score_rows(
                model,
                rows,
                pad_id=self.pad_id,
                micro_batch_size=self.optim.micro_batch_size,
                temperature=temperature,
                all_positions=all_positions,
                gather=self.gather_logits,
                autocast_dtype=self.autocast_dtype,
                vision=self.vision,
            )

    @_computing
    @torch.no_grad()
    def compute_values(self, rows: Sequence[TrainingRow]) -> list[list[float]]:
        """Critic values, token-aligned like `row.old_logprobs` (entry t: the value of the state in which token t
        was chosen), 0.0 off the loss mask. Needs `algorithm.advantage == "gae"`."""
        if self.value_head is None:
            raise RuntimeError("compute_values needs a value head: set algorithm.advantage to 'gae'")
        out: list[list[float]] = [[] for _ in rows]
        for chunk in self._micro_batches(rows, range(len(rows))):
            batch = self._collate([rows[i] for i in chunk])
            mask = batch["target_mask"] > 0
            hidden = self._forward(batch, mask, 1.0, hidden=True).hidden
            _spread(out, chunk, rows, _scatter(self.value_head(hidden).squeeze(-1), mask))
        return out

    # ------------------------------------------------------------ the update

    @_computing
    def update(
        self,
        rows: Sequence[TrainingRow],
        *,
        temperature: float,
        norm_length: int | None = None,
        objective: Literal["policy", "sft"] = "policy",
        pack_length: int | None = None,
    ) -> dict[str, float]:
        """One PPO update on `rows`; returns metrics averaged over its optimizer steps (token counts summed).
        `temperature` must be the rollout's (0, greedy, means 1: greedy rollouts report temperature-1 logprobs).
        `objective="sft"` trains the same way on `losses.sft_loss` instead (the rows' loss masks; advantages and
        sampling log-probs unused): supervised fine-tuning (`rllm.training.sft`). `pack_length` packs each
        mini-batch's rows into sequences of at most that many tokens (`batch.collate_packed`: no padding, the same
        loss and gradient) instead of micro-batches of `optim.micro_batch_size` rows.

        `ppo_epochs` passes over the rows, each shuffled by the backend's seeded generator into `mini_batches`
        mini-batches, one optimizer step each. A mini-batch's gradient is accumulated exactly over micro-batches:
        each micro-batch's loss, aggregated over itself, is weighted by its share of what `loss_agg` averages over
        in the whole mini-batch (loss tokens, or rows holding one), so the step does not depend on the split."""
        if not rows:
            raise ValueError("update needs at least one training row")
        if (self.value_head is not None) != (rows[0].returns is not None):
            raise ValueError(
                "advantage 'gae' trains a critic: rows must carry returns and old values "
                "(rllm.training.advantages.apply_gae), and only then"
            )
        algo, started = self.algorithm, time.perf_counter()
        if norm_length is None and algo.loss_agg == "seq-mean-token-sum-norm":
            norm_length = max(len(row) for row in rows) - 1  # fixed for the whole update, whatever the split
        log = UpdateLog()
        self.model.train()
        try:
            with self._dropout_rng():
                plan = mini_batch_order(
                    len(rows), epochs=algo.ppo_epochs, mini_batches=algo.mini_batches, generator=self.generator
                )
                mismatch = None
                for index, mini_batch in enumerate(plan):
                    batches = self._mini_batch_tensors(rows, mini_batch, pack_length)
                    units = [self._units(batch["target_mask"], objective) for batch in batches]
                    tokens = [int(batch["target_mask"].sum()) for batch in batches]
                    self.optimizer.zero_grad(set_to_none=True)
                    for batch, unit, count in zip(batches, units, tokens, strict=True):
                        packed = batch["attention_mask"].dim() == 4  # packed rows: no padding
                        seen = batch["input_ids"].numel() if packed else batch["attention_mask"].sum()
                        log.count_tokens(float(seen), float(batch["target_mask"].sum()))
                        if unit == 0:
                            continue
                        if objective == "sft":
                            loss, losses, token_means = self._sft_loss(batch, temperature)
                        else:
                            loss, losses, token_means, logprobs = self._loss(batch, temperature, norm_length)
                        # before the first optimizer step: the trainer's view of the sampled tokens
                        if index == 0 and objective != "sft":
                            mismatch = merge_mismatch_sums(
                                mismatch,
                                mismatch_sums(
                                    logprobs,
                                    batch["target_old_logprobs"],
                                    batch["target_mask"],
                                    threshold=algo.off_policy.mismatch_threshold,
                                ),
                            )
                        (loss * (unit / sum(units))).backward()
                        log.add(losses, unit / sum(units))
                        log.add(token_means, count / sum(tokens))
                    self._optimizer_step(log, has_loss=sum(units) > 0)
        finally:
            self.model.eval()
        self.updates += 1
        if objective != "sft":  # sampling log-probs: only what was sampled has them
            log.add({"off_policy/nonfinite_tokens": nonfinite_tokens(rows)})
        return {**log.metrics(time.perf_counter() - started), **mismatch_metrics(mismatch)}

    def _optimizer_step(self, log: UpdateLog, *, has_loss: bool) -> None:
        """Clip and apply the accumulated gradient: skipped (and counted) when it is not finite, and when no loss
        token contributed (every row masked); the schedule advances anyway (it counts planned optimizer steps)."""
        max_norm = self.optim.grad_clip if self.optim.grad_clip is not None else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self._trainable_parameters(), max_norm))
        log.add({"grad_norm": grad_norm, "lr": self.optimizer.param_groups[0]["lr"]})
        if not math.isfinite(grad_norm):  # a NaN/inf loss or gradient: skip, never step the weights
            log.add({"skipped_nonfinite": 1})
        elif has_loss:
            self.optimizer.step()
        self.scheduler.step()
        log.steps += 1

    @_computing
    def update_pairs(
        self, pairs: Sequence[PreferencePair], *, loss: str = "sigmoid", beta: float = 0.1, live_reference: bool = False
    ) -> dict[str, float]:
        """One DPO optimizer step on `pairs` (`losses.dpo_loss`, mean over pairs). The reference log-probabilities
        are the pairs' `ref_chosen`/`ref_rejected` (precomputed), or with `live_reference` computed here by the
        reference (LoRA adapters disabled, or the frozen copy). A micro-batch holds whole pairs, both sides of
        `optim.micro_batch_size // 2` of them (at least one), taken in order of length (less padding); each
        micro-batch's mean is weighted by its share of the pairs, so the step does not depend on the split."""
        if not pairs:
            raise ValueError("update_pairs needs at least one pair")
        if not live_reference and any(p.ref_chosen is None or p.ref_rejected is None for p in pairs):
            raise ValueError("pairs lack reference log-probabilities: precompute them or pass live_reference=True")
        started, log = time.perf_counter(), UpdateLog()
        per_micro = max(1, self.optim.micro_batch_size // 2)
        ordered = sorted(pairs, key=lambda pair: pair.length)
        self.model.train()
        try:
            with self._dropout_rng():
                self.optimizer.zero_grad(set_to_none=True)
                for first in range(0, len(ordered), per_micro):
                    chunk = ordered[first : first + per_micro]
                    loss_value, metrics = self._dpo_micro_batch(chunk, loss, beta, live_reference, log)
                    (loss_value * (len(chunk) / len(pairs))).backward()
                    log.add(
                        {"loss": loss_value.item(), **{k: v.item() for k, v in metrics.items()}},
                        len(chunk) / len(pairs),
                    )
                self._optimizer_step(log, has_loss=True)
        finally:
            self.model.eval()
        self.updates += 1
        return log.metrics(time.perf_counter() - started)

    def _dpo_micro_batch(
        self, chunk: Sequence[PreferencePair], loss: str, beta: float, live_reference: bool, log: UpdateLog
    ) -> tuple[Tensor, dict[str, Tensor]]:
        batch = self._collate([pair.chosen for pair in chunk] + [pair.rejected for pair in chunk])
        log.count_tokens(float(batch["attention_mask"].sum()), float(batch["target_mask"].sum()))
        positions = batch["target_mask"] > 0
        sums = _scatter(self._forward(batch, positions, 1.0).logprobs, positions).sum(-1)
        if live_reference:
            ref_sums = self._reference_logprobs(batch, positions, 1.0).sum(-1)
        else:
            ref_sums = torch.tensor(
                [pair.ref_chosen for pair in chunk] + [pair.ref_rejected for pair in chunk],
                dtype=sums.dtype,
                device=sums.device,
            )
        tokens = positions.sum(-1)
        chosen, rejected = sums.chunk(2)
        ref_chosen, ref_rejected = ref_sums.chunk(2)
        chosen_tokens, rejected_tokens = tokens.chunk(2)
        return dpo_loss(
            chosen,
            rejected,
            ref_chosen,
            ref_rejected,
            beta=beta,
            kind=loss,
            chosen_tokens=chosen_tokens,
            rejected_tokens=rejected_tokens,
        )

    def _loss(
        self, batch: dict[str, Tensor], temperature: float, norm_length: int | None
    ) -> tuple[Tensor, dict[str, float], dict[str, float], Tensor]:
        """A micro-batch's loss aggregated over itself, its parts, per-token means for the log, and the current
        log-probs `[B, T]` (detached; for the mismatch metric):

        loss = pg_loss + kl_coef * kl - entropy_coef * entropy + value_coef * value_loss
        """
        algo = self.algorithm
        mask = batch["target_mask"]
        positions = mask > 0
        # Entropy is always logged (the logits at the loss positions exist anyway); it carries a gradient only
        # when it is part of the loss.
        out = self._forward(
            batch,
            positions,
            temperature,
            entropy=True,
            entropy_grad=algo.entropy_coef > 0,
            hidden=self.value_head is not None,
        )
        logprobs = _scatter(out.logprobs, positions)
        reference = self._reference_logprobs(batch, positions, temperature) if algo.kl_coef > 0 else None
        # decoupled mode (rows carry the trainer's recomputed log-probs): the ratio's anchor is pi_prox, the sampler's
        # log-probs become the behaviour policy of the importance weights
        decoupled = "target_prox_logprobs" in batch
        loss, losses, token_means = actor_loss(
            logprobs,
            _scatter(out.entropy, positions),
            batch["target_prox_logprobs"] if decoupled else batch["target_old_logprobs"],
            batch["target_advantages"],
            mask,
            algo,
            norm_length=norm_length,
            ref_logprobs=reference,
            behaviour_logprobs=batch["target_old_logprobs"] if decoupled else None,
            row_roles=batch.get("row_roles"),
        )
        if self.value_head is not None:
            values = _scatter(self.value_head(out.hidden).squeeze(-1), positions)
            v_loss, v = value_loss(
                values,
                batch["target_old_values"],
                batch["target_returns"],
                mask,
                clip=algo.value_clip,
                agg=algo.loss_agg,
                norm_length=norm_length,
            )
            loss = loss + algo.value_coef * v_loss
            losses.update(value_loss=v_loss.item(), loss=loss.item())
            token_means.update(
                value_clip_fraction=v["value_clip_fraction"].item(), value_mean=masked_token_mean(values, mask)
            )
        return loss, losses, token_means, logprobs.detach()

    def _sft_loss(
        self, batch: dict[str, Tensor], temperature: float
    ) -> tuple[Tensor, dict[str, float], dict[str, float]]:
        """A micro-batch's supervised loss (mean NLL of its masked tokens), and its entropy for the log."""
        mask = batch["target_mask"]
        positions = mask > 0
        out = self._forward(batch, positions, temperature, entropy=True, entropy_grad=False)
        loss = sft_loss(_scatter(out.logprobs, positions), mask)
        return loss, {"loss": loss.item()}, {"entropy": float(out.entropy.mean()) if out.entropy.numel() else 0.0}

    @contextlib.contextmanager
    def _dropout_rng(self) -> Iterator[None]:
        """Dropout (LoRA, attention) draws from a generator seeded by (seed, update count) inside a forked RNG: an
        update is reproducible from the checkpoint alone and never consumes the global RNG."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed * 1_000_003 + self.updates)
            yield

    @torch.no_grad()
    def _reference_logprobs(self, batch: dict[str, Tensor], mask: Tensor, temperature: float) -> Tensor:
        if self.reference is not None:
            model, context = self.reference, contextlib.nullcontext()
        else:
            model, context = self.model, self.model.disable_adapter()
        with context:
            out = forward_targets(
                model,
                batch,
                mask,
                temperature=temperature,
                gather=self.gather_logits,
                autocast_dtype=self.autocast_dtype,
            )
        return _scatter(out.logprobs, mask)

    # ------------------------------------------------------------ rollouts and weight sync

    def make_rollout_model(self, options: InferenceOptions | None = None) -> Any:
        """A `LocalModel` generating with THIS backend's model object (LoRA adapters active; no copy, no merge).
        Generation and training must alternate, never overlap (the trainer loop does). A `dtype`/`device` in the
        options that would make LocalModel copy the model is refused: the copy would silently stop following
        training."""
        from rllm.inference.model import LocalModel

        options = options if options is not None else InferenceOptions()
        dtype, device = options.dtype, options.device
        if dtype is not None and str(dtype).removeprefix("torch.") != str(self.model.dtype).removeprefix("torch."):
            raise ValueError(
                f"make_rollout_model shares the training model ({self.model.dtype}); dtype={dtype!r} "
                "would copy it. Build a LocalModel yourself and sync it with push_weights instead."
            )
        if device is not None and torch.device(device) != self.device:
            raise ValueError(
                f"make_rollout_model shares the training model on {self.device}; device={device!r} would move it"
            )
        # one packed copy of the weights: the model's, shared with this backend
        return LocalModel(self.model, self.tokenizer, options, vision=self.vision, packed=self.packed_linears)

    def make_rollout_copy(self, options: InferenceOptions | None = None) -> Any:
        """A `LocalModel` on its OWN copy of the current weights (LoRA merged in), for rollouts that run while this
        backend trains (asynchronous training) or in another `dtype` (e.g. "bfloat16" rollouts of float32
        training); `push_weights` copies the trained weights into it (cast to its dtype)."""
        from rllm.inference.model import LocalModel

        options = options if options is not None else InferenceOptions()
        model = copy.deepcopy(self.model)
        if self.lora:
            model = model.merge_and_unload()
        if options.dtype is not None:  # converted here, so LocalModel does not copy it a second time
            model = model.to(getattr(torch, str(options.dtype).removeprefix("torch.")))
            options = dataclasses.replace(options, dtype=None)
        # its own packed copies (of its own weights), but this backend's kernel choice: a resumed run's recorded one
        packed = PackedLinears(self.kernels) if self.kernels is not None else None
        model = model.requires_grad_(False).eval()
        return LocalModel(model, self.tokenizer, options, vision=self.vision, packed=packed)

    def rollout_state_dict(self) -> dict[str, Tensor]:
        """The weights training changes, named as in the plain base model: LoRA merged into its target weights
        (W + scale * B @ A, the training model untouched), or every trainable weight for full fine-tuning."""
        if self.lora:  # + a module peft trains whole (a VLM's trainable image tower), under its plain names
            whole = {
                plain_state_name(n): p.detach().clone()
                for n, p in self.model.named_parameters()
                if p.requires_grad and "lora_" not in n
            }
            return {**merged_lora_state(self.model), **whole}
        return {plain_state_name(n): p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    def push_weights(self, client: Any) -> int:
        """Make `client` sample from the current weights; return its new weight version. A LocalModel sharing
        this model already computes with them: only its version is bumped (`update_weights({})`, applied between
        two decode steps). A server-backed client (`sync_weights`, e.g. vLLM) gets this backend as a weight source
        (`rllm.training.backends.serving`) and pulls what its sync strategy needs. Any other client with
        `update_weights` receives `rollout_state_dict()`."""
        self.weight_version = push_weights_to(client, self)
        return self.weight_version

    # ------------------------------------------------------------ checkpoints

    def save(self, directory: Path) -> None:
        """`state_dict()` as `directory/backend.pt` (a checkpoint's staging folder: made atomic by the caller)."""
        save_torch_file(self.state_dict(), Path(directory) / STATE_FILE)  # a failed write releases its file

    def load(self, directory: Path) -> None:
        self.load_state_dict(torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=False))

    def close(self) -> None:
        """Nothing to release: the model lives in this process."""

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs that the base weights do not hold: trainable parameters (LoRA adapters,
        or all weights), value head, optimizer, scheduler, shuffle generator, counters. A snapshot: later updates
        do not change it. Tensors only in plain containers (loads with `torch.load(weights_only=True)`)."""
        trainable = {n: p.detach() for n, p in self.model.named_parameters() if p.requires_grad}
        state = {
            "format": STATE_FORMAT,
            "trainable": trainable,
            "value_head": self.value_head.state_dict() if self.value_head is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "generator": self.generator.get_state(),
            "updates": self.updates,
            "weight_version": self.weight_version,
        }
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved into a backend built with the same configs and base model."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"unknown TorchBackend state format {state.get('format')!r}")
        params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        if set(params) != set(state["trainable"]):
            diff = sorted(set(params) ^ set(state["trainable"]))
            raise ValueError(f"checkpoint's trainable parameters do not match this model's, e.g. {diff[:3]}")
        with torch.no_grad():
            for name, param in params.items():
                param.copy_(state["trainable"][name])
        if (state["value_head"] is None) != (self.value_head is None):
            raise ValueError("checkpoint and backend disagree on having a value head (advantage 'gae')")
        if self.value_head is not None:
            self.value_head.load_state_dict(state["value_head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
        self.weight_version = int(state["weight_version"])


# ---- small tensor helpers ---------------------------------------------------------------------------------------


@torch.no_grad()
def score_rows(
    model: Any,
    rows: Sequence[TrainingRow],
    *,
    pad_id: int,
    micro_batch_size: int,
    temperature: float = 1.0,
    all_positions: bool = False,
    gather: bool = True,
    autocast_dtype: torch.dtype | None = None,
    vision: Any = None,
) -> list[list[float]]:
    """Per-row, token-aligned log-probs of the rows' tokens under `model` (entry t: log p(token t | tokens < t);
    0.0 at t = 0 and off the loss mask unless `all_positions`), in micro-batches of similar lengths: the trainer's
    `compute_logprobs`, and a distillation teacher's scores (`rllm.training.distill`)."""
    device = next(model.parameters()).device
    out: list[list[float]] = [[] for _ in rows]
    for chunk in _micro_batch_indices(rows, range(len(rows)), micro_batch_size):
        batch = {k: v.to(device) for k, v in collate([rows[i] for i in chunk], pad_id=pad_id).items()}
        batch = attach_images(batch, [rows[i] for i in chunk], vision)
        mask = batch["attention_mask"][:, 1:] > 0 if all_positions else batch["target_mask"] > 0
        logprobs = forward_targets(
            model, batch, mask, temperature=temperature, gather=gather, autocast_dtype=autocast_dtype
        ).logprobs
        _spread(out, chunk, rows, _scatter(logprobs, mask))
    return out


def _micro_batch_indices(rows: Sequence[TrainingRow], indices: Sequence[int], size: int) -> list[list[int]]:
    """`split_micro_batches` over `rows[indices]`, as lists of indices into `rows`."""
    slots: dict[int, list[int]] = defaultdict(list)
    for i in indices:
        slots[id(rows[i])].append(i)
    chunks = split_micro_batches([rows[i] for i in indices], size)
    return [[slots[id(row)].pop(0) for row in chunk] for chunk in chunks]


def _spread(out: list[list[float]], chunk: list[int], rows: Sequence[TrainingRow], shifted: Tensor) -> None:
    for b, i in enumerate(chunk):
        out[i] = [0.0] + shifted[b, : len(rows[i]) - 1].tolist()


def _scatter(values: Tensor, mask: Tensor) -> Tensor:
    """Flat per-position values back into a `[B, T]` tensor, 0 off `mask` (differentiable)."""
    full = values.new_zeros(mask.shape)
    return full.masked_scatter(mask, values)
