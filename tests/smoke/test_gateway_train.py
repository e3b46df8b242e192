"""The openai-SDK example agent trains through the gateway (tiny random-init model, real SmolLM2 tokenizer) with
training rows made of exactly the sampled ids; and `rllm serve gateway` in front of an OpenAI-compatible upstream."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

openai = pytest.importorskip("openai")

from rllm.config import load_config
from rllm.models.registry import load_tokenizer
from rllm.runs import load_metrics
from rllm.testing import FakeReply, run_fake_server
from rllm.testing.fake_openai_server import read_first_line
from rllm.training.batch import build_rows, episode_trajectories
from rllm.training.trainer import AgentTrainer
from rllm.types import Episode
from tests.support.models import sharp_tiny_model

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "rollout.n=2",
    "rollout.max_tokens=6",
    "trainer.tasks_per_step=2",
    "trainer.total_steps=2",
    "data.train_size=4",
    "data.val_size=2",
    "optim.micro_batch_size=4",
    "rollout.n_parallel=4",
]


def _parity_reward(task: dict, answer: str) -> float:
    """A reward a random model earns about half the time (the arithmetic one it never earns), so weights move."""
    return float(len(answer) % 2)


def test_openai_sdk_agent_trains_token_exactly_through_the_gateway(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config names the agent by a path relative to the repository root
    overrides = [*TINY, f"model.name={tiny_model_dir}", f"trainer.run_dir={tmp_path}", "trainer.name=gw"]
    config = load_config("configs/openai_agent_grpo.yaml", overrides)
    tokenizer = load_tokenizer(str(tiny_model_dir))
    trainer = AgentTrainer(
        config=config,
        progress=False,
        model=sharp_tiny_model(tokenizer, seed=2),
        tokenizer=tokenizer,
        workflow_args={"reward_fn": _parity_reward},
    )
    assert trainer.workflow_class.__name__ == "solve"  # examples/openai_agent.py, by the config's path
    assert trainer.train()["steps"] == 2
    steps = [m for m in load_metrics(tmp_path / "gw") if "reward_mean" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["token_mismatch"] == 0 and m["batch/rows_split"] == 0 and m["turns_mean"] == 2 for m in steps)
    assert any(m["grad_norm"] > 0 for m in steps)

    lines = [json.loads(line) for line in (tmp_path / "gw" / "episodes.jsonl").read_text().splitlines()]
    episodes = [Episode.model_validate(line["episode"]) for line in lines if line["split"] == "train"]
    assert len(episodes) == 8 and all(e.termination_reason.value == "env_done" for e in episodes)
    pairs = episode_trajectories(episodes)
    rows, stats = build_rows(
        pairs,
        step_advantages=[[1.0] * len(t.steps) for _, t in pairs],
        max_prompt_length=config.rollout.max_prompt_length,
        max_response_length=config.rollout.max_response_length,
    )
    assert stats["rows_split"] == 0 and len(rows) == len(pairs)
    for row, (_, trajectory) in zip(rows, pairs, strict=True):
        first, last = (step.model_output for step in (trajectory.steps[0], trajectory.steps[-1]))
        assert len(trajectory.steps) == 2  # both turns of the agent, merged into one row
        assert row.input_ids == last.prompt_ids + last.completion_ids  # the sampled ids, nothing re-tokenized
        assert row.input_ids[: first.prompt_length + first.completion_length] == first.prompt_ids + first.completion_ids
        sampled = [i for i, m in enumerate(row.loss_mask) if m]
        assert [row.input_ids[i] for i in sampled] == first.completion_ids + last.completion_ids
        assert [row.old_logprobs[i] for i in sampled] == first.logprobs + last.logprobs


def test_rllm_serve_gateway_in_front_of_an_upstream(tmp_path, tiny_model_dir):
    with run_fake_server() as upstream:
        upstream.queue_replies(FakeReply("First."), FakeReply("Second."))
        command = [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "serve",
            "gateway",
            "--upstream",
            upstream.base_url,
            "--model",
            upstream.model,
            "--tokenizer",
            str(tiny_model_dir),
            "--port",
            "0",
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        try:
            base_url = read_first_line(process, 120.0)
            sdk = openai.OpenAI(base_url=f"{base_url}/sessions/a/v1", api_key="none", max_retries=0)
            messages = [{"role": "user", "content": "hi"}]
            first = sdk.chat.completions.create(model=upstream.model, messages=messages, temperature=0.5)
            messages += [first.choices[0].message, {"role": "user", "content": "again"}]
            second = sdk.chat.completions.create(model=upstream.model, messages=messages)
            calls = httpx.get(f"{base_url}/sessions/a/calls").json()["calls"]
        finally:
            process.terminate()
            _, stderr = process.communicate(timeout=30)
        path, body = upstream.requests[0]
    assert process.returncode == 0, stderr[-2000:]
    assert (first.choices[0].message.content, second.choices[0].message.content) == ("First.", "Second.")
    assert path == "/v1/completions" and body["return_token_ids"] and body["temperature"] == 0.5
    assert isinstance(body["prompt"], list) and all(isinstance(i, int) for i in body["prompt"])
    assert calls[0]["completion_ids"] == [ord(c) for c in "First."] and calls[0]["logprobs"]
    assert calls[1]["prompt_ids"][: len(body["prompt"])] == body["prompt"]


def test_rllm_eval_runs_the_openai_sdk_agent_against_an_endpoint(tmp_path):
    def right_answer(endpoint: str, body: dict) -> FakeReply:
        a, b = map(int, re.findall(r"\d+", body["messages"][1]["content"]))  # "What is a * b?"
        return FakeReply(f"{a * b}")

    with run_fake_server(reply_fn=right_answer) as server:
        command = [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "eval",
            "arithmetic",
            "workflow=examples/openai_agent.py:solve",
            "data.val_size=3",
            "rollout.server=openai",
            f"rollout.openai.base_url={server.base_url}",
            f"rollout.openai.model={server.model}",
            f"trainer.run_dir={tmp_path}",
        ]
        out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
        chat_requests = [path for path, _ in server.requests if path.endswith("/chat/completions")]
    assert out.returncode == 0, out.stderr[-2000:]
    assert "success rate   1.000  (3 episodes)" in out.stdout and "mean turns     2.00" in out.stdout
    assert len(chat_requests) == 6  # two turns each, forwarded to the endpoint's chat API (no tokenizer given)


def test_harnesses_by_name_evaluate_and_train_from_the_command_line(tmp_path, tiny_model_dir, capsys):
    """`rllm eval arithmetic --agent openai-agents` (the Agents SDK over /v1/responses) and `rllm train arithmetic
    --agent langgraph` (LangGraph over /v1/chat/completions), with the calculator tool, as a user types them."""
    pytest.importorskip("agents")
    pytest.importorskip("langchain")
    from rllm.cli.main import main

    common = [f"model.name={tiny_model_dir}", f"trainer.run_dir={tmp_path}", "agent_args.tools=[calculator]"]
    assert main(["eval", "arithmetic", "--agent", "openai-agents", *common, "data.val_size=2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "(2 episodes)" in out and "token mismatch 0" in out and '"error"' not in out, out
    train = ["train", "arithmetic", "--agent", "langgraph", *common, *TINY, "trainer.total_steps=1", "trainer.name=lg"]
    assert main([*train, "data.val_size=0", "--no-progress"]) == 0
    [step] = [m for m in load_metrics(tmp_path / "lg") if "reward_mean" in m]
    assert step["token_mismatch"] == 0 and step["batch/rows_split"] == 0 and step["episodes"] == 4
    assert step.get("termination/error", 0) == 0 and step.get("termination/infra_error", 0) == 0
