"""LocalModel: continuous batching must not change what a request gets (ids, logprobs, seeds), and the worker must
survive bad requests, weight updates and shutdown. Tiny random-init Llama with the real SmolLM2 tokenizer."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from rllm.errors import InfraError
from rllm.inference import InferenceOptions
from rllm.inference.model import LocalModel, PromptTooLongError
from rllm.models.base import SamplingParams
from tests.support.models import sharp_tiny_model

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


@pytest.fixture
def make_model(tokenizer):
    created = []

    def make(**kwargs):
        weights_seed = kwargs.pop("model_seed", 0)
        model = LocalModel(sharp_tiny_model(tokenizer, seed=weights_seed), tokenizer, InferenceOptions(**kwargs))
        created.append(model)
        return model

    yield make
    for model in created:
        model.close()


@pytest.fixture(scope="module")
def prompts(tokenizer):
    texts = [
        "Hi",
        "The cat sat on the mat and looked at the",
        "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15",
        "Once upon a time, in a land far away, there lived a very old dragon who",
        "Why?",
        "Paris is",
    ]
    return [tokenizer.encode(t) for t in texts]


def run(coro):
    return asyncio.run(coro)


async def gather(model, prompts, sampling):
    return await asyncio.gather(*[model.generate(p, sampling) for p in prompts])


async def gather_each(model, requests, return_exceptions=False):
    """Submit (prompt, sampling) pairs concurrently."""
    calls = [model.generate(p, s) for p, s in requests]
    return await asyncio.gather(*calls, return_exceptions=return_exceptions)


def reference_logprobs(model, prompt_ids, completion_ids, temperature):
    """log softmax(logits / T) of the completion from one plain forward pass over prompt + completion."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logprobs = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return logprobs.gather(1, torch.tensor(completion_ids)[:, None]).squeeze(1)


def test_greedy_batched_equals_one_at_a_time(make_model, prompts):
    model = make_model(max_batch_size=4)  # 6 prompts: some join the running batch later
    batched = run(gather(model, prompts, GREEDY))
    alone = [run(model.generate(p, GREEDY)) for p in prompts]
    assert [o.completion_ids for o in batched] == [o.completion_ids for o in alone]
    assert all(o.prompt_ids == p for o, p in zip(batched, prompts, strict=True))
    assert len({tuple(o.completion_ids) for o in batched}) > 1  # the model is not degenerate


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_logprobs_match_a_plain_forward_pass(make_model, prompts, temperature):
    model = make_model(max_batch_size=4)
    outputs = run(gather(model, prompts, SamplingParams(temperature=temperature, max_tokens=10, seed=1)))
    for out in outputs:
        assert len(out.logprobs) == len(out.completion_ids)
        expected = reference_logprobs(model.model, out.prompt_ids, out.completion_ids, temperature)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4), (out.logprobs, expected)


def test_top_k_top_p_logprobs_are_untruncated_and_samples_stay_in_the_nucleus(make_model, prompts):
    model = make_model()
    sampling = SamplingParams(temperature=1.0, top_k=5, top_p=0.9, max_tokens=8, seed=3)
    for out in run(gather(model, prompts, sampling)):
        expected = reference_logprobs(model.model, out.prompt_ids, out.completion_ids, 1.0)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)
        ids = torch.tensor([out.prompt_ids + out.completion_ids])
        with torch.no_grad():
            logits = model.model(input_ids=ids).logits[0, len(out.prompt_ids) - 1 : -1]
        top5 = logits.topk(5).indices
        assert all(tok in row.tolist() for tok, row in zip(out.completion_ids, top5, strict=True))


def test_max_tokens_and_finish_reason(make_model, prompts):
    model = make_model(eos_token_ids=())
    out = run(model.generate(prompts[0], SamplingParams(max_tokens=5, seed=0)))
    assert len(out.completion_ids) == 5 and out.finish_reason == "length"
    assert out.text == model.tokenizer.decode(out.completion_ids, skip_special_tokens=True)
    assert out.weight_version == 0


