"""The alarms on real runs constructed to show their pathology (issue 54, item 1): each run raises its alarm in its
metrics, on the console and in `rllm audit`, which exits 1. The clean run is the demo's config in
`tests/smoke/test_gae_learning.py` (audited there, no alarm).

Each run is a few steps of a tiny random-init model with the SmolLM2 tokenizer (seconds): what it shows comes from
its construction, not from learning. A random model's replies always run to `max_tokens`, so every constructed run
also raises `truncation`, which the first run checks as its own pathology.
"""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from rllm import Step, Trajectory, Workflow
from rllm.audit import audit_run
from rllm.config import load_config
from rllm.runs import load_metrics
from rllm.training.trainer import AgentTrainer
from tests.support.cli import run_rllm

TINY = [
    "rollout.n=2",
    "rollout.max_tokens=4",
    "trainer.tasks_per_step=2",
    "data.task=arithmetic",
    "data.train_size=8",
    "data.val_size=0",
    "optim.micro_batch_size=4",
    "trainer.tensorboard=false",
    "trainer.save_every=0",
]


class OneReply(Workflow):
    """One reply per question, rewarded by its length in characters: different replies of a group earn different
    rewards, so a group has a learning signal unless its replies are the same."""

    sampling: ClassVar[dict] = {}

    async def run(self, task, uid):
        messages = [{"role": "user", "content": task["question"]}]
        output = await self.generate(messages, **self.sampling)
        self.commit(
            Trajectory(steps=[Step(chat_completions=messages, model_output=output, reward=len(output.text) / 10)])
        )


class HotSampler(OneReply):
    """Samples at temperature 3 while the trainer recomputes log-probs at the config's 1: they disagree."""

    sampling: ClassVar[dict] = {"temperature": 3.0}


class HistoryRewriter(Workflow):
    """Two turns; the second sends back an edited first reply, so its prompt does not extend the first turn's tokens."""

    async def run(self, task, uid):
        messages = [{"role": "user", "content": task["question"]}]
        first = await self.generate(messages)
        messages += [{"role": "assistant", "content": "(edited) " + first.text}, {"role": "user", "content": "Sure?"}]
        second = await self.generate(messages)
        steps = [
            Step(chat_completions=messages[:1], model_output=first),
            Step(chat_completions=messages, model_output=second),
        ]
        steps[-1].reward = len(second.text) / 10
        self.commit(Trajectory(steps=steps))


def _train(tmp_path, model_dir, name, workflow, overrides, steps=3):
    config = load_config(
        None,
        [f"model.name={model_dir}", *TINY, f"trainer.total_steps={steps}", *overrides]
        + [f"trainer.run_dir={tmp_path}", f"trainer.name={name}"],
    )
    AgentTrainer(config=config, workflow_class=workflow, progress=False).train()
    return tmp_path / name


def _raised(run_dir):
    """{alarm name: first step} from the run's metrics, and the same from `rllm audit`'s replay."""
    logged: dict[str, int] = {}
    for line in load_metrics(run_dir):
        for key in line:
            if key.startswith("alarm/"):
                logged.setdefault(key.removeprefix("alarm/"), line["step"])
    audited = {span.name: span.steps[0] for span in audit_run(run_dir).alarms}
    return logged, audited


@pytest.mark.parametrize(
    ("name", "workflow", "overrides", "expected"),
    [
        # temperature driven to ~0: the tempered policy is (almost) deterministic, groups have equal rewards
        ("cold", OneReply, ["rollout.temperature=0.01"], {"entropy_collapse": 2, "no_signal": 3, "truncation": 2}),
        # a huge step size with two optimizer steps a batch: the second mini-batch is far off-policy
        ("kl", OneReply, ["optim.lr=2", "algorithm.ppo_epochs=4", "rollout.temperature=0.3"], {"kl_spike": 1}),
        ("mismatch", HotSampler, [], {"logprob_mismatch": 1}),
        ("rewrite", HistoryRewriter, ["rollout.max_steps=2"], {"prefix_breaks": 1}),
    ],
)
def test_a_constructed_run_raises_its_alarm(tmp_path, tiny_model_dir, capfd, name, workflow, overrides, expected):
    run_dir = _train(tmp_path, tiny_model_dir, name, workflow, overrides)
    logged, audited = _raised(run_dir)
    for alarm, step in expected.items():
        assert logged.get(alarm) == step, (alarm, logged)
    assert logged == audited  # the trainer's alarms are exactly what the replay of its logs finds
    console = capfd.readouterr().err
    for alarm, step in expected.items():
        assert f"step {step}: alarm {alarm}: " in console


def test_rllm_audit_exits_1_on_an_alarm_and_links_the_episodes(tmp_path, tiny_model_dir):
    run_dir = _train(tmp_path, tiny_model_dir, "cut", OneReply, [], steps=2)
    out = run_rllm("audit", str(run_dir))
    assert out.returncode == 1, out.stderr
    assert "alarm truncation at step 2: 100% of the episodes were cut by a length limit" in out.stdout
    assert "episodes: " in out.stdout and "2 steps, 1 alarm;" in out.stderr
    report = json.loads(run_rllm("audit", str(run_dir), "--json").stdout)
    (span,) = report["alarms"]
    assert not report["ok"] and span["name"] == "truncation" and span["steps"] == [2]
    assert len(span["episodes"]) == 4 and all(step == 2 for step, _ in span["episodes"])  # 2 tasks x 2 samples
