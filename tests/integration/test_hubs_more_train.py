"""The skyrl_gym, openenv and verifiers hubs through rllm's real loop: `evaluate` (what `rllm eval` runs) with a
scripted model that plays well, so the hub's reward reaches the summary, then one training step of a tiny random-init
model (`AgentTrainer`, what `rllm train` runs). The same shape as tests/integration/test_hubs_train.py; the hubs
themselves are tested in tests/unit/tasks/test_hubs_more.py (whose fixtures make the echo environment and the verifiers
environments). Each test skips without its package (verifiers lives in a venv of its own)."""

from __future__ import annotations

import json
import re

import pytest

from rllm.config import load_config
from tests.support.hubs import (
    FIXTURES,
    forget_modules,
    importable_vf_environments,
    make_echo_env,
)
from tests.support.training import eval_with, train_one_step


def _skyrl_multi_turn_file(tmp_path) -> str:
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i} + {i}? End with #### and the number."}],
            "env_class": "gsm8k_multi_turn",
            "reward_spec": {"method": "rule", "ground_truth": str(2 * i)},
            "extra_info": {"index": i, "max_turns": 2},
        }
        for i in range(40)
    ]
    path = tmp_path / "multi.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_skyrl_gym_evaluates_and_trains_a_step(tmp_path, monkeypatch, smollm2_tokenizer, tiny_model_dir):
    pytest.importorskip("skyrl_gym")
    task = ["data.task=skyrl_gym:gsm8k", f"data.data_dir={FIXTURES}"]
    answers = {}
    for row in load_config(None, [*task, "data.val_size=3"]).data.make_tasks("val"):
        answers[row["extra_info"]["question"]] = row["reward_spec"]["ground_truth"]

    def reply(text: str) -> str:  # the right number, in the format SkyRL's gsm8k scorer reads
        return next(f"Step by step.\n#### {a}" for question, a in answers.items() if question in text)

    runs = [f"trainer.run_dir={tmp_path / 'runs'}", "trainer.name=eval", "rollout.max_tokens=32"]
    summary, episodes = eval_with(monkeypatch, smollm2_tokenizer, reply, [*task, "data.val_size=3", *runs])
    assert summary["episodes"] == 3 and summary["success_rate"] == 1.0 and summary["reward_mean"] == 1.0
    assert all(episode.termination_reason.value == "env_done" for episode in episodes)
    multi = ["data.task=skyrl_gym:gsm8k_multi_turn", f"data.task_args.dataset={_skyrl_multi_turn_file(tmp_path)}"]
    train_one_step(tmp_path, tiny_model_dir, [*multi, "rollout.max_steps=2"])


