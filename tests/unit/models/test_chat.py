import copy
import json
import warnings

import pytest

from rllm.models.chat import ChatRenderer, render_messages, render_text
from rllm.types import ModelOutput
from tests.support.chat import CALC_TOOLS


def _sample(tokenizer, prompt_ids, reply, *, end_with_eos=True):
    ids = tokenizer.encode(reply, add_special_tokens=False)
    if end_with_eos:
        ids.append(tokenizer.eos_token_id)
    return ModelOutput(text=reply, prompt_ids=prompt_ids, completion_ids=ids, logprobs=[-1.0] * len(ids))


def _converse(tokenizer, renderer, turns, *, end_with_eos=True):
    messages = [{"role": "system", "content": "Reach the goal."}, {"role": "user", "content": "P_\n_G"}]
    prompts = []
    for k in range(turns):
        ids = renderer.render(messages)
        prompts.append(ids)
        reply = f"Action: {['Right', 'Down', 'Left'][k % 3]}"
        renderer.record(_sample(tokenizer, ids, reply, end_with_eos=end_with_eos))
        messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": f"obs {k}"}]
    return messages, prompts


def test_delta_prompts_equal_the_full_render_when_replies_end_the_turn(shipped_tokenizer):
    renderer = ChatRenderer(shipped_tokenizer)
    messages, prompts = _converse(shipped_tokenizer, renderer, turns=3)
    final = renderer.render(messages)
    assert renderer.mismatches == 0
    assert final == render_messages(shipped_tokenizer, messages)
    for shorter, longer in zip(prompts, prompts[1:] + [final], strict=True):
        assert longer[: len(shorter)] == shorter


def test_a_reply_cut_by_max_tokens_gets_the_end_of_turn_as_context(shipped_tokenizer):
    renderer = ChatRenderer(shipped_tokenizer)
    messages, _prompts = _converse(shipped_tokenizer, renderer, turns=2, end_with_eos=False)
    assert renderer.mismatches == 0
    # the model never sampled <|im_end|>; the delta supplies it, so the text is the same as a full render
    text = shipped_tokenizer.decode(renderer.render(messages), skip_special_tokens=False)
    assert text == render_text(shipped_tokenizer, messages)


def test_rewritten_history_is_counted_and_rendered_in_full(shipped_tokenizer):
    renderer = ChatRenderer(shipped_tokenizer)
    messages, _ = _converse(shipped_tokenizer, renderer, turns=2)
    edited = [*messages]
    edited[1] = {"role": "user", "content": "a different first observation"}
    assert renderer.render(edited) == render_messages(shipped_tokenizer, edited)
    assert renderer.mismatches == 1


def test_a_stored_reply_that_differs_from_the_sample_is_counted(shipped_tokenizer):
    renderer = ChatRenderer(shipped_tokenizer)
    messages = [{"role": "user", "content": "hi"}]
    ids = renderer.render(messages)
    renderer.record(_sample(shipped_tokenizer, ids, "<think>long</think> Up"))
    renderer.render([*messages, {"role": "assistant", "content": "Up"}, {"role": "user", "content": "next"}])
    assert renderer.mismatches == 1


def test_tools_are_rendered_and_turns_still_extend(qwen_tokenizer):
    renderer = ChatRenderer(qwen_tokenizer, tools=CALC_TOOLS)
    messages, _ = _converse(qwen_tokenizer, renderer, turns=2)
    final = renderer.render(messages)
    assert renderer.mismatches == 0
    assert '"name": "calc"' in qwen_tokenizer.decode(final)
    assert final == render_messages(qwen_tokenizer, messages, tools=CALC_TOOLS)


def test_record_before_render_is_an_error(smollm2_tokenizer):
    with pytest.raises(RuntimeError, match="before render"):
        ChatRenderer(smollm2_tokenizer).record(ModelOutput(completion_ids=[1]))


