"""One contract, every model client (tests/support/model_contract.py): `FakeModel` with its tokenizer, `LocalModel`
on a tiny real model, and `OpenAIClient` against the fake OpenAI server answering with real token ids. The vLLM
client keeps the same clauses against a real vLLM server in tests/integration/test_vllm_server.py."""

from __future__ import annotations

import asyncio

import pytest

from rllm.inference import InferenceOptions
from rllm.models.base import close_model
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.models.openai import OpenAIClient
from rllm.testing import run_fake_server
from tests.support.model_contract import CLAUSES
from tests.support.models import sharp_tiny_model

# a real (tiny) transformers model is slow by this suite's rule (`make check` leaves it out)
CLIENTS = ("fake-model", pytest.param("local-model", marks=pytest.mark.slow), "openai-client")


def _reply(prompt, sampling) -> str:
    """FakeModel's script: a reply that depends on the prompt, so batched calls cannot pass with each other's."""
    return f"reply to {len(prompt)} tokens"


@pytest.fixture(scope="module")
def tiny_model(smollm2_tokenizer):
    return sharp_tiny_model(smollm2_tokenizer, 0)


@pytest.fixture(scope="module")
def fake_server(smollm2_tokenizer):
    with run_fake_server(tokenizer=smollm2_tokenizer, model="tiny") as server:
        yield server


def _client(kind: str, request):
    """A fresh client (made inside the event loop that uses it) and its tokenizer."""
    if kind == "fake-model":
        tokenizer = FakeTokenizer()
        return FakeModel(_reply, tokenizer=tokenizer), tokenizer
    tokenizer = request.getfixturevalue("smollm2_tokenizer")
    if kind == "local-model":
        from rllm.inference.model import LocalModel

        return LocalModel(
            request.getfixturevalue("tiny_model"), tokenizer, InferenceOptions(max_batch_size=4)
        ), tokenizer
    server = request.getfixturevalue("fake_server")
    return OpenAIClient(server.base_url, server.model, tokenizer=tokenizer), tokenizer


@pytest.mark.parametrize("clause", CLAUSES, ids=[clause.__name__ for clause in CLAUSES])
@pytest.mark.parametrize("kind", CLIENTS)
def test_every_model_client_keeps_the_contract(kind, clause, request):
    async def run() -> None:
        client, tokenizer = _client(kind, request)
        try:
            await clause(client, tokenizer)
        finally:
            await close_model(client)

    asyncio.run(run())
