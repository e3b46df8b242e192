"""Update step time of the torch backend against the verl backend with 1 and 2 workers, same rows, same model.

    .venv-verl/bin/python benchmarks/verl_backend.py                  # SmolLM2-135M, LoRA r=16, 8 rows x 128 tokens
    .venv-verl/bin/python benchmarks/verl_backend.py --full --rows 16 # full fine-tuning

Runs in the verl environment (`make verl`): both backends are importable there. Each backend is built, then
`--repeats` identical PPO updates (1 epoch, 1 mini-batch, micro-batches of `--micro`) run on the same synthetic rows
(real token ids, half the tokens trained on, advantages of +-1); the first update is a warm-up and not counted. The
weight push after an update (verl: gather the shards, write, load into the driver's copy) is timed separately.
Start-up: model load (torch), or Ray + workers + model load (verl). On a 2-core CPU these numbers are for catching
regressions, not for choosing a backend: verl's workers compete for the same two cores, and its gains (sharded
memory, many GPUs) do not exist here. Read the ratios.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from rllm.config import TrainConfig
from rllm.training.batch import TrainingRow


def synthetic_rows(n: int, length: int, vocab: int, seed: int = 0) -> list[TrainingRow]:
    rng, rows = random.Random(seed), []
    for i in range(n):
        prompt = length // 2
        mask = [0] * prompt + [1] * (length - prompt)
        rows.append(
            TrainingRow(
                input_ids=[rng.randrange(100, vocab) for _ in mask],
                prompt_length=prompt,
                loss_mask=mask,
                old_logprobs=[0.0] * length,
                advantages=[(1.0 if i % 2 else -1.0) * m for m in mask],
                group_key="g",
                episode_id=str(i),
                trajectory_name="t",
            )
        )
    return rows


def measure(backend, rows, repeats: int) -> dict[str, float]:
    for row, logprobs in zip(rows, backend.compute_logprobs(rows, temperature=1.0), strict=True):
        row.old_logprobs = logprobs
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        backend.update(rows, temperature=1.0)
        times.append(time.perf_counter() - started)
    rollout = backend.make_rollout_model()
    started = time.perf_counter()
    backend.push_weights(rollout)
    push = time.perf_counter() - started
    rollout.close()
    return {"update_s": statistics.median(times[1:]), "push_s": push}


def main() -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA r=16")
    args = parser.parse_args()

    from rllm.training.backends import make_backend

    results = {}
    for label, backend_name, workers in (("torch", "torch", 1), ("verl x1", "verl", 1), ("verl x2", "verl", 2)):
        config = TrainConfig.model_validate(
            {
                "model": {"name": args.model, "lora": {"enabled": not args.full}},
                "optim": {"micro_batch_size": args.micro, "lr": 1e-5},
                "trainer": {"backend": backend_name, "workers_per_node": workers, "total_steps": 10},
            }
        )
        with tempfile.TemporaryDirectory() as run_dir:
            started = time.perf_counter()
            backend = make_backend(config, Path(run_dir))
            startup = time.perf_counter() - started
            try:
                rows = synthetic_rows(args.rows, args.length, len(backend.tokenizer))
                results[label] = {"startup_s": startup, **measure(backend, rows, args.repeats)}
            finally:
                backend.close()
        print(f"{label:8} " + "  ".join(f"{k} {v:7.2f}" for k, v in results[label].items()), flush=True)

    base = results["torch"]
    print(
        f"\n{args.model}, {'full fine-tuning' if args.full else 'LoRA r=16'}, {args.rows} rows x {args.length} "
        f"tokens, micro-batch {args.micro} (CPU numbers: for regressions)"
    )
    for label in ("verl x1", "verl x2"):
        r = results[label]
        print(
            f"{label}: update {r['update_s'] / base['update_s']:.2f}x the torch backend's time, "
            f"start-up {r['startup_s'] / base['startup_s']:.1f}x, weight push {r['push_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