def test_eos_ends_the_completion_and_is_kept(make_model, prompts, tokenizer):
    assert tokenizer.eos_token_id in make_model().eos_token_ids  # default comes from the tokenizer
    probe = make_model(eos_token_ids=())
    full = run(probe.generate(prompts[1], GREEDY)).completion_ids
    eos = full[3]  # pretend this token is EOS
    model = make_model(eos_token_ids={eos})
    out = run(model.generate(prompts[1], GREEDY))
    assert out.completion_ids == full[: full.index(eos) + 1]
    assert out.completion_ids[-1] == eos and out.finish_reason == "stop"
    assert len(out.logprobs) == len(out.completion_ids)


def test_stop_string_ends_generation_and_keeps_the_tokens(make_model, prompts, tokenizer):
    model = make_model(eos_token_ids=(), prefix_cache_tokens=0)  # each call prefills anew: bitwise comparable
    sampling = SamplingParams(temperature=1.0, max_tokens=20, seed=5)
    full = run(model.generate(prompts[2], sampling))
    pieces = [tokenizer.decode(full.completion_ids[: i + 1], skip_special_tokens=True) for i in range(20)]
    for stop in (
        pieces[4][len(pieces[3]) :].strip(),  # the whole text of one token
        pieces[6][len(pieces[5]) - 2 : len(pieces[5]) + 2],
    ):  # a string straddling two tokens
        first = next(i for i, text in enumerate(pieces) if stop in text)
        out = run(model.generate(prompts[2], sampling.model_copy(update={"stop": [stop]})))
        assert out.finish_reason == "stop"
        assert out.completion_ids == full.completion_ids[: first + 1]
        assert stop in out.text and out.logprobs == full.logprobs[: first + 1]


def test_seeded_sample_does_not_depend_on_the_batch(make_model, prompts):
    model = make_model(max_batch_size=3)
    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=1234)
    alone = run(model.generate(prompts[3], sampling))
    others = [SamplingParams(temperature=0.8, max_tokens=n, seed=n) for n in (3, 15, 7, 20, 2)]

    async def crowded():
        crowd = [model.generate(p, s) for p, s in zip(prompts, others, strict=False)]
        return await asyncio.gather(*crowd[:2], model.generate(prompts[3], sampling), *crowd[2:])

    in_crowd = run(crowded())[2]
    assert in_crowd.completion_ids == alone.completion_ids
    other_seed = run(model.generate(prompts[3], SamplingParams(temperature=1.0, max_tokens=10, seed=99)))
    assert other_seed.completion_ids != alone.completion_ids


def test_unseeded_runs_reproduce_for_the_same_workload(make_model, prompts):
    sampling = SamplingParams(temperature=1.0, max_tokens=8)
    first = run(gather(make_model(seed=7), prompts, sampling))
    second = run(gather(make_model(seed=7), prompts, sampling))
    other = run(gather(make_model(seed=8), prompts, sampling))
    assert [o.completion_ids for o in first] == [o.completion_ids for o in second]
    assert [o.completion_ids for o in first] != [o.completion_ids for o in other]


def test_identical_prompts_share_one_prefill(make_model, prompts):
    model = make_model()
    outs = run(gather_each(model, [(prompts[3], SamplingParams(max_tokens=6, seed=s)) for s in range(4)]))
    assert model.stats["prefills_shared"] == 3
    assert len({tuple(o.completion_ids) for o in outs}) > 1
    for out in outs:
        expected = reference_logprobs(model.model, out.prompt_ids, out.completion_ids, 1.0)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_messages_are_rendered_with_the_chat_template(make_model, tokenizer):
    from rllm.models.chat import render_messages

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    out = run(make_model().generate(messages, GREEDY))
    assert out.prompt_ids == render_messages(tokenizer, messages)


