"""How much of the ideal concurrency the rollout engine achieves, and what it costs per step.

    .venv/bin/python benchmarks/engine_concurrency.py            # 512 episodes x 5 turns, 50 ms per model call

A fake OpenAI-compatible server (its own process, real HTTP on loopback) answers every call after a fixed 50 ms.
The engine drives 512 episodes of 5 turns each through `OpenAIClient` in token-in/token-out mode (the mode training
uses, with the real SmolLM2 chat template rendering each turn as a token delta), once per concurrency level, after
one untimed wave of `n_parallel` episodes (the client's connections open, as from a training run's second step on).

The server answers with the SmolLM2 tokenizer's ids for its reply text plus the end-of-turn token, as vLLM returns
the sampled ids (`spawn_fake_server(tokenizer=...)`), so every turn after the first takes the token-delta path:
the run checks that no turn was re-rendered in full (`token_mismatch == 0`). Until 2026-11-27 the server answered
with one id per character, which no real tokenizer decodes to the reply: every turn was a mismatch, re-encoded in
full, and those numbers measured that path instead. The server parses and writes JSON with orjson (the same JSON,
compact): less of the CPU that client and server share.

- ideal wall time  = episodes / n_parallel * turns * latency (every slot always waiting on the server, zero cost);
- efficiency       = ideal / measured;
- added latency    = (measured - ideal) / (turns per slot): what each step costs beyond the 50 ms wait;
- client CPU/step  = CPU time of this process / steps (engine + chat rendering + HTTP client);
- server CPU/step  = CPU time of the fake server's process / steps (Linux: read from /proc);
- loop ceiling     = the efficiency one event loop could reach at this client CPU/step, busy all the time:
                     latency / (n_parallel x client CPU/step), at most 1;
- framework overhead per step: the same episodes against an in-process model that answers at once (no HTTP,
  no sleep), wall time / steps — the engine's own cost per step.
Client and server share the machine's cores, so at high concurrency the CPU, not the engine, sets the limit: at
n_parallel rollouts the ideal rate is n_parallel / 50 ms steps a second, and the client's one event loop can give
at most 1 / (client CPU/step) of them (256 rollouts ask for 5120 a second, i.e. 0.195 ms of client CPU a step).
Rollouts that start together come back together (the server takes 50 ms for each), so the loop gets their replies
in bursts. On Python 3.11 aiohttp sent each next request only after the whole burst had been processed, so the bursts
never spread and each step waited about n_parallel / 2 x client CPU/step. `rllm.models.eager_writes` sends each
request when it is posted, as aiohttp itself does from 3.12. On a shared machine the CPU's speed drifts (1.5x within
a day here): compare code against code in runs interleaved on the same machine, not against an old table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time

from rllm import AgentExecutionEngine, BaseAgent, BaseEnv, ModelOutput, SamplingParams
from smoke import add_smoke_flag, device_line


class CountdownEnv(BaseEnv):
    """Ends after `turns` steps; every observation is a short line, like a small text game. Its calls take
    microseconds, so it is stepped inline (`blocking = False`, like the built-in FrozenLake and arithmetic envs);
    `--blocking-env` measures the thread-pool path instead."""

    blocking = False

    def __init__(self, turns: int) -> None:
        self.turns, self.t = turns, 0

    @classmethod
    def from_dict(cls, task: dict) -> CountdownEnv:
        return cls(task["turns"])

    def reset(self):
        self.t = 0
        return "Start. Say anything.", {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.turns
        return f"Turn {self.t} done.", float(done), done, {}


class InstantModel:
    """Answers at once with fixed ids: isolates the engine's own per-step cost."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._reply = tokenizer.encode("Hello.", add_special_tokens=False) + [tokenizer.eos_token_id]

    async def generate(self, prompt, sampling=None) -> ModelOutput:
        return ModelOutput(
            text="Hello.",
            prompt_ids=list(prompt),
            completion_ids=self._reply,
            logprobs=[-0.5] * len(self._reply),
            finish_reason="stop",
        )


def make_engine(model, n_parallel: int, turns: int) -> AgentExecutionEngine:
    return AgentExecutionEngine(
        agent_class=BaseAgent,
        env_class=CountdownEnv,
        model=model,
        n_parallel=n_parallel,
        max_steps=turns,
        sampling=SamplingParams(max_tokens=16, temperature=1.0),
        retry_limit=0,
    )


