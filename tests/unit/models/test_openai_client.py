"""OpenAIClient against the fake OpenAI-compatible server (real sockets, no mocks of the transport)."""

from __future__ import annotations

import asyncio
import email.utils
import importlib.util
import time
import warnings

import pytest

pytest.importorskip("aiohttp")

from rllm.errors import InfraError
from rllm.models.base import ModelClient, SamplingParams
from rllm.models.openai import (
    ModelRequestError,
    OpenAIClient,
    TokenIdsUnavailableError,
    TokenIdsUnavailableWarning,
    _dumps,
    _loads,
    _parse_retry_after,
)
from rllm.testing.fake_openai_server import DEFAULT_REPLY_TEXT, FakeReply, Fault, run_fake_server

EOS = 3


class CharTokenizer:
    """A tokenizer whose token id is the character's code point, like the fake server's default replies."""

    eos_token_id = EOS

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join("" if (i == EOS and skip_special_tokens) else chr(i) for i in ids)

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, tokenize=False):
        text = "".join(f"<{m['role']}>{m['content']}\x03" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")


def make_client(server, **kwargs) -> OpenAIClient:
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("backoff_max", 2.0)
    kwargs.setdefault("max_retries", 3)
    kwargs.setdefault("timeout", 5.0)
    return OpenAIClient(server.base_url, server.model, **kwargs)


def run(client: OpenAIClient, prompt, sampling=None):
    async def go():
        async with client:
            return await client.generate(prompt, sampling)

    return asyncio.run(go())


def test_token_ids_round_trip(server):
    prompt = [11, 22, 33, 44]
    out = run(make_client(server), prompt, SamplingParams(max_tokens=5))
    assert out.prompt_ids == prompt
    assert out.completion_ids == [ord(c) for c in "Hello"]
    assert out.text == out.content == "Hello"
    assert out.logprobs is not None and len(out.logprobs) == 5
    assert out.finish_reason == "length"
    path, body = server.requests[-1]
    assert path == "/v1/completions"
    assert body["prompt"] == prompt and body["return_token_ids"] is True and body["logprobs"] == 0
    assert body["include_stop_str_in_output"] is True and body["skip_special_tokens"] is True
    assert "top_k" not in body and "seed" not in body and "stop" not in body


def test_image_parts_reach_a_chat_server_unchanged(server):
    """A vision-language server (vLLM, OpenAI) reads OpenAI image parts itself: the client sends them as they are."""
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What colour?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        }
    ]

    async def go():
        async with make_client(server) as client:
            with pytest.warns(TokenIdsUnavailableWarning):
                return await client.generate(messages)

    assert asyncio.run(go()).text == DEFAULT_REPLY_TEXT
    path, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["messages"] == messages


PNG = "data:image/png;base64,iVBORw0KGgo="
PNG_RED = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElF"
    "TkSuQmCC"
)  # a 1x1 red pixel


def test_a_prompt_with_images_is_sampled_through_chat_with_the_servers_token_ids(server):
    """A VLM behind vLLM: images travel in chat messages only, so a prompt with images goes to /chat/completions with
    `return_token_ids`; the server's prompt ids (images expanded) and sampled ids are the output's, with its images."""
    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": PNG}}, {"type": "text", "text": "Colour?"}],
        }
    ]
    out = run(make_client(server, tokenizer=CharTokenizer()), messages, SamplingParams(max_tokens=5, top_k=3))
    path, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["messages"] == messages
    assert body["return_token_ids"] is True and body["logprobs"] is True and body["top_k"] == 3
    assert body["include_stop_str_in_output"] is True and body["skip_special_tokens"] is True
    assert out.prompt_ids[:5] == [ord(c) for c in "user:"]  # the fake server's own rendering of the messages
    assert out.completion_ids == [ord(c) for c in out.text] and len(out.logprobs) == len(out.completion_ids)
    assert out.prompt_images == [PNG]


def test_an_image_prompt_sends_its_messages_and_the_servers_ids_win(server):
    from rllm.errors import RllmError
    from rllm.models.base import ImagePrompt

    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]}]
    client = make_client(server, tokenizer=CharTokenizer())
    with pytest.warns(UserWarning, match="changed the prompt ids"):
        out = run(client, ImagePrompt([1, 2, 3], [PNG], messages=messages), SamplingParams(max_tokens=3))
    assert server.requests[-1][1]["messages"] == messages
    assert out.prompt_ids != [1, 2, 3] and out.prompt_images == [PNG]
    with pytest.raises(RllmError, match="chat messages only"):
        run(client, ImagePrompt([1, 2, 3], [PNG]))
    server.supports_token_ids = False
    with pytest.raises(TokenIdsUnavailableError, match="return_token_ids"):
        run(client, messages)