def test_update_weights_changes_outputs_and_bumps_the_version(make_model, prompts, tokenizer, tmp_path):
    model = make_model()
    before = run(model.generate(prompts[1], GREEDY))
    other = sharp_tiny_model(tokenizer, seed=1).state_dict()
    assert model.update_weights(other) == 1 and model.weight_version == 1
    after = run(model.generate(prompts[1], GREEDY))
    assert after.completion_ids != before.completion_ids and after.weight_version == 1

    # A partial state dict (as a merged LoRA would be) only touches what it names.
    name = "model.layers.0.mlp.down_proj.weight"
    partial = {name: torch.zeros_like(other[name])}
    assert model.update_weights(partial) == 2
    assert torch.equal(model.model.state_dict()[name], partial[name])
    assert torch.equal(model.model.state_dict()["model.norm.weight"], other["model.norm.weight"])

    from safetensors.torch import save_file

    original = sharp_tiny_model(tokenizer, seed=0).state_dict()
    save_file({k: v.contiguous() for k, v in original.items() if k != "lm_head.weight"}, tmp_path / "w.safetensors")
    assert model.update_weights(tmp_path, version=10) == 10
    restored = run(model.generate(prompts[1], GREEDY))
    assert restored.completion_ids == before.completion_ids and restored.weight_version == 10

    with pytest.raises(KeyError, match="does not have"):
        model.update_weights({"not.a.weight": torch.zeros(1)})
    assert model.weight_version == 10
    assert run(model.generate(prompts[1], GREEDY)).completion_ids == before.completion_ids


def test_a_generation_spanning_a_weight_update_records_a_version_per_token(make_model, prompts, tokenizer):
    """A partial rollout: the update lands between two decode steps of a running request, which goes on with the new
    weights; the output says which version produced each token."""
    model = make_model(eos_token_ids=())  # never stops early: 200 tokens
    other = sharp_tiny_model(tokenizer, seed=1).state_dict()

    async def go():
        task = asyncio.create_task(model.generate(prompts[1], SamplingParams(temperature=0.0, max_tokens=200)))
        while model.stats["generated_tokens"] < 5:
            await asyncio.sleep(0.001)
        await asyncio.to_thread(model.update_weights, other)
        return await task

    out = run(go())
    versions = out.info["token_weight_versions"]
    assert out.weight_version == 0 and out.info["weight_version_end"] == 1 and len(versions) == 200
    switch = versions.index(1)
    assert 5 <= switch < 200 and versions == [0] * switch + [1] * (200 - switch)
    assert "token_weight_versions" not in run(model.generate(prompts[1], GREEDY)).info  # one version: not repeated


def test_more_requests_than_slots_all_complete(make_model, prompts):
    model = make_model(max_batch_size=3)
    requests = [(prompts[i % len(prompts)], SamplingParams(max_tokens=2 + i % 7, seed=i)) for i in range(20)]
    outs = run(gather_each(model, requests))
    for (prompt, sampling), out in zip(requests, outs, strict=True):
        assert out.prompt_ids == prompt
        assert len(out.completion_ids) <= sampling.max_tokens
    assert model.stats["decode_rows"] <= 3 * model.stats["decode_steps"]


def test_bad_requests_fail_alone(make_model, prompts, monkeypatch):
    model = make_model()
    with pytest.raises(ValueError, match="non-empty"):
        run(model.generate([]))
    with pytest.raises(PromptTooLongError, match="context"):
        run(model.generate([5] * model.context_length))
    with pytest.raises(ValueError, match="vocabulary"):
        run(model.generate([5, model.vocab_size + 3]))

    # A failure inside the worker (here: the prefill of one prompt) fails that request only, also when it was
    # batched with others (they are then prefilled one by one).
    scheduler = model._scheduler
    original = scheduler._prefill_chunk
    chunk_sizes = []

    def flaky_prefill(plans):
        chunk_sizes.append(len(plans))
        if any(plan.request.prompt_ids == prompts[0] for plan in plans):
            raise RuntimeError("boom")
        return original(plans)

    monkeypatch.setattr(scheduler, "_prefill_chunk", flaky_prefill)
    outs = run(gather_each(model, [(p, GREEDY) for p in prompts], return_exceptions=True))
    assert isinstance(outs[0], InfraError) and "boom" in str(outs[0])
    assert all(len(o.completion_ids) == 12 or o.finish_reason == "stop" for o in outs[1:])
    assert max(chunk_sizes) > 1  # the prompts were batched before the retry
    alive = run(model.generate(prompts[1], GREEDY))  # the worker and its cache are fine afterwards
    assert alive.completion_ids == outs[1].completion_ids


