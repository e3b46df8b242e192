"""Rollouts against a server that fails like a busy production one (issue 15, item 16): of its first 400 model
requests, a seeded 30 % answer 429 with Retry-After 1 s, 10 % answer 503 and 5 % hang past the client's timeout.
No trajectory may be lost. (That each retry honours Retry-After, in the client and in the engine's whole-rollout
retry, is tested where it can be timed: tests/unit/models/test_openai_client.py.)"""

from __future__ import annotations

import random
import time
from collections import Counter

from rllm.agents.base import BaseAgent
from rllm.engine.execution import AgentExecutionEngine
from rllm.models.openai import OpenAIClient
from rllm.testing.fake_openai_server import FakeOpenAIServer, Fault, run_fake_server
from tests.support.envs import CounterEnv


class TimedFaultServer(FakeOpenAIServer):
    """Records when each request came and which fault it got."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.log: list[tuple[float, str]] = []

    async def _apply_fault(self, fault, request):
        if fault.kind == "http":
            kind = f"http:{fault.status}"
        else:
            kind = "hang" if fault.seconds > 0 else "ok"
        self.log.append((time.monotonic(), kind))
        return await super()._apply_fault(fault, request)


def fault_mix(n: int, seed: int = 0) -> list[Fault]:
    rng = random.Random(seed)
    faults = []
    for _ in range(n):
        x = rng.random()
        if x < 0.30:
            faults.append(Fault.http(429, retry_after=1))
        elif x < 0.40:
            faults.append(Fault.http(503))
        elif x < 0.45:
            faults.append(Fault.hang(3.0))  # the client gives up after 1 s
        else:
            faults.append(Fault.hang(0.0))  # a healthy answer
    return faults


def test_no_trajectory_is_lost_to_429s_503s_and_hangs():
    with run_fake_server(TimedFaultServer()) as server:
        faults = fault_mix(400)
        server.inject(*faults)
        client = OpenAIClient(
            server.base_url,
            server.model,
            timeout=1.0,
            max_retries=2,
            backoff_base=0.05,
            backoff_max=0.2,
            allow_missing_token_ids=True,
        )
        engine = AgentExecutionEngine(
            agent_class=BaseAgent,
            env_class=CounterEnv,
            model=client,
            max_steps=2,
            n_parallel=16,
            retry_limit=8,
            retry_backoff=0.05,
        )
        tasks = [{"id": f"t{i}", "k": 2, "log": Counter()} for i in range(64)]
        episodes = engine.execute_tasks(tasks)
    served = Counter(kind for _, kind in server.log)
    assert served["http:429"] >= 30 and served["http:503"] >= 10 and served["hang"] > 0  # the faults really came
    assert len(episodes) == 64
    assert [e.termination_reason.value for e in episodes] == ["env_done"] * 64  # none lost, none given up
    assert all(len(e.trajectories[0].steps) == 2 for e in episodes)
    retried = sum(e.metrics["retries"] for e in episodes)
    print(f"requests {len(server.log)}, faults {dict(served)}, whole-rollout retries {retried}")