def test_without_vllms_token_in_endpoint_an_image_prompt_falls_back_to_chat_once(server, smollm2_tokenizer):
    """A client that knows the VLM's processor first tries vLLM's /inference/v1/generate (token-in/token-out with
    images); a server without it (404) is remembered, warned about once, and served through chat."""
    from rllm.models.base import ImagePrompt
    from rllm.models.vision import VisionProcessor
    from rllm.models.vlm import idefics3_processor

    vision = VisionProcessor(idefics3_processor(smollm2_tokenizer, image_size=32, image_seq_len=4))
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_RED}}]}]
    text, urls = vision.render_text(messages)
    prompt = ImagePrompt(vision.tokenizer.encode(text, add_special_tokens=False), urls, messages=messages)
    client = make_client(server, vision=vision)
    assert client.tokenizer is vision.tokenizer
    with pytest.warns(UserWarning, match="--enable-scale-out"):
        run(client, prompt, SamplingParams(max_tokens=3))
    assert server.requests[-1][0] == "/v1/chat/completions"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # remembered: no second try, no second warning
        warnings.filterwarnings("ignore", message=".*changed the prompt ids")
        count = len(server.requests)
        run(client, prompt, SamplingParams(max_tokens=3))
    assert len(server.requests) == count + 1


def test_sampling_params_are_sent(server):
    sampling = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_tokens=64, stop=["\n"], seed=7)
    out = run(make_client(server, extra_body={"min_p": 0.1}), [1, 2], sampling)
    assert out.finish_reason == "stop" and out.text == DEFAULT_REPLY_TEXT
    body = server.requests[-1][1]
    expected = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_tokens": 64, "stop": ["\n"], "seed": 7}
    assert {key: body[key] for key in expected} == expected
    assert body["min_p"] == 0.1


def test_sglang_dialect_keeps_stop_strings_its_way(server):
    run(make_client(server, dialect="sglang"), [1, 2])
    body = server.requests[-1][1]
    assert body["no_stop_trim"] is True and "include_stop_str_in_output" not in body


def test_messages_with_tokenizer_are_rendered_and_sent_as_ids(server):
    tokenizer = CharTokenizer()
    server.queue_replies(FakeReply(text="ok", token_ids=[ord("o"), ord("k"), EOS], logprobs=[-0.5, -0.25, -0.125]))
    messages = [{"role": "user", "content": "hi"}]
    client = make_client(server, tokenizer=tokenizer)
    assert isinstance(client, ModelClient)
    out = run(client, messages)
    assert out.prompt_ids == tokenizer.encode("<user>hi\x03<assistant>")
    assert out.completion_ids == [ord("o"), ord("k"), EOS]  # the EOS the model sampled is kept
    assert out.logprobs == [-0.5, -0.25, -0.125]
    assert server.requests[-1][0] == "/v1/completions"


def test_chat_mode_without_tokenizer(server):
    reply = FakeReply(
        text="Let me look.",
        reasoning="the user wants weather",
        tool_calls=[{"name": "weather", "arguments": {"city": "Paris"}}, {"name": "broken", "arguments": "{oops"}],
    )
    server.queue_replies(reply, FakeReply(text="again"))
    client = make_client(server)

    async def go():
        async with client:
            with pytest.warns(TokenIdsUnavailableWarning):
                first = await client.generate([{"role": "user", "content": "weather?"}])
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # warned once per client, not per call
                second = await client.generate([{"role": "user", "content": "again"}])
            return first, second

    first, second = asyncio.run(go())
    assert first.prompt_ids is None and first.completion_ids is None and not first.has_token_ids
    assert first.content == first.text == "Let me look."
    assert first.reasoning == "the user wants weather"
    assert [call.name for call in first.tool_calls] == ["weather", "broken"]
    assert first.tool_calls[0].arguments == {"city": "Paris"} and first.tool_calls[0].id == "call_0"
    assert first.tool_calls[1].arguments == "{oops"  # malformed arguments stay a string
    assert first.finish_reason == "tool_calls"
    assert first.logprobs is not None and len(first.logprobs) == len("Let me look.")
    assert second.content == "again"
    path, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["logprobs"] is True and "return_token_ids" not in body


