import copy

import pytest

from rllm.models.chat import ChatRenderer, render_messages, render_text
from rllm.types import ModelOutput

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate arithmetic.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]


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
    renderer = ChatRenderer(qwen_tokenizer, tools=TOOLS)
    messages, _ = _converse(qwen_tokenizer, renderer, turns=2)
    final = renderer.render(messages)
    assert renderer.mismatches == 0
    assert '"name": "calc"' in qwen_tokenizer.decode(final)
    assert final == render_messages(qwen_tokenizer, messages, tools=TOOLS)


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
            shown = [{**m, "content": m["content"].split("</think>")[-1]}
                     if m["role"] == "assistant" and i < last - 1 else m for i, m in enumerate(messages)]  # fmt: skip
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


@pytest.mark.parametrize("tools", [None, TOOLS])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_render_text_equals_apply_chat_template(shipped_tokenizer, tools, add_generation_prompt):
    """The fast path (transformers' compiled template called directly) renders exactly what apply_chat_template
    renders, and inputs it does not take (reasoning fields, non-JSON values) fall back to it."""
    for messages in _conversations():
        try:
            expected = shipped_tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
            )
        except Exception as exc:  # a template that rejects this shape must reject it on both paths
            with pytest.raises(type(exc)):
                render_text(shipped_tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt)
            continue
        assert render_text(shipped_tokenizer, messages, tools=tools,
                           add_generation_prompt=add_generation_prompt) == expected  # fmt: skip
    import transformers.utils.chat_template_utils as chat_utils

    from rllm.models.chat import _fast_template

    if hasattr(chat_utils, "_normalize_chat_messages"):  # transformers >= 5.11 (not the verl venv's 5.10)
        assert _fast_template(shipped_tokenizer, tools) is not None  # the fast path was taken for plain inputs
    copy.deepcopy(shipped_tokenizer)  # rendering left nothing on the tokenizer that cannot be copied


def test_an_image_for_a_text_only_model_is_refused_naming_the_model(shipped_tokenizer):
    import re

    from rllm.errors import ImageError

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "system", "content": "Look."}, {"role": "user", "content": [image]}]
    name = re.escape(shipped_tokenizer.name_or_path)
    with pytest.raises(ImageError, match=rf"messages\[1\] holds an image, but the model '{name}' is a text-only model"
                                         ".*images need a vision-language model"):  # fmt: skip
        render_text(shipped_tokenizer, messages)
    with pytest.raises(ImageError, match="text-only"):
        ChatRenderer(shipped_tokenizer).render([{"role": "user", "content": [{"type": "image", "path": "x.png"}]}])
