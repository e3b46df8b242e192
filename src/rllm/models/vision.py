"""Vision-language models in rllm: how a prompt with images becomes token ids plus the image inputs, the same way
for the sampler (`LocalModel`) and for the training forward (`TorchBackend`), so the log-probs of both agree.

A VLM of transformers (`AutoModelForImageTextToText`: Idefics3/SmolVLM and its kind) reads a prompt whose every
image stands as a run of placeholder tokens (`<image>` x the image's sequence length, with markers around it), and
replaces the embeddings of those placeholders with the vision tower's features of the image. Here:

- `VisionProcessor.render_text(messages)` applies the processor's chat template with each image part as the
  template's `{"type": "image"}` placeholder, then puts each image's expansion (the processor's own text for that
  image: markers, `<image>` tokens, grid tags) in place of its placeholder. The result is plain text of special
  tokens, so `ChatRenderer` extends multi-turn prompts exactly as for text, and the prompt ids hold every image
  token. It returns the images' URLs in placeholder order: `ModelOutput.prompt_images` records them, and training
  rebuilds the same inputs from them.
- `inputs_embeds(model, input_ids, images)` embeds the ids and writes each image's features over its placeholder
  tokens, in order. Features are computed one image at a time (each at its own size, no padding between images),
  so an image's features never depend on which other images share the batch: the sampler (one prompt, maybe only
  its tail after a reused K/V prefix) and the trainer (a micro-batch of rows) compute bitwise the same inputs.
- The text-only model stays the default: a model without a vision tower refuses images (`rllm.models.chat`).

Choices:
- Image preprocessing (decode, resize, normalise) runs once per distinct image URL and is cached (LRU), so a
  screenshot repeated in every later prompt of a rollout is processed once.
- Only architectures whose language model takes plain 1-D positions run in the embedded engine (Idefics3, SmolVLM,
  LLaVA-style). Qwen2-VL's multimodal rotary positions need position ids computed from the image grid, which the
  slot cache does not model: such a model is refused with that reason (serve it with vLLM and use chat mode).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rllm.errors import ImageError
from rllm.images import decode_image, message_image_urls, normalize_images
from rllm.models.chat import describe_ignored_tools

__all__ = [
    "ImageSpan",
    "ProcessedImage",
    "VisionProcessor",
    "check_supported",
    "image_key",
    "image_spans",
    "inputs_embeds",
    "is_vision_model",
    "vision_modules",
]

_CACHED_IMAGES = 256


@dataclass(frozen=True)
class ProcessedImage:
    """One image as the model takes it: its placeholder text and ids, and its pixel inputs (batch of one image)."""

    url: str
    text: str  # the expansion that stands for the image in the prompt
    ids: tuple[int, ...]
    num_image_tokens: int  # how many of `ids` are the image token (each gets one feature vector)
    pixel_inputs: dict[str, Tensor]  # e.g. pixel_values [1, crops, 3, H, W], pixel_attention_mask [1, crops, H, W]


def image_key(url: str) -> int:
    """A negative id that stands for an image's content in prefix matching (token ids are never negative): two
    prompts with the same placeholder ids but different images must not share K/V."""
    return -1 - int.from_bytes(hashlib.sha256(url.encode()).digest()[:7], "big")


def is_vision_model(model: nn.Module) -> bool:
    """Whether `model` (peft-wrapped or not) is a transformers VLM with an image tower rllm can feed."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    return hasattr(base, "get_image_features") and getattr(config, "image_token_id", None) is not None


def vision_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The image side of a VLM (vision encoder, connector/projector), by their names in the model (peft-wrapped or
    not): the children of its backbone other than the language model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    prefix = getattr(base, "base_model_prefix", "model")
    backbone, decoder = getattr(base, prefix), base.get_decoder()
    return {
        f"{prefix}.{name}": child
        for name, child in backbone.named_children()
        if child is not decoder and any(True for _ in child.parameters())
    }