def test_openenv_evaluates_and_trains_a_step(tmp_path, monkeypatch, smollm2_tokenizer, tiny_model_dir):
    pytest.importorskip("openenv.core")
    from rllm.tasks.hubs import openenv as hub

    make_echo_env(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget_modules("echo_env")
    hub._environment.cache_clear()
    try:
        task = ["data.task=openenv:echo_env", "rollout.max_steps=2"]
        runs = [f"trainer.run_dir={tmp_path / 'runs'}", "trainer.name=eval", "rollout.max_tokens=16"]
        summary, episodes = eval_with(
            monkeypatch, smollm2_tokenizer, lambda text: "echo", [*task, "data.val_size=2", *runs]
        )
        assert summary["episodes"] == 2 and summary["reward_mean"] == pytest.approx(0.8)  # 2 turns x 0.1 x len("echo")
        for episode in episodes:
            (trajectory,) = episode.trajectories
            assert [step.observation for step in trajectory.steps] == ["echo", "echo"]
            assert episode.termination_reason.value == "max_turns"
        train_one_step(tmp_path, tiny_model_dir, task)
        assert hub.running_servers() >= 1  # pooled for the rest of the process
    finally:
        hub.shutdown_servers()
        hub._environment.cache_clear()
        forget_modules("echo_env")
    assert hub.running_servers() == 0


@pytest.fixture
def vf_path(tmp_path, monkeypatch):
    yield from importable_vf_environments(tmp_path, monkeypatch)


def _last_user(text: str) -> str:
    return text.rsplit("user", 1)[-1]


def _solved_vf_episodes(tmp_path, monkeypatch, tokenizer, env: str, tasks: int, max_tokens: int, reply) -> list:
    """`rllm eval` of the verifiers environment `env` on `tasks` tasks with a scripted model replying `reply(text)`;
    every task must be solved, in one trajectory an episode. The summary and the episodes."""
    runs = [f"trainer.run_dir={tmp_path / 'runs'}", "trainer.name=eval", f"rollout.max_tokens={max_tokens}"]
    overrides = [f"data.task=verifiers:{env}", f"data.val_size={tasks}", *runs]
    summary, episodes = eval_with(monkeypatch, tokenizer, reply, overrides)
    assert summary["episodes"] == tasks and summary["success_rate"] == 1.0
    assert len(episodes) == tasks and all(len(episode.trajectories) == 1 for episode in episodes)
    return summary, episodes


def test_verifiers_single_turn_evaluates_and_trains_a_step(
    tmp_path, monkeypatch, smollm2_tokenizer, tiny_model_dir, vf_path
):
    def reply(text: str) -> str:  # the sum asked for
        a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1])
        return str(a + b)

    task = ["data.task=verifiers:vf_sums"]
    summary, episodes = _solved_vf_episodes(tmp_path, monkeypatch, smollm2_tokenizer, "vf_sums", 4, 8, reply)
    assert summary["reward_mean"] == 1.0
    for episode in episodes:
        (trajectory,) = episode.trajectories
        assert len(trajectory.steps) == 1 and trajectory.steps[-1].info["stop_condition"] == "max_turns_reached"
        assert "Reply with the number only." in json.dumps(trajectory.steps[0].chat_completions)
    train_one_step(tmp_path, tiny_model_dir, task)


def test_verifiers_tool_env_calls_its_tool_through_the_gateway(tmp_path, monkeypatch, smollm2_tokenizer, vf_path):
    def reply(text: str) -> str:  # call the add tool, then answer with what it returned
        a, b = map(int, re.findall(r"compute (\d+) \+ (\d+)", text)[-1])
        call = json.dumps({"name": "add", "arguments": {"a": a, "b": b}})
        return str(a + b) if call in text else f"<tool_call>\n{call}\n</tool_call>"

    _, episodes = _solved_vf_episodes(tmp_path, monkeypatch, smollm2_tokenizer, "vf_tools", 2, 64, reply)
    for episode in episodes:
        (trajectory,) = episode.trajectories
        assert len(trajectory.steps) == 2 and trajectory.steps[0].info["tool_calls"][0]["function"]["name"] == "add"
        last = trajectory.steps[-1].info
        assert last["metrics"]["add_calls"] == 1.0 and last["stop_condition"] == "no_tools_called"


def test_verifiers_multi_turn_env_plays_its_own_turns(tmp_path, monkeypatch, smollm2_tokenizer, vf_path):
    def reply(text: str) -> str:  # binary search on the env's hints
        low, high = 1, 20
        for guess, hint in re.findall(r"assistant\s*\n?(\d+).*?user\s*\n?(higher|lower)", text, flags=re.S):
            low, high = (int(guess) + 1, high) if hint == "higher" else (low, int(guess) - 1)
        return str((low + high) // 2)

    _, episodes = _solved_vf_episodes(tmp_path, monkeypatch, smollm2_tokenizer, "vf_guess", 4, 8, reply)
    for episode in episodes:
        (trajectory,) = episode.trajectories
        assert 1 <= len(trajectory.steps) <= 5 and trajectory.steps[-1].info["stop_condition"] == "guessed"
        assert episode.task["answer"] == trajectory.steps[-1].action.strip()


@pytest.fixture(autouse=True)
def _no_leftover_cwd_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a default run directory would land in the test's own folder
