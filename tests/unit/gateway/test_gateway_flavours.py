"""The gateway's three APIs with their official SDKs over real sockets: the OpenAI Responses API (`openai`) and the
Anthropic Messages API (`anthropic`), streamed and not, with tool calls, multi-turn; one session mixing all three
flavours still records one token-exact row; errors in each flavour's shape; unknown routes as JSON."""

from __future__ import annotations

import httpx
import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from tests.support.gateway import (
    CALL_TEXT,
    TOOLS,
    assert_extends,
    assert_one_exact_row,
    assert_recorded_prompts_render,
    client,
    fake,
    serving,
)

CALL_2 = '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
RESPONSES_TOOLS = [{"type": "function", **TOOLS[0]["function"]}]
ANTHROPIC_TOOLS = [
    {"name": "add", "description": "Add two numbers.", "input_schema": TOOLS[0]["function"]["parameters"]}
]


def claude(gateway, sid: str = "s1", **kwargs) -> anthropic.Anthropic:
    """The `anthropic` SDK pointed at a session as a user would: given the OpenAI-style session URL."""
    kwargs.setdefault("api_key", "none")
    return anthropic.Anthropic(base_url=gateway.session_url(sid), max_retries=0, **kwargs)


# ---- the Responses API -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_loop_with_previous_response_id_is_token_exact(shipped_tokenizer, stream):
    model = fake([f"Adding both.\n{CALL_TEXT}\n{CALL_2}", "3 and 7."], tokenizer=shipped_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk:
        first = _respond(sdk, stream, input="Add 1+2 and 3+4.", instructions="Use tools.", tools=RESPONSES_TOOLS)
        calls = [item for item in first.output if item.type == "function_call"]
        assert [item.type for item in first.output] == ["message", "function_call", "function_call"]
        assert first.output[0].content[0].text == "Adding both."
        assert [(c.name, c.arguments) for c in calls] == [("add", '{"a": 1, "b": 2}'), ("add", '{"a": 3, "b": 4}')]
        results = zip(calls, "37", strict=True)
        outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": r} for c, r in results]
        second = _respond(
            sdk, stream, input=outputs, previous_response_id=first.id, instructions="Use tools.", tools=RESPONSES_TOOLS
        )
        session = gateway.sessions["s1"]
    assert second.output_text == "3 and 7." and second.status == "completed"
    assert second.usage.output_tokens == session.records[1].output.completion_length
    assert_one_exact_row(session, shipped_tokenizer)
    restored = session.records[1].rendered_messages
    assert restored[0]["role"] == "system" and restored[0]["content"].startswith("Use tools.")
    assert {"role": "assistant", "content": f"Adding both.\n{CALL_TEXT}\n{CALL_2}"} in restored
    assert [m["content"] for m in restored if m["role"] == "tool"] == ["3", "7"]


def _respond(sdk, stream: bool, **kwargs):
    if not stream:
        return sdk.responses.create(model="policy", **kwargs)
    with sdk.responses.stream(model="policy", **kwargs) as events:
        deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
        final = events.get_final_response()
    assert "".join(deltas) == "".join(
        part.text for item in final.output if item.type == "message" for part in item.content
    )
    return final


def test_responses_echoing_the_whole_input_extends_too(smollm2_tokenizer):
    """The Agents SDK's way without server state: every call sends the whole conversation as items."""
    model = fake([CALL_TEXT, "It is 3."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk:
        items: list = [{"role": "user", "content": "1+2?"}]
        first = sdk.responses.create(model="m", input=items, tools=RESPONSES_TOOLS)
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": first.output[-1].call_id, "output": "3"})
        second = sdk.responses.create(
            model="m", input=items, tools=RESPONSES_TOOLS, include=["message.output_text.logprobs"]
        )
        session = gateway.sessions["s1"]
    assert second.output_text == "It is 3."
    assert [lp.logprob for lp in second.output[0].content[0].logprobs] == session.records[1].logprobs
    assert session.token_mismatches() == 0
    assert_recorded_prompts_render(session, smollm2_tokenizer)


# ---- the Anthropic Messages API ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_loop_is_token_exact(shipped_tokenizer, stream):
    model = fake([f"Let me add.\n{CALL_TEXT}", "The sum is 3. DONE then more"], tokenizer=shipped_tokenizer)
    with serving(model) as gateway, claude(gateway) as sdk:
        messages: list = [{"role": "user", "content": "What is 1 + 2?"}]
        first = _message(sdk, stream, messages=messages)
        assert first.stop_reason == "tool_use" and [b.type for b in first.content] == ["text", "tool_use"]
        use = first.content[1]
        assert (use.name, use.input) == ("add", {"a": 1, "b": 2})
        messages += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "3"}]},
        ]
        second = _message(sdk, stream, messages=messages, stop_sequences=["DONE"])
        session = gateway.sessions["s1"]
    assert second.content[0].text == "The sum is 3. " and second.stop_reason == "stop_sequence"
    assert second.stop_sequence == "DONE" and second.usage.input_tokens == len(session.records[1].prompt_ids)
    assert_one_exact_row(session, shipped_tokenizer)
    assert session.records[1].rendered_messages[-2] == {"role": "assistant", "content": f"Let me add.\n{CALL_TEXT}"}


