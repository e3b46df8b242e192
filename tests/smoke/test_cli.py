"""The CLI end to end in a subprocess, on a tiny random-init model folder (real tokenizer): what a user types."""

from __future__ import annotations

import json
import subprocess
import sys

from rllm.runs import read_episodes
from rllm.testing import FakeReply, run_fake_server


def _rllm(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rllm.cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_eval_on_a_local_model_folder_writes_episodes_and_summary(tmp_path, tiny_model_dir):
    out = _rllm("eval", "frozenlake", "--n", "3", "--model", str(tiny_model_dir), "--max-tokens", "6",
                "--max-steps", "2", "--out", str(tmp_path / "runs"), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "success rate" in out.stdout and "tokens/s" in out.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["token_mismatch"] == 0
    episodes = read_episodes(run_dir / "episodes.jsonl")
    assert [ep.id.split(":")[1] for ep in episodes] == ["0", "0", "0"]
    assert all(s.model_output.completion_ids for ep in episodes for s in ep.trajectories[0].steps)


def test_eval_against_an_openai_compatible_endpoint_in_chat_mode(tmp_path):
    with run_fake_server() as server:
        server.queue_replies(*[FakeReply("Action: down")] * 6)
        out = _rllm("eval", "frozenlake", "--n", "2", "--base-url", server.base_url, "--model", server.model,
                    "--max-steps", "3", "--out", str(tmp_path / "runs"), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "episodes" in out.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["episodes"] == 2


def test_unknown_task_is_a_clear_error(tmp_path):
    out = _rllm("eval", "nosuchtask", "--n", "1", cwd=tmp_path)
    assert out.returncode != 0
    assert "error: unknown task 'nosuchtask'; built-in tasks: arithmetic, countdown, frozenlake" in out.stderr
    assert "Traceback" not in out.stderr
