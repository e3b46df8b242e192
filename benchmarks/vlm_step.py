"""What images cost: a GRPO-shaped step of the embedded vision-language model against its text-only language model.

    .venv/bin/python benchmarks/vlm_step.py                  # builds smolvlm-smollm2-135m first if needed

Workload: `--pictures` shapes-task pictures (64x64, 16 image tokens + 3 markers each) x `--group` samples,
`--new-tokens` tokens each (EOS disabled, so both sides produce the same count). The VLM (`smolvlm-smollm2-135m`:
SmolLM2-135M-Instruct inside SmolVLM's architecture, random vision tower) answers about the picture; the text model
(SmolLM2-135M-Instruct itself) gets the same conversation without the picture. Both roll out on `LocalModel` and
update on `TorchBackend` (LoRA r=16; the VLM's tower trainable). Timed alternately (text, VLM, text, VLM); read the
ratios.

Also printed: the exactness of the VLM path, the largest |log-prob| difference between the sampler and the trainer's
forward on the sampled tokens (the PPO ratio's denominator and numerator).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import torch

from rllm.config import AlgorithmConfig, LoraConfig, ModelConfig, OptimConfig
from rllm.inference import InferenceOptions
from rllm.models import registry
from rllm.models.base import SamplingParams
from rllm.tasks.shapes import ShapesAgent, make_shapes_tasks
from rllm.training.backends.torch import TorchBackend
from rllm.training.batch import TrainingRow
from smoke import add_smoke_flag, device_line, tiny_model_folder, tiny_vlm_folder

VLM, TEXT = "smolvlm-smollm2-135m", "smollm2-135m-instruct"


def conversations(n: int, *, images: bool) -> list[list[dict]]:
    agent = ShapesAgent()
    out = []
    for task in make_shapes_tasks(n, seed=7):
        user = agent.format_observation(task) if images else task["question"]
        out.append([{"role": "system", "content": ShapesAgent.system_prompt}, {"role": "user", "content": user}])
    return out


def backend(name: str) -> TorchBackend:
    config = ModelConfig(name=name, lora=LoraConfig(enabled=True, rank=16, alpha=32), vision_tower="trainable")
    return TorchBackend(config, AlgorithmConfig(), OptimConfig(lr=1e-4, micro_batch_size=16), total_steps=100)


def rollout(model, prompts, group: int, new_tokens: int) -> tuple[list, float]:
    async def go():
        calls = [
            model.generate(p, SamplingParams(max_tokens=new_tokens, seed=i)) for p in prompts for i in range(group)
        ]
        return await asyncio.gather(*calls)

    started = time.perf_counter()
    outputs = asyncio.run(go())
    return outputs, time.perf_counter() - started


def rows_of(outputs) -> list[TrainingRow]:
    rows = []
    for i, out in enumerate(outputs):
        ids = out.prompt_ids + out.completion_ids
        mask = [0] * out.prompt_length + [1] * out.completion_length
        rows.append(
            TrainingRow(
                input_ids=ids,
                prompt_length=out.prompt_length,
                loss_mask=mask,
                old_logprobs=[0.0] * out.prompt_length + out.logprobs,
                advantages=[(-1.0) ** i * m for m in mask],
                group_key=str(i // 4),
                episode_id=str(i),
                trajectory_name="agent",
                images=list(out.prompt_images or []),
            )
        )
    return rows


def _largest_difference(rows: list[TrainingRow], scored: list[list[float]]) -> float:
    return max(
        abs(a - b)
        for row, lps in zip(rows, scored, strict=True)
        for a, b, m in zip(lps, row.old_logprobs, row.loss_mask, strict=True)
        if m
    )


def main() -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pictures", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    add_smoke_flag(parser)
    args = parser.parse_args()
    print(device_line())
    if args.smoke:
        args.pictures, args.group, args.new_tokens, args.repeats = 1, 2, 2, 1
        vlm, text = tiny_vlm_folder(), tiny_model_folder()
    else:
        registry.fetch_model(VLM, log=None)
        vlm, text = VLM, TEXT
    sides = {
        "text": (backend(text), conversations(args.pictures, images=False)),
        "vlm": (backend(vlm), conversations(args.pictures, images=True)),
    }
    times: dict[str, dict[str, list[float]]] = {side: {"rollout": [], "update": []} for side in sides}
    exact = []
    for _ in range(args.repeats):
        for side, (trainer, prompts) in sides.items():
            model = trainer.make_rollout_model(InferenceOptions(max_batch_size=64, eos_token_ids=()))
            try:
                outputs, seconds = rollout(model, prompts, args.group, args.new_tokens)
            finally:
                model.close()
            times[side]["rollout"].append(seconds)
            rows = rows_of(outputs)
            if side == "vlm":
                exact.append(_largest_difference(rows, trainer.compute_logprobs(rows, temperature=1.0)))
            started = time.perf_counter()
            trainer.update(rows, temperature=1.0)
            times[side]["update"].append(time.perf_counter() - started)
            prompt_tokens = statistics.mean(o.prompt_length for o in outputs)
            print(
                f"{side}: rollout {seconds:.2f} s, update {times[side]['update'][-1]:.2f} s, "
                f"{len(rows)} rows, prompt {prompt_tokens:.0f} tokens"
            )
    for phase in ("rollout", "update"):
        text, vlm = statistics.median(times["text"][phase]), statistics.median(times["vlm"][phase])
        print(f"ratio {phase}: VLM {vlm:.2f} s / text {text:.2f} s = {vlm / text:.2f}x")
    print(f"exactness: max |sampler - trainer| log-prob on the VLM's sampled tokens = {max(exact):.2e}")
    print(f"threads: {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
