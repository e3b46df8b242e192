"""A TorchBackend on a given tiny model for the backend tests, rows sampled from it, and its gradients."""

from __future__ import annotations

import asyncio
import copy

from rllm.config import AlgorithmConfig, LoraConfig, ModelConfig, OptimConfig
from rllm.inference import InferenceOptions
from rllm.models.base import SamplingParams
from rllm.training.backends.torch import TorchBackend
from rllm.training.batch import build_rows, episode_trajectories
from rllm.types import Episode, Step, Trajectory


def make_backend(tokenizer, base_model, *, lora=True, lr=1e-2, micro=4, total_steps=10, checkpointing=False, **algo):
    model_cfg = ModelConfig(
        name="unused", lora=LoraConfig(enabled=lora, rank=4, alpha=8.0), gradient_checkpointing=checkpointing
    )
    optim = OptimConfig(lr=lr, micro_batch_size=micro, grad_clip=None)
    return TorchBackend(
        model_cfg,
        AlgorithmConfig(**algo),
        optim,
        total_steps=total_steps,
        seed=0,
        model=copy.deepcopy(base_model),
        tokenizer=tokenizer,
    )


def sample_rows(backend, tokenizer, advantages, *, max_tokens=6, temperature=1.0):
    """Roll out with a LocalModel sharing the backend's model; one row per prompt, given advantages."""
    prompts = ["Hi there", "The cat sat on the mat and", "1 2 3 4 5", "Once upon a time"]
    local = backend.make_rollout_model(InferenceOptions(max_batch_size=8, seed=3))

    async def go():
        sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens)
        return await asyncio.gather(*(local.generate(tokenizer.encode(p), sampling) for p in prompts))

    try:
        outputs = asyncio.run(go())
    finally:
        local.close()
    episodes = [
        Episode(id=f"t{i}:0", trajectories=[Trajectory(steps=[Step(model_output=o)])]) for i, o in enumerate(outputs)
    ]
    rows, _ = build_rows(
        episode_trajectories(episodes),
        step_advantages=[[a] for a in advantages],
        max_prompt_length=64,
        max_response_length=64,
    )
    return rows


def grads(backend):
    return {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None}


def sampler_gap(backend, rows, temperature: float = 1.0) -> float:
    """The largest |trainer log-prob - sampled log-prob| over the rows' trained tokens: 0 when the trainer scores
    exactly what was sampled."""
    recomputed = backend.compute_logprobs(rows, temperature=temperature)
    return max(
        abs(new - old)
        for row, logprobs in zip(rows, recomputed, strict=True)
        for new, old, trained in zip(logprobs, row.old_logprobs, row.loss_mask, strict=True)
        if trained
    )