def test_a_template_that_reprints_earlier_replies_differently_is_counted():
    """Like templates that strip old reasoning: once a later turn exists, an earlier reply prints differently, so
    the sampled tokens are no longer a prefix of the prompt: a new row, counted."""
    from rllm.models.fake import FakeTokenizer

    class StrippingTokenizer(FakeTokenizer):
        def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, tokenize=False):
            last = len(messages) - 1
            shown = [
                {**m, "content": m["content"].split("</think>")[-1]} if m["role"] == "assistant" and i < last - 1 else m
                for i, m in enumerate(messages)
            ]
            return super().apply_chat_template(shown, tools, add_generation_prompt, tokenize)

    for tokenizer, expected in ((FakeTokenizer(), 0), (StrippingTokenizer(), 1)):
        renderer = ChatRenderer(tokenizer)
        messages = [{"role": "user", "content": "hi"}]
        ids = renderer.render(messages)
        reply = "<think>hmm</think>Up"
        renderer.record(_sample(tokenizer, ids, reply))
        messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": "next"}]
        ids = renderer.render(messages)
        renderer.record(_sample(tokenizer, ids, "Down"))
        renderer.render([*messages, {"role": "assistant", "content": "Down"}, {"role": "user", "content": "again"}])
        assert renderer.mismatches == expected, tokenizer


def _conversations():
    """Conversations of the shapes rollouts send: system/user turns, tool calls as dicts (arguments as a dict and
    as a JSON string), tool results, None-valued keys, unicode, and the inputs the fast path must hand over."""
    call = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": {"expr": "2+2"}}}
    yield [{"role": "user", "content": "Hi"}]
    yield [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Héllo ✓ <|im_start|>"}]
    yield [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "calc"},
        {"role": "assistant", "content": "4", "tool_calls": None},
        {"role": "user", "content": "and 3*3?"},
    ]
    string_args = {**call, "function": {"name": "calc", "arguments": '{"expr": "3*3"}'}}
    yield [{"role": "user", "content": "3*3?"}, {"role": "assistant", "content": "", "tool_calls": [string_args]}]
    yield [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "reasoning_content": "think"}]
    yield [{"role": "user", "content": ("tuple", "not plain")}]


@pytest.mark.filterwarnings("ignore:the chat template .* ignores `tools`")
@pytest.mark.parametrize("tools", [None, CALC_TOOLS])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_render_text_equals_apply_chat_template(shipped_tokenizer, tools, add_generation_prompt, tuned_runtime):
    """The fast path (transformers' compiled template called directly, where rllm.runtime enables it) renders exactly
    what apply_chat_template renders, and inputs it does not take (reasoning fields, non-JSON values) fall back to
    it. (Tools a template ignores are in the system message on both paths.)"""
    from rllm.models.chat import describe_ignored_tools

    for messages in _conversations():
        try:
            shown = describe_ignored_tools(shipped_tokenizer, messages, tools) if tools else messages
            expected = shipped_tokenizer.apply_chat_template(
                shown, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
            )
        except Exception as exc:  # a template that rejects this shape must reject it on both paths
            with pytest.raises(type(exc)):
                render_text(shipped_tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt)
            continue
        before = copy.deepcopy(messages)
        assert (
            render_text(shipped_tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt)
            == expected
        )
        assert messages == before  # the messages are handed to the template uncopied where they hold no None
    import transformers.utils.chat_template_utils as chat_utils

    from rllm.models.chat import _fast_template

    if hasattr(chat_utils, "_normalize_chat_messages"):  # transformers >= 5.11 (not the verl venv's 5.10)
        fast = _fast_template(shipped_tokenizer, tools)
        assert fast is not None  # the fast path was taken for plain inputs
        # rendered with transformers' globals (raise_exception, strftime_now, ...) held in one plain dict
        compiled = chat_utils._compile_jinja_template(shipped_tokenizer.chat_template)
        assert type(fast.globals) is dict and fast.globals == dict(compiled.globals)
        assert fast.environment is compiled.environment
    copy.deepcopy(shipped_tokenizer)  # rendering left nothing on the tokenizer that cannot be copied


