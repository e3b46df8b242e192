"""The torch side of `LocalModel`: a continuous-batching decode loop over the running sequences.

Runs only on `LocalModel`'s worker thread. At each step boundary the worker admits the waiting requests that fit
(`admit`), then runs one decode step for all running rows (`step`). A finished row frees its slot at once, so a
waiting request can take it at the next boundary.

Admission prefills several prompts in one forward: prompts are sorted by length and cut into the chunks that pad
least for what a forward costs on the device, of at most `prefill_tokens` padded tokens each, each row writing its
K/V into its own slot (padding writes only past the row's end, where nothing reads it). Prefill is skipped wherever
K/V already exist (K/V at position i depend only on tokens 0..i):
- an identical prompt, running or admitted with it (the k samples of one task in GRPO): its K/V and last logits
  are copied, no forward;
- the longest common prefix with a running prompt (a shared system prompt, tool list or few-shot block), with a
  finished sequence in `PrefixStore` (the next turn of a multi-turn rollout), or with a prompt admitted in the same
  batch (then the batch prefills in two waves: the prompts that others copy from, then the others) is copied and
  only the rest is prefilled. Prefixes shorter than `MIN_SHARED_PREFIX` tokens are recomputed (not worth a copy).
Reused K/V and batched prompts are computed in forwards of other shapes, so logits can differ from a lone cold
prefill in the last bits (about 1e-6 relative in float32), like any change of batch shape.

A decode step feeds every row's last sampled token and samples the next on the device from the row state
(`rllm.inference.rows`); one small copy brings the new ids and log-probs to the host, which checks EOS, stop
strings and lengths. The step's operations do not depend on the number of rows, and on CUDA it is replayed from a
CUDA graph captured per (rows, attention span, sampling mode) bucket (`rllm.inference.graphs`).

The output layer runs on the last position of each row only, through `rllm.inference.lm_head.output_logits` (sliced
on the CPU, bitwise the same logits).
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rllm.errors import InfraError
from rllm.inference.cache import PrefixStore, SlotKVCache, common_prefix_length
from rllm.inference.graphs import DecodeGraphs
from rllm.inference.lm_head import backbone_and_head, output_logits
from rllm.inference.rows import RowState
from rllm.inference.sampling import RowSampler, SamplingMode
from rllm.models.vision import ProcessedImage, image_spans, inputs_embeds

__all__ = ["MIN_SHARED_PREFIX", "BatchScheduler", "GenerationRequest", "cheapest_cut"]

logger = logging.getLogger(__name__)

MIN_SHARED_PREFIX = 16  # tokens; a shorter common prefix is prefilled again rather than copied
# Padded prompt tokens per prefill forward: past a few thousand rows a matmul gains nothing more, and a GPU's
# activations stay small.
PREFILL_TOKENS = {"cpu": 2048, "cuda": 8192}
# What one more prefill forward costs, in padded tokens: a CPU's matmuls run as fast at a few hundred rows as at
# thousands, so padding is the waste to avoid; a GPU's forward is launch-bound at these sizes, so forwards are.
FORWARD_COST = {"cpu": 64, "cuda": 8192}


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

    @functools.cached_property
    def key_tuple(self) -> tuple[int, ...]:
        return tuple(self.key)


@dataclass
class SchedulerStats:
    prefill_tokens: int = 0
    prefill_forwards: int = 0  # forwards that prefilled prompts (several prompts each when they arrive together)
    prefills_shared: int = 0  # requests whose prompt K/V were copied from another row
    decode_steps: int = 0
    decode_rows: int = 0  # sum of batch sizes over decode steps
    graph_steps: int = 0  # decode steps replayed from a CUDA graph
    generated_tokens: int = 0
    prefix_hit_tokens: int = 0  # prompt tokens whose K/V came from the prefix store instead of a prefill
    shared_prefix_tokens: int = 0  # prompt tokens whose K/V were copied from a running row's common prefix


@dataclass(eq=False)
class _Admission:
    """Where one admitted request's prompt K/V come from."""

    request: GenerationRequest
    key: tuple[int, ...]
    start: int = 0  # leading prompt positions copied rather than computed
    stored: torch.Tensor | None = None  # those positions' K/V from the prefix store
    source: int | _Admission | None = None  # or a running row / an earlier admission of this batch holding them
    same_as: int | _Admission | None = None  # an identical prompt: copy all of it, logits included
    wave: int = 1  # 2: copies from an admission of this batch, so prefills after it
    row: int = -1
    error: BaseException | None = None

    @property
    def suffix(self) -> int:
        return len(self.request.prompt_ids) - self.start


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
        prefill_tokens: int | None = None,
        cuda_graphs: bool = True,
    ) -> None:
        """`image_token_id`: a vision-language model's image token, whose embeddings a prompt's image features
        replace at prefill (`rllm.models.vision`). `prefill_tokens`: padded tokens per prefill forward (default
        `PREFILL_TOKENS` of the device). `cuda_graphs`: replay decode steps from CUDA graphs on a CUDA device."""
        self.model = model
        self.image_token_id = image_token_id
        self.eos_ids = eos_ids
        self.max_batch_size = max_batch_size
        self.context_length = context_length
        self.decode = decode  # token ids -> text, special tokens skipped
        self.device = model.device
        self.weight_version = 0
        self.active: list[GenerationRequest] = []  # row i <-> cache slot i <-> self.rows row i
        self.stats = SchedulerStats()
        self.prefixes = PrefixStore(prefix_cache_tokens)
        self.kv_epoch = 0  # bumped when the weights change: K/V computed before are stale
        self.prefill_tokens = prefill_tokens or PREFILL_TOKENS.get(self.device.type, PREFILL_TOKENS["cuda"])
        self._parts = backbone_and_head(model)  # None: the model's own forward computes the logits
        # transformers renames `past_key_values` to `cache` (5.24 warns, 5.40 drops the old name)
        forward = self._parts[0].forward if self._parts is not None else model.forward
        self._cache_kwarg = "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        on_cuda = self.device.type == "cuda"
        self.cache = SlotKVCache(
            num_layers=config.num_hidden_layers,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            head_dim=head_dim,
            dtype=model.dtype,
            device=self.device,
            max_slots=max_batch_size,
            max_positions=context_length,
            static=on_cuda,
        )
        self.rows = RowState(max_batch_size, self.device)
        self._position_index = torch.arange(context_length, device=self.device)
        self.graphs = DecodeGraphs(max_batch_size) if on_cuda and cuda_graphs else None

    @property
    def free_slots(self) -> int:
        return self.max_batch_size - len(self.active)

    # ------------------------------------------------------------ admission

    def admit(self, requests: list[GenerationRequest]) -> None:
        """Prefill `requests` (at most `free_slots`; reusing whatever K/V exist for their prompts) and sample their
        first tokens. A request whose prefill fails gets the error; the others go on."""
        if not requests:
            return
        if self.graphs is not None and not self.active:  # weights are only swapped while no step is running
            self.graphs.check_weights(self.model)
        plans = self._plan(requests)
        first = self.cache.add_slots(len(plans), self._positions_needed(requests))
        for offset, plan in enumerate(plans):
            plan.row = first + offset
            plan.request.weight_version = self.weight_version
            plan.request.kv_epoch = self.kv_epoch
        self.active.extend(plan.request for plan in plans)
        self.rows.start_rows(first, [p.request.sampler for p in plans], [len(p.request.prompt_ids) for p in plans])
        for wave in (1, 2):
            self._prefill_wave([p for p in plans if p.wave == wave and p.same_as is None])
        for plan in plans:
            if plan.same_as is not None:
                self._copy_identical(plan)
        errors = {p.row: InfraError(f"local model prefill failed: {p.error!r}") for p in plans if p.error is not None}
        self._retire(list(errors), errors=errors)
        self._sample_first_tokens(first)

    def _positions_needed(self, requests: list[GenerationRequest]) -> int:
        """Cache positions to reserve: the prompt and the first decode step; on a static (CUDA) cache the whole
        completion, so that decoding never reallocates the buffers its graphs were captured on."""
        extra = (lambda r: r.max_new_tokens) if self.cache.static else (lambda r: 1)
        return min(self.context_length, max(len(r.prompt_ids) + extra(r) for r in requests))

    def _plan(self, requests: list[GenerationRequest]) -> list[_Admission]:
        """Decide where each prompt's K/V come from; returns the admissions in row order: prompts computed first
        (sorted by how much is left to compute, so chunks pad little), then those copying from them, then
        identical prompts."""
        running = [(row, r.key_tuple) for row, r in enumerate(self.active) if r.prompt_logits is not None]
        plans: list[_Admission] = []
        for request in requests:
            plan = _Admission(request, request.key_tuple)
            identical = [row for row, key in running if key == plan.key]
            identical += [p for p in plans if p.same_as is None and p.key == plan.key]
            plan.same_as = identical[0] if identical else None
            if plan.same_as is None:
                self._choose_prefix_source(plan, running, [p for p in plans if p.wave == 1 and p.same_as is None])
            plans.append(plan)
        computed = sorted((p for p in plans if p.same_as is None), key=lambda p: (p.wave, p.suffix))
        return computed + [p for p in plans if p.same_as is not None]

    def _choose_prefix_source(self, plan: _Admission, running: list, leaders: list[_Admission]) -> None:
        """The longest usable common prefix among running rows, the prefix store and this batch's leaders (at most
        all prompt tokens but the last, whose logits are needed)."""
        limit = len(plan.key) - 1
        best, length = None, 0
        for source, key in [*running, *((leader, leader.key) for leader in leaders)]:
            shared = min(common_prefix_length(key, plan.key), limit)
            if shared > length:
                best, length = source, shared
        stored = None
        if self.prefixes.max_tokens:
            stored = self.prefixes.lookup(list(plan.key), min_tokens=max(length + 1, MIN_SHARED_PREFIX))
        if stored is not None:
            plan.stored, plan.start = stored, stored.shape[3]
        elif best is not None and length >= MIN_SHARED_PREFIX:
            plan.source, plan.start = best, length
            plan.wave = 2 if isinstance(best, _Admission) else 1

    def _prefill_wave(self, plans: list[_Admission]) -> None:
        """Copy each prompt's reused prefix into its slot, then prefill the rest in chunks of adjacent rows."""
        for plan in plans:
            if isinstance(plan.source, _Admission) and plan.source.error is not None:
                plan.source, plan.start = None, 0  # that prefix was never computed: compute the whole prompt
            elif plan.stored is not None:
                self.cache.write_prefix(plan.row, plan.stored)
                self.stats.prefix_hit_tokens += plan.start
            elif plan.source is not None:
                source = plan.source.row if isinstance(plan.source, _Admission) else plan.source
                self.cache.copy_prefix(source, plan.row, plan.start)
                self.stats.shared_prefix_tokens += plan.start
        for chunk in self._chunks(plans):
            try:
                self._prefill_chunk(chunk)
            except Exception as exc:
                if len(chunk) == 1:
                    logger.exception("local model: prefill failed")
                    chunk[0].error = exc
                else:  # one bad prompt must not fail the others: prefill them one by one
                    for plan in chunk:
                        self._prefill_alone(plan)

    def _prefill_alone(self, plan: _Admission) -> None:
        try:
            self._prefill_chunk([plan])
        except Exception as exc:
            logger.exception("local model: prefill failed")
            plan.error = exc

    def _chunks(self, plans: list[_Admission]) -> list[list[_Admission]]:
        """Runs of adjacent rows (sorted by suffix length), each cut into the chunks that cost least (`cheapest_cut`).
        Prompts with images, and models whose logits are not `head(hidden)`, are prefilled alone."""
        runs: list[list[_Admission]] = []
        for plan in plans:
            run = runs[-1] if runs else []
            joins = (
                run
                and plan.row == run[-1].row + 1
                and self._parts is not None
                and not plan.request.images
                and not run[0].request.images
            )
            if joins:
                run.append(plan)
            else:
                runs.append([plan])
        return [chunk for run in runs for chunk in self._cheapest_cut(run)]

    def _cheapest_cut(self, run: list[_Admission]) -> list[list[_Admission]]:
        forward_cost = FORWARD_COST.get(self.device.type, FORWARD_COST["cuda"])
        bounds = cheapest_cut([p.suffix for p in run], forward_cost=forward_cost, max_tokens=self.prefill_tokens)
        return [run[start:end] for start, end in bounds]

    def _prefill_chunk(self, plans: list[_Admission]) -> None:
        """One forward over the prompts of adjacent rows `plans[0].row ...`, each from its `start` on; sets each
        request's `prompt_logits`."""
        first, count = plans[0].row, len(plans)
        width = max(p.suffix for p in plans)
        ids, write_positions, last = [], [], []
        for plan in plans:
            prompt, start, end = plan.request.prompt_ids, plan.start, len(plan.request.prompt_ids)
            # Padding writes its garbage K/V at the row's end, which the first decode step overwrites.
            ids.append(prompt[start:] + [0] * (width - plan.suffix))
            write_positions.append(list(range(start, end)) + [end] * (width - plan.suffix))
            last.append(plan.suffix - 1)
        input_ids = torch.tensor(ids, dtype=torch.long).to(self.device)
        positions = torch.tensor(write_positions, dtype=torch.long).to(self.device)
        span = max(len(p.request.prompt_ids) for p in plans) + 1
        mask = self._position_index[:span][None, None, :] <= positions[:, :, None]
        self.cache.begin_forward(
            slice(first, first + count), self.rows.index[first : first + count, None], positions, span
        )
        try:
            tokens = self._embed(plans[0], input_ids) if plans[0].request.images else {"input_ids": input_ids}
            logits = self._logits(tokens, positions, mask[:, None], torch.tensor(last, device=self.device))
        finally:
            self.cache.end_forward()
        logits = logits.float()
        for i, plan in enumerate(plans):
            plan.request.prompt_logits = logits[i]
            self.cache.lengths[plan.row] = len(plan.request.prompt_ids)
        self.stats.prefill_tokens += sum(p.suffix for p in plans)
        self.stats.prefill_forwards += 1

    def _copy_identical(self, plan: _Admission) -> None:
        source = plan.same_as.row if isinstance(plan.same_as, _Admission) else plan.same_as
        donor = self.active[source] if isinstance(plan.same_as, int) else plan.same_as.request
        if isinstance(plan.same_as, _Admission) and plan.same_as.error is not None:
            plan.error = plan.same_as.error
            return
        self.cache.copy_prefix(source, plan.row, len(plan.request.prompt_ids))
        plan.request.prompt_logits = donor.prompt_logits
        self.stats.prefills_shared += 1

    def _embed(self, plan: _Admission, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The input of a prefill of one prompt with images: its embeddings with the image features in place (the
        first `start` positions' K/V are already in the slot)."""
        request = plan.request
        before = sum(1 for t in request.prompt_ids[: plan.start] if t == self.image_token_id)
        spans = image_spans(request.images, int((input_ids == self.image_token_id).sum()), skip=before)
        return {"inputs_embeds": inputs_embeds(self.model, input_ids, spans, image_token_id=self.image_token_id)}

    def _sample_first_tokens(self, first: int) -> None:
        """Sample the first token of rows `first..` (the admitted ones that prefilled) from their prompt logits."""
        admitted = self.active[first:]
        if not admitted:
            return
        logits = torch.stack([r.prompt_logits for r in admitted])
        tokens, logprobs = self.rows.sample(logits, first, max(r.sampler.mode for r in admitted))
        self.rows.record(first, tokens, logprobs, advance=False)
        ids, logprobs = self.rows.read_out(first, len(admitted))
        finished = [first + i for i in range(len(admitted)) if self._record(first + i, ids[i], logprobs[i])]
        self._retire(finished)

    def _logits(
        self,
        tokens: dict[str, torch.Tensor],
        positions: torch.Tensor,
        mask: torch.Tensor,
        last: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits `[rows, vocab]` at position `last[i]` of each row (default: the last), the K/V going to
        `self.cache`. `tokens` holds `input_ids` or `inputs_embeds`."""
        inputs = {
            **tokens,
            "position_ids": positions,
            "attention_mask": mask,
            self._cache_kwarg: self.cache,
            "use_cache": True,
        }
        if self._parts is None:  # one unpadded row at a time (see `_chunks`)
            return self.model(**inputs, logits_to_keep=1).logits[:, -1]
        backbone, head = self._parts
        hidden = backbone(**inputs).last_hidden_state
        hidden = hidden[:, -1] if last is None else hidden[self.rows.index[: hidden.shape[0]], last]
        return output_logits(head, hidden)

    # ------------------------------------------------------------ decoding

    def step(self) -> None:
        """One new token for every running row."""
        count = len(self.active)
        if not count:
            return
        span = max(self.cache.lengths) + 1
        self.cache.reserve(count, span)
        mode = max(r.sampler.mode for r in self.active)
        replayed = False
        if self.graphs is not None:
            generation = (self.cache.generation, self.rows.generation)
            replayed = self.graphs.run(count, span, mode, self.cache.capacity, generation, self._decode)
        if not replayed:
            self._decode(count, span, mode)
        self.stats.graph_steps += replayed
        ids, logprobs = self.rows.read_out(0, count)
        self.cache.lengths = [length + 1 for length in self.cache.lengths]
        self.stats.decode_steps += 1
        self.stats.decode_rows += count
        finished = [row for row in range(count) if self._record(row, ids[row], logprobs[row])]
        self._retire(finished)

    def _decode(self, count: int, span: int, mode: SamplingMode) -> None:
        """The device side of a decode step for rows `0..count-1` attending to `span` positions: feed each row's
        next token, sample the one after, record it in `self.rows`. Reads and writes only fixed tensors and never
        waits on the device, so a CUDA graph can capture it (rows past the running ones are inactive padding)."""
        rows = slice(0, count)
        positions = self.rows.positions[rows, None]
        mask = self._position_index[:span][None, :] <= positions
        self.cache.begin_forward(rows, self.rows.index[rows, None], positions, span)
        try:
            logits = self._logits({"input_ids": self.rows.next_ids[rows, None]}, positions, mask[:, None, None, :])
        finally:
            self.cache.end_forward()
        tokens, logprobs = self.rows.sample(logits, 0, mode)
        self.rows.record(0, tokens, logprobs, advance=True)

    def _record(self, row: int, token: int, logprob: float) -> bool:
        """Append a sampled token to row `row`'s request; True when the request is finished."""
        request = self.active[row]
        request.completion_ids.append(token)
        request.logprobs.append(logprob)
        request.token_versions.append(self.weight_version)
        self.stats.generated_tokens += 1
        if token in self.eos_ids or (request.stop and self._hit_stop_string(request)):
            request.finish_reason = "stop"
        elif len(request.completion_ids) >= request.max_new_tokens:
            request.finish_reason = "length"
        return request.finish_reason is not None

    def _hit_stop_string(self, request: GenerationRequest) -> bool:
        # A new match must end in the newest token's text, so decoding a short tail is enough (the slack covers
        # tokens that decode to nothing on their own, e.g. pieces of one multi-byte character).
        window = max(len(s) for s in request.stop) + 8
        tail = self.decode(request.completion_ids[-window:])
        return any(s in tail for s in request.stop)

    # ------------------------------------------------------------ retiring

    def drop_cancelled(self) -> None:
        self._retire([row for row, r in enumerate(self.active) if r.cancelled], deliver=False)

    def _retire(self, rows: list[int], *, deliver: bool = True, errors: dict | None = None) -> None:
        """Remove finished rows (delivering their requests, or `errors[row]`): the last running rows move into
        their holes, all at once, so the running rows stay `0..n-1`."""
        if not rows:
            return
        errors = errors or {}
        if deliver:
            for row in rows:
                if row not in errors:
                    self._store_prefix(row)
        gone = set(rows)
        count, keep = len(self.active), len(self.active) - len(gone)
        holes = sorted(row for row in gone if row < keep)
        movers = [row for row in range(keep, count) if row not in gone]
        retired = [(self.active[row], errors.get(row)) for row in sorted(gone)]
        self.cache.move_slots(holes, movers)
        if holes:
            self.rows.move(holes, movers)
        for hole, mover in zip(holes, movers, strict=True):
            self.active[hole] = self.active[mover]
        del self.active[keep:]
        self.cache.truncate(keep)
        self.rows.stop_rows(keep, count)
        for request, error in retired:
            request.prompt_logits = None
            if deliver:
                request.deliver(request, error)
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

    def fail_all(self, error: BaseException) -> None:
        """A step failed: every running request gets `error`; the cache is reset so the next request starts clean."""
        failed, self.active = self.active, []
        self.rows.stop_rows(0, len(failed))
        self.cache.truncate(0)
        self.cache.release()
        for request in failed:
            request.deliver(request, error)


def cheapest_cut(lengths: list[int], *, forward_cost: int, max_tokens: int) -> list[tuple[int, int]]:
    """Cut prompts of `lengths` tokens (sorted, so chunks of neighbours pad little) into chunks `[start, end)`, each
    padded to its longest prompt and holding at most `max_tokens` padded tokens (a longer prompt goes alone), with
    the least padded tokens plus `forward_cost` per chunk (an exact dynamic programme, quadratic in the prompts). On
    a CPU a forward costs little beyond its tokens, so a chunk ends where the next prompt would add more padding
    than a forward of its own; on a GPU rows are cheap and forwards are not, so prompts merge as far as the bound
    allows."""
    best = [0] + [None] * len(lengths)  # best[i]: least cost of lengths[:i]
    start_of = [0] * (len(lengths) + 1)  # start_of[i]: where the last chunk of lengths[:i] starts
    for end in range(1, len(lengths) + 1):
        width = 0
        for start in range(end - 1, -1, -1):
            width = max(width, lengths[start])
            padded = (end - start) * width
            if padded > max_tokens and start < end - 1:
                break
            cost = best[start] + padded + forward_cost
            if best[end] is None or cost < best[end]:
                best[end], start_of[end] = cost, start
    bounds, end = [], len(lengths)
    while end:
        bounds.append((start_of[end], end))
        end = start_of[end]
    return bounds[::-1]
