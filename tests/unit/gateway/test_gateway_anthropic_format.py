"""The Anthropic Messages wire format without a server: requests translated into the gateway's normalised chat
messages (the echo of a produced reply included), and replies as strict SDK `Message`s and stream events that the
SDK's own accumulator turns back into the same message."""

from __future__ import annotations

import json
import math

import pytest

anthropic = pytest.importorskip("anthropic")

from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from rllm.gateway.anthropic_format import (
    anthropic_error_body,
    message_body,
    message_events,
    parse_messages_request,
)
from rllm.gateway.openai_format import Reply, RequestError, normalize_messages
from tests.support.gateway import LEAKS, assert_strict

EVENTS = TypeAdapter(RawMessageStreamEvent)
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
TOOL = {"name": "add", "description": "Add two numbers.", "input_schema": {"type": "object", "properties": {}}}
REPLIES = {
    "end_turn": Reply("Héllo there.", [], "stop", 7, 5, pieces=["H", "é", "llo", " there", ".", ""]),
    "max_tokens": Reply("Hello", [], "length", 7, 3, pieces=["He", "", "llo"]),
    "stop_sequence": Reply("Hello", [], "stop", 7, 2, stop_sequence="###"),
    "tool_use": Reply("Let me add.", [CALL], "tool_calls", 7, 9),
}


def request(messages, **extra):
    return parse_messages_request({"model": "policy", "max_tokens": 64, "messages": messages, **extra})


def accumulate(events: list[dict]) -> Message:
    snapshot, buffers = None, {}
    for event in events:
        snapshot = accumulate_event(event=EVENTS.validate_python(event), current_snapshot=snapshot, json_bufs=buffers)
    return snapshot


# ---- responses ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_reason", list(REPLIES))
def test_message_body_is_a_strict_sdk_message_with_the_right_stop(stop_reason):
    reply = REPLIES[stop_reason]
    body = message_body(reply, message_id="msg_1", model="policy")
    message = Message.model_validate(body)
    assert_strict(type(message), body)
    assert not any(leak in json.dumps(body) for leak in LEAKS if leak != "stop_reason")
    assert message.stop_reason == stop_reason and message.role == "assistant" and message.model == "policy"
    assert message.stop_sequence == ("###" if stop_reason == "stop_sequence" else None)
    assert message.usage.input_tokens == 7 and message.usage.output_tokens == reply.completion_tokens
    assert message.content[0].type == "text" and message.content[0].text == reply.content


def test_tool_calls_become_tool_use_blocks_with_decoded_input():
    body = message_body(REPLIES["tool_use"], message_id="msg_1", model="policy")
    text, call = Message.model_validate(body).content
    assert text.text == "Let me add." and call.type == "tool_use"
    assert (call.id, call.name, call.input) == ("call_1", "add", {"a": 1, "b": 2})
    bare = Reply(None, [{**CALL, "function": {"name": "add", "arguments": "not json"}}], "tool_calls", 1, 1)
    (only,) = Message.model_validate(message_body(bare, message_id="m", model="p")).content
    assert only.input == {"arguments": "not json"}  # input must be an object: what was written is kept


@pytest.mark.parametrize("stop_reason", list(REPLIES))
def test_events_are_strict_and_accumulate_to_the_message_body(stop_reason):
    reply = REPLIES[stop_reason]
    events = message_events(reply, message_id="msg_1", model="policy")
    for event in events:
        assert_strict(type(EVENTS.validate_python(event)), event)
    assert [e["type"] for e in (events[0], events[1], events[-2], events[-1])] == [
        "message_start",
        "content_block_start",
        "message_delta",
        "message_stop",
    ]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 1
    deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and e["index"] == 0]
    assert "".join(deltas) == reply.content
    expected = Message.model_validate(message_body(reply, message_id="msg_1", model="policy"))
    assert accumulate(events).model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)


def test_text_streams_one_delta_per_group_of_token_pieces():
    events = message_events(REPLIES["end_turn"], message_id="m", model="p")
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == [
        "H",
        "é",
        "llo",
        " there",
        ".",
    ]
    cut = Reply("Hel", [], "stop", 1, 2, pieces=["Hel", "lo"])  # pieces that do not add up go out whole
    texts = [
        e["delta"]["text"] for e in message_events(cut, message_id="m", model="p") if "index" in e and "delta" in e
    ]
    assert texts == ["Hel"]


