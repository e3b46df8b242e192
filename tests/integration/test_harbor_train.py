"""Harbor task folders through rllm's real loop: `evaluate` (what `rllm eval path/to/tasks` runs) on the shipped
examples with a scripted model that solves each task through the bash tool (it sends the task's solve.sh as its
command, then calls finish), so Harbor's verifiers' rewards reach the summary; then one training step of a tiny
random-init model on them (`AgentTrainer`, what `rllm train path/to/tasks` runs), every episode graded in the
sandbox. The format, the rule and the errors are tested in tests/unit/tasks/test_harbor.py."""

from __future__ import annotations

import json

import pytest

from rllm.config import load_config
from rllm.evaluation import evaluate
from rllm.models.fake import FakeModel
from rllm.runs import load_metrics, read_episodes
from rllm.sandbox import Sandbox
from rllm.tasks.harbor import EXAMPLES
from rllm.training.trainer import AgentTrainer

TASKS = sorted(p.name for p in EXAMPLES.iterdir() if (p / "task.toml").is_file())


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_harbor_tasks_evaluate_and_train_a_step(tmp_path, monkeypatch, smollm2_tokenizer, tiny_model_dir):
    Sandbox.check()
    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "home"))
    task = [f"data.task={EXAMPLES}", "rollout.max_steps=3"]

    def reply(prompt, sampling) -> str:  # the task's own solution as one bash command, then finish
        text = smollm2_tokenizer.decode(prompt)
        if text.count("<|im_start|>assistant") > 1:  # it has run the solution already
            return _call("finish", {})
        name = next(n for n in TASKS if (EXAMPLES / n / "instruction.md").read_text().strip() in text)
        return _call("bash", {"command": (EXAMPLES / name / "solution" / "solve.sh").read_text()})

    model = FakeModel(reply, tokenizer=smollm2_tokenizer)
    monkeypatch.setattr("rllm.evaluation.make_eval_model", lambda config, run_dir: model)
    runs = [f"trainer.run_dir={tmp_path / 'runs'}", "trainer.name=eval", "rollout.max_tokens=400"]
    summary, run_dir = evaluate(load_config(None, [*task, *runs]))
    assert summary["episodes"] == len(TASKS) and summary["success_rate"] == 1.0 and summary["reward_mean"] == 1.0
    for episode in read_episodes(run_dir):
        (trajectory,) = episode.trajectories
        assert [s.action["tool_calls"][0]["name"] for s in trajectory.steps] == ["bash", "finish"]
        assert trajectory.steps[-1].info["termination"] == "finished" and episode.termination_reason.value == "env_done"

    one_step = [
        f"model.name={tiny_model_dir}",
        "data.train_size=4",
        "data.val_size=0",
        "trainer.total_steps=1",
        "trainer.tasks_per_step=2",
        "rollout.n=2",
        "rollout.max_steps=2",
        "rollout.max_tokens=8",
        "optim.micro_batch_size=2",
        "trainer.tensorboard=false",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=train",
    ]
    AgentTrainer(config=load_config(None, [f"data.task={EXAMPLES}", *one_step]), progress=False).train()
    (step,) = [m for m in load_metrics(tmp_path / "train") if "reward_mean" in m]
    assert step["step"] == 1 and "loss_tokens" in step
    episodes = read_episodes(tmp_path / "train", split="train")
    assert len(episodes) == 2 * 2 and all(e.termination_reason.value == "max_turns" for e in episodes)
    assert all(e.trajectories[0].steps[-1].reward == 0.0 for e in episodes)  # graded in the sandbox: untouched


@pytest.fixture(autouse=True)
def _no_leftover_cwd_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a default run directory would land in the test's own folder