def test_the_private_transformers_helpers_of_the_fast_path_are_there(smollm2_tokenizer):
    """The fast path reads transformers' private `chat_template_utils` names in one place (`_template_compiler`):
    on the transformers this project pins (>= 5.11) they must all be there and compile the template as relied on
    (a cached compiled Jinja template with the environment and globals the fast path copies), or an upgrade has
    changed them and the fast path would quietly turn itself off."""
    import transformers
    from packaging.version import Version

    from rllm.models import chat

    if Version(transformers.__version__) < Version("5.11"):
        pytest.skip("transformers < 5.11 renders its own way: the fast path is off by design")
    compiler = chat._template_compiler()
    assert compiler is not None, "transformers lacks a private helper the fast path mirrors"
    compiled = compiler(smollm2_tokenizer.chat_template)
    assert compiler(smollm2_tokenizer.chat_template) is compiled  # cached by transformers, as the fast path relies on
    assert {"raise_exception"} <= set(compiled.globals) and compiled.environment.is_async is False
    messages = [{"role": "user", "content": "Hi"}]
    fast = chat._flat_template(smollm2_tokenizer.chat_template)
    rendered = fast.render(
        messages=messages,
        tools=None,
        documents=None,
        add_generation_prompt=True,
        **smollm2_tokenizer.special_tokens_map,
    )
    assert rendered == smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def test_without_the_runtime_enabled_rendering_takes_apply_chat_template(smollm2_tokenizer, monkeypatch):
    """A library user who did not opt in (rllm.runtime.enable) renders through transformers' public API only."""
    from rllm.models import chat

    def private(*args):
        raise AssertionError("the private fast path ran without rllm.runtime enabled")

    monkeypatch.setattr(chat, "_fast_template", private)
    messages = [{"role": "user", "content": "Hi"}]
    expected = smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert render_text(smollm2_tokenizer, messages) == expected


def test_an_image_for_a_text_only_model_is_refused_naming_the_model(shipped_tokenizer):
    import re

    from rllm.errors import ImageError

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "system", "content": "Look."}, {"role": "user", "content": [image]}]
    name = re.escape(shipped_tokenizer.name_or_path)
    with pytest.raises(
        ImageError,
        match=rf"messages\[1\] holds an image, but the model '{name}' is a text-only model"
        ".*images need a vision-language model",
    ):
        render_text(shipped_tokenizer, messages)
    with pytest.raises(ImageError, match="text-only"):
        ChatRenderer(shipped_tokenizer).render([{"role": "user", "content": [{"type": "image", "path": "x.png"}]}])


# ---- tools with a template that ignores them (SmolLM2's) ----