def _drive(model, prompt_lists, sampling=GREEDY):
    """Admit the prompts in ONE batch on this thread (no worker) and step until all are delivered."""
    delivered = {}
    requests = [model._new_request(p, sampling) for p in prompt_lists]
    for i, request in enumerate(requests):
        request.deliver = lambda req, error, i=i: delivered.__setitem__(i, error or req)
    scheduler = model._scheduler
    with torch.inference_mode():
        scheduler.admit(requests)
        while scheduler.active:
            scheduler.step()
    return [delivered[i] for i in range(len(requests))]


def test_a_failed_prefill_does_not_fail_the_prompts_that_would_have_copied_its_prefix(
    make_model, prompts, tokenizer, monkeypatch
):
    """Prompts sharing a system prompt admitted together: the first computes it, the others copy it. If the first
    one's prefill fails, the others compute their whole prompt and get what they get without the failure."""
    system = tokenizer.encode("You are a careful assistant. Answer in one short sentence, then stop. Question:")
    batch = [system + prompts[1], system + prompts[3], system + prompts[5]]
    healthy = make_model(eos_token_ids=())
    expected = _drive(healthy, batch)
    assert healthy.stats["shared_prefix_tokens"] == 2 * len(system)  # the two followers copied the leader's prefix
    model = make_model(eos_token_ids=())
    original = model._scheduler._prefill_chunk

    def failing_leader(plans):
        if any(plan.request.prompt_ids == batch[0] for plan in plans):
            raise RuntimeError("boom")
        return original(plans)

    monkeypatch.setattr(model._scheduler, "_prefill_chunk", failing_leader)
    outs = _drive(model, batch)
    assert isinstance(outs[0], InfraError) and "boom" in str(outs[0])
    assert [o.completion_ids for o in outs[1:]] == [o.completion_ids for o in expected[1:]]
    assert model.stats["shared_prefix_tokens"] == 0 and not model._scheduler.active


def test_cancelled_request_frees_its_slot(make_model, prompts):
    model = make_model(max_batch_size=1, eos_token_ids=())

    async def scenario():
        slow = asyncio.ensure_future(model.generate(prompts[0], SamplingParams(max_tokens=1000, seed=0)))
        await asyncio.sleep(0.05)
        slow.cancel()
        return await asyncio.wait_for(model.generate(prompts[1], GREEDY), timeout=30)

    assert len(run(scenario()).completion_ids) == 12


def test_close_stops_the_worker(tokenizer, prompts):
    async def scenario():
        async with LocalModel(sharp_tiny_model(tokenizer), tokenizer) as model:
            await model.generate(prompts[0], GREEDY)
            worker = model._worker
        return model, worker

    model, worker = run(scenario())
    assert not worker.is_alive()
    assert all(t.name != "rllm-local-model" or not t.is_alive() for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="closed"):
        run(model.generate(prompts[0], GREEDY))
    model.close()  # idempotent


def test_bfloat16_copy_leaves_the_passed_model_alone(tokenizer, prompts):
    base = sharp_tiny_model(tokenizer)
    with LocalModel(base, tokenizer, InferenceOptions(dtype="bfloat16")) as model:
        assert base.dtype == torch.float32 and model.model.dtype == torch.bfloat16
        out = run(model.generate(prompts[1], SamplingParams(max_tokens=6, seed=0)))
        expected = reference_logprobs(base, out.prompt_ids, out.completion_ids, 1.0)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=0.5)


# ------------------------------------------------------------ prefix cache (multi-turn K/V reuse)


def _three_turns(model, first_prompt, delta, sampling=GREEDY):
    """Each turn's prompt = the previous prompt + its completion + `delta` (an observation), as in a rollout."""
    prompt, outs = first_prompt, []
    for _ in range(3):
        out = run(model.generate(prompt, sampling))
        outs.append(out)
        prompt = prompt + out.completion_ids + delta
    return outs