async def timed_run(engine, tasks) -> tuple[float, float, list]:
    cpu, wall = time.process_time(), time.perf_counter()
    episodes = await engine.execute_tasks_async(tasks)
    return time.perf_counter() - wall, time.process_time() - cpu, episodes


async def run_http(server, tokenizer, args, n_parallel: int) -> dict:
    from rllm.models.openai import OpenAIClient

    tasks = [{"id": str(i), "turns": args.turns} for i in range(args.episodes)]
    async with OpenAIClient(server.base_url, "fake-model", tokenizer=tokenizer) as client:
        engine = make_engine(client, n_parallel, args.turns)
        await engine.execute_tasks_async(tasks[:n_parallel])  # one wave: every connection open, caches warm
        server_cpu = process_cpu(server.process.pid)
        wall, cpu, episodes = await timed_run(engine, tasks)
        server_cpu = process_cpu(server.process.pid) - server_cpu
    steps = sum(len(ep.trajectories[0].steps) for ep in episodes)
    assert steps == args.episodes * args.turns, f"expected {args.episodes * args.turns} steps, got {steps}"
    mismatches = sum(ep.metrics["token_mismatch"] for ep in episodes)
    assert mismatches == 0, f"{mismatches} turns were re-rendered in full: the token-delta path was not measured"
    waves = args.episodes / min(n_parallel, args.episodes)
    ideal = waves * args.turns * args.latency_ms / 1000
    return {
        "n_parallel": n_parallel,
        "wall": wall,
        "ideal": ideal,
        "efficiency": ideal / wall,
        "added_ms": (wall - ideal) / (waves * args.turns) * 1000,
        "cpu_ms": cpu / steps * 1000,
        "server_cpu_ms": server_cpu / steps * 1000,
        "ceiling": min(1.0, args.latency_ms / (n_parallel * cpu / steps * 1000)),
    }


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of another process so far; NaN where /proc is not there (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> str:
    """The CPU's model name and the cores this process may use: a figure without its machine is not a figure."""
    from rllm.cpus import describe_cpu, usable_cores

    return f"{describe_cpu()}, {usable_cores()} cores, Python {platform.python_version()}"


async def run_instant(tokenizer, args) -> float:
    tasks = [{"id": str(i), "turns": args.turns} for i in range(args.episodes)]
    engine = make_engine(InstantModel(tokenizer), 64, args.turns)
    await engine.execute_tasks_async(tasks[:64])
    wall, _, episodes = await timed_run(engine, tasks)
    return wall / sum(len(ep.trajectories[0].steps) for ep in episodes) * 1000


def main() -> None:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--parallel", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--tokenizer", default="smollm2-135m-instruct", help="embedded model name or folder")
    parser.add_argument("--blocking-env", action="store_true", help="run env calls on the engine's thread pool")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.episodes, args.turns, args.latency_ms, args.parallel = 8, 2, 5.0, [4]
    CountdownEnv.blocking = args.blocking_env

    from rllm.models.registry import load_tokenizer
    from rllm.testing import spawn_fake_server

    tokenizer = load_tokenizer(args.tokenizer)
    print(device_line())
    print(
        f"{args.episodes} episodes x {args.turns} turns, server latency {args.latency_ms:.0f} ms, "
        f"token-in/token-out with the {args.tokenizer} chat template; {machine()}, client and server on them"
    )
    print(
        f"{'n_parallel':>10} {'ideal s':>8} {'wall s':>8} {'efficiency':>10} {'added ms/step':>13} "
        f"{'client CPU ms/step':>18} {'server CPU ms/step':>18} {'loop ceiling':>12}"
    )
    with spawn_fake_server(latency_ms=args.latency_ms, tokenizer=args.tokenizer) as server:
        for n_parallel in args.parallel:
            r = asyncio.run(run_http(server, tokenizer, args, n_parallel))
            print(
                f"{r['n_parallel']:>10} {r['ideal']:>8.2f} {r['wall']:>8.2f} {r['efficiency']:>10.3f} "
                f"{r['added_ms']:>13.2f} {r['cpu_ms']:>18.3f} {r['server_cpu_ms']:>18.3f} {r['ceiling']:>12.3f}"
            )
    overhead = asyncio.run(run_instant(tokenizer, args))
    print(f"framework overhead per step (engine + chat rendering, instant in-process model): {overhead:.3f} ms")


if __name__ == "__main__":
    main()
