"""Our solver-judge scripts (tests/compat/scripts/solver_judge): a countdown workflow written against rLLM's public
`Workflow` API (Workflow, Episode/Trajectory/Step, RolloutEngine.get_model_response, ModelOutput, RewardFunction) and
a script that runs it with rLLM's `AgentWorkflowEngine` and `OpenAIEngine`, as an rLLM user would write them. The
script runs against a local OpenAI-compatible server that speaks token ids; then the workflow class is trained for two
steps on the tiny model by rllm's trainer."""

from __future__ import annotations

import itertools
import json
import re
import runpy
import sys
from pathlib import Path

import pytest

from rllm.testing.fake_openai_server import FakeOpenAIServer, FakeReply, run_fake_server

SCRIPTS = Path(__file__).parent / "scripts" / "solver_judge"
# Countdown rows in the fields rLLM's countdown reward reads (question, target, nums).
PROBLEMS = [([2, 3, 4], 14, "2 + 3 * 4", "2 * 3 + 4"), ([5, 6, 7], 37, "5 * 6 + 7", "5 + 6 * 7")]


def countdown_rows():
    rows = []
    for nums, target, _, _ in PROBLEMS:
        question = (
            f"Make {target} from {nums}, each number once, with + - * /. Put the expression in <answer></answer>."
        )
        rows.append(
            {
                "question": question,
                "ground_truth": str(target),
                "data_source": "countdown",
                "target": target,
                "nums": nums,
            }
        )
    return rows


def solver_judge_server(tokenizer):
    """A stand-in model: the two solvers of a problem answer right then wrong; the judge picks a right proposal."""
    answers = {str(target): (right, wrong) for _, target, right, wrong in PROBLEMS}
    calls: dict[str, int] = {}

    def reply(endpoint, body):
        prompt = tokenizer.decode(body["prompt"])
        target = re.search(r"Make (\d+) from", prompt).group(1)
        if "Check each proposal" in prompt:
            proposals = re.findall(r"Proposal (\d+): (.*)", prompt)
            index = next((i for i, text in proposals if text == answers[target][0]), "1")
            text = f"The right one is <answer>{index}</answer>"
        else:
            calls[target] = calls.get(target, 0) + 1
            text = f"Let me compute. <answer>{answers[target][(calls[target] - 1) % 2]}</answer>"
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        return FakeReply(text=text, token_ids=ids, logprobs=[-0.5] * len(ids))

    return FakeOpenAIServer(model=tokenizer.name_or_path, reply_fn=reply)  # served under its path, as vLLM does


@pytest.fixture
def rllm_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "home"))
    from rllm.data.dataset import DatasetRegistry

    DatasetRegistry.register_dataset("countdown", countdown_rows(), "test")
    return tmp_path


def test_the_panel_script_evaluates_against_a_token_id_server(rllm_home, qwen_tokenizer, monkeypatch, capsys):
    with run_fake_server(solver_judge_server(qwen_tokenizer)) as server:
        monkeypatch.setenv("RLLM_COMPAT_MODEL", qwen_tokenizer.name_or_path)
        monkeypatch.setenv("RLLM_COMPAT_BASE_URL", server.base_url)
        monkeypatch.chdir(rllm_home)
        monkeypatch.syspath_prepend(str(SCRIPTS))
        runpy.run_path(str(SCRIPTS / "eval_countdown_panel.py"), run_name="__main__")
    sys.modules.pop("countdown_panel", None)
    out = capsys.readouterr().out
    assert "2 countdown puzzles" in out and "judge picked a right answer in 1.0 of the puzzles" in out
    episodes = json.loads((rllm_home / "logs" / "countdown_panel.json").read_text())
    assert len(episodes) == 2
    for episode in episodes:
        names = [t["name"] for t in episode["trajectories"]]
        assert names == ["solver", "solver", "judge"] and episode["is_correct"]
        solver_rewards = sorted(t["steps"][0]["reward"] for t in episode["trajectories"][:2])
        assert solver_rewards == [0.0, 1.0]
        assert episode["metrics"]["solver_acc"] == 0.5 and episode["metrics"]["judge_acc"] == 1
        # the workflow returned its Episode without trajectory rewards: they are the step rewards here
        assert [t["reward"] for t in episode["trajectories"]] == [
            t["steps"][0]["reward"] for t in episode["trajectories"]
        ]
        assert episode["metrics"]["token_mismatch"] == 0
        for trajectory in episode["trajectories"]:
            (step,) = trajectory["steps"]
            seen = step["chat_completions"][:-1]  # rLLM records the reply too
            rendered = qwen_tokenizer.apply_chat_template(seen, add_generation_prompt=True, tokenize=False)
            assert qwen_tokenizer.decode(step["model_output"]["prompt_ids"]) == rendered
            completion = step["model_output"]["completion_ids"]
            assert qwen_tokenizer.decode(completion, skip_special_tokens=True) == step["model_output"]["text"]
            assert step["model_output"]["logprobs"] == [-0.5] * len(completion)


def test_the_workflow_trains_two_steps_on_the_tiny_model(rllm_home, tiny_model_dir):
    """The rLLM-API workflow class, trained by rllm's AgentTrainer: its rollout engine's calls go through the trainer's
    local model, and both roles get gradients."""
    from rllm.config import load_config
    from rllm.rewards.base import RewardOutput
    from rllm.rewards.countdown_reward import countdown_reward_fn
    from rllm.runs import load_metrics
    from rllm.training.trainer import AgentTrainer

    sys.path.insert(0, str(SCRIPTS))
    try:
        from countdown_panel import CountdownPanel
    finally:
        sys.path.remove(str(SCRIPTS))
        sys.modules.pop("countdown_panel", None)
    overrides = [
        f"model.name={tiny_model_dir}",
        "trainer.total_steps=2",
        "rollout.n=2",
        "rollout.max_tokens=8",
        "data.val_size=0",
        "trainer.tensorboard=false",
        f"trainer.run_dir={rllm_home}",
        "trainer.name=sj",
        "trainer.tasks_per_step=2",
        "optim.micro_batch_size=4",
        "optim.lr=1e-2",
    ]
    config = load_config("configs/countdown_solver_judge.yaml", overrides)
    calls = itertools.count()

    def alternating_reward(task, action):  # the random tiny model never solves a puzzle: give the groups variance
        return countdown_reward_fn(task, action) if next(calls) % 2 else RewardOutput(reward=1.0, is_correct=True)

    trainer = AgentTrainer(
        workflow_class=CountdownPanel,
        config=config,
        progress=False,
        workflow_args={"n_solutions": 2, "reward_function": alternating_reward},
        train_dataset=countdown_rows(),
        val_dataset=[],
    )
    trainer.train()
    steps = [m for m in load_metrics(rllm_home / "sj") if "reward_mean" in m]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        assert m["role/solver/count"] == 8 and m["role/judge/count"] == 4  # 2 tasks x 2 rollouts x (2 + 1)
        assert m["skipped_update"] == 0 and m["token_mismatch"] == 0 and m["grad_norm"] > 0
