"""The fake OpenAI-compatible server speaks the real protocol: the official `openai` SDK can use it."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

pytest.importorskip("aiohttp")
openai = pytest.importorskip("openai")

from rllm.testing.fake_openai_server import (
    DEFAULT_REPLY_TEXT,
    FakeReply,
    Fault,
    run_fake_server,
    spawn_fake_server,
)


def sdk(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def test_openai_sdk_chat_completions(server):
    server.queue_replies(FakeReply(text="Calling.", tool_calls=[{"name": "add", "arguments": {"a": 1, "b": 2}}]))

    async def go():
        async with sdk(server) as client:
            return await client.chat.completions.create(
                model=server.model, messages=[{"role": "user", "content": "1+2?"}], logprobs=True
            )

    response = asyncio.run(go())
    choice = response.choices[0]
    assert choice.message.content == "Calling." and choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "add" and call.function.arguments == '{"a": 1, "b": 2}'
    assert [entry.token for entry in choice.logprobs.content] == list("Calling.")
    assert response.usage.completion_tokens == len("Calling.")


def test_openai_sdk_completions_with_token_ids(server):
    async def go():
        async with sdk(server) as client:
            return await client.completions.create(
                model=server.model,
                prompt=[101, 102, 103],
                max_tokens=4,
                logprobs=0,
                extra_body={"return_token_ids": True},
            )

    choice = asyncio.run(go()).choices[0]
    assert choice.text == DEFAULT_REPLY_TEXT[:4] and choice.finish_reason == "length"
    assert choice.model_extra["prompt_token_ids"] == [101, 102, 103]
    assert choice.model_extra["token_ids"] == [ord(c) for c in DEFAULT_REPLY_TEXT[:4]]
    assert len(choice.logprobs.token_logprobs) == 4


def test_openai_sdk_lists_models_and_sees_injected_errors(server):
    async def go():
        async with sdk(server) as client:
            models = await client.models.list()
            server.inject(Fault.http(429, retry_after=1))
            with pytest.raises(openai.RateLimitError):
                await client.completions.create(model=server.model, prompt=[1])
            with pytest.raises(openai.NotFoundError):
                await client.completions.create(model="other-model", prompt=[1])
            return models

    assert [model.id for model in asyncio.run(go()).data] == [server.model]


def test_faults_apply_in_order_to_the_next_requests(server):
    import httpx

    server.inject(Fault.http(503), Fault.malformed_json(), Fault.drop_connection())
    body = {"model": server.model, "prompt": [1]}
    with httpx.Client() as client:
        first = client.post(server.base_url + "/completions", json=body)
        assert first.status_code == 503 and first.json()["error"]["code"] == 503
        assert client.post(server.base_url + "/completions", json=body).text.startswith('{"choices": [{"text"')
        with pytest.raises(httpx.TransportError):
            client.post(server.base_url + "/completions", json=body)
        assert client.post(server.base_url + "/completions", json=body).json()["choices"][0]["text"]


def test_latency_does_not_serialize_requests():
    import httpx

    with run_fake_server(latency_s=0.2) as fake:

        async def burst():
            async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
                body = {"model": fake.model, "prompt": [1]}
                await asyncio.gather(*(client.post(fake.base_url + "/completions", json=body) for _ in range(50)))

        start = time.monotonic()
        asyncio.run(burst())
        elapsed = time.monotonic() - start
    assert 0.2 <= elapsed < 2.0  # 50 serialized requests would take 10 s


def test_separate_process_prints_its_url_and_takes_faults_remotely():
    import httpx

    with spawn_fake_server(latency_ms=1) as remote:
        assert remote.base_url.startswith("http://127.0.0.1:") and remote.base_url.endswith("/v1")
        remote.inject(Fault.http(500))
        body = {"model": remote.model, "prompt": [1], "return_token_ids": True}
        assert httpx.post(remote.base_url + "/completions", json=body).status_code == 500
        ok = httpx.post(remote.base_url + "/completions", json=body).json()
        assert ok["choices"][0]["prompt_token_ids"] == [1]
        assert remote.stats() == {"requests": 2, "faults_pending": 0}


@pytest.mark.slow
def test_with_a_tokenizer_replies_carry_its_ids_so_every_turn_extends_the_last(smollm2_tokenizer):
    """As vLLM does, the ids are the tokenizer's for the reply text plus the end-of-turn token, cut to max_tokens.
    So a multi-turn rollout rendered as token deltas has no mismatch (with one id per character every turn had one,
    and benchmarks/engine_concurrency.py measured the full re-encoding of each prompt instead)."""
    import httpx

    from rllm.agents.base import BaseAgent
    from rllm.engine.execution import AgentExecutionEngine
    from rllm.models.openai import OpenAIClient
    from tests.support.envs import CounterEnv

    tokenizer = smollm2_tokenizer
    ids = tokenizer.encode(DEFAULT_REPLY_TEXT, add_special_tokens=False) + [tokenizer.eos_token_id]
    with run_fake_server(tokenizer=tokenizer) as fake:
        body = {"model": fake.model, "prompt": "Hi", "return_token_ids": True, "logprobs": 0}
        choice = httpx.post(fake.base_url + "/completions", json=body).json()["choices"][0]
        assert choice["token_ids"] == ids and choice["text"] == DEFAULT_REPLY_TEXT
        assert choice["prompt_token_ids"] == tokenizer.encode("Hi", add_special_tokens=False)
        assert len(choice["logprobs"]["token_logprobs"]) == len(ids) and choice["finish_reason"] == "stop"
        cut = httpx.post(fake.base_url + "/completions", json={**body, "max_tokens": 2}).json()["choices"][0]
        assert cut["token_ids"] == ids[:2] and cut["finish_reason"] == "length"
        assert cut["text"] == tokenizer.decode(ids[:2], skip_special_tokens=True)

        client = OpenAIClient(fake.base_url, fake.model, tokenizer=tokenizer)
        engine = AgentExecutionEngine(agent_class=BaseAgent, env_class=CounterEnv, model=client, max_steps=4)
        (episode,) = engine.execute_tasks([{"k": 4}])
    steps = episode.trajectories[0].steps
    assert len(steps) == 4 and episode.metrics["token_mismatch"] == 0
    for before, after in itertools.pairwise(steps):
        context = before.model_output.prompt_ids + before.model_output.completion_ids
        assert after.model_output.prompt_ids[: len(context)] == context
