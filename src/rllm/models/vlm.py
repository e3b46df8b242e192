"""Building vision-language models that run here without a model hub.

No pretrained VLM ships on PyPI (`../shared/research/wave2.md` §C), so rllm builds real transformers VLM
architectures itself; pretrained SmolVLM / Idefics3 checkpoints load through the same code (`model.name=<folder or
hub id>`) wherever a hub is reachable.

- `build_vlm_around(text_folder)`: SmolVLM's architecture around a real text model (SmolLM2-135M-Instruct for the
  embedded `smolvlm-smollm2-135m`, see `rllm.models.registry`): the real language model, a random vision tower.
  Without a trained vision encoder it cannot see until trained: the visual task (`rllm.tasks.shapes`) trains the
  tower with the language model's adapters.
- `build_tiny_vlm(tokenizer)`: a random-init `Idefics3ForConditionalGeneration` (SmolVLM's architecture, about 3 M
  parameters) speaking a copy of `tokenizer` with the image tokens added, and its real `Idefics3Processor`. For
  tests: shapes, masks, exactness.
- The chat template is the language model's ChatML with an `<image>` placeholder per image part, so a VLM built
  around SmolLM2 talks exactly as SmolLM2 does.
- Images are resized to one square tile (`image_size`, no splitting into sub-images): a fixed, small number of image
  tokens per image, what a CPU can afford.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

__all__ = ["CHATML_IMAGE_TEMPLATE", "IMAGE_TOKENS", "build_tiny_vlm", "build_vlm_around", "idefics3_processor"]

# ChatML (SmolLM2's and Qwen's turn format) where a content list prints text parts and `<image>` per image part.
CHATML_IMAGE_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
IMAGE_TOKENS = ("<fake_token_around_image>", "<image>", "<global-img>")  # what Idefics3's processor prints


def idefics3_processor(tokenizer: Any, *, image_size: int, image_seq_len: int) -> Any:
    """An `Idefics3Processor` for `tokenizer` (a copy gets the image tokens added; the caller's is left alone) that
    resizes every image to one `image_size` tile. Uses the PIL image processor: torchvision does not install beside
    our torch, and the PIL one computes the same pixels without it."""
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    size = {"longest_edge": image_size}
    image_processor = Idefics3ImageProcessorPil(do_image_splitting=False, size=size, max_image_size=size)
    return Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=image_seq_len,
        chat_template=CHATML_IMAGE_TEMPLATE,
    )


def build_tiny_vlm(
    tokenizer: Any,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    image_size: int = 32,
    patch_size: int = 8,
    scale_factor: int = 2,
) -> tuple[Any, Any]:
    """(a random-init fp32 `Idefics3ForConditionalGeneration`, its processor). Same seed, same weights; the global
    torch RNG is left untouched. Each image costs `(image_size / patch_size / scale_factor) ** 2` image tokens
    (4 by default) plus 3 markers."""
    import torch
    from transformers import GenerationConfig, Idefics3Config, Idefics3ForConditionalGeneration, LlamaConfig

    image_seq_len = (image_size // patch_size) ** 2 // scale_factor**2
    processor = idefics3_processor(tokenizer, image_size=image_size, image_seq_len=image_seq_len)
    tok = processor.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    text = LlamaConfig(
        vocab_size=-(-len(tok) // 64) * 64,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": image_size,
        "patch_size": patch_size,
    }
    config = Idefics3Config(
        text_config=text,
        vision_config=vision,
        scale_factor=scale_factor,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=eos, pad_token_id=pad)
    return model.to(torch.float32).eval(), processor


def build_vlm_around(
    text_folder: str | Path,
    *,
    seed: int = 0,
    image_size: int = 64,
    patch_size: int = 8,
    scale_factor: int = 2,
    vision_hidden: int = 128,
    vision_layers: int = 2,
) -> tuple[Any, Any, float]:
    """SmolVLM's architecture around a real text model folder (Llama-family, e.g. SmolLM2-135M-Instruct): the
    language model's weights as they are (its embeddings extended by the image tokens, new rows at the mean
    embedding), a random-init SigLIP-shaped vision tower and connector. Returns (model, processor, the largest
    |logit difference| from the text model on a text-only probe over its own vocabulary: 0 up to float rounding,
    i.e. without images it answers exactly as the text model does)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Idefics3Config, Idefics3ForConditionalGeneration

    text = AutoModelForCausalLM.from_pretrained(text_folder, dtype=torch.float32).eval()
    image_seq_len = (image_size // patch_size) ** 2 // scale_factor**2
    processor = idefics3_processor(
        AutoTokenizer.from_pretrained(text_folder), image_size=image_size, image_seq_len=image_seq_len
    )
    tok = processor.tokenizer
    text_config = text.config.to_dict()
    old_vocab = text_config["vocab_size"]
    text_config["vocab_size"] = -(-len(tok) // 64) * 64
    vision = {
        "hidden_size": vision_hidden,
        "intermediate_size": 2 * vision_hidden,
        "num_hidden_layers": vision_layers,
        "num_attention_heads": 4,
        "image_size": image_size,
        "patch_size": patch_size,
    }
    config = Idefics3Config(
        text_config=text_config,
        vision_config=vision,
        scale_factor=scale_factor,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=text.config.tie_word_embeddings,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config)
    state = text.model.state_dict()
    embed = state["embed_tokens.weight"]
    extra = embed.mean(0, keepdim=True).expand(config.text_config.vocab_size - old_vocab, -1)
    state["embed_tokens.weight"] = torch.cat([embed, extra])
    model.model.text_model.load_state_dict(state)
    if not text.config.tie_word_embeddings:
        head = text.lm_head.weight
        model.lm_head.weight.data = torch.cat([head, head.new_zeros(len(extra), head.shape[1])])
    model.tie_weights()
    model.generation_config = text.generation_config
    model.eval()
    probe = torch.tensor([tok.encode("The capital of France is", add_special_tokens=False)])
    with torch.no_grad():
        diff = (model(input_ids=probe).logits[..., :old_vocab] - text(input_ids=probe).logits).abs().max().item()
    return model, processor, diff
