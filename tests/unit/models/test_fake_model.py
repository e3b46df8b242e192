"""FakeModel and FakeTokenizer: the test doubles the engine tests stand on."""

from __future__ import annotations

import asyncio
import time

import pytest

from rllm.errors import InfraError
from rllm.models.base import ModelClient, SamplingParams
from rllm.models.chat import ChatRenderer
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.types import ModelOutput


def generate(model: FakeModel, prompt, sampling: SamplingParams | None = None) -> ModelOutput:
    return asyncio.run(model.generate(prompt, sampling))


USER = [{"role": "user", "content": "hi"}]


def test_is_a_model_client():
    assert isinstance(FakeModel("x"), ModelClient)


def test_list_script_is_consumed_in_order_then_fails_loudly():
    model = FakeModel(["one", "two"])
    assert generate(model, USER).text == "one"
    assert generate(model, USER).text == "two"
    with pytest.raises(IndexError, match="exhausted"):
        generate(model, USER)
    assert len(model.calls) == 3 and isinstance(model.calls[2].error, IndexError)


def test_string_script_replies_always():
    model = FakeModel("same")
    assert [generate(model, USER).text for _ in range(3)] == ["same"] * 3


def test_text_only_without_tokenizer():
    out = generate(FakeModel("hello"), USER)
    assert (out.text, out.content, out.finish_reason) == ("hello", "hello", "stop")
    assert out.prompt_ids is None and out.completion_ids is None and out.logprobs is None


def test_callable_script_branches_on_prompt_and_injects_errors():
    def script(prompt, sampling):
        content = prompt[-1]["content"]
        if content == "boom":
            raise InfraError("server down")
        if content == "returned":
            return InfraError("returned error")
        return content.upper()

    model = FakeModel(script)
    assert generate(model, [{"role": "user", "content": "abc"}]).text == "ABC"
    with pytest.raises(InfraError, match="server down"):
        generate(model, [{"role": "user", "content": "boom"}])
    with pytest.raises(InfraError, match="returned error"):
        generate(model, [{"role": "user", "content": "returned"}])


def test_scripted_model_output_passes_through():
    scripted = ModelOutput(text="t", completion_ids=[1, 2], finish_reason="stop")
    assert generate(FakeModel([scripted]), USER) is scripted


def test_token_ids_with_tokenizer():
    tok = FakeTokenizer()
    model = FakeModel("abc", tokenizer=tok, logprob=-0.25)
    out = generate(model, [5, 6, 7])
    assert out.prompt_ids == [5, 6, 7]
    assert out.completion_ids == tok.encode("abc") + [tok.eos_token_id]
    assert out.logprobs == [-0.25] * 4
    assert (out.text, out.finish_reason) == ("abc", "stop")


def test_messages_with_tokenizer_are_rendered_to_prompt_ids():
    tok = FakeTokenizer()
    out = generate(FakeModel("ok", tokenizer=tok), USER)
    assert tok.decode(out.prompt_ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_max_tokens_truncates_ids():
    tok = FakeTokenizer()
    out = generate(FakeModel("abcdef", tokenizer=tok), [1], SamplingParams(max_tokens=3))
    assert out.completion_ids == tok.encode("abc") and out.text == "abc"
    assert out.finish_reason == "length" and len(out.logprobs) == 3
    # A reply that fits exactly, eos included, is not truncated.
    out = generate(FakeModel("ab", tokenizer=tok), [1], SamplingParams(max_tokens=3))
    assert out.finish_reason == "stop" and out.completion_ids[-1] == tok.eos_token_id


def test_delay_sleeps_without_blocking_other_calls():
    model = FakeModel("x", delay=0.05)

    async def many():
        return await asyncio.gather(*(model.generate(USER) for _ in range(20)))

    start = time.perf_counter()
    asyncio.run(many())
    assert time.perf_counter() - start < 0.5  # 20 calls of 50 ms overlap


def test_per_call_delay_and_call_record():
    model = FakeModel("x", delay=lambda prompt, sampling: 0.0 if sampling.max_tokens == 5 else 0.01)
    generate(model, USER, SamplingParams(max_tokens=5))
    assert model.calls[0].prompt == USER and model.calls[0].sampling.max_tokens == 5
    assert model.calls[0].output.text == "x" and model.calls[0].error is None


def test_fake_tokenizer_round_trips_and_renders_chatml():
    tok = FakeTokenizer()
    text = "<|im_start|>user\nhé \u2063 ∑<|im_end|>\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert ids[0] == tok.encode("<|im_start|>")[0] and len(tok.encode("<|im_end|>")) == 1
    assert tok.decode(ids, skip_special_tokens=True) == "user\nhé \u2063 ∑\n"
    rendered = tok.apply_chat_template([{"role": "system", "content": "s"}, *USER], tokenize=False)
    assert rendered == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(USER, tokenize=True) == tok.encode(tok.apply_chat_template(USER))


def test_fake_tokenizer_multi_turn_renders_as_exact_extensions():
    tok = FakeTokenizer()
    model = FakeModel(["first", "second"], tokenizer=tok)
    renderer = ChatRenderer(tok)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}]
    previous = None
    for _ in range(2):
        ids = renderer.render(messages)
        if previous is not None:
            assert ids[: len(previous)] == previous
        out = generate(model, ids)
        renderer.record(out)
        previous = out.prompt_ids + out.completion_ids
        messages = [*messages, {"role": "assistant", "content": out.text}, {"role": "user", "content": "more"}]
    assert renderer.mismatches == 0
    # The extended prompt is what a full render of the same conversation would give.
    assert ids == tok.encode(tok.apply_chat_template(messages[:-2]))
