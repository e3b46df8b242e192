"""The contract every token-in/token-out model client keeps, whatever serves it: the engines and the trainer rely on
each clause. `tests/contract/test_model_clients.py` runs it on `FakeModel`, `LocalModel` and `OpenAIClient` against
the fake server; `tests/integration/test_vllm_server.py` on the vLLM client against a real vLLM server.

Each clause is `async def clause(client, tokenizer)`; `CLAUSES` lists them. A clause asserts only what every client
must do, never a value one of them happens to produce.
"""

from __future__ import annotations

import asyncio
import math

from rllm.models.base import SamplingParams

__all__ = ["CLAUSES", "PROMPTS"]

MESSAGES = [{"role": "user", "content": "Name a colour."}]
PROMPTS = ("Count: one, two,", "The capital of France is", "def add(a, b):")
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


async def the_prompt_is_echoed_and_every_token_has_its_logprob(client, tokenizer) -> None:
    """`prompt_ids` are the ids sent; one finite logprob ≤ 0 per completion id; at most `max_tokens` of them."""
    prompt = _ids(tokenizer, PROMPTS[0])
    out = await client.generate(prompt, GREEDY)
    assert out.prompt_ids == prompt
    assert 1 <= len(out.completion_ids) <= GREEDY.max_tokens
    assert len(out.logprobs) == len(out.completion_ids)
    assert all(math.isfinite(lp) and lp <= 1e-6 for lp in out.logprobs), out.logprobs


async def the_text_is_what_the_completion_ids_decode_to(client, tokenizer) -> None:
    out = await client.generate(_ids(tokenizer, PROMPTS[1]), GREEDY)
    assert out.text == tokenizer.decode(out.completion_ids, skip_special_tokens=True)


async def the_finish_reason_says_why_it_ended(client, tokenizer) -> None:
    """ "length" exactly when `max_tokens` ids came without an end token; "stop" when an end token ended it."""
    sampling = SamplingParams(temperature=0.0, max_tokens=3)
    out = await client.generate(_ids(tokenizer, PROMPTS[2]), sampling)
    ended = out.completion_ids[-1] == tokenizer.eos_token_id
    assert out.finish_reason == ("stop" if ended else "length"), (out.finish_reason, out.completion_ids)
    if out.finish_reason == "length":
        assert len(out.completion_ids) == sampling.max_tokens


async def greedy_decoding_repeats(client, tokenizer) -> None:
    prompt = _ids(tokenizer, PROMPTS[0])
    first, second = [await client.generate(prompt, GREEDY) for _ in range(2)]
    assert first.completion_ids == second.completion_ids and first.logprobs == second.logprobs


async def the_same_seed_gives_the_same_sample(client, tokenizer) -> None:
    prompt = _ids(tokenizer, PROMPTS[1])
    sampling = SamplingParams(temperature=1.0, max_tokens=8, seed=7)
    first, second = [await client.generate(prompt, sampling) for _ in range(2)]
    assert first.completion_ids == second.completion_ids


async def concurrent_calls_answer_as_one_at_a_time(client, tokenizer) -> None:
    """The engines send many requests at once: batched, each must get its own answer, the one it gets alone."""
    prompts = [_ids(tokenizer, text) for text in PROMPTS]
    alone = [await client.generate(prompt, GREEDY) for prompt in prompts]
    together = await asyncio.gather(*(client.generate(prompt, GREEDY) for prompt in prompts))
    assert [out.prompt_ids for out in together] == prompts
    assert [out.completion_ids for out in together] == [out.completion_ids for out in alone]


async def chat_messages_are_rendered_with_the_chat_template(client, tokenizer) -> None:
    out = await client.generate(MESSAGES, GREEDY)
    rendered = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    rendered = rendered["input_ids"] if isinstance(rendered, dict) or hasattr(rendered, "keys") else rendered
    assert out.prompt_ids == list(rendered)
    assert out.completion_ids and len(out.logprobs) == len(out.completion_ids)


CLAUSES = (
    the_prompt_is_echoed_and_every_token_has_its_logprob,
    the_text_is_what_the_completion_ids_decode_to,
    the_finish_reason_says_why_it_ended,
    greedy_decoding_repeats,
    the_same_seed_gives_the_same_sample,
    concurrent_calls_answer_as_one_at_a_time,
    chat_messages_are_rendered_with_the_chat_template,
)