def test_tool_call_streams_as_one_input_json_delta():
    events = message_events(REPLIES["tool_use"], message_id="m", model="p")
    start = next(e for e in events if e["type"] == "content_block_start" and e["index"] == 1)
    assert start["content_block"] == {"id": "call_1", "input": {}, "name": "add", "type": "tool_use"}
    (delta,) = [e["delta"] for e in events if e["type"] == "content_block_delta" and e["index"] == 1]
    assert delta["type"] == "input_json_delta" and json.loads(delta["partial_json"]) == {"a": 1, "b": 2}


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (409, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_error_bodies_parse_as_sdk_errors(status, kind):
    body = anthropic_error_body("it broke", status=status)
    parsed = ErrorResponse.model_validate(body)
    assert_strict(ErrorResponse, body)
    assert parsed.error.type == kind and parsed.error.message == "it broke"


def test_request_too_large_follows_the_documented_type():
    # 413 request_too_large is documented by Anthropic but absent from the SDK's error union
    assert anthropic_error_body("big", status=413) == {
        "type": "error",
        "error": {"type": "request_too_large", "message": "big"},
    }


# ---- requests ----------------------------------------------------------------------------------------------------


def test_system_string_or_blocks_becomes_the_first_message():
    user = [{"role": "user", "content": "hi"}]
    assert request(user, system="Be brief.").messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    blocks = [{"type": "text", "text": "A."}, {"type": "text", "text": "B.", "cache_control": {"type": "ephemeral"}}]
    parsed = request(user, system=blocks)
    assert parsed.messages[0] == {"role": "system", "content": "A.\nB."}
    assert parsed.raw_messages == [{"role": "system", "content": blocks}, *user]
    assert request(user).messages == [{"role": "user", "content": "hi"}] and request(user).raw_messages == user


def test_sampling_fields_and_tools_are_translated():
    parsed = request(
        [{"role": "user", "content": "hi"}],
        stop_sequences=["###", ""],
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        stream=True,
        tools=[TOOL, {**TOOL, "name": "sub", "type": "custom", "cache_control": {"type": "ephemeral"}}],
        tool_choice={"type": "tool", "name": "add"},
        metadata={"user_id": "u"},
        thinking={"type": "enabled", "budget_tokens": 1024},
        service_tier="auto",
    )
    assert (parsed.max_tokens, parsed.stop, parsed.temperature, parsed.top_p, parsed.top_k) == (
        64,
        ["###"],
        0.5,
        0.9,
        20,
    )
    assert parsed.stream and parsed.model == "policy" and not parsed.unsupported_sampling
    function = {"name": "add", "description": "Add two numbers.", "parameters": TOOL["input_schema"]}
    assert parsed.tools[0] == {"type": "function", "function": function}
    assert parsed.tools[1]["function"]["name"] == "sub"


def test_tool_use_and_tool_result_round_trip():
    parsed = request(
        [
            {"role": "user", "content": "add 1 and 2"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "3"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "x"}] * 2},
                    {"type": "tool_result", "tool_use_id": "t3", "is_error": True, "content": "boom"},
                    {"type": "tool_result", "tool_use_id": "t4"},
                ],
            },
        ]
    )
    call = {"id": "t1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
    assert parsed.messages[1:] == [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "3", "tool_call_id": "t1"},
        {"role": "tool", "content": "x\nx", "tool_call_id": "t2"},
        {"role": "tool", "content": "boom", "tool_call_id": "t3"},
        {"role": "tool", "content": "", "tool_call_id": "t4"},
    ]


def test_tool_results_come_before_the_text_of_their_user_message():
    parsed = request(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "before"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": "3"},
                    {"type": "text", "text": "after", "citations": None},
                ],
            }
        ]
    )
    assert parsed.messages == [
        {"role": "tool", "content": "3", "tool_call_id": "t1"},
        {"role": "user", "content": "before\nafter"},
    ]


def test_thinking_blocks_are_dropped_and_assistant_text_concatenated():
    parsed = request(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "xx"},
                    {"type": "text", "text": "Hel"},
                    {"type": "text", "text": "lo"},
                ],
            },
        ]
    )
    assert parsed.messages[1] == {"role": "assistant", "content": "Hello"}


