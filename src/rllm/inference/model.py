"""`LocalModel`: the embedded inference client (transformers on CPU or one GPU) with continuous batching.

Many rollouts call `generate` concurrently; each call becomes a request in a queue. ONE worker thread owns the
model and runs the decode loop (`rllm.inference.scheduler`): new requests are prefilled and join the running
batch at step boundaries, a finished sequence frees its slot at once, and results come back to the caller's event
loop with `loop.call_soon_threadsafe`. Torch runs on the worker thread so the event loop (environments, tools,
other clients) stays responsive while the model computes.

Choices worth knowing:
- Token ids in, token ids out. `completion_ids` are the sampled ids, INCLUDING the EOS token when one was sampled
  (training needs it); `text` is their decode without special tokens. A stop string ends generation after the token
  that completed it; the tokens up to there are kept (so `text` holds the stop string and may run a few characters
  past it when a token straddles it), never re-tokenized.
- Logprobs: `logprobs[i]` is log p(completion_ids[i]) under softmax(logits / temperature), temperature 1 for greedy,
  before top-k/top-p truncation (see `rllm.inference.sampling`). A trainer recomputing with the same temperature
  and dtype gets the same numbers up to float rounding.
- Determinism: a request with `sampling.seed` gives the same completion for the same prompt whatever else is in
  the batch (its own generator; see `rllm.inference.sampling`); bitwise only up to the float rounding of different
  batch shapes and of K/V reused from another forward (a shared prefix, the prefix store), which in practice never
  moves a sample (`InferenceOptions(prefix_cache_tokens=0, max_batch_size=1)` makes repeated runs bitwise
  identical). Without a seed, the seed is derived from the model's `seed` and a counter of submitted requests, so a
  run that submits the same requests in the same order reproduces.
- `max_tokens` is cut to what the context still holds (`max_position_embeddings` minus the prompt); a prompt that
  leaves no room is refused with `PromptTooLongError` before it reaches the worker.
- `update_weights` is applied by the worker between two steps. Requests already running keep going with the new
  weights; `ModelOutput.weight_version` is the version that produced a request's first token and, when they
  differ, `info["weight_version_end"]` the version of its last one and `info["token_weight_versions"]` one per
  completion token (a partial rollout: the tokens after the update were sampled with the new weights on the K/V the
  old ones computed).
- The worker is a daemon thread started by the first call and stopped by `close()` (or `async with`).
- On a GPU nothing of size `[rows, vocab]` leaves the device: sampling runs where the logits are and one small copy a
  step brings the new ids and log-probs to the host; prompts admitted together prefill in one forward; decode steps
  replay from CUDA graphs (`rllm.inference.graphs`; `InferenceOptions(cuda_graphs=False)` runs them
  eagerly). The K/V cache then stays allocated between rollout phases (graphs hold its address): `close()` frees it.
- What changes state outside the model is opt-in (`rllm.runtime`, read when the model is built): the thread
  governor, which sets torch's intra-op threads on the worker before each decode step, and the packed oneDNN
  linears. Without `rllm.runtime.enable()` the worker runs with torch's own thread count and linear layers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

import torch

from rllm import runtime
from rllm.cpus import governor, held_threads, set_torch_threads, user_threads
from rllm.errors import ImageError, InfraError
from rllm.images import VLM_NEEDED
from rllm.inference.kernels import KernelChoice
from rllm.inference.options import InferenceOptions
from rllm.inference.packed_linears import PackedLinears, packed_linears_available
from rllm.inference.sampling import RowSampler, draw_uniforms
from rllm.inference.scheduler import BatchScheduler, GenerationRequest
from rllm.models.base import ImagePrompt, Prompt, SamplingParams
from rllm.models.chat import encode_text
from rllm.types import ModelOutput

__all__ = ["LocalModel", "PromptTooLongError"]

governor(torch.get_num_threads())  # measure the load from now: the first decision spans model loading

logger = logging.getLogger(__name__)

_STOP = object()  # worker shutdown sentinel


class PromptTooLongError(ValueError):
    """The prompt leaves no room for a completion in the model's context."""


class _WeightUpdate:
    def __init__(self, state: dict[str, torch.Tensor], version: int | None) -> None:
        self.state = state
        self.version = version
        self.done: concurrent.futures.Future[int] = concurrent.futures.Future()