def test_429_retry_after_is_honoured(server):
    server.inject(Fault.http(429, retry_after=0.4))
    before = server.request_count
    start = time.monotonic()
    out = run(make_client(server, backoff_base=0.001), [1, 2, 3])
    assert time.monotonic() - start >= 0.35
    assert out.completion_ids is not None
    assert server.request_count - before == 2


def test_503_is_retried_then_succeeds(server):
    server.inject(Fault.http(503), Fault.http(502))
    before = server.request_count
    out = run(make_client(server), [5])
    assert out.text == DEFAULT_REPLY_TEXT
    assert server.request_count - before == 3


def test_persistent_503_raises_infra_error_after_max_retries(server):
    server.inject(*[Fault.http(503, message="engine overloaded")] * 3)
    before = server.request_count
    with pytest.raises(InfraError) as info:
        run(make_client(server, max_retries=2), [5])
    message = str(info.value)
    assert server.base_url + "/completions" in message and "503" in message and "engine overloaded" in message
    assert "3 attempts" in message
    assert server.request_count - before == 3


def test_hang_times_out_and_is_retried(server):
    server.inject(Fault.hang(0.8))
    before = server.request_count
    out = run(make_client(server, timeout=0.2), [5])
    assert out.text == DEFAULT_REPLY_TEXT and server.request_count - before == 2


def test_persistent_hang_raises_infra_error(server):
    server.inject(Fault.hang(5), Fault.hang(5))
    start = time.monotonic()
    with pytest.raises(InfraError, match="timed out"):
        run(make_client(server, timeout=0.2, max_retries=1), [5])
    assert time.monotonic() - start < 3


def test_dropped_connection_is_retried(server):
    server.inject(Fault.drop_connection())
    out = run(make_client(server), [5])
    assert out.text == DEFAULT_REPLY_TEXT


def test_client_error_is_not_retried(server):
    server.inject(Fault.http(400, message="max_tokens is too large for this model"))
    before = server.request_count
    with pytest.raises(ModelRequestError, match="max_tokens is too large") as info:
        run(make_client(server), [5])
    assert info.value.status == 400
    assert server.request_count - before == 1


def test_unknown_model_is_a_request_error(server):
    client = OpenAIClient(server.base_url, "no-such-model", max_retries=3)
    with pytest.raises(ModelRequestError, match="does not exist") as info:
        run(client, [5])
    assert info.value.status == 404


def test_malformed_json_is_retried_then_infra_error(server):
    server.inject(Fault.malformed_json())
    assert run(make_client(server), [5]).text == DEFAULT_REPLY_TEXT
    server.inject(*[Fault.malformed_json()] * 2)
    with pytest.raises(InfraError, match="not valid JSON"):
        run(make_client(server, max_retries=1), [5])


def test_missing_token_ids_raise_a_clear_error(server):
    server.supports_token_ids = False
    with pytest.raises(TokenIdsUnavailableError, match="return_token_ids") as info:
        run(make_client(server), [5])
    assert "vLLM >= 0.10.2" in str(info.value)
    out = run(make_client(server, allow_missing_token_ids=True), [5])
    assert out.completion_ids is None and out.prompt_ids is None and out.text == DEFAULT_REPLY_TEXT


def test_many_concurrent_calls_and_a_second_event_loop(server):
    client = make_client(server)

    async def burst():
        outs = await asyncio.gather(*(client.generate([i + 1]) for i in range(100)))
        return [out.prompt_ids for out in outs]

    assert asyncio.run(burst()) == [[i + 1] for i in range(100)]
    assert asyncio.run(burst()) == [[i + 1] for i in range(100)]  # a new loop gets a new session
    asyncio.run(client.aclose())


def test_retry_after_parsing():
    assert _parse_retry_after("2") == 2.0
    assert _parse_retry_after("0.5") == 0.5
    assert _parse_retry_after(None) is None and _parse_retry_after("soon") is None
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8 <= _parse_retry_after(in_ten) <= 10
    assert _parse_retry_after(email.utils.formatdate(time.time() - 100, usegmt=True)) == 0.0


def test_backoff_is_capped():
    client = OpenAIClient("http://127.0.0.1:1/v1", "m", backoff_base=1.0, backoff_max=3.0)
    assert client._delay(10, None) <= 3.0
    assert client._delay(10, 3600.0) == 3.0
    assert 2.0 <= client._delay(0, 2.0) <= 2.2


