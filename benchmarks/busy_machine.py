"""Generation and a training step on a busy machine: the default thread count against fixed ones.

    .venv/bin/python benchmarks/busy_machine.py                 # 3 rounds, about 2-3 minutes on 2 cores
    .venv/bin/python benchmarks/busy_machine.py --rounds 5 --load 1
    make bench-busy                                             # the same, recorded in benchmarks/RESULTS.md

Workload (one unit, timed in seconds): SmolLM2-135M in float32 with LoRA r=16, as `rllm train` runs it on a CPU:
the local model generates 12 sampled tokens for 16 arithmetic prompts (4 questions x 4 samples), then the torch
backend runs one GRPO update on 8 of those rows. Each setting is its own process (OpenMP reads its environment
once, when torch loads), started once and driven unit by unit:
- `default`: rllm's own choice (`rllm.cpus.ThreadGovernor`: the cores this process may use minus those others use);
- `fixed N`: `OMP_NUM_THREADS=N` for N = 1 and N = all usable cores; `fixed <all>` is the old default (torch's
  thread count, i.e. every core, whatever else runs).
Conditions: `idle` (whatever else runs on the machine), and `loaded`: `--load` processes that spin on the CPU, each
started in its own session, as work started from another terminal or by another job is (Linux shares a contended
CPU fairly between sessions and cgroups, so this is the case where extra threads buy no extra CPU). Rounds
interleave conditions and settings (in a rotating order), so drift in the machine's load hits all alike; the table
holds medians. `best` is the fastest fixed setting; the targets: `default` within 1.3x of the best when loaded,
and no slower than the old default when idle. On a machine shared with other work the idle figures are noisy: read
the ratios, and rerun on a quiet machine for the idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

from rllm.inference import InferenceOptions
from smoke import add_smoke_flag, tiny_model_folder

MODEL = "smollm2-135m-instruct"


# ------------------------------------------------------------ the child: one setting, one process


def child(model: str) -> None:
    """Load the model, warm up, then time one unit per "run" line on stdin; one JSON line each on stdout."""
    import torch

    from rllm import cpus
    from rllm.config import AlgorithmConfig, ModelConfig, OptimConfig
    from rllm.models.base import SamplingParams
    from rllm.models.chat import render_messages
    from rllm.training.backends.torch import TorchBackend

    optim = OptimConfig(micro_batch_size=8)
    backend = TorchBackend(ModelConfig(name=model), AlgorithmConfig(), optim, total_steps=100)
    local = backend.make_rollout_model(InferenceOptions(max_batch_size=16, eos_token_ids=(), prefix_cache_tokens=0))
    questions = [f"What is {100 + 37 * i} * {3 + i}? Answer with the number only." for i in range(4)]
    prompts = [render_messages(backend.tokenizer, [{"role": "user", "content": q}]) for q in questions] * 4
    sampling = SamplingParams(temperature=1.0, max_tokens=12)

    async def generate() -> list:
        return await asyncio.gather(*[local.generate(prompt, sampling) for prompt in prompts])

    def unit() -> dict:
        started = time.perf_counter()
        outputs = asyncio.run(generate())
        generated = time.perf_counter()
        backend.update(_rows(outputs[:8]), temperature=1.0)
        done = time.perf_counter()
        return {"generate_s": generated - started, "train_s": done - generated, "threads": torch.get_num_threads()}

    unit()  # warm-up: the worker thread, allocator, oneDNN kernels
    print(json.dumps({"ready": True, "cores": cpus.usable_cores()}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        print(json.dumps(unit()), flush=True)
    local.close()


def _rows(outputs: list) -> list:
    from rllm.training.batch import TrainingRow

    rows = []
    for i, out in enumerate(outputs):
        prompt, completion = len(out.prompt_ids), len(out.completion_ids)
        advantage = 0.5 if i % 2 else -0.5
        row = TrainingRow(
            input_ids=out.prompt_ids + out.completion_ids,
            prompt_length=prompt,
            loss_mask=[0] * prompt + [1] * completion,
            old_logprobs=[0.0] * prompt + list(out.logprobs),
            advantages=[0.0] * prompt + [advantage] * completion,
            group_key=f"q{i % 4}:solver",
            episode_id=f"q{i % 4}:{i}",
            trajectory_name="solver",
        )
        rows.append(row)
    return rows


# ------------------------------------------------------------ the parent: settings x conditions, interleaved


class Setting:
    """One child process running with `env` added to the environment."""

    def __init__(self, name: str, env: dict[str, str], model: str) -> None:
        self.name = name
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        if "OMP_NUM_THREADS" not in env:
            environment.pop("OMP_NUM_THREADS", None)
        command = [sys.executable, __file__, "--child", "--model", model]
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
        self.process = subprocess.Popen(command, **pipes, text=True, env=environment)

    def read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"setting {self.name}: its process exited with {self.process.wait()}")
        return json.loads(line)

    def run(self) -> dict:
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start_load(count: int) -> list[subprocess.Popen]:
    """`count` processes that spin on the CPU, each in a session of its own."""
    spin = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(spin, start_new_session=True) for _ in range(count)]


def stop_load(load: list[subprocess.Popen]) -> None:
    for process in load:
        process.kill()
        process.wait()


def machine_line() -> str:
    import torch

    from rllm.cpus import cgroup_quota_cores, describe_cpu, usable_cores

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = cgroup_quota_cores()
    quota_text = f"{quota:g} cores" if quota is not None else "none"
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    cores = f"{usable_cores()} usable cores (affinity {affinity}, cgroup quota {quota_text})"
    return f"device: {describe_cpu()}, {cores}, torch {torch.__version__}; load average before: {load}"


def main(argv: list[str] | None = None) -> int:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="timed units per setting and condition (median)")
    parser.add_argument("--load", type=int, default=2, help="busy processes in the loaded condition")
    parser.add_argument("--model", default=MODEL, help="embedded model name or a folder")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.load, args.model = 1, 1, tiny_model_folder()
    if args.child:
        child(args.model)
        return 0
    from rllm.cpus import usable_cores

    cores = usable_cores()
    print(machine_line(), flush=True)
    fixed = sorted({1, cores})
    settings = [Setting("default", {}, args.model)]
    settings += [Setting(f"fixed {n}", {"OMP_NUM_THREADS": str(n)}, args.model) for n in fixed]
    old_default = f"fixed {cores}"
    started = time.perf_counter()
    times: dict[tuple[str, str], list[float]] = {}
    threads: dict[tuple[str, str], list[int]] = {}
    try:
        for setting in settings:
            setting.read()  # loaded and warmed up
        unit = "generate 16 prompts x 12 tokens (sampled) + one GRPO update on 8 rows"
        load = f"{args.load} busy processes, each in its own session"
        print(
            f"workload: {args.model} float32 LoRA r=16; one unit = {unit}; loaded = {load}; {args.rounds} rounds, "
            "interleaved; median seconds (generate + train)",
            flush=True,
        )
        for round_index in range(args.rounds):
            for condition in ("idle", "loaded"):
                load = start_load(args.load if condition == "loaded" else 0)
                try:
                    time.sleep(0.5)  # the neighbours are running before the unit starts
                    shift = round_index % len(settings)
                    for setting in settings[shift:] + settings[:shift]:
                        result = setting.run()
                        key = (condition, setting.name)
                        times.setdefault(key, []).append(result["generate_s"] + result["train_s"])
                        threads.setdefault(key, []).append(result["threads"])
                finally:
                    stop_load(load)
    finally:
        for setting in settings:
            setting.close()
    report(times, threads, [s.name for s in settings], old_default)
    print(f"benchmark took {time.perf_counter() - started:.0f} s", flush=True)
    return 0


def report(times: dict, threads: dict, names: list[str], old_default: str) -> None:
    """One self-describing line per condition (the summary in RESULTS.md quotes them), the runs, the verdict."""
    medians = {key: statistics.median(values) for key, values in times.items()}
    ratios = {}
    for condition in ("idle", "loaded"):
        best_name = min((name for name in names if name != "default"), key=lambda name: medians[(condition, name)])
        default = medians[(condition, "default")]
        ratios[condition] = (default / medians[(condition, best_name)], default / medians[(condition, old_default)])
        cells = ", ".join(
            f"{name}{' (old default)' if name == old_default else ''} {medians[(condition, name)]:.2f} s"
            for name in names
        )
        print(
            f"{condition}: {cells}; best {best_name}: default/best {ratios[condition][0]:.2f}, "
            f"default/old default {ratios[condition][1]:.2f}"
        )
    for condition in ("idle", "loaded"):
        runs = {name: [round(value, 2) for value in times[(condition, name)]] for name in names}
        chosen = sorted(set(threads[(condition, "default")]))
        print(f"runs {condition}: {runs}; the default trained with {chosen} thread(s)")
    loaded, idle = ratios["loaded"][0], ratios["idle"][1]
    loaded_verdict = "met" if loaded <= 1.3 else "NOT met"
    idle_verdict = "met" if idle <= 1.05 else "NOT met"
    print(
        f"verdict: loaded default/best {loaded:.2f} (target <= 1.3: {loaded_verdict}); idle default/old default "
        f"{idle:.2f} (target <= 1.0, 5% noise allowed: {idle_verdict})"
    )


if __name__ == "__main__":
    sys.exit(main())
