"""The web action language (rllm.tasks.web.actions): parsing replies and tool calls, without a browser."""

from __future__ import annotations

import pytest

from rllm.tasks.web.actions import ACTIONS, ActionError, WebAction, describe_actions, parse_actions


def test_calls_come_from_the_last_code_block_in_order():
    reply = "First I look.\n```\nclick('e1')\n```\nNo, better:\n```python\nfill('e6', 'Jerald')\nclick(\"e7\")\n```"
    assert parse_actions(reply) == [
        WebAction("fill", {"ref": "e6", "text": "Jerald"}),
        WebAction("click", {"ref": "e7"}),
    ]


def test_calls_in_plain_text_and_keyword_arguments():
    reply = "The answer is the second box, so select_option(ref='e4', value='Sudan') then press('e4', key='Enter')."
    assert parse_actions(reply) == [
        WebAction("select_option", {"ref": "e4", "value": "Sudan"}),
        WebAction("press", {"ref": "e4", "key": "Enter"}),
    ]


@pytest.mark.parametrize("ref", ["5", 5, "e5", "[ref=e5]", "ref=e5"])
def test_browsergym_style_numeric_refs_mean_the_snapshot_ref(ref):
    assert parse_actions({"tool_calls": [{"name": "click", "arguments": {"ref": ref}}]})[0].args["ref"] == "e5"


def test_frame_refs_are_kept():
    assert parse_actions("click('f1e12')")[0].args == {"ref": "f1e12"}


def test_text_with_parentheses_and_quotes_inside_a_call():
    assert parse_actions("fill('e3', 'a (b) \"c\"')")[0].args["text"] == 'a (b) "c"'


def test_openai_style_tool_calls_with_json_string_arguments():
    action = {"tool_calls": [{"id": "1", "function": {"name": "fill", "arguments": '{"ref": "e2", "text": 7}'}}]}
    assert parse_actions(action) == [WebAction("fill", {"ref": "e2", "text": "7"})]


def test_a_tool_call_reply_without_calls_falls_back_to_its_text():
    assert parse_actions({"tool_calls": [], "content": "```noop()```", "errors": []}) == [WebAction("noop", {})]


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ("I am not sure what to do.", "no action found"),
        ("click()", "click needs ref"),
        ("click('e1', 'e2')", "at most 1"),
        ("fill('e1', text=x)", "plain values"),
        ("click('OK button')", "not an element ref"),
        ("scroll(0, 'down')", "must be a number"),
        ("click('e1', wait=3)", "no argument 'wait'"),
        ({"tool_calls": [{"name": "navigate", "arguments": {}}]}, "unknown action 'navigate'"),
        ({"tool_calls": [{"name": "click", "arguments": "{not json"}]}, "not a JSON object"),
        (42, "expected a reply"),
    ],
)
def test_bad_actions_raise_an_error_the_agent_can_read(reply, says):
    with pytest.raises(ActionError, match=says):
        parse_actions(reply)


def test_the_description_names_every_action_and_its_arguments():
    text = describe_actions()
    for name, (params, required, _) in ACTIONS.items():
        assert f"{name}(" in text
        assert all(p in text for p in params[:required])
    assert str(WebAction("fill", {"ref": "e1", "text": "hi"})) == "fill('e1', 'hi')"
