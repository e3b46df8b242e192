"""Short training runs for the end-to-end tests: tiny runs' overrides and a run's final checkpoint, an evaluation with
a scripted model, and one checked training step."""

from __future__ import annotations

from pathlib import Path

import torch

from rllm.config import load_config
from rllm.evaluation import evaluate
from rllm.models.fake import FakeModel
from rllm.runs import load_metrics, read_episodes
from rllm.training.checkpoint import latest_checkpoint, load_checkpoint
from rllm.training.trainer import AgentTrainer

# The shipped arithmetic config and the overrides that make its run tiny, for `rllm train` command lines.
CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic_grpo.yaml")
# Groups of 2 six-token replies, 2 tasks a step; six training and two validation tasks.
TINY_BATCH = [
    "rollout.n=2",
    "rollout.max_tokens=6",
    "trainer.tasks_per_step=2",
    "data.train_size=6",
    "data.val_size=2",
    "optim.micro_batch_size=2",
]
TINY_CLI = [*TINY_BATCH, "rollout.val_n=1", "trainer.tensorboard=false"]

# One GRPO step of a shipped config on a tiny model (groups of 2, two turns an episode): the train and web smoke runs.
ONE_TINY_STEP = [
    "rollout.n=2",
    "rollout.max_tokens=6",
    "rollout.max_steps=2",
    "trainer.tasks_per_step=2",
    "trainer.total_steps=1",
    "optim.micro_batch_size=2",
]

# A tiny run (groups of 2, two turns an episode, six training and two validation tasks); TINY adds a large learning
# rate and greedy validation, for a workflow or environment given in the test.
TINY_RUN = [*TINY_BATCH, "rollout.max_steps=2"]
TINY = [
    *TINY_RUN,
    "optim.lr=1e-2",
    "rollout.val_n=1",
    "rollout.val_temperature=0",  # greedy validation, one episode a task (the config samples 4)
]


def final_state(run_dir):
    """The step and backend state of the last checkpoint in `run_dir` (every checksum verified)."""
    checkpoint = latest_checkpoint(run_dir)
    step, _parts = load_checkpoint(checkpoint)
    return step, torch.load(checkpoint / "backend.pt", weights_only=False)


ONE_STEP = [
    "data.train_size=4",
    "data.val_size=0",
    "trainer.total_steps=1",
    "trainer.tasks_per_step=2",
    "rollout.n=2",
    "rollout.max_tokens=6",
    "optim.micro_batch_size=2",
    "trainer.tensorboard=false",
]


def eval_with(monkeypatch, tokenizer, reply, overrides: list[str]) -> tuple[dict, list]:
    """`evaluate` (what `rllm eval` runs) under `overrides`, with a scripted model whose reply to the decoded prompt
    is `reply(text)`: the summary and the episodes."""
    model = FakeModel(lambda prompt, sampling: reply(tokenizer.decode(prompt)), tokenizer=tokenizer)
    monkeypatch.setattr("rllm.evaluation.make_eval_model", lambda config, run_dir: model)
    summary, run_dir = evaluate(load_config(None, overrides))
    return summary, read_episodes(run_dir)


def train_one_step(tmp_path, model_dir, overrides: list[str]) -> None:
    """One training step (ONE_STEP) of the model in `model_dir` under `overrides`, checked to have trained."""
    config = load_config(
        None, [f"model.name={model_dir}", *ONE_STEP, *overrides, f"trainer.run_dir={tmp_path}", "trainer.name=train"]
    )
    AgentTrainer(config=config, progress=False).train()
    (step,) = [m for m in load_metrics(tmp_path / "train") if "reward_mean" in m]
    assert step["step"] == 1 and "loss_tokens" in step
    assert len(read_episodes(tmp_path / "train", split="train")) == 2 * 2  # tasks x rollout.n


def env_trainer(env_class, tasks: list[dict], overrides: list[str], val_tasks=(), agent_class=None) -> AgentTrainer:
    """An AgentTrainer of `agent_class` (BaseAgent) in `env_class` on `tasks`, under the FrozenLake config and
    `overrides` (the config's task data replaced by the test's own)."""
    from rllm.agents.base import BaseAgent

    config = load_config(Path(CONFIG).with_name("frozenlake_grpo.yaml"), overrides)
    trainer_args = {"train_dataset": tasks, "val_dataset": list(val_tasks), "config": config, "progress": False}
    return AgentTrainer(agent_class=agent_class or BaseAgent, env_class=env_class, **trainer_args)
