"""Tiny models for tests: the embedded models' names, and random-init models whose outputs mean something."""

from __future__ import annotations

SMOLLM2 = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"


def sharp_tiny_model(tokenizer, seed: int = 0, **shape):
    """A tiny model with wider random weights. build_tiny_model's init gives near-uniform logits and a degenerate
    greedy output (one token repeated); these give peaked, prompt-dependent ones, so comparisons between batch
    compositions, log-prob checks and update directions mean something."""

    from rllm.models.registry import build_tiny_model

    return sharpen(build_tiny_model(tokenizer, seed=seed, **shape), seed)


def sharpen(model, seed: int = 0):
    """`model` with its matrices redrawn wider (seeded): peaked, input-dependent logits (see sharp_tiny_model)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 2:
                scale = 2.0 / param.shape[1] ** 0.5 * (8 if "embed" in name else 1)
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    return model


def saved_model_dir(path, model, processor):
    """`path` holding `model` and its tokenizer or processor, as a model folder that `model.name` can name."""
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
