"""The OpenAI-compatible gateway with the real `openai` SDK (sync and async, streamed and not): strict responses,
no token ids leaking, recorded calls, token-exact multi-turn and tool-calling sessions, errors, sampling modes."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

openai = pytest.importorskip("openai")

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from rllm.errors import InfraError
from rllm.gateway.openai_format import RequestError, normalize_messages, parse_request, token_pieces
from rllm.inference import InferenceOptions
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeTokenizer
from rllm.workflows.runtime import TerminationEvent
from tests.support.gateway import (
    CALL_TEXT,
    LEAKS,
    TOOLS,
    assert_extends,
    assert_strict,
    client,
    fake,
    serving,
)


def raw_create(sdk: openai.OpenAI, **kwargs) -> dict:
    kwargs.setdefault("model", "policy")
    return json.loads(sdk.chat.completions.with_raw_response.create(**kwargs).http_response.text)


# ---- responses ---------------------------------------------------------------------------------------------------


def test_sync_sdk_response_is_strict_and_leaks_no_token_ids():
    with serving(fake("Hello there.")) as gateway, client(gateway) as sdk:
        data = raw_create(sdk, messages=[{"role": "user", "content": "hi"}])
        response = sdk.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert_strict(ChatCompletion, data)
    assert not any(leak in json.dumps(data) for leak in LEAKS)
    assert data["object"] == "chat.completion" and data["choices"][0]["logprobs"] is None
    choice = response.choices[0]
    assert choice.message.content == "Hello there." and choice.finish_reason == "stop"
    assert choice.message.tool_calls is None and response.model == "policy"
    assert response.usage.completion_tokens == len("Hello there.") + 1  # the end-of-turn token is sampled too


def test_logprobs_only_when_asked_and_calls_are_recorded_with_ids():
    model = fake("Fine.")
    with serving(model) as gateway, client(gateway) as sdk:
        response = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True)
        calls = httpx.get(gateway.base_url + "/sessions/s1/calls").json()
    entries = response.choices[0].logprobs.content
    output = model.calls[0].output
    assert [e.logprob for e in entries] == output.logprobs == [-0.5] * 6
    assert "".join(e.token for e in entries) == "Fine.<|im_end|>" and entries[0].bytes == [ord("F")]
    [call] = calls["calls"]
    assert call["prompt_ids"] == output.prompt_ids and call["completion_ids"] == output.completion_ids
    assert call["logprobs"] == output.logprobs and call["text"] == "Fine." and call["content"] == "Fine."
    assert call["finish_reason"] == "stop" and call["weight_version"] == 0 and call["output"]["text"] == "Fine."
    assert calls["token_mismatch"] == 0


def test_async_streaming_matches_the_plain_reply_chunk_by_chunk():
    async def go(gateway):
        async with openai.AsyncOpenAI(base_url=gateway.session_url("s2"), api_key="x", max_retries=0) as sdk:
            stream = await sdk.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
                logprobs=True,
            )
            return [chunk async for chunk in stream]

    with serving(fake("héllo wörld")) as gateway:
        chunks = asyncio.run(go(gateway))
        with httpx.stream(
            "POST",
            gateway.session_url("raw") + "/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}], "stream": True},
        ) as raw:
            assert raw.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in raw.iter_lines() if line]
    for chunk in chunks:
        assert_strict(ChatCompletionChunk, chunk.model_dump(exclude_unset=True))
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert content == list("héllo wörld")  # one piece per token
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    logprobs = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(logprobs) == 12  # the end-of-turn token's entry rides on the last content chunk
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_token_pieces_add_up_to_the_decoded_text(smollm2_tokenizer):
    text = "Größe: 3 × 4 = 12 🙂 done"
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False) + [smollm2_tokenizer.eos_token_id]
    pieces = token_pieces(smollm2_tokenizer, ids)
    assert len(pieces) == len(ids) and pieces[-1] == ""
    assert "".join(pieces) == smollm2_tokenizer.decode(ids, skip_special_tokens=True) == text


# ---- token exactness ---------------------------------------------------------------------------------------------


def test_multi_turn_session_extends_by_prefix_with_sdk_message_objects(smollm2_tokenizer):
    model = fake(["It is 4. END and more", "Four.", "Yes."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
        first = sdk.chat.completions.create(model="m", messages=messages, stop=["END"])
        assert first.choices[0].message.content == "It is 4. "  # OpenAI cuts the stop string; the ids keep it
        messages += [first.choices[0].message, {"role": "user", "content": [{"type": "text", "text": "Words?"}]}]
        second = sdk.chat.completions.create(model="m", messages=messages)
        messages += [second.choices[0].message.model_dump(), {"role": "user", "content": "Sure?"}]
        sdk.chat.completions.create(model="m", messages=messages)
        session = gateway.sessions["s1"]
    assert session.token_mismatches() == 0
    assert_extends(session.records)
    assert session.records[2].rendered_messages[2] == {"role": "assistant", "content": "It is 4. END and more"}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calling_round_trip_extends_by_prefix(shipped_tokenizer, stream):
    model = fake([f"Let me add.\n{CALL_TEXT}", f"{CALL_TEXT}", "The sum is 3."], tokenizer=shipped_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk:
        messages = [{"role": "user", "content": "What is 1 + 2?"}]
        ids = []
        for _ in range(2):
            message = _create(sdk, messages, stream)
            assert message["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
            ids.append(message["tool_calls"][0]["id"])
            messages += [message, {"role": "tool", "tool_call_id": ids[-1], "content": "3"}]
        final = _create(sdk, messages, stream)
        session = gateway.sessions["s1"]
    assert final["content"] == "The sum is 3." and not final.get("tool_calls")
    assert len(set(ids)) == 2  # unique within the session
    assert [r.finish_reason for r in session.records] == ["tool_calls", "tool_calls", "stop"]
    assert session.records[0].content == "Let me add." and session.records[1].content is None
    assert session.token_mismatches() == 0
    assert_extends(session.records)
    assert session.records[2].rendered_messages[-4] == {"role": "assistant", "content": f"Let me add.\n{CALL_TEXT}"}
    # the tools are described once, by the template (Qwen) or in the system message (SmolLM2), as recorded
    first = session.records[0]
    assert shipped_tokenizer.decode(first.prompt_ids).count("# Tools") == 1
    text = shipped_tokenizer.apply_chat_template(first.rendered_messages, tools=TOOLS, tokenize=False)
    assert first.prompt_ids == shipped_tokenizer.encode(text + "<|im_start|>assistant\n", add_special_tokens=False)


def _create(sdk: openai.OpenAI, messages: list, stream: bool) -> dict:
    if not stream:
        message = sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
        return message.model_dump()
    content, calls = "", {}
    for chunk in sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            calls[call.index] = {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
    return {"role": "assistant", "content": content or None, "tool_calls": list(calls.values()) or None}


def test_tool_calls_resent_as_text_are_restored(smollm2_tokenizer):
    model = fake([f"Let me add.\n{CALL_TEXT}", "The sum is 3."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk:
        messages = [{"role": "user", "content": "What is 1 + 2?"}]
        first = sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
        [call] = first.tool_calls
        # as smolagents' memory replays it: the content, then the calls printed as a Python list, no `tool_calls`
        printed = [{"id": call.id, "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]
        text = f"{first.content}\nCalling tools:\n{printed}"
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Observation:\n3"}]
        sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        session = gateway.sessions["s1"]
    assert session.records[1].rendered_messages[-2] == {"role": "assistant", "content": f"Let me add.\n{CALL_TEXT}"}
    assert session.token_mismatches() == 0
    assert_extends(session.records)


def test_text_naming_an_id_the_session_did_not_produce_is_not_restored(smollm2_tokenizer):
    model = fake([f"Let me add.\n{CALL_TEXT}", "The sum is 3."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk:
        messages = [{"role": "user", "content": "What is 1 + 2?"}]
        first = sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
        produced = first.tool_calls[0].id
        # another call's id, and one the produced id is a prefix of: neither names the produced reply
        text = f"Earlier I ran call_other_1 and {produced}0."
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "And now?"}]
        sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        session = gateway.sessions["s1"]
    assert produced == "call_s1_1"
    assert session.records[1].rendered_messages[-2] == {"role": "assistant", "content": text}
    assert session.token_mismatches() == 1  # not the sampled reply: the history really changed


def test_local_model_session_is_token_exact(smollm2_tokenizer):
    from rllm.inference.model import LocalModel
    from rllm.models.registry import build_tiny_model

    local = LocalModel(
        build_tiny_model(smollm2_tokenizer, seed=1), smollm2_tokenizer, InferenceOptions(max_batch_size=2)
    )
    try:
        with serving(local, sampling=SamplingParams(max_tokens=8)) as gateway, client(gateway) as sdk:
            messages = [{"role": "user", "content": "Say something."}]
            first = sdk.chat.completions.create(model="m", messages=messages, logprobs=True, seed=1)
            messages += [first.choices[0].message, {"role": "user", "content": "More."}]
            streamed = sdk.chat.completions.create(model="m", messages=messages, stream=True, seed=2)
            text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
            session = gateway.sessions["s1"]
    finally:
        local.close()
    first_record, second_record = session.records
    assert len(first.choices[0].logprobs.content) == len(first_record.completion_ids)
    assert text == second_record.content == second_record.text
    assert session.token_mismatches() == 0
    assert_extends(session.records)


# ---- errors ------------------------------------------------------------------------------------------------------


def test_n_above_one_is_a_400_that_says_why():
    with (
        serving(fake("x")) as gateway,
        client(gateway) as sdk,
        pytest.raises(openai.BadRequestError, match="one completion per request") as info,
    ):
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], n=2)
    assert info.value.body["param"] == "n"


def test_spent_budget_is_400_context_length_exceeded_and_remembered():
    with serving(fake("A long enough reply."), max_response_length=30) as gateway, client(gateway) as sdk:
        messages = [{"role": "user", "content": "hi"}]
        first = sdk.chat.completions.create(model="m", messages=messages)
        messages += [first.choices[0].message, {"role": "user", "content": "again, please, at length"}]
        with pytest.raises(openai.BadRequestError) as info:
            sdk.chat.completions.create(model="m", messages=messages)
        session = gateway.sessions["s1"]
    assert info.value.code == "context_length_exceeded"
    assert isinstance(session.failure, TerminationEvent) and session.failure.reason.value == "max_response_length"


def test_model_failure_is_502_and_remembered():
    with serving(fake([InfraError("server down")])) as gateway, client(gateway) as sdk:
        with pytest.raises(openai.InternalServerError, match="server down") as info:
            sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        failure = gateway.sessions["s1"].failure
    assert info.value.status_code == 502 and isinstance(failure, InfraError)


def test_unknown_session_is_404_when_sessions_are_supplied():
    async def handler(messages, tools, overrides):
        raise AssertionError("not called")

    with serving() as gateway:
        gateway.open_session(handler, sid="known")
        with client(gateway, "nope") as sdk, pytest.raises(openai.NotFoundError, match="no session 'nope'"):
            sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert client(gateway, "known").models.list().data[0].id == "rllm"
        no_session = httpx.post(gateway.base_url + "/v1/chat/completions", json={})
        assert no_session.status_code == 404 and "/sessions/<any id>/v1" in no_session.json()["error"]["message"]
        assert httpx.get(gateway.base_url + "/health").json()["sessions"] == 1
        assert httpx.delete(gateway.base_url + "/sessions/known").json() == {"id": "known", "deleted": True}
        assert httpx.delete(gateway.base_url + "/sessions/known").status_code == 404


def test_bad_requests_name_the_fix():
    with pytest.raises(RequestError, match="text-only.*images need a vision-language model"):  # as local rendering
        parse_request({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})
    with pytest.raises(
        RequestError, match="'input_audio' is not supported; the gateway serves text-only models, send text parts$"
    ):
        parse_request({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})
    with pytest.raises(RequestError, match="non-empty list"):
        parse_request({"messages": []})
    with pytest.raises(RequestError, match="temperature"):
        parse_request({"messages": [{"role": "user", "content": "x"}], "temperature": -1})
    with serving(fake("x")) as gateway:
        url = gateway.session_url("s") + "/chat/completions"
        response = httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_messages_are_normalized_to_what_templates_render():
    sent = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "audio": None,
            "function_call": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": None},
    ]
    assert normalize_messages(sent) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a\nb"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
    ]


# ---- sampling ----------------------------------------------------------------------------------------------------


def test_standalone_honours_request_sampling():
    model = fake("x")
    with serving(model, sampling=SamplingParams(temperature=1.0, max_tokens=64)) as gateway, client(gateway) as sdk:
        sdk.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            temperature=0.3,
            top_p=0.5,
            max_completion_tokens=100,
            seed=7,
        )
    sampling = model.calls[0].sampling
    assert (sampling.temperature, sampling.top_p, sampling.max_tokens) == (0.3, 0.5, 100)
    assert sampling.seed is not None and sampling.seed != 7  # derived per call, as workflows do


def test_training_mode_ignores_request_sampling_and_counts_it():
    seen = []

    async def handler(messages, tools, overrides):
        seen.append(overrides)
        return await fake("ok").generate(messages, SamplingParams(**overrides))

    with serving() as gateway:
        session = gateway.open_session(
            handler,
            sid="t",
            sampling=SamplingParams(temperature=1.0, max_tokens=50),
            honor_sampling=False,
            tokenizer=FakeTokenizer(),
        )
        with client(gateway, "t") as sdk:
            for max_tokens in (100, 10):
                sdk.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": "hi"}],
                    temperature=0.2,
                    top_p=1.0,
                    seed=3,
                    max_tokens=max_tokens,
                    frequency_penalty=0.5,
                )
    assert seen == [{"max_tokens": 50}, {"max_tokens": 10}]  # the request's max_tokens only lowers the trainer's
    assert dict(session.ignored) == {"temperature": 2, "seed": 2, "frequency_penalty": 2}  # top_p=1.0 changes nothing


def test_a_reply_the_client_strips_is_still_its_sampled_text(smollm2_tokenizer):
    """smolagents keeps `content.strip()`: the echo of "Action:\\n" comes back as "Action:" and is still that reply."""
    model = fake(["Thinking it over,\n", "It is 4."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk:
        messages = [{"role": "user", "content": "2+2?"}]
        first = sdk.chat.completions.create(model="m", messages=messages).choices[0].message.content
        messages += [{"role": "assistant", "content": first.strip()}, {"role": "user", "content": "And?"}]
        sdk.chat.completions.create(model="m", messages=messages)
        session = gateway.sessions["s1"]
    assert first == "Thinking it over,\n" and session.token_mismatches() == 0
    assert session.records[1].rendered_messages[1] == {"role": "assistant", "content": "Thinking it over,\n"}