# float64: reused K/V come from other forward shapes (decode steps, a shorter prefill) than a full re-prefill, so
# float32 differs by a couple of ulps of this sharp model's logits (|logit| ~ 90, ulp ~ 8e-6), about as much as the
# cache-off path differs from one plain forward; float64 leaves only the logits' final cast, so 1e-5 is meaningful.
@pytest.mark.parametrize(("dtype", "atol"), [("float64", 1e-5), ("float32", 1e-4)])
@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(temperature=1.0, max_tokens=12, seed=4)])
def test_prefix_cache_gives_the_same_multi_turn_rollout(make_model, prompts, sampling, dtype, atol):
    cached = make_model(eos_token_ids=(), dtype=dtype)
    plain = make_model(eos_token_ids=(), dtype=dtype, prefix_cache_tokens=0)
    with_cache = _three_turns(cached, prompts[3], prompts[1], sampling)
    without = _three_turns(plain, prompts[3], prompts[1], sampling)
    for a, b in zip(with_cache, without, strict=True):
        assert a.prompt_ids == b.prompt_ids and a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=atol, rtol=0)
        expected = reference_logprobs(cached.model, a.prompt_ids, a.completion_ids, sampling.temperature)
        assert torch.allclose(torch.tensor(a.logprobs), expected, atol=1e-4)
    # Turns 2 and 3 reuse everything but the previous completion's last token (its K/V was never computed).
    reused = sum(len(o.prompt_ids) + len(o.completion_ids) - 1 for o in with_cache[:2])
    assert cached.stats["prefix_hit_tokens"] == reused and plain.stats["prefix_hit_tokens"] == 0
    assert cached.stats["prefill_tokens"] == plain.stats["prefill_tokens"] - reused
    assert len(cached._scheduler.prefixes) == 1  # each turn's entry replaced the previous one it extends


def test_update_weights_clears_the_prefix_cache(make_model, prompts, tokenizer):
    model = make_model(eos_token_ids=())
    first = run(model.generate(prompts[3], GREEDY))
    assert len(model._scheduler.prefixes) == 1
    model.update_weights(sharp_tiny_model(tokenizer, seed=1).state_dict())
    assert len(model._scheduler.prefixes) == 0 and model._scheduler.prefixes.tokens == 0
    second = run(model.generate(prompts[3] + first.completion_ids + prompts[1], GREEDY))
    assert model.stats["prefix_hit_tokens"] == 0
    expected = reference_logprobs(model.model, second.prompt_ids, second.completion_ids, 1.0)
    assert torch.allclose(torch.tensor(second.logprobs), expected, atol=1e-4)


def test_a_prompt_diverging_from_a_stored_sequence_reuses_only_the_common_prefix(make_model, prompts):
    from rllm.inference.scheduler import MIN_SHARED_PREFIX

    cached, plain = make_model(eos_token_ids=()), make_model(eos_token_ids=(), prefix_cache_tokens=0)
    first = run(cached.generate(prompts[3], GREEDY))
    stored = prompts[3] + first.completion_ids
    cut = MIN_SHARED_PREFIX + 2
    cases = [  # (prompt, tokens whose K/V can be reused)
        (stored[:5] + [t + 1 for t in stored[5:8]] + stored[8:] + prompts[1], 0),  # shares 5 < MIN_SHARED_PREFIX
        (stored[:cut] + [t + 1 for t in stored[cut : cut + 3]] + prompts[1], cut),  # diverges after `cut` tokens
        (stored[: len(prompts[3]) + 2], len(prompts[3]) + 1),  # a strict prefix: all but its last token
    ]
    for prompt, reusable in cases:
        hits = cached.stats["prefix_hit_tokens"]
        a, b = run(cached.generate(prompt, GREEDY)), run(plain.generate(prompt, GREEDY))
        assert cached.stats["prefix_hit_tokens"] - hits == reusable
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


