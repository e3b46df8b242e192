"""`rllm.models.exactness`: a prefix break's cause and a template's tool-call round trip, on templates as plain
functions (the real templates, through the engine and the gateway, are in tests/contract/test_exactness_report.py).
Neither may ever fail the rollout it counts for."""

from __future__ import annotations

from rllm.models.exactness import break_kind, tool_format_round_trips

PREVIOUS = [{"role": "user", "content": "hi"}]


def render_stripping(messages, add_generation_prompt):
    """A template that prints a reply without its trailing space, as `| trim` does."""
    text = "".join(f"<{m['role']}>{m['content'].rstrip()}</s>" for m in messages)
    return text + ("<assistant>" if add_generation_prompt else "")


def test_a_break_is_the_historys_the_templates_or_the_replys_round_trip():
    context = "<user>hi</s><assistant>yes </s>"  # the previous prompt + the reply "yes " as sampled
    reply = {"role": "assistant", "content": "yes "}
    later = [*PREVIOUS, reply, {"role": "user", "content": "ok"}]
    assert break_kind(render_stripping, PREVIOUS, later, context, "yes ") == "template"  # stored verbatim
    edited = [*PREVIOUS, {"role": "assistant", "content": "yes"}, later[2]]  # the agent trimmed it itself
    assert break_kind(render_stripping, PREVIOUS, edited, context, "yes ") == "round_trip"
    rewritten = [{"role": "user", "content": "hello"}, *later[1:]]
    assert break_kind(render_stripping, PREVIOUS, rewritten, context, "yes ") == "history"
    dropped = [*PREVIOUS, {"role": "user", "content": "ok"}]
    assert break_kind(render_stripping, PREVIOUS, dropped, context, "yes ") == "history"
    assert break_kind(render_stripping, PREVIOUS, [*PREVIOUS, "not a message"], context, "yes ") == "history"


def test_a_reply_that_prints_back_after_its_parse_is_the_templates_break():
    calls = [{"type": "function", "function": {"name": "f", "arguments": {}}}]

    def render(messages, add_generation_prompt):
        return "".join(f"<{m['role']}>{m.get('content') or 'CALL f'}</s>" for m in messages)

    parsed = {"role": "assistant", "content": "", "tool_calls": calls}
    later = [*PREVIOUS, parsed, {"role": "tool", "content": "1"}]
    assert break_kind(render, PREVIOUS, later, "<user>hi</s><assistant>CALL f</s>", "CALL f") == "template"
    assert break_kind(render, PREVIOUS, later, "<user>hi</s><assistant>call(f)</s>", "call(f)") == "round_trip"

    def refuse(messages, add_generation_prompt):
        raise ValueError("the last turn must be the user's")

    assert break_kind(refuse, PREVIOUS, later, "<user>hi</s><assistant>call(f)</s>", "call(f)") == "round_trip"


class Template:
    """A tokenizer's `apply_chat_template` as a function of the messages."""

    def __init__(self, chat_template: str, render) -> None:
        self.chat_template, self._render = chat_template, render

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **kwargs):
        return self._render(messages) + ("<assistant>" if add_generation_prompt else "")


def _calls(messages) -> list:
    return [c["function"] for m in messages for c in m.get("tool_calls") or []]


def test_tool_calls_round_trip_only_when_every_parallel_call_parses_back():
    import json

    def hermes(first_only: bool):
        def render(messages):
            calls = _calls(messages)[:1] if first_only else _calls(messages)
            blocks = [
                f"<tool_call>\n{json.dumps({'name': c['name'], 'arguments': c['arguments']})}\n</tool_call>"
                for c in calls
            ]
            return "<user>rllm probe</s>" + ("<assistant>" + "\n".join(blocks) if blocks else "")

        return render

    assert tool_format_round_trips(Template("<tool_call> all", hermes(first_only=False)))
    assert not tool_format_round_trips(Template("<tool_call> first", hermes(first_only=True)))
    mistral = Template("[TOOL_CALLS]", lambda m: "[TOOL_CALLS]" + json.dumps(_calls(m)))
    assert not tool_format_round_trips(mistral)
    assert tool_format_round_trips(Template("content only", lambda m: "<user>rllm probe</s>"))  # rllm writes them


def test_a_template_that_raises_on_the_probe_counts_nothing():
    def refuse(messages):
        raise ValueError("a system turn is required")

    assert tool_format_round_trips(Template("strict", refuse))
