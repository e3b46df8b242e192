"""The CLI end to end in a subprocess, on a tiny random-init model folder (real tokenizer): what a user types."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from rllm.config import load_config
from rllm.runs import read_episodes
from rllm.testing import FakeReply, run_fake_server
from tests.support.cli import run_rllm

ROOT = Path(__file__).resolve().parents[2]


def _rllm(*args: str, cwd) -> subprocess.CompletedProcess:
    return run_rllm(*args, cwd=cwd, timeout=300)


def _endpoint(server, *more: str) -> list[str]:
    """Overrides that point `rllm eval` at a fake OpenAI-compatible server, in chat mode."""
    return [
        "rollout.server=openai",
        f"rollout.openai.base_url={server.base_url}",
        f"rollout.openai.model={server.model}",
        *more,
    ]


def _eval_against(server, tmp_path, task: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`rllm eval task *args` against the fake server; it must succeed. Its output and its one run directory."""
    out = _rllm("eval", task, *args, f"trainer.run_dir={tmp_path / 'runs'}", *_endpoint(server), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    return out, run_dir


def test_eval_on_a_local_model_folder_writes_a_run_directory(tmp_path, tiny_model_dir):
    out = _rllm(
        "eval",
        "frozenlake",
        "data.val_size=3",
        "rollout.val_n=2",
        f"model.name={tiny_model_dir}",
        "rollout.max_tokens=6",
        "rollout.max_steps=2",
        f"trainer.run_dir={tmp_path / 'runs'}",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "success rate" in out.stdout and "tokens/s" in out.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("eval-frozenlake-")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["token_mismatch"] == 0
    assert load_config(run_dir / "config.yaml").rollout.val_n == 2  # the resolved config is kept, as in training
    assert json.loads((run_dir / "manifest.json").read_text())["kind"] == "eval"
    episodes = read_episodes(run_dir, split="eval")
    assert [ep.id.split(":")[1] for ep in episodes] == ["0", "1"] * 3
    assert all(s.model_output.completion_ids for ep in episodes for s in ep.trajectories[0].steps)


def test_eval_of_a_training_config_uses_its_validation_split_and_sampling(tmp_path, tiny_model_dir):
    config = load_config("configs/arithmetic_grpo.yaml", ["data.val_size=4"])
    out = _rllm(
        "eval",
        str(ROOT / "configs/arithmetic_grpo.yaml"),
        "data.val_size=4",
        f"model.name={tiny_model_dir}",
        f"trainer.run_dir={tmp_path / 'runs'}",
        "--no-progress",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    episodes = read_episodes(run_dir)
    assert [ep.task for ep in episodes] == config.data.make_tasks("val")  # the very rows training validates on
    assert all(ep.trajectories[0].steps[0].model_output.completion_length <= 12 for ep in episodes)  # max_tokens


def test_eval_against_an_openai_compatible_endpoint_in_chat_mode(tmp_path):
    with run_fake_server() as server:
        server.queue_replies(*[FakeReply("Action: down")] * 6)
        out, run_dir = _eval_against(server, tmp_path, "frozenlake", "data.val_size=2", "rollout.max_steps=3")
    assert "episodes" in out.stdout
    assert json.loads((run_dir / "summary.json").read_text())["episodes"] == 2


def test_eval_token_in_token_out_against_an_endpoint_with_a_key_from_the_named_variable(
    tmp_path, tiny_model_dir, monkeypatch
):
    monkeypatch.setenv("MY_ENDPOINT_KEY", "secret-123")
    with run_fake_server() as server:
        out = _rllm(
            "eval",
            "arithmetic",
            "data.val_size=2",
            "rollout.max_tokens=4",
            f"rollout.openai.tokenizer={tiny_model_dir}",
            "rollout.openai.api_key_env=MY_ENDPOINT_KEY",
            f"trainer.run_dir={tmp_path / 'runs'}",
            *_endpoint(server),
            cwd=tmp_path,
        )
        paths, keys = [path for path, _ in server.requests], list(server.authorizations)
    assert out.returncode == 0, out.stderr
    assert paths == ["/v1/completions"] * 2 and keys == ["Bearer secret-123"] * 2  # token ids in, the named key
    (run_dir,) = (tmp_path / "runs").iterdir()
    outputs = [ep.trajectories[0].steps[0].model_output for ep in read_episodes(run_dir)]
    assert all(o.prompt_ids and len(o.logprobs) == len(o.completion_ids) > 0 for o in outputs)


def test_unknown_task_is_a_clear_error(tmp_path):
    out = _rllm("eval", "nosuchtask", cwd=tmp_path)
    assert out.returncode != 0
    known = "arithmetic, code, countdown, frozenlake, humaneval, math, mcp_kb"
    assert f"data.task = 'nosuchtask': unknown task 'nosuchtask'; built-in tasks: {known}" in out.stderr
    assert "benchmarks: `rllm datasets list`; environment hubs: hub:name" in out.stderr
    assert "Traceback" not in out.stderr


def test_eval_countdown_with_the_solver_judge_workflow_against_an_endpoint(tmp_path):
    from rllm.tasks.countdown import make_countdown_tasks

    solution = make_countdown_tasks(1, seed=1)[0]["solution"]  # the task `data.val_size=1` makes (data.val_seed 1)
    with run_fake_server() as server:
        # one episode: two solver calls (a right and a wrong answer), then the judge, who picks candidate 2
        server.queue_replies(
            FakeReply(f"<answer>{solution}</answer>"),
            FakeReply("<answer>1 + 1</answer>"),
            FakeReply("<answer>2</answer>"),
        )
        out, run_dir = _eval_against(
            server, tmp_path, "countdown", "workflow=solver_judge", "data.val_size=1", "rollout.n_parallel=1"
        )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["role/solver/count"], summary["role/solver/reward_mean"], summary["role/solver/success_rate"]) == (
        2,
        0.5,
        0.5,
    )
    # The two solvers run concurrently, so which one got the right answer depends on arrival order; the judge's
    # pick of candidate 2 is right exactly when the second solver trajectory holds the right answer.
    (episode,) = read_episodes(run_dir / "episodes.jsonl")
    second_right = episode.trajectories[1].is_correct
    assert summary["role/judge/success_rate"] == float(second_right) == float(episode.is_correct)
    assert "role solver" in out.stdout and "role judge" in out.stdout


def test_eval_math_against_an_endpoint_scores_by_verified_equivalence(tmp_path):
    from rllm.tasks.math import make_math_tasks

    first, second = make_math_tasks(2, seed=1)  # what `data.val_size=2` generates (data.val_seed 1)
    with run_fake_server() as server:
        # a right answer written differently (a sum that sympy evaluates), and a wrong one
        server.queue_replies(
            FakeReply(f"So the answer is \\boxed{{({first['answer']}) + 0}}."),
            FakeReply(f"\\boxed{{{second['answer']} + 1}}"),
        )
        _, run_dir = _eval_against(server, tmp_path, "math", "data.val_size=2", "rollout.n_parallel=1")
    episodes = read_episodes(run_dir / "episodes.jsonl")
    assert [ep.is_correct for ep in episodes] == [True, False]
    assert json.loads((run_dir / "summary.json").read_text())["success_rate"] == 0.5


def test_eval_humaneval_against_an_endpoint_runs_the_tests_in_the_sandbox(tmp_path):
    from rllm.tasks.humaneval import make_humaneval_tasks

    first, second = make_humaneval_tasks(2, seed=1)  # what `data.val_size=2` picks (data.val_seed 1)
    right = f"```python\n{first['prompt']}{first['canonical_solution']}\n```"
    wrong = f"```python\n{second['prompt']}    return None\n```"
    with run_fake_server() as server:
        server.queue_replies(FakeReply(right), FakeReply(wrong))
        _, run_dir = _eval_against(server, tmp_path, "humaneval", "data.val_size=2", "rollout.n_parallel=1")
    episodes = read_episodes(run_dir / "episodes.jsonl")
    assert [ep.task["id"] for ep in episodes] == [first["id"], second["id"]]
    assert [ep.is_correct for ep in episodes] == [True, False]
    info = episodes[1].trajectories[0].steps[0].info
    assert info["passed_tests"] == 0 and "AssertionError" in info["feedback"]  # what a multi-turn agent would see


def test_eval_mcp_kb_against_an_endpoint_that_parses_tool_calls_itself(tmp_path):
    from rllm.tasks.mcp_kb import PLANETS, make_mcp_kb_tasks

    (task,) = make_mcp_kb_tasks(1, seed=1)  # what `data.val_size=1` generates (data.val_seed 1)
    planet = next(name for name in PLANETS if name in task["question"])
    with run_fake_server() as server:
        # a chat-mode server parses calls itself: the first reply is a lookup call, the second the answer
        server.queue_replies(
            FakeReply("", tool_calls=[{"name": "lookup", "arguments": {"entity": planet, "attribute": "moons"}}]),
            FakeReply(f"<answer>{task['answer']}</answer>"),
        )
        _, run_dir = _eval_against(server, tmp_path, "mcp_kb", "data.val_size=1", "rollout.max_steps=3")
        bodies = [body for path, body in server.requests if path.endswith("/chat/completions")]
    (episode,) = read_episodes(run_dir / "episodes.jsonl")
    assert episode.is_correct and len(episode.trajectories[0].steps) == 2
    assert {t["function"]["name"] for t in bodies[0]["tools"]} == {"lookup", "convert", "finish"}  # tools were sent
    assistant, tool_message = bodies[1]["messages"][-2:]  # sent back as an OpenAI server expects them
    assert assistant["tool_calls"][0]["function"]["name"] == "lookup"
    assert tool_message["role"] == "tool" and tool_message["content"].startswith(f"{planet} moons = ")
    assert tool_message["tool_call_id"] == assistant["tool_calls"][0]["id"]