def test_running_prompts_share_their_common_prefix(make_model, prompts, tokenizer):
    """Concurrent prompts that share a system prompt: the second copies the first's K/V for the shared part."""
    system = tokenizer.encode("You are a careful assistant. Answer in one short sentence, then stop. Question:")
    assert len(system) >= 16
    requests = [system + prompts[1], system + prompts[3], system + prompts[5]]
    shared, alone = make_model(eos_token_ids=()), make_model(eos_token_ids=())
    together = run(gather(shared, requests, GREEDY))
    one_by_one = [run(alone.generate(p, GREEDY)) for p in requests]
    assert shared.stats["shared_prefix_tokens"] >= 2 * len(system)
    assert shared.stats["prefill_tokens"] + shared.stats["shared_prefix_tokens"] == sum(len(p) for p in requests)
    for a, b in zip(together, one_by_one, strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
        expected = reference_logprobs(shared.model, a.prompt_ids, a.completion_ids, 1.0)
        assert torch.allclose(torch.tensor(a.logprobs), expected, atol=1e-4)


def test_prefix_store_is_bounded_lru():
    from rllm.inference.cache import PrefixStore

    store = PrefixStore(max_tokens=10)
    kv = lambda n: torch.zeros(1, 2, 1, n, 1)  # noqa: E731
    store.put([1, 2, 3, 4], kv(4))
    store.put([5, 6, 7, 8], kv(4))
    assert store.lookup([1, 2, 3, 4, 9]).shape[3] == 4  # touches [1, 2, 3, 4]: [5, 6, 7, 8] is now oldest
    assert store.lookup([1, 2, 3, 4]).shape[3] == 3  # one prompt token is always left to prefill
    store.put([9, 9, 9], kv(3))
    assert store.tokens == 7 and store.lookup([5, 6, 7, 8, 0]) is None
    assert store.lookup([1, 2, 3, 5]).shape[3] == 3  # the common prefix of a diverging prompt
    assert store.lookup([1, 2, 3, 5], min_tokens=4) is None and store.lookup([7, 1, 2]) is None
    store.put(list(range(11)), kv(11))  # larger than the whole store: not kept
    assert store.tokens == 7


def test_prefill_chunks_pad_little_on_a_cpu_and_merge_on_a_gpu():
    from rllm.inference.scheduler import FORWARD_COST, cheapest_cut

    lengths = [10, 11, 12, 100, 104]
    cpu = cheapest_cut(lengths, forward_cost=FORWARD_COST["cpu"], max_tokens=2048)
    assert cpu == [(0, 3), (3, 5)]  # one forward of 5 x 104 would pad 272 tokens; a second forward costs 64
    assert cheapest_cut(lengths, forward_cost=FORWARD_COST["cuda"], max_tokens=2048) == [(0, 5)]
    assert cheapest_cut(lengths, forward_cost=FORWARD_COST["cuda"], max_tokens=300) == [(0, 3), (3, 5)]
    assert cheapest_cut([3000, 10], forward_cost=64, max_tokens=2048) == [(0, 1), (1, 2)]  # too long: alone
    assert cheapest_cut([], forward_cost=64, max_tokens=2048) == []
    spread = list(range(60, 200, 4))
    chunks = cheapest_cut(spread, forward_cost=64, max_tokens=2048)
    padded = sum((end - start) * max(spread[start:end]) for start, end in chunks)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(spread)
    assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))  # contiguous, nothing skipped
    assert padded + 64 * len(chunks) < len(spread) * max(spread)  # cheaper than padding everything to the longest
    assert padded <= 1.15 * sum(spread)


def test_a_call_on_the_worker_runs_there_as_on_a_thread_of_its_own_and_raises_where_it_is_waited_for(
    make_model, prompts
):
    """`call_on_worker` (a synchronous trainer's update): on the decoding thread, between decode steps, outside its
    inference mode and packed linears; an error reaches the caller and the worker goes on decoding."""
    from rllm.inference.packed_linears import packed_linears_active

    model = make_model()
    before = run(model.generate(prompts[1], GREEDY))
    seen = model.call_on_worker(
        lambda: (threading.current_thread().name, torch.is_inference_mode_enabled(), packed_linears_active())
    ).result()
    assert seen == ("rllm-local-model", False, False)
    weight = torch.ones(3, requires_grad=True)
    grad = model.call_on_worker(lambda: torch.autograd.grad((weight * 2).sum(), weight)[0]).result()
    assert torch.equal(grad, torch.full((3,), 2.0))  # autograd works there

    def broken():
        raise ValueError("the caller's own error")

    with pytest.raises(ValueError, match="the caller's own error"):
        model.call_on_worker(broken).result()
    assert run(model.generate(prompts[1], GREEDY)).completion_ids == before.completion_ids
