"""Token exactness (docs/architecture.md, "Token exactness"): over multi-turn rollouts, every prompt extends the
previous prompt + the exact sampled completion, for every chat template the project ships; 0 mismatches."""

from __future__ import annotations

import itertools

import pytest

from rllm.engine import AgentExecutionEngine
from rllm.inference import InferenceOptions
from rllm.models.base import SamplingParams
from rllm.tasks.frozenlake import FrozenLakeAgent, FrozenLakeEnv, make_frozenlake_tasks


def _run(model, *, n_tasks: int, max_tokens: int, max_steps: int, temperature: float = 1.0):
    engine = AgentExecutionEngine(
        agent_class=FrozenLakeAgent,
        env_class=FrozenLakeEnv,
        model=model,
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=7),
        max_steps=max_steps,
        n_parallel=n_tasks,
    )
    return engine.execute_tasks(make_frozenlake_tasks(n_tasks, seed=3))


def _assert_every_turn_extends(episodes) -> int:
    multi_turn_steps = 0
    for episode in episodes:
        assert episode.metrics["token_mismatch"] == 0, episode.id
        steps = episode.trajectories[0].steps
        for previous, step in itertools.pairwise(steps):
            context = previous.model_output.prompt_ids + previous.model_output.completion_ids
            prompt = step.model_output.prompt_ids
            assert prompt[: len(context)] == context, f"{episode.id}: turn does not extend the previous one"
            assert len(prompt) > len(context), "the observation delta must add tokens"
            multi_turn_steps += 1
    return multi_turn_steps


def test_random_tiny_model_rollouts_extend_for_every_shipped_template(shipped_tokenizer):
    """A random model samples arbitrary tokens (special tokens, byte fragments): exactly where re-tokenizing the
    decoded text would go wrong."""
    from rllm.inference.model import LocalModel
    from rllm.models.registry import build_tiny_model

    model = LocalModel(
        build_tiny_model(shipped_tokenizer, seed=1), shipped_tokenizer, InferenceOptions(max_batch_size=8, seed=0)
    )
    try:
        episodes = _run(model, n_tasks=6, max_tokens=12, max_steps=4)
    finally:
        model.close()
    assert _assert_every_turn_extends(episodes) >= 6


@pytest.mark.slow
def test_real_smollm2_rollouts_extend():
    from rllm.inference.model import LocalModel

    model = LocalModel.from_pretrained("smollm2-135m-instruct", InferenceOptions(max_batch_size=4, seed=0))
    try:
        episodes = _run(model, n_tasks=2, max_tokens=16, max_steps=3, temperature=0.7)
    finally:
        model.close()
    assert _assert_every_turn_extends(episodes) >= 1