def _swe_first_prompt(tokenizer):
    """The SWE agent's first prompt, rendered as a rollout renders it: the agent's messages, the env's tools."""
    from rllm.tasks.swe.agent import SWEAgent
    from rllm.tasks.swe.env import issue_prompt
    from rllm.tasks.swe.tools import tool_schemas

    agent = SWEAgent()
    agent.reset()
    issue = issue_prompt({"problem_statement": "calc.clamp(5, 0, 5) returns 0."})
    agent.update_from_env(issue, 0.0, False, {"tools": tool_schemas("r2egym")})
    renderer = ChatRenderer(tokenizer, tools=agent.tools)
    return agent, renderer, renderer.render(agent.chat_completions)


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forget which models were warned about (the warning is once per model and process)."""
    import rllm.models.chat as chat

    monkeypatch.setattr(chat, "_warned", set(), raising=False)


def test_tools_a_template_ignores_go_into_its_system_message_once(smollm2_tokenizer, fresh_warnings):
    with pytest.warns(UserWarning) as caught:
        agent, _, ids = _swe_first_prompt(smollm2_tokenizer)
        _swe_first_prompt(smollm2_tokenizer)  # a second rollout of the same model: no second warning
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert str(caught[0].message) == (
        f"the chat template of {smollm2_tokenizer.name_or_path!r} ignores `tools`, so rllm put the 4 tools in the "
        "system message, with the <tool_call> JSON call format rllm parses (docs/agents/tools-mcp.md)"
    )
    text = smollm2_tokenizer.decode(ids, skip_special_tokens=False)
    for tool in agent.tools:  # each tool's name, description and parameters, as its JSON schema
        assert json.dumps(tool) in text
        assert f'"name": "{tool["function"]["name"]}"' in text and tool["function"]["description"] in text
    # appended to the agent's own system message, in the call format rllm's parser reads
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n" + agent.system_prompt + "\n\n# Tools\n")
    assert system.endswith('<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
    assert text.count("# Tools") == 1 and "named SmolLM" not in text


@pytest.mark.filterwarnings("ignore:the chat template .* ignores `tools`")
def test_calls_written_as_described_parse_and_the_turns_still_extend(smollm2_tokenizer):
    agent, renderer, ids = _swe_first_prompt(smollm2_tokenizer)
    reply = '<tool_call>\n{"name": "execute_bash", "arguments": {"cmd": "grep -n high calc.py"}}\n</tool_call>'
    output = _sample(smollm2_tokenizer, ids, reply)
    renderer.record(output)
    action = agent.update_from_model(output)
    (call,) = action.action["tool_calls"]
    assert (call["name"], call["arguments"]) == ("execute_bash", {"cmd": "grep -n high calc.py"})
    agent.update_from_env("12:    if x >= high + 1:", 0.0, False, {})
    context = ids + output.completion_ids
    next_ids = renderer.render(agent.chat_completions)
    assert renderer.extended and renderer.mismatches == 0 and next_ids[: len(context)] == context
    assert next_ids == render_messages(smollm2_tokenizer, agent.chat_completions, tools=agent.tools)


def test_a_template_that_renders_tools_is_left_alone(qwen_tokenizer, fresh_warnings):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either
        _, _, ids = _swe_first_prompt(qwen_tokenizer)
        text = render_text(qwen_tokenizer, messages, tools=CALC_TOOLS)
    assert text == qwen_tokenizer.apply_chat_template(
        messages, tools=CALC_TOOLS, add_generation_prompt=True, tokenize=False
    )
    assert text.count('"name": "calc"') == 1 and text.count("# Tools") == 1
    assert qwen_tokenizer.decode(ids).count("# Tools") == 1


def test_without_a_system_message_one_is_added_for_the_tools(smollm2_tokenizer, fresh_warnings):
    from rllm.tools.parsing import tools_system_prompt

    messages = [{"role": "user", "content": "2+2?"}]
    with pytest.warns(UserWarning, match="put the tool in the system message"):
        text = render_text(smollm2_tokenizer, messages, tools=CALC_TOOLS)
    expected = [{"role": "system", "content": tools_system_prompt(CALC_TOOLS)}, *messages]
    assert text == smollm2_tokenizer.apply_chat_template(expected, add_generation_prompt=True, tokenize=False)


def test_a_template_that_ignores_tools_and_calls_in_another_format_is_refused():
    from rllm.errors import RllmError
    from rllm.models.fake import FakeTokenizer

    class MistralLike(FakeTokenizer):  # prints [TOOL_CALLS] for replies, never the tools it is given
        chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}[TOOL_CALLS]"

        def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, tokenize=False):
            return super().apply_chat_template(messages, None, add_generation_prompt, tokenize)

    with pytest.raises(RllmError, match="ignores `tools` and writes tool calls in the mistral format"):
        render_text(MistralLike(), [{"role": "user", "content": "hi"}], tools=CALC_TOOLS)
    assert render_text(FakeTokenizer(), [{"role": "user", "content": "hi"}], tools=CALC_TOOLS).count("calc") == 1