def check_supported(model: nn.Module) -> None:
    """Refuse a VLM whose language model needs multimodal position ids (module docstring)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(base, "get_rope_index") or hasattr(getattr(base, "model", None), "get_rope_index"):
        raise ImageError(
            f"{type(base).__name__} computes multimodal rotary positions from the image grid, which rllm's embedded "
            "engine does not model; serve it with vLLM (`rllm serve` or your own server) and roll out in chat mode"
        )


class VisionProcessor:
    """Renders chat messages with images for one VLM and prepares its image inputs. Wraps a transformers processor
    (`AutoProcessor`) that has `image_token`, a tokenizer and a chat template. Thread-safe (its cache is locked)."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.image_token: str = processor.image_token
        self.image_token_id: int = self.tokenizer.convert_tokens_to_ids(self.image_token)
        if getattr(processor, "chat_template", None) is None:
            raise ImageError(
                f"the processor {type(processor).__name__} has no chat template; rllm renders conversations with it"
            )
        self._cache: OrderedDict[str, ProcessedImage] = OrderedDict()
        self._lock = threading.Lock()

    def render_text(
        self, messages: list[dict], *, tools: list[dict] | None = None, add_generation_prompt: bool = True
    ) -> tuple[str, list[str]]:
        """(the chat template's text with each image expanded to its placeholder tokens, the images' URLs in
        order). Images may be in any form `rllm.images` accepts."""
        messages = normalize_images(messages)
        if tools:  # a template that ignores them gets them in the system message (rllm.models.chat)
            messages = describe_ignored_tools(self.processor, messages, tools)
        urls = message_image_urls(messages)
        placeholders = [_with_placeholders(m) for m in messages]
        text = self.processor.apply_chat_template(
            placeholders, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
        )
        pieces = text.split(self.image_token)
        if len(pieces) - 1 != len(urls):
            raise ImageError(
                f"the chat template printed {len(pieces) - 1} image placeholders for {len(urls)} images; "
                "it must print the processor's image token once per image part"
            )
        out = [pieces[0]]
        for url, piece in zip(urls, pieces[1:], strict=True):
            out += [self.image(url).text, piece]
        return "".join(out), urls

    def image(self, url: str) -> ProcessedImage:
        """The processed image of a URL (cached)."""
        with self._lock:
            cached = self._cache.get(url)
            if cached is not None:
                self._cache.move_to_end(url)
                return cached
        processed = self._process(url)
        with self._lock:
            self._cache[url] = processed
            while len(self._cache) > _CACHED_IMAGES:
                self._cache.popitem(last=False)
        return processed

    def _process(self, url: str) -> ProcessedImage:
        batch = self.processor(
            text=[self.image_token], images=[[decode_image(url)]], add_special_tokens=False, return_tensors="pt"
        )
        ids = tuple(int(t) for t in batch["input_ids"][0])
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        from rllm.models.chat import encode_text

        if tuple(encode_text(self.tokenizer, text)) != ids:  # the expansion must survive a text round trip
            raise ImageError(
                f"{type(self.processor).__name__}'s image expansion does not re-tokenize to the same ids; "
                "its image tokens must be special tokens of the tokenizer"
            )
        pixel = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask") and isinstance(v, Tensor)}
        count = sum(1 for t in ids if t == self.image_token_id)
        return ProcessedImage(url=url, text=text, ids=ids, num_image_tokens=count, pixel_inputs=pixel)

    def collapse(self, ids: Sequence[int], urls: Sequence[str]) -> list[int]:
        """`ids` with each image's expansion put back to the one image token the chat template prints: the prompt
        as a server's own processor takes it with the images (it expands them again, to the same ids)."""
        out, cursor = [], 0
        for index, url in enumerate(urls):
            expansion = list(self.image(url).ids)
            at = _find(ids, expansion, cursor)
            if at < 0:
                raise ImageError(
                    f"the prompt ids do not hold the expansion of image {index} (of {len(urls)}) after "
                    f"position {cursor}: the ids and the images disagree"
                )
            out += [*ids[cursor:at], self.image_token_id]
            cursor = at + len(expansion)
        return out + list(ids[cursor:])

    def images(self, urls: Sequence[str]) -> list[ProcessedImage]:
        return [self.image(url) for url in urls]

    def prefix_key(self, ids: Sequence[int], urls: Sequence[str]) -> list[int]:
        """`ids` with each image's tokens replaced by `image_key(url)`: equal keys mean equal K/V."""
        key = list(ids)
        positions = [i for i, t in enumerate(key) if t == self.image_token_id]
        start = 0
        for url in urls:
            count = self.image(url).num_image_tokens
            for position in positions[start : start + count]:
                key[position] = image_key(url)
            start += count
        return key