@pytest.mark.parametrize("stop_reason", list(REPLIES))
def test_echo_of_a_produced_reply_normalises_like_the_chat_completions_echo(stop_reason):
    reply = REPLIES[stop_reason]
    echoed = Message.model_validate(message_body(reply, message_id="m", model="p")).model_dump()["content"]
    parsed = request([{"role": "user", "content": "hi"}, {"role": "assistant", "content": echoed}])
    chat_echo = {"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls}
    assert parsed.messages[1:] == normalize_messages([chat_echo])


def test_echo_of_a_tool_call_turn_without_text():
    reply = Reply(None, [CALL, {**CALL, "id": "call_2"}], "tool_calls", 3, 4)
    echoed = Message.model_validate(message_body(reply, message_id="m", model="p")).model_dump()["content"]
    parsed = request([{"role": "user", "content": "hi"}, {"role": "assistant", "content": echoed}])
    chat_echo = {"role": "assistant", "content": None, "tool_calls": reply.tool_calls}
    assert parsed.messages[1:] == normalize_messages([chat_echo])


USER = [{"role": "user", "content": "hi"}]
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}}


@pytest.mark.parametrize(
    ("body", "param", "fix"),
    [
        ([1], None, "JSON object"),
        ({"messages": USER}, "max_tokens", "required"),
        ({"max_tokens": 0, "messages": USER}, "max_tokens", "integer"),
        ({"max_tokens": 9, "messages": []}, "messages", "non-empty"),
        ({"max_tokens": 9, "messages": [{"role": "tool", "content": "x"}]}, "messages", "top-level `system`"),
        ({"max_tokens": 9, "messages": [{"role": "system", "content": [{"type": "image"}]}]}, "messages", "text only"),
        ({"max_tokens": 9, "messages": [{"role": "tool", "content": "x"}]}, "messages", "user or assistant"),
        (
            {"max_tokens": 9, "messages": [*USER, {"role": "user", "content": [IMAGE]}]},
            "messages",
            r"messages\[1\].*text",
        ),
        ({"max_tokens": 9, "messages": [{"role": "user", "content": [DOCUMENT]}]}, "messages", "'document'"),
        ({"max_tokens": 9, "messages": [{"role": "user", "content": 3}]}, "messages", "string or a list"),
        ({"max_tokens": 9, "messages": USER, "system": [{"type": "image"}]}, "system", "text"),
        ({"max_tokens": 9, "messages": USER, "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools", "client"),
        ({"max_tokens": 9, "messages": USER, "tools": [{"name": "x"}]}, "tools", "input_schema"),
        ({"max_tokens": 9, "messages": USER, "mcp_servers": [{"type": "url", "url": "u"}]}, "mcp_servers", "client"),
        ({"max_tokens": 9, "messages": USER, "temperature": 1.5}, "temperature", "range"),
        ({"max_tokens": 9, "messages": USER, "top_p": math.nan}, "top_p", "finite"),
        ({"max_tokens": 9, "messages": USER, "stop_sequences": "###"}, "stop_sequences", "list of strings"),
        ({"max_tokens": 9, "messages": USER, "stop_sequences": ["a", 1]}, "stop_sequences", "list of strings"),
        ({"max_tokens": 9, "messages": USER, "tool_choice": {"type": "required"}}, "tool_choice", "auto"),
        ({"max_tokens": 9, "messages": USER, "stream": "yes"}, "stream", "true or false"),
    ],
)
def test_unsupported_bodies_are_400s_naming_the_field_and_fix(body, param, fix):
    with pytest.raises(RequestError, match=fix) as caught:
        parse_messages_request(body)
    assert caught.value.status == 400 and caught.value.param == param


@pytest.mark.parametrize(
    ("content", "fix"),
    [
        ([{"type": "tool_use", "id": "t", "name": "n", "input": {}}], "belong in assistant"),
        ([{"type": "search_result", "source": "s", "title": "t", "content": []}], "'search_result'"),
        ([{"type": "tool_result", "tool_use_id": "t", "content": [DOCUMENT]}], "'document'.*tool_result"),
        (["text"], "object with a `type`"),
    ],
)
def test_unsupported_user_blocks_name_the_block_type(content, fix):
    with pytest.raises(RequestError, match=fix):
        request([{"role": "user", "content": content}])


@pytest.mark.parametrize(
    ("block", "fix"),
    [
        ({"type": "tool_result", "tool_use_id": "t", "content": "x"}, "belong in the user message"),
        ({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}, "'server_tool_use'"),
        ({"type": "tool_use", "id": "t", "name": "n", "input": "[]"}, "must be an object"),
        (IMAGE, "'image'"),
    ],
)
def test_unsupported_assistant_blocks_name_the_block_type(block, fix):
    with pytest.raises(RequestError, match=fix):
        request([*USER, {"role": "assistant", "content": [block]}])