def _message(sdk, stream: bool, **kwargs):
    kwargs.update(model="policy", max_tokens=256, system="You add numbers.", tools=ANTHROPIC_TOOLS)
    if not stream:
        return sdk.messages.create(**kwargs)
    with sdk.messages.stream(**kwargs) as events:
        text = "".join(events.text_stream)
        final = events.get_final_message()
    assert text == "".join(block.text for block in final.content if block.type == "text")
    return final


# ---- one session, three flavours ---------------------------------------------------------------------------------


def test_one_session_mixing_the_three_apis_is_one_row(smollm2_tokenizer):
    model = fake(["Two.", "Three.", "Four."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway, client(gateway) as sdk, claude(gateway) as sdk_claude:
        history = [{"role": "user", "content": "Count: one."}]
        chat = sdk.chat.completions.create(model="m", messages=history).choices[0].message.content
        history += [{"role": "assistant", "content": chat}, {"role": "user", "content": "Next."}]
        response = sdk.responses.create(model="m", input=history)
        history += [{"role": "assistant", "content": response.output_text}, {"role": "user", "content": "Next."}]
        message = sdk_claude.messages.create(model="m", max_tokens=64, messages=history)
        session = gateway.sessions["s1"]
    assert (chat, response.output_text, message.content[0].text) == ("Two.", "Three.", "Four.")
    assert session.token_mismatches() == 0
    assert_extends(session.records)


# ---- errors ------------------------------------------------------------------------------------------------------


def test_errors_come_in_each_flavours_shape():
    with serving(fake("A long enough reply."), max_response_length=30) as gateway:
        with client(gateway) as sdk:
            first = sdk.responses.create(model="m", input="hi")
            with pytest.raises(openai.BadRequestError) as length:
                sdk.responses.create(model="m", input="again, at length", previous_response_id=first.id)
            with pytest.raises(openai.NotFoundError, match="not a response of this session") as unknown:
                sdk.responses.create(model="m", input="x", previous_response_id="resp_nope")
        with claude(gateway, "s2") as sdk_claude:
            history = [{"role": "user", "content": "hi"}]
            reply = sdk_claude.messages.create(model="m", max_tokens=64, messages=history)
            history += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": "at length"}]
            with pytest.raises(anthropic.BadRequestError, match="prompt is too long") as too_long:
                sdk_claude.messages.create(model="m", max_tokens=64, messages=history)
        plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        missing = httpx.post(gateway.session_url("s2") + "/messages", json=plain)
        not_served = httpx.post(gateway.session_url("s3") + "/completions", json={"prompt": "x"})
        wrong_method = httpx.get(gateway.session_url("s3") + "/responses")
    # litellm and the SDKs read these words, not the code, to recognise a context-length error
    assert length.value.body["message"].startswith("This model's maximum context length is")
    assert length.value.code == "context_length_exceeded" and unknown.value.body["param"] == "previous_response_id"
    assert too_long.value.body["error"]["type"] == "invalid_request_error"
    assert missing.status_code == 400 and missing.json()["type"] == "error"
    assert "max_tokens" in missing.json()["error"]["message"]
    for answer in (not_served, wrong_method):
        assert answer.headers["content-type"].startswith("application/json")
        assert "/v1/responses and /v1/messages" in answer.json()["error"]["message"]
    assert not_served.status_code == 404 and wrong_method.status_code == 405


def test_api_key_from_either_header():
    with serving(fake(["a.", "b."]), api_key="sekret") as gateway:
        with claude(gateway, api_key="sekret") as good, claude(gateway, api_key="wrong") as bad:
            assert good.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(anthropic.AuthenticationError, match="x-api-key") as refused:
                bad.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        with openai.OpenAI(base_url=gateway.session_url("s2"), api_key="sekret", max_retries=0) as sdk:
            assert sdk.responses.create(model="m", input="hi").output_text == "b."
    assert refused.value.body["type"] == "error"
