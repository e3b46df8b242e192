"""Shared fixtures. Real tokenizers come from the embedded models that `make test` fetches first; models used in
unit tests are tiny random-init ones built around those tokenizers, so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import pytest

SMOLLM2 = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from rllm.models.registry import load_tokenizer

    return load_tokenizer(SMOLLM2)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from rllm.models.registry import load_tokenizer

    return load_tokenizer(QWEN)


@pytest.fixture(scope="session", params=[SMOLLM2, QWEN])
def shipped_tokenizer(request):
    """Each chat template the project ships (both embedded models)."""
    from rllm.models.registry import load_tokenizer

    return load_tokenizer(request.param)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer):
    """A saved tiny random-init model folder with the real SmolLM2 tokenizer (for CLI and loader tests)."""
    from rllm.models.registry import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-model")
    build_tiny_model(smollm2_tokenizer, seed=0).save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path
