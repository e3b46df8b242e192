"""The torch side of `LocalModel`: a continuous-batching decode loop over the running sequences.

Runs only on `LocalModel`'s worker thread. At each step boundary the worker admits waiting requests (one prefill
each, batch 1, so no prompt is ever padded), then runs one decode step for all running rows: a forward over one new
token per row against `SlotKVCache`, a batched sampler, and the finish checks. A finished row frees its slot at
once, so a waiting request can take it at the next boundary.

Prefill is skipped wherever K/V already exist (K/V at position i depend only on tokens 0..i):
- an identical running prompt (the k samples of one task in GRPO): its K/V and last logits are copied, no forward;
- the longest common prefix with a running prompt (a shared system prompt, tool list or few-shot block) or with
  a finished sequence in `PrefixStore` (the next turn of a multi-turn rollout): that prefix is copied and only
  the rest is prefilled. Prefixes shorter than `MIN_SHARED_PREFIX` tokens are recomputed (not worth a copy).
Reused K/V were computed in a forward of another shape, so logits can differ from a cold prefill in the last bits
(about 1e-6 relative in float32), like any change of batch shape.

The output layer runs on the last position of each row only, through `rllm.models.lm_head.output_logits` (sliced
on the CPU, bitwise the same logits).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rllm.models.lm_head import backbone_and_head, output_logits
from rllm.models.local_cache import PrefixStore, SlotKVCache, common_prefix_length
from rllm.models.local_sampling import RowSampler, sample_next_tokens
from rllm.models.vision import ProcessedImage, image_spans, inputs_embeds

__all__ = ["MIN_SHARED_PREFIX", "BatchScheduler", "GenerationRequest"]

MIN_SHARED_PREFIX = 16  # tokens; a shorter common prefix is prefilled again rather than copied


@dataclass(eq=False)
class GenerationRequest:
    """One `generate` call while it is queued or running. Written only by the worker thread, except `cancelled`."""

    prompt_ids: list[int]
    sampler: RowSampler
    max_new_tokens: int  # max_tokens, cut to what the context still holds
    stop: list[str]
    deliver: Callable[[GenerationRequest, BaseException | None], None]  # thread-safe hand-back to the caller
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    weight_version: int = 0  # the version that produced the first token
    token_versions: list[int] = field(default_factory=list)  # the version that produced each completion token
    cancelled: bool = False  # set by the caller's task when it is cancelled
    prompt_logits: torch.Tensor | None = None  # last prompt position; kept so a same-prompt request can skip prefill
    images: list[ProcessedImage] = field(default_factory=list)  # a VLM prompt's images, in placeholder order
    prefix_key: list[int] | None = None  # the ids with each image's tokens keyed by its content (vision.prefix_key)
    submitted_at: float = field(default_factory=time.perf_counter)
    kv_epoch: int = 0  # the scheduler's `kv_epoch` at admission: K/V from an older epoch is never stored

    @property
    def key(self) -> list[int]:
        """What prefix sharing compares: the prompt ids, where image tokens also say which image they stand for."""
        return self.prompt_ids if self.prefix_key is None else self.prefix_key


@dataclass
class SchedulerStats:
    prefill_tokens: int = 0
    prefills_shared: int = 0  # requests whose prompt K/V were copied from another row
    decode_steps: int = 0
    decode_rows: int = 0  # sum of batch sizes over decode steps
    generated_tokens: int = 0
    prefix_hit_tokens: int = 0  # prompt tokens whose K/V came from the prefix store instead of a prefill
    shared_prefix_tokens: int = 0  # prompt tokens whose K/V were copied from a running row's common prefix


class BatchScheduler:
    """Admits, steps and retires requests. Not thread-safe: the worker thread owns it."""

    def __init__(
        self,
        model: Any,
        *,
        eos_ids: set[int],
        max_batch_size: int,
        context_length: int,
        decode: Callable[[list[int]], str],
        prefix_cache_tokens: int = 0,
        image_token_id: int | None = None,
    ) -> None:
        """`image_token_id`: a vision-language model's image token, whose embeddings a prompt's image features
        replace at prefill (`rllm.models.vision`)."""
        self.model = model
        self.image_token_id = image_token_id
        self.eos_ids = eos_ids
        self.max_batch_size = max_batch_size
        self.context_length = context_length
        self.decode = decode  # token ids -> text, special tokens skipped
        self.device = model.device
        self.weight_version = 0
        self.active: list[GenerationRequest] = []  # row i <-> cache slot i
        self.stats = SchedulerStats()
        self.prefixes = PrefixStore(prefix_cache_tokens)
        self.kv_epoch = 0  # bumped when the weights change: K/V computed before are stale
        self._parts = backbone_and_head(model)  # None: the model's own forward computes the logits
        # transformers renames `past_key_values` to `cache` (5.24 warns, 5.40 drops the old name)
        forward = self._parts[0].forward if self._parts is not None else model.forward
        self._cache_kwarg = "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.cache = SlotKVCache(
            num_layers=config.num_hidden_layers,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            head_dim=head_dim,
            dtype=model.dtype,
            device=self.device,
            max_slots=max_batch_size,
            max_positions=context_length,
        )

    @property
    def free_slots(self) -> int:
        return self.max_batch_size - len(self.active)

    # ------------------------------------------------------------ admission

    def admit(self, request: GenerationRequest) -> None:
        """Prefill `request` (reusing whatever K/V exist for its prompt) and sample its first token."""
        slot = self.cache.add_slot(len(request.prompt_ids))
        self.active.append(request)
        request.weight_version = self.weight_version
        request.kv_epoch = self.kv_epoch
        try:
            donor, shared = self._longest_running_prefix(request)
            if donor is not None and shared == len(request.prompt_ids) == len(self.active[donor].prompt_ids):
                self.cache.copy_prefix(donor, slot, shared)  # the same prompt: nothing to compute
                request.prompt_logits = self.active[donor].prompt_logits
                self.stats.prefills_shared += 1
            else:
                request.prompt_logits = self._prefill(slot, request, self._reuse_prefix(slot, request))
        except BaseException:
            self._remove_row(slot)
            raise
        tokens, logprobs = sample_next_tokens(request.prompt_logits[None, :], [request.sampler], [0])
        self._record(slot, tokens[0], logprobs[0])
        if request.finish_reason is not None:
            self._retire([slot])

    def _longest_running_prefix(self, request: GenerationRequest) -> tuple[int | None, int]:
        """The running row whose prompt shares the longest prefix with `request`'s, and that length."""
        best, length = None, 0
        for row, other in enumerate(self.active):
            if other is request or other.prompt_logits is None:
                continue
            shared = common_prefix_length(other.key, request.key)
            if shared > length:
                best, length = row, shared
        return best, length

    def _reuse_prefix(self, slot: int, request: GenerationRequest) -> int:
        """Copy the longest common prefix of the prompt held by a running row or the prefix store into `slot`
        (at most all prompt tokens but the last, whose logits are needed); returns its length (0: none)."""
        prompt = request.key
        donor, shared = self._longest_running_prefix(request)
        shared = min(shared, len(prompt) - 1)
        stored = self.prefixes.lookup(prompt, min_tokens=max(shared + 1, MIN_SHARED_PREFIX)) \
            if self.prefixes.max_tokens else None  # fmt: skip
        if stored is not None:
            self.cache.write_prefix(slot, stored)
            self.stats.prefix_hit_tokens += stored.shape[3]
            return stored.shape[3]
        if donor is None or shared < MIN_SHARED_PREFIX:
            return 0
        self.cache.copy_prefix(donor, slot, shared)
        self.stats.shared_prefix_tokens += shared
        return shared

    def _prefill(self, slot: int, request: GenerationRequest, start: int = 0) -> torch.Tensor:
        """Prefill the prompt from `start` on into `slot`, whose first `start` positions already hold the prefix."""
        prompt_ids = request.prompt_ids
        length = len(prompt_ids)
        input_ids = torch.tensor([prompt_ids[start:]], dtype=torch.long, device=self.device)
        positions = torch.arange(start, length, device=self.device)[None, :]
        mask = None
        if start:
            # Causal over prefix + new tokens, given ready-made (4-D, used as is) like the decode mask.
            mask = torch.arange(length, device=self.device)[None, :] <= positions[0, :, None]
            mask = mask[None, None]
        self.cache.begin_prefill(slot, start)
        try:
            logits = self._last_logits(self._embed(request, input_ids, start), positions, mask)
        finally:
            self.cache.end_prefill(length)
        self.stats.prefill_tokens += length - start
        return logits[0].float()

    def _embed(self, request: GenerationRequest, input_ids: torch.Tensor, start: int) -> dict[str, torch.Tensor]:
        """The model input of a prefill: the ids, or for a prompt with images their embeddings with the image
        features in place (the first `start` positions' K/V are already in the slot)."""
        if not request.images:
            return {"input_ids": input_ids}
        ids = request.prompt_ids
        before = sum(1 for t in ids[:start] if t == self.image_token_id)
        spans = image_spans(request.images, int((input_ids == self.image_token_id).sum()), skip=before)
        return {"inputs_embeds": inputs_embeds(self.model, input_ids, spans, image_token_id=self.image_token_id)}

    def _last_logits(self, tokens: dict[str, torch.Tensor], positions: torch.Tensor, mask: torch.Tensor | None):
        """Logits `[rows, vocab]` at each row's last position, the K/V going to `self.cache`. `tokens` holds
        `input_ids` or `inputs_embeds`."""
        inputs = {**tokens, "position_ids": positions, "attention_mask": mask,
                  self._cache_kwarg: self.cache, "use_cache": True}  # fmt: skip
        if self._parts is None:
            return self.model(**inputs, logits_to_keep=1).logits[:, -1]
        backbone, head = self._parts
        hidden = backbone(**inputs).last_hidden_state[:, -1]
        return output_logits(head, hidden)

    # ------------------------------------------------------------ decoding

    def step(self) -> None:
        """One new token for every running row."""
        rows = self.active
        if not rows:
            return
        input_ids = torch.tensor([[r.completion_ids[-1]] for r in rows], dtype=torch.long, device=self.device)
        position_ids, mask = self.cache.begin_decode()
        try:
            logits = self._last_logits({"input_ids": input_ids}, position_ids, mask)
        finally:
            self.cache.end_decode()
        steps = [len(r.completion_ids) for r in rows]
        tokens, logprobs = sample_next_tokens(logits, [r.sampler for r in rows], steps)
        self.stats.decode_steps += 1
        self.stats.decode_rows += len(rows)
        finished = []
        for row, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
            self._record(row, token, logprob)
            if rows[row].finish_reason is not None:
                finished.append(row)
        self._retire(finished)

    def _record(self, row: int, token: int, logprob: float) -> None:
        request = self.active[row]
        request.completion_ids.append(token)
        request.logprobs.append(logprob)
        request.token_versions.append(self.weight_version)
        self.stats.generated_tokens += 1
        if token in self.eos_ids or (request.stop and self._hit_stop_string(request)):
            request.finish_reason = "stop"
        elif len(request.completion_ids) >= request.max_new_tokens:
            request.finish_reason = "length"

    def _hit_stop_string(self, request: GenerationRequest) -> bool:
        # A new match must end in the newest token's text, so decoding a short tail is enough (the slack covers
        # tokens that decode to nothing on their own, e.g. pieces of one multi-byte character).
        window = max(len(s) for s in request.stop) + 8
        tail = self.decode(request.completion_ids[-window:])
        return any(s in tail for s in request.stop)

    # ------------------------------------------------------------ retiring

    def drop_cancelled(self) -> None:
        self._retire([row for row, r in enumerate(self.active) if r.cancelled], deliver=False)

    def _retire(self, rows: list[int], *, deliver: bool = True) -> None:
        # Highest row first: `_remove_row` moves the last row into the hole, which is then never a row still to go.
        for row in sorted(rows, reverse=True):
            if deliver:
                self._store_prefix(row)
            request = self._remove_row(row)
            request.prompt_logits = None
            if deliver:
                request.deliver(request, None)
        if not self.active:
            self.cache.release()

    def _store_prefix(self, row: int) -> None:
        """Keep the finished row's K/V for a next turn. The slot holds prompt + completion minus the last sampled
        token (never fed back), so the stored ids are exactly the first `lengths[row]` of them."""
        request = self.active[row]
        if not self.prefixes.max_tokens or request.kv_epoch != self.kv_epoch:
            return
        length = self.cache.lengths[row]
        ids = (request.key + request.completion_ids)[:length]
        self.prefixes.put(ids, self.cache.read_prefix(row, length))

    def invalidate_prefixes(self) -> None:
        """The weights changed: stored K/V and those of running rows are stale, so none of them is stored."""
        self.prefixes.clear()
        self.kv_epoch += 1

    def _remove_row(self, row: int) -> GenerationRequest:
        request = self.active[row]
        moved = self.cache.remove_slot(row)
        if moved is not None:
            self.active[row] = self.active[moved]
        self.active.pop()
        return request

    def fail_all(self, error: BaseException) -> None:
        """A step failed: every running request gets `error`; the cache is reset so the next request starts clean."""
        failed, self.active = self.active, []
        self.cache.lengths = []
        self.cache.release()
        for request in failed:
            request.deliver(request, error)
