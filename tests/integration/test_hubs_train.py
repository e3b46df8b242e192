"""Each environment hub, and a catalog benchmark, through rllm's real loop: `evaluate` (what `rllm eval` runs) with a
scripted model that plays well, so the reward reaches the summary, then one training step of a tiny random-init model
(`AgentTrainer`, what `rllm train` runs). The hubs themselves are tested in tests/unit/tasks/test_hubs.py."""

from __future__ import annotations

import re

import pytest

from rllm.config import load_config
from rllm.runs import load_metrics, read_episodes
from tests.support.training import ONE_STEP, eval_with, train_one_step


def test_reasoning_gym_evaluates_and_trains_a_step(tmp_path, monkeypatch, smollm2_tokenizer, tiny_model_dir):
    task = ["data.task=reasoning_gym:leg_counting", "data.task_args.max_animals=3"]
    answers = {}
    for row in load_config(None, [*task, "data.val_size=4"]).data.make_tasks("val"):
        answers[row["question"]] = row["answer"]

    def reply(text: str) -> str:  # the right answer to the question in the prompt, in the asked format
        return next(f"Counting.\n<answer>{a}</answer>" for question, a in answers.items() if question in text)

    runs = [f"trainer.run_dir={tmp_path / 'runs'}", "trainer.name=eval", "rollout.max_tokens=32"]
    summary, episodes = eval_with(monkeypatch, smollm2_tokenizer, reply, [*task, "data.val_size=4", *runs])
    assert summary["episodes"] == 4 and summary["success_rate"] == 1.0 and summary["reward_mean"] == 1.0
    assert {episode.task["question"] for episode in episodes} == set(answers)
    train_one_step(tmp_path, tiny_model_dir, task)


def test_textarena_evaluates_and_trains_a_step(tmp_path, monkeypatch, smollm2_tokenizer, tiny_model_dir):
    task = ["data.task=textarena:GuessTheNumber-v0"]

    def reply(text: str) -> str:  # binary search on the hints so far: wins GuessTheNumber-v0 within 5 turns
        low, high = 1, 20
        guesses = [int(g) for g in re.findall(r"My guess: \[(\d+)\]", text)]
        hints = re.findall(r"The target number is (higher|lower)", text)
        for guess, hint in zip(guesses, hints, strict=True):
            low, high = (guess + 1, high) if hint == "higher" else (low, guess - 1)
        return f"My guess: [{(low + high) // 2}]"

    runs = [f"trainer.run_dir={tmp_path / 'runs'}", "trainer.name=eval", "rollout.max_steps=6"]
    summary, episodes = eval_with(monkeypatch, smollm2_tokenizer, reply, [*task, "data.val_size=3", *runs])
    assert summary["episodes"] == 3 and summary["success_rate"] == 1.0 and summary["reward_mean"] == 1.0
    for episode in episodes:
        (trajectory,) = episode.trajectories
        assert 1 <= len(trajectory.steps) <= 5 and [s.reward for s in trajectory.steps][-1] == 1.0
        assert episode.termination_reason.value == "env_done"
    train_one_step(tmp_path, tiny_model_dir, [*task, "rollout.max_steps=2"])


@pytest.fixture(autouse=True)
def _no_leftover_cwd_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a default run directory would land in the test's own folder


def test_a_catalog_benchmark_evaluates_and_trains_from_the_command_line_offline(
    tmp_path, monkeypatch, capsys, tiny_model_dir
):
    """`rllm eval gsm8k --data-dir DIR` and `rllm train gsm8k --data-dir DIR`, as typed, on the fixture (the hub's
    layout), with the hub unreachable."""
    from pathlib import Path

    from rllm.cli.main import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = str(Path(__file__).resolve().parents[1] / "fixtures" / "catalog")
    common = [f"model.name={tiny_model_dir}", f"trainer.run_dir={tmp_path}", "--no-progress", "--data-dir", data]
    assert main(["eval", "gsm8k", *common, "data.val_size=3", "rollout.max_tokens=4", "trainer.name=eval"]) == 0
    assert "(3 episodes)" in capsys.readouterr().out
    assert [e.task["data_source"] for e in read_episodes(tmp_path / "eval")] == ["gsm8k"] * 3
    assert main(["train", "gsm8k", *common, *ONE_STEP, "trainer.name=train"]) == 0
    (step,) = [m for m in load_metrics(tmp_path / "train") if "reward_mean" in m]
    assert step["step"] == 1 and "loss_tokens" in step
    questions = {e.task["question"] for e in read_episodes(tmp_path / "train", split="train")}
    assert questions and all(q.startswith(("Tom has", "A pen costs", "A farm has")) for q in questions)  # train split
