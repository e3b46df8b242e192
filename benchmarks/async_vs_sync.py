"""Asynchronous against synchronous training: the same config trained twice, printing wall time, validation reward
and the reward curve of each, the train-inference mismatch, and `ratio: async/sync` (wall time) last.

    python benchmarks/async_vs_sync.py                       # the main job's config (Qwen2.5-Coder-0.5B, arithmetic)
    python benchmarks/async_vs_sync.py --steps 4 --model smollm2-135m-instruct --val-size 0   # quick look
    python benchmarks/async_vs_sync.py --correction decoupled # TIS against the trainer's recomputed log-probs

Synchronous (`rollout.max_staleness=0`) samples from the model it trains, then updates. Asynchronous
(`rollout.max_staleness=S`) samples the next steps from a copy of the weights in this process (LocalModel's worker
thread) while the update runs in another thread, or from the vLLM server with `--rollouts vllm`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from rllm.config import load_config
from rllm.runs import load_metrics
from rllm.training.trainer import AgentTrainer
from smoke import add_smoke_flag, device_line, tiny_training_overrides

CORRECTIONS = {
    "none": [],
    "decoupled": ["algorithm.off_policy.mode=decoupled", "algorithm.off_policy.is_level=token"],
    "mask": ["algorithm.off_policy.is_level=token", "algorithm.off_policy.is_mode=mask"],
}


def train(args: argparse.Namespace, run_dir: str, staleness: int) -> tuple[float, dict, list[dict]]:
    overrides = [
        f"trainer.total_steps={args.steps}",
        f"data.val_size={args.val_size}",
        f"trainer.run_dir={run_dir}",
        f"trainer.name=s{staleness}",
        f"rollout.max_staleness={staleness}",
        "trainer.tensorboard=false",
        f"rollout.server={args.rollouts}",
        *CORRECTIONS[args.correction],
        *args.override,
    ]
    if args.model:
        overrides.append(f"model.name={args.model}")
    config = load_config(args.config, overrides)
    started = time.perf_counter()
    result = AgentTrainer(config=config, progress=False).train()
    wall = time.perf_counter() - started
    steps = [m for m in load_metrics(f"{run_dir}/s{staleness}") if "reward_mean" in m]
    return wall, result, steps


def report(name: str, wall: float, result: dict, steps: list[dict]) -> None:
    def mean(key: str) -> float:
        values = [m[key] for m in steps if key in m]
        return statistics.fmean(values) if values else float("nan")

    curve = " ".join(f"{m['reward_mean']:.2f}" for m in steps)
    before, after = result["val_before"]["reward_mean"], result["val_after"]["reward_mean"]
    print(f"{name}: wall {wall:.1f} s, {wall / len(steps):.1f} s/step; val reward {before:.3f} -> {after:.3f}")
    print(f"  train reward per step: {curve}")
    print(
        f"  rollout {mean('time_rollout_s'):.1f} s/step, update {mean('time_update_s'):.1f} s/step, trainer waited "
        f"{mean('time_wait_rollout_s'):.1f} s/step for rollouts"
    )
    print(
        f"  mismatch: |dlogp| mean {mean('mismatch/abs_diff_mean'):.2e} max {mean('mismatch/abs_diff_max'):.2e}, "
        f"KL k3 {mean('mismatch/kl_k3'):.2e}, beyond threshold {mean('mismatch/frac_beyond'):.4f}; staleness "
        f"max {max(m.get('off_policy/staleness_max', 0) for m in steps)}"
    )
    corrected = mean("off_policy/is_truncated_fraction"), mean("off_policy/is_masked_fraction")
    print(f"  tokens truncated {corrected[0]:.4f}, masked {corrected[1]:.4f} (nan: no correction configured)")


def main() -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/arithmetic_grpo.yaml")
    parser.add_argument("--model", default=None, help="model.name override (default: the config's)")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--val-size", type=int, default=32)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--rollouts", choices=["local", "vllm"], default="local")
    parser.add_argument("--correction", choices=sorted(CORRECTIONS), default="none")
    parser.add_argument("--override", nargs="*", default=[], help="more key=value config overrides")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the throwaway first step")
    add_smoke_flag(parser)
    args = parser.parse_args()
    print(device_line())
    if args.smoke:  # two steps: the asynchronous run samples its second from the first's weights
        args.steps, args.val_size, args.warmup, args.model = 2, 0, False, None
        args.override = [*tiny_training_overrides(), *args.override]
    with tempfile.TemporaryDirectory() as run_dir:
        if args.warmup:  # one throwaway step: model files in the page cache, CUDA context and kernels, for both runs
            train(argparse.Namespace(**{**vars(args), "steps": 1, "val_size": 0}), f"{run_dir}/warmup", 0)
        sync = train(args, run_dir, 0)
        report("sync  (max_staleness=0)", *sync)
        asynchronous = train(args, run_dir, args.staleness)
        report(f"async (max_staleness={args.staleness})", *asynchronous)
    print(f"ratio: async/sync {asynchronous[0] / sync[0]:.2f}")


if __name__ == "__main__":
    main()