def _find(ids: Sequence[int], run: list[int], start: int) -> int:
    """The first index >= start where `run` occurs in `ids`, or -1."""
    first, n = run[0], len(run)
    for i in range(start, len(ids) - n + 1):
        if ids[i] == first and list(ids[i : i + n]) == run:
            return i
    return -1


def _with_placeholders(message: dict) -> dict:
    content = message.get("content")
    if type(content) is not list:
        return message
    parts = [{"type": "image"} if isinstance(p, dict) and p.get("type") == "image_url" else p for p in content]
    return {**message, "content": parts}


# ---- the model side --------------------------------------------------------------------------------------------


def image_features(model: nn.Module, image: ProcessedImage) -> Tensor:
    """`[image.num_image_tokens, hidden]`: the features that replace one image's placeholder tokens."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    device = base.get_input_embeddings().weight.device
    pixel = {k: v.to(device) for k, v in image.pixel_inputs.items()}
    out = base.get_image_features(**pixel, return_dict=True).pooler_output
    features = torch.cat(list(out), dim=0) if isinstance(out, (list, tuple)) else out.reshape(-1, out.shape[-1])
    if features.shape[0] != image.num_image_tokens:
        raise ImageError(
            f"the vision tower gave {features.shape[0]} feature vectors for an image of "
            f"{image.num_image_tokens} image tokens; the processor and the model disagree"
        )
    return features


ImageSpan = tuple[ProcessedImage, int, int]  # an image and the range [lo, hi) of its features a window takes


def image_spans(images: Sequence[ProcessedImage], num_tokens: int, *, skip: int = 0) -> list[ImageSpan]:
    """Which features stand for image tokens `[skip, skip + num_tokens)` of a prompt whose images are `images`, in
    order: the first `skip` image tokens lie before the window (a prompt whose K/V prefix was reused); a row cut
    short keeps only a prefix of its image tokens. Raises `ImageError` when the images have too few tokens."""
    spans, start, stop = [], 0, skip + num_tokens
    for image in images:
        end = start + image.num_image_tokens
        lo, hi = max(skip, start), min(stop, end)
        if lo < hi:
            spans.append((image, lo - start, hi - start))
        start = end
    if start < stop:
        raise ImageError(
            f"the prompt has {stop} image tokens but its {len(images)} images stand for {start}: the "
            "image inputs do not match the prompt ids"
        )
    return spans


def inputs_embeds(model: nn.Module, input_ids: Tensor, spans: Sequence[ImageSpan], *, image_token_id: int) -> Tensor:
    """The embeddings of `input_ids` (`[B, L]`) with image features written over the image tokens in row-major
    order: `spans` (from `image_spans`, the rows' spans one after the other) say which features, in that order.
    Only the images of `spans` run the vision tower."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embeds = base.get_input_embeddings()(input_ids)
    mask = input_ids == image_token_id
    needed = int(mask.sum())
    if needed == 0 and not spans:
        return embeds
    computed: dict[str, Tensor] = {}  # the samples of one task share their images: each runs the tower once
    features = []
    for image, lo, hi in spans:
        if image.url not in computed:
            computed[image.url] = image_features(model, image)
        features.append(computed[image.url][lo:hi])
    source = torch.cat(features, dim=0) if features else embeds.new_zeros(0, embeds.shape[-1])
    if source.shape[0] != needed:
        raise ImageError(
            f"the ids hold {needed} image tokens but their images give {source.shape[0]} features: "
            "the image inputs do not match the prompt ids"
        )
    return embeds.masked_scatter(mask[..., None], source.to(embeds.dtype))