def test_bodies_go_through_orjson_and_what_it_refuses_through_json_unchanged():
    """orjson for speed; whatever the stdlib's `json` sent and read before is still sent and read the same way."""
    import json

    body = {"prompt": [1, 2], "logit_bias": {42: -100.0}, "seed": 2**70, "text": "caf\u00e9 \ud83d"}
    assert json.loads(_dumps(body)) == json.loads(json.dumps(body))  # int keys, a >64-bit int, a lone surrogate
    assert _dumps({"prompt": [1, 2], "logit_bias": {42: -100.0}}) == b'{"prompt":[1,2],"logit_bias":{"42":-100.0}}'
    reply = b'{"choices": [{"logprobs": {"token_logprobs": [-Infinity, NaN]}, "n": 123456789012345678901234}]}'
    assert json.dumps(_loads(reply)) == json.dumps(json.loads(reply))  # what Python servers can write
    with pytest.raises(ValueError):
        _loads(b'{"choices": [{"text": "trunc')


def test_api_key_falls_back_to_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    assert OpenAIClient("http://x/v1", "m").api_key == "sk-from-env"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert OpenAIClient("http://x/v1", "m").api_key == "EMPTY"


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("rllm.models.registry") is None, reason="rllm.models.registry not written yet"
)
def test_real_smollm2_tokenizer_token_exactness(server):
    from rllm.models.chat import render_messages
    from rllm.models.registry import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    sampled = tokenizer.encode("The answer is 4.", add_special_tokens=False) + [tokenizer.eos_token_id]
    server.queue_replies(FakeReply(text="The answer is 4.", token_ids=sampled))
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    out = run(make_client(server, tokenizer="smollm2-135m-instruct"), messages)
    assert out.prompt_ids == render_messages(tokenizer, messages)
    assert out.completion_ids == sampled


SYNC_ENGINE_SCRIPT = """
import gc
from rllm.agents.base import BaseAgent
from rllm.engine.execution import AgentExecutionEngine
from rllm.models.openai import OpenAIClient
from rllm.testing.fake_openai_server import run_fake_server
from tests.support.envs import CounterEnv

with run_fake_server() as server:
    client = OpenAIClient(base_url=server.base_url, model=server.model)
    engine = AgentExecutionEngine(agent_class=BaseAgent, env_class=CounterEnv, model=client, max_steps=2)
    for _ in range(2):  # the client stays usable for a second blocking call (a new loop, a new session)
        episodes = engine.execute_tasks([{"k": 1}], n_rollouts=2)
        assert all(ep.trajectories[0].steps for ep in episodes)
    del engine, client
    gc.collect()
print("done")
"""


def test_the_blocking_execute_tasks_leaves_no_unclosed_http_session(tmp_path):
    """`execute_tasks` runs its own event loop; the client's HTTP session of that loop is closed with it (before:
    'Unclosed client session' at exit)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "ignore::DeprecationWarning", "-c", SYNC_ENGINE_SCRIPT],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]
    assert "Unclosed" not in out.stderr, out.stderr[-2000:]


def test_the_engine_retry_honours_the_servers_retry_after():
    """The client gives up (max_retries=0) on a 429 asking for 1 s; the InfraError carries that delay and the
    engine's whole-rollout retry waits for it instead of its own 0.01 s backoff (before: it resent after 0.01 s)."""
    from collections import Counter

    from rllm.agents.base import BaseAgent
    from rllm.engine.execution import AgentExecutionEngine
    from tests.support.envs import CounterEnv

    with run_fake_server() as server:
        server.inject(Fault.http(429, retry_after=1))
        client = OpenAIClient(base_url=server.base_url, model=server.model, max_retries=0)
        engine = AgentExecutionEngine(
            agent_class=BaseAgent,
            env_class=CounterEnv,
            model=client,
            max_steps=1,
            env_args={"log": Counter()},
            retry_backoff=0.01,
        )
        started = time.monotonic()
        (episode,) = engine.execute_tasks([{"k": 1}])
        elapsed = time.monotonic() - started
    assert episode.metrics["retries"] == 1 and episode.termination_reason.value == "env_done"
    assert "HTTP 429" in episode.info["retry_errors"][0]
    assert elapsed >= 1.0