class _Call:
    """A function to run on the worker thread between two decode steps (`LocalModel.call_on_worker`)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run(self) -> None:
        if not self.done.set_running_or_notify_cancel():
            return
        try:  # as on a thread of its own: outside the worker's inference mode and packed linears
            with torch.inference_mode(False), PackedLinears.suspended():
                self.done.set_result(self.fn())
        except BaseException as exc:  # the caller's error, raised where it waits
            self.done.set_exception(exc)


class LocalModel:
    """Batched, token-exact generation with a transformers causal LM. See the module docstring."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        options: InferenceOptions | None = None,
        *,
        vision: Any = None,
        packed: PackedLinears | None = None,
    ) -> None:
        """`options` are the model's settings (`InferenceOptions`, its defaults when None). Two arguments are
        objects rather than settings: `vision` (a `rllm.models.vision.VisionProcessor`) makes a vision-language model
        take prompts with images (chat messages with image parts, or an `ImagePrompt` of ids and images); `packed`
        (a `PackedLinears`, the torch backend's) shares its packed weights instead of packing a second copy.

        A dtype other than the model's makes LocalModel keep its OWN converted copy and leave the passed model (the
        trainer's fp32 weights) alone; logprobs then carry that dtype's rounding. The prefix store keeps K/V of
        finished sequences while the model is idle (turns are separated by environment steps), evicted LRU past
        `prefix_cache_tokens` and cleared by `update_weights`; running prompts share their common prefixes even
        with it off (`rllm.inference.scheduler`)."""
        options = options if options is not None else InferenceOptions()
        if not isinstance(options, InferenceOptions):
            raise TypeError(f"LocalModel takes an InferenceOptions, got {type(options).__name__}")
        self.options = options
        self.model = _placed(model, options)
        self.tokenizer = tokenizer
        self.vision = _checked_vision(self.model, vision)
        self.weight_version = 0
        self.max_batch_size = options.max_batch_size
        self.seed = options.seed
        self.eos_token_ids = (
            set(options.eos_token_ids) if options.eos_token_ids is not None else _default_eos_ids(self.model, tokenizer)
        )
        self.context_length, self.vocab_size = _text_limits(self.model)
        self._num_threads, self._threads = _worker_threads(self.model, options.num_threads)
        self._scheduler = self._new_scheduler()
        self._linears = _packed_linears(self.model, options.packed_linears, packed)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._requests_submitted = 0
        self._lock = threading.Lock()  # guards worker start/stop and the request counter
        self._worker: threading.Thread | None = None
        self._closed = False

    def _new_scheduler(self) -> BatchScheduler:
        return BatchScheduler(
            self.model,
            eos_ids=self.eos_token_ids,
            max_batch_size=self.max_batch_size,
            context_length=self.context_length,
            decode=self._decode,
            prefix_cache_tokens=self.options.prefix_cache_tokens,
            image_token_id=self.vision.image_token_id if self.vision is not None else None,
            cuda_graphs=self.options.cuda_graphs,
        )

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str = "default",
        options: InferenceOptions | None = None,
        *,
        dtype: Any = "float32",
        device: str | None = None,
    ) -> LocalModel:
        """Load an embedded model by name ("default" is `registry.DEFAULT_MODEL`) or a transformers folder, in
        `dtype` on `device` (default: the CPU), with its vision processor where it has one."""
        from rllm.models import registry

        name = registry.DEFAULT_MODEL if name_or_path == "default" else name_or_path
        tokenizer = registry.load_tokenizer(name)
        model = registry.load_causal_lm(name, dtype=dtype, device=device or "cpu")
        return cls(model, tokenizer, options, vision=registry.load_vision(name))

    # ------------------------------------------------------------ generate

    async def generate(self, prompt: Prompt, sampling: SamplingParams | None = None) -> ModelOutput:
        sampling = sampling or SamplingParams()
        prompt_ids, images = self._prompt_ids(prompt, sampling.tools)
        request = self._new_request(prompt_ids, sampling)
        if images:
            request.images = self.vision.images(images)
            request.prefix_key = self.vision.prefix_key(prompt_ids, images)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ModelOutput] = loop.create_future()
        request.deliver = lambda req, error: self._deliver(loop, future, req, error)
        self._submit(request)
        try:
            return await future
        except asyncio.CancelledError:
            request.cancelled = True  # the worker drops it at the next step boundary
            raise

    def _prompt_ids(self, prompt: Prompt, tools: list[dict] | None = None) -> tuple[list[int], list[str]]:
        """(the prompt's token ids, its images' URLs in placeholder order)."""
        images: list[str] = []
        if isinstance(prompt, ImagePrompt):
            if self.vision is None:
                raise ImageError(
                    f"this prompt holds {len(prompt.images)} images, but the model is text-only: {VLM_NEEDED}"
                )
            prompt, images = prompt.ids, list(prompt.images)
        if not isinstance(prompt, list) or not prompt:
            raise ValueError("prompt must be a non-empty list of token ids or of chat messages")
        if isinstance(prompt[0], dict):
            if self.vision is not None:
                text, images = self.vision.render_text(prompt, tools=tools)
                ids = encode_text(self.tokenizer, text)
            else:
                ids = _render_messages(self.tokenizer, prompt, tools)
        elif all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
        else:
            raise ValueError("prompt must be a list of ints (token ids) or a list of dicts (chat messages)")
        if self.vision is not None:
            self._check_image_tokens(ids, images)
        if not ids:
            raise ValueError("prompt rendered to no tokens")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt holds token ids outside the vocabulary [0, {self.vocab_size}): {bad[:5]}")
        if len(ids) >= self.context_length:
            raise PromptTooLongError(
                f"prompt has {len(ids)} tokens; the model's context is {self.context_length}, "
                "which leaves no room for a completion"
            )
        return ids, images

    def _check_image_tokens(self, ids: list[int], images: list[str]) -> None:
        count = sum(1 for t in ids if t == self.vision.image_token_id)
        expected = sum(image.num_image_tokens for image in self.vision.images(images))
        if count != expected:
            raise ImageError(
                f"the prompt has {count} image tokens but its {len(images)} images stand for {expected}; "
                "give token ids and images together as rendered (rllm.models.vision)"
            )

    def _new_request(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerationRequest:
        with self._lock:
            counter = self._requests_submitted
            self._requests_submitted += 1
        max_new = min(sampling.max_tokens, self.context_length - len(prompt_ids))
        uniforms = None
        if not sampling.greedy:
            # Derived seeds mix the model seed and the request counter so different runs/requests differ.
            seed = sampling.seed if sampling.seed is not None else (self.seed * 1_000_003 + counter) % (2**63)
            uniforms = draw_uniforms(seed, max_new, self.model.device)
        sampler = RowSampler(sampling.temperature, sampling.top_k, sampling.top_p, uniforms)
        return GenerationRequest(
            prompt_ids=prompt_ids,
            sampler=sampler,
            max_new_tokens=max_new,
            stop=list(sampling.stop),
            deliver=lambda req, error: None,
        )

    def _submit(self, item: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("LocalModel is closed")
            if self._worker is None:
                self._worker = threading.Thread(target=self._run_worker, name="rllm-local-model", daemon=True)
                self._worker.start()
            self._inbox.put(item)

    def _deliver(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future,
        request: GenerationRequest,
        error: BaseException | None,
    ) -> None:
        """Called on the worker thread; builds the output there and hands it to the caller's loop."""
        result = error if error is not None else self._output(request)

        def resolve() -> None:
            if future.done():
                return
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

        try:
            loop.call_soon_threadsafe(resolve)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            pass

    def _output(self, request: GenerationRequest) -> ModelOutput:
        text = self._decode(request.completion_ids)
        info: dict[str, Any] = {}
        if request.token_versions and request.token_versions[-1] != request.weight_version:
            info["weight_version_end"] = request.token_versions[-1]
            info["token_weight_versions"] = list(request.token_versions)  # partial rollouts: a version per token
        return ModelOutput(
            text=text,
            content=text,
            prompt_ids=request.prompt_ids,
            completion_ids=request.completion_ids,
            logprobs=request.logprobs,
            finish_reason=request.finish_reason,
            weight_version=request.weight_version,
            prompt_images=[image.url for image in request.images] or None,
            info=info,
        )

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ------------------------------------------------------------ the worker

    def _run_worker(self) -> None:
        if self.model.device.type == "cuda":  # streams and graph captures follow the thread's current device
            torch.cuda.set_device(self.model.device)
        if self._num_threads:
            torch.set_num_threads(self._num_threads)  # intra-op threads are per thread with OpenMP
        pending: deque[GenerationRequest] = deque()
        scheduler = self._scheduler
        with torch.inference_mode(), self._linears or contextlib.nullcontext():
            while True:
                block = not scheduler.active and not pending
                if self._threads is not None:
                    self._threads.set_busy(False)  # while waiting, the trainer may have the cores
                if self._drain_inbox(pending, block=block) is _STOP:
                    break
                if self._threads is not None:
                    self._threads.set_busy(True)
                    set_torch_threads(self._threads.threads())
                self._step_safely(pending)
        if self._threads is not None:
            self._threads.set_busy(False)
        if self._linears is not None:
            self._linears.clear()
        error = RuntimeError("LocalModel was closed before this request finished")
        for request in [*scheduler.active, *pending]:
            request.deliver(request, error)
        scheduler.active = []

    def _drain_inbox(self, pending: deque[GenerationRequest], *, block: bool) -> object | None:
        """Move queued requests to `pending` and apply weight updates, in arrival order."""
        while True:
            try:
                item = self._inbox.get(block=block)
            except queue.Empty:
                return None
            block = False
            if item is _STOP:
                return _STOP
            if isinstance(item, _WeightUpdate):
                self._apply_weight_update(item)
            elif isinstance(item, _Call):
                item.run()
            else:
                pending.append(item)

    def _step_safely(self, pending: deque[GenerationRequest]) -> None:
        """Admit what fits, then one decode step. A failure fails the requests it touched, never the worker."""
        scheduler = self._scheduler
        scheduler.drop_cancelled()
        admitted = []
        while pending and len(admitted) < scheduler.free_slots:
            request = pending.popleft()
            if not request.cancelled:
                admitted.append(request)
        try:
            scheduler.admit(admitted)
        except Exception as exc:  # a bug, not a bad prompt (those fail alone inside `admit`): start clean
            logger.exception("local model: admission failed")
            error = InfraError(f"local model prefill failed: {exc!r}")
            running = {id(request) for request in scheduler.active}
            scheduler.fail_all(error)
            for request in admitted:
                if id(request) not in running:
                    request.deliver(request, error)
        try:
            scheduler.step()
        except Exception as exc:
            logger.exception("local model: decode step failed")
            scheduler.fail_all(InfraError(f"local model decode step failed: {exc!r}"))

    # ------------------------------------------------------------ weights

    def set_weight_version(self, version: int) -> None:
        """Stamp later outputs with `version` without loading weights (a resumed run's model already has them):
        the version the model reports and the one its scheduler stamps on outputs move together."""
        self.weight_version = self._scheduler.weight_version = int(version)

    def update_weights(
        self, state_dict_or_path: Mapping[str, torch.Tensor] | str | Path, *, version: int | None = None
    ) -> int:
        """Load new weights between two decode steps and return the new `weight_version` (`version` if given, else
        the old one + 1). Accepts a full or partial state dict (e.g. a merged LoRA) with this model's parameter
        names, or a safetensors file, or a folder of them. Blocks until applied; safe from any thread (from an
        event loop, prefer `await asyncio.to_thread(model.update_weights, ...)`)."""
        state = _read_state(state_dict_or_path)
        update = _WeightUpdate(state, version)
        self._submit(update)
        return update.done.result()

    def call_on_worker(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run `fn()` on the worker thread between two decode steps and return its future. `fn` runs as on a thread
        of its own (outside the worker's inference mode and packed linears). For a trainer's update: one thread
        computes (`rllm.cpus`' docstring: a second thread's parallel work makes every team wait to wake)."""
        call = _Call(fn)
        self._submit(call)
        return call.done

    def _apply_weight_update(self, update: _WeightUpdate) -> None:
        try:
            with torch.inference_mode(False):
                own = self.model.state_dict()  # tensors sharing storage with the parameters (tied names included)
            unknown = sorted(set(update.state) - set(own))
            if unknown:
                raise KeyError(f"update_weights: {len(unknown)} names this model does not have, e.g. {unknown[:3]}")
            for name, tensor in update.state.items():
                if tuple(tensor.shape) != tuple(own[name].shape):
                    raise ValueError(
                        f"update_weights: {name} has shape {tuple(tensor.shape)}, "
                        f"the model's is {tuple(own[name].shape)}"
                    )
            # Out of the worker's inference mode: the parameters are ordinary tensors the trainer may also use.
            with torch.inference_mode(False), torch.no_grad():
                for name, tensor in update.state.items():
                    own[name].copy_(tensor.detach())
            self.weight_version = update.version if update.version is not None else self.weight_version + 1
            self._scheduler.weight_version = self.weight_version
            self._scheduler.invalidate_prefixes()
            update.done.set_result(self.weight_version)
        except Exception as exc:
            update.done.set_exception(exc)

    # ------------------------------------------------------------ lifecycle

    @property
    def packed_linears(self) -> bool:
        """The worker runs the linear layers through oneDNN with packed weights (`rllm.inference.packed_linears`)."""
        return self._linears is not None

    @property
    def kernels(self) -> KernelChoice | None:
        """Which path (packed oneDNN or torch's default) each linear shape runs, where packed linears are on."""
        return self._linears.kernels if self._linears is not None else None

    @property
    def stats(self) -> dict[str, int]:
        """Counters of the decode loop (prefill tokens, shared prefills, prefix-cache hit tokens, decode steps, rows,
        generated tokens)."""
        return dict(vars(self._scheduler.stats))

    def close(self, timeout: float = 30.0) -> None:
        """Stop the worker; requests still queued or running fail with RuntimeError. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker
            if worker is not None:
                self._inbox.put(_STOP)
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _placed(model: Any, options: InferenceOptions) -> Any:
    """The model in the options' dtype (a converted copy when it differs, the caller's left alone) and device."""
    if options.dtype is not None and _as_dtype(options.dtype) != model.dtype:
        model = copy.deepcopy(model).to(_as_dtype(options.dtype))
    if options.device is not None:
        model = model.to(options.device)
    return model.eval()


def _checked_vision(model: Any, vision: Any) -> Any:
    if vision is not None:
        from rllm.models.vision import check_supported

        check_supported(model)
    return vision


def _text_limits(model: Any) -> tuple[int, int]:
    """The context length (2,048 where the config names none) and the vocabulary size of the text model."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(getattr(config, "max_position_embeddings", None) or 2048), int(config.vocab_size)


def _worker_threads(model: Any, given: int | None) -> tuple[int | None, Any]:
    """The worker's fixed thread count, and the governor that chooses it each step when none is fixed. Unless given,
    held by a training run (`rllm.cpus.hold_threads`: its results must not depend on the load) or set by the program
    on this thread (torch.set_num_threads, OMP_NUM_THREADS), on a CPU the count follows the cores other processes
    leave free (rllm.cpus), where the program opted in to that (`rllm.runtime`)."""
    fixed = given or held_threads() or user_threads(torch.get_num_threads())
    governed = fixed is None and model.device.type == "cpu" and runtime.options().thread_governor
    return fixed, governor() if governed else None


def _packed_linears(model: Any, wanted: bool, shared: PackedLinears | None) -> PackedLinears | None:
    """The worker's packed linears for an fp32 model on a CPU (None elsewhere, or when not wanted or not enabled in
    `rllm.runtime` or not supported by this torch: then torch's own path runs); `shared` is one to reuse."""
    if not wanted or model.device.type != "cpu" or model.dtype != torch.float32:
        return None
    if not packed_linears_available():
        return None
    packed = shared if shared is not None else PackedLinears()
    packed.install(model)
    return packed


def _default_eos_ids(model: Any, tokenizer: Any) -> set[int]:
    found: set[int] = set()
    for ids in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(ids, int):
            found.add(ids)
        elif isinstance(ids, (list, tuple, set)):
            found.update(int(i) for i in ids)
    return found


def _as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    resolved = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype).removeprefix("torch."), None)
    if isinstance(resolved, torch.dtype):
        return resolved
    raise ValueError(f"unknown dtype {dtype!r}; use e.g. 'float32' or 'bfloat16'")


def _render_messages(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    from rllm.models.chat import render_messages

    return render_messages(tokenizer, messages, tools=tools)


def _read_state(source: Mapping[str, torch.Tensor] | str | Path) -> dict[str, torch.Tensor]:
    """A state dict from a mapping, a safetensors file or a folder of safetensors files (read on the caller's
    thread, so the worker only pauses for the copy)."""
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"update_weights: no safetensors file at {path}")
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state
