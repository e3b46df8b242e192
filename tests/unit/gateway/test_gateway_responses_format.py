"""The Responses API wire format without a server: request bodies to chat requests (items, instructions, tools,
refusals) and hand-built Replies to `response` objects and streaming events that the `openai` SDK's models accept
strictly."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from rllm.gateway.openai_format import Reply, RequestError, normalize_messages
from rllm.gateway.responses_format import parse_responses_request, reply_message, response_body, response_events
from tests.support.gateway import LEAKS, assert_strict

META = {"response_id": "resp_abc", "created_at": 1700000000, "model": "policy"}
TOOL = {
    "type": "function",
    "name": "add",
    "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    "strict": True,
}
CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
    {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}},
]
EVENTS = TypeAdapter(ResponseStreamEvent)


def entry(token: str, logprob: float = -0.5) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}


def text_reply(**kwargs) -> Reply:
    pieces = ["Hel", "lo", " th", "ere", "."]
    defaults = {
        "content": "Hello there.",
        "tool_calls": [],
        "finish_reason": "stop",
        "prompt_tokens": 7,
        "completion_tokens": 6,
        "pieces": [*pieces, ""],  # the end-of-turn token adds no text
        "token_entries": [entry(p) for p in pieces] + [entry("<|im_end|>", -0.01)],
    }
    return Reply(**{**defaults, **kwargs})


def call_reply(content: str | None = "Let me add.") -> Reply:
    return Reply(content=content, tool_calls=CALLS, finish_reason="tool_calls", prompt_tokens=9, completion_tokens=30)


def request(**body):
    return parse_responses_request({"model": "policy", "input": "hi", **body})


def refused(body) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse_responses_request(body)
    return caught.value


# ---- response objects --------------------------------------------------------------------------------------------


def test_text_response_is_strict_and_leaks_nothing():
    body = response_body(text_reply(), request(instructions="Be brief.", metadata={"k": "v"}), **META)
    assert_strict(Response, body)
    response = Response.model_validate(body)
    assert response.output_text == "Hello there." and response.status == "completed"
    assert body["output"][0]["id"] == "msg_abc" and body["output"][0]["content"][0]["logprobs"] == []
    assert body["usage"] == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 6,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 13,
    }
    assert body["instructions"] == "Be brief." and body["metadata"] == {"k": "v"} and body["error"] is None
    leaks = [leak for leak in LEAKS if leak != "reasoning"]  # usage.output_tokens_details.reasoning_tokens is OpenAI's
    assert not any(leak in json.dumps(body) for leak in leaks) and "reasoning" not in body


def test_tool_call_response_has_a_message_then_function_calls_with_predictable_ids():
    wanted = request(tools=[TOOL], tool_choice="required", parallel_tool_calls=False, max_output_tokens=50)
    body = response_body(call_reply(), wanted, **META)
    assert_strict(Response, body)
    Response.model_validate(body)
    assert [item["type"] for item in body["output"]] == ["message", "function_call", "function_call"]
    calls = body["output"][1:]
    assert [c["id"] for c in calls] == ["fc_abc_0", "fc_abc_1"] and [c["call_id"] for c in calls] == [
        "call_1",
        "call_2",
    ]
    assert calls[1]["arguments"] == '{"a": 3, "b": 4}' and calls[1]["status"] == "completed"
    assert body["tools"] == [TOOL] and body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False and body["max_output_tokens"] == 50


def test_tool_calls_without_text_have_no_message_item():
    body = response_body(call_reply(content=None), request(tools=[TOOL]), **META)
    assert [item["type"] for item in body["output"]] == ["function_call", "function_call"]
    assert_strict(Response, body)


def test_logprobs_only_when_include_asks():
    plain = response_body(text_reply(), request(), **META)["output"][0]["content"][0]
    asked = response_body(text_reply(), request(include=["message.output_text.logprobs"]), **META)
    assert plain["logprobs"] == []
    assert [e["token"] for e in asked["output"][0]["content"][0]["logprobs"]][-2:] == [".", "<|im_end|>"]
    assert_strict(Response, asked)
    ignored = request(include=["reasoning.encrypted_content"])
    assert ignored.include_logprobs is False and ignored.chat_request([]).logprobs is False


def test_length_makes_the_response_and_its_message_incomplete():
    body = response_body(text_reply(finish_reason="length"), request(max_output_tokens=6), **META)
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete" and body["completed_at"] is None
    assert Response.model_validate(body).incomplete_details.reason == "max_output_tokens"


# ---- streaming ---------------------------------------------------------------------------------------------------


def check_events(reply: Reply, wanted) -> list[dict]:
    events = response_events(reply, wanted, **META)
    for event in events:
        parsed = EVENTS.validate_python(event)
        assert parsed.type == event["type"], event
        assert_strict(type(parsed), event, event["type"])
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["response"] == response_body(reply, wanted, **META)
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    return events


def test_streamed_text_goes_out_per_token_piece_with_logprobs():
    events = check_events(text_reply(), request(include=["message.output_text.logprobs"], stream=True))
    kinds = [event["type"] for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["Hel", "lo", " th", "ere", "."]
    assert "".join(d["delta"] for d in deltas) == "Hello there."
    assert sum(len(d["logprobs"]) for d in deltas) == 6  # the end-of-turn token rides with the last piece
    assert all(d["item_id"] == "msg_abc" and d["output_index"] == 0 for d in deltas)


def test_streamed_text_without_pieces_is_one_delta_without_logprobs():
    events = check_events(text_reply(pieces=None), request(stream=True))
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    assert [(d["delta"], d["logprobs"]) for d in deltas] == [("Hello there.", [])]


def test_streamed_function_calls_and_incomplete_responses():
    events = check_events(call_reply(), request(tools=[TOOL], stream=True))
    arguments = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert [(a["item_id"], a["output_index"], a["delta"]) for a in arguments] == [
        ("fc_abc_0", 1, '{"a": 1, "b": 2}'),
        ("fc_abc_1", 2, '{"a": 3, "b": 4}'),
    ]
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert added[1]["arguments"] == "" and added[1]["status"] == "in_progress"
    incomplete = check_events(text_reply(finish_reason="length"), request(stream=True))
    assert incomplete[-1]["type"] == "response.incomplete"


# ---- input items -------------------------------------------------------------------------------------------------


def test_string_input_is_one_user_message_and_instructions_lead_only_the_chat_request():
    wanted = request(input="What is 2+2?", instructions="Answer briefly.", max_output_tokens=64, temperature=0.3)
    assert wanted.input_messages == [{"role": "user", "content": "What is 2+2?"}]
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    chat = wanted.chat_request(history)
    assert chat.messages == [{"role": "system", "content": "Answer briefly."}, *history, *wanted.input_messages]
    assert chat.raw_messages == ["What is 2+2?"] and chat.max_tokens == 64 and chat.temperature == 0.3
    assert chat.include_usage is False and chat.stream is False


def test_message_items_become_chat_messages():
    wanted = request(
        input=[
            {"role": "developer", "content": "Be terse."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "b", "annotations": []}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "user", "content": "c"},
        ]
    )
    assert wanted.input_messages == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]


def test_function_call_output_is_a_tool_message():
    wanted = request(
        input=[
            {"type": "function_call", "call_id": "call_9", "name": "add", "arguments": '{"a": 1}'},
            {"type": "function_call_output", "call_id": "call_9", "output": "3"},
            {"type": "function_call_output", "call_id": "call_9", "output": [{"type": "input_text", "text": "4"}]},
        ]
    )
    assert wanted.input_messages == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}],
        },
        {"role": "tool", "content": "3", "tool_call_id": "call_9"},
        {"role": "tool", "content": "4", "tool_call_id": "call_9"},
    ]


@pytest.mark.parametrize("content", ["Let me add.", None])
def test_echoed_output_items_are_one_assistant_turn_equal_to_reply_message(content):
    reply = call_reply(content)
    output = response_body(reply, request(tools=[TOOL]), **META)["output"]
    echoed = request(input=[{"role": "user", "content": "add"}, *output, {"role": "user", "content": "thanks"}])
    assistant = echoed.input_messages[1]
    assert [m["role"] for m in echoed.input_messages] == ["user", "assistant", "user"]
    assert [call["id"] for call in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert assistant == reply_message(reply) == normalize_messages([assistant])[0]


def test_echoed_text_reply_equals_reply_message():
    reply = text_reply()
    output = response_body(reply, request(), **META)["output"]
    assert request(input=output).input_messages == [reply_message(reply)]


def test_tools_become_chat_tools():
    wanted = request(tools=[TOOL], tool_choice={"type": "function", "name": "add"})
    assert wanted.chat_request([]).tools == [
        {"type": "function", "function": {k: TOOL[k] for k in ("name", "description", "parameters")}}
    ]
    assert wanted.tool_choice == {"type": "function", "name": "add"} and request().chat_request([]).tools is None


# ---- refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "fix"),
    [
        (["hi"], None, "JSON object"),
        ({"model": "m"}, "input", "non-empty"),
        ({"input": []}, "input", "non-empty"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
            "input",
            "text-only",
        ),
        ({"input": [{"type": "input_file", "file_id": "f"}]}, "input", "does not serve"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input", "previous_response_id"),
        ({"input": [{"role": "tool", "content": "3"}]}, "input", "function_call_output"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools", "function tools only"),
        ({"input": "hi", "background": True}, "background", "drop `background`"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation", "previous_response_id"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "integer in [1"),
        ({"input": "hi", "temperature": float("nan")}, "temperature", "finite"),
        ({"input": "hi", "include": "message.output_text.logprobs"}, "include", "list of strings"),
    ],
)
def test_unservable_bodies_are_refused_naming_the_field_and_fix(body, param, fix):
    error = refused(body)
    assert error.status == 400 and error.param == param and fix in str(error), str(error)


def test_refusals_point_at_the_input_item():
    error = refused({"input": ["x", {"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})
    assert "input[0]" in str(error)  # a bare string is not an item
    error = refused(
        {"input": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "input_audio"}]}]}
    )
    assert str(error).startswith("input[1]: content part of type 'input_audio'")
    error = refused({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})
    assert "input[0].content[0]" in str(error) and "input_text" in str(error)
    error = refused({"input": "hi", "tools": [{"type": "function", "function": {"name": "add"}}]})
    assert "flat" in str(error)


def test_the_strict_check_catches_an_unknown_field_inside_a_union_member():
    body = response_body(call_reply(), request(tools=[TOOL]), **META)
    body["output"][1]["token_ids"] = [1, 2]
    with pytest.raises(AssertionError, match="token_ids"):
        assert_strict(Response, body)
