"""`rllm eval` against endpoints that cannot work (issue 39, item 1), as a user runs it: an unreachable endpoint is
one line and a non-zero exit at once, not ~35 s of retries and a success rate of 0; an eval whose every episode is
an infrastructure error stops with the cause (a training step: tests/unit/test_first_hour_errors.py)."""

from __future__ import annotations

import json
import socket
import time

from aiohttp import web

from rllm.testing import run_fake_server
from rllm.testing.fake_openai_server import FakeOpenAIServer, Fault
from tests.support.cli import run_rllm


def _eval_against(base_url: str, tmp_path, *more: str):
    started = time.monotonic()
    endpoint = ["rollout.server=openai", f"rollout.openai.base_url={base_url}"]
    runs = f"trainer.run_dir={tmp_path / 'runs'}"
    out = run_rllm("eval", "arithmetic", "data.val_size=2", *endpoint, runs, "--no-progress", *more, cwd=tmp_path)
    return out, time.monotonic() - started


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _one_error_line(out) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "success rate" not in out.stdout  # no score that looks real
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    return line


def test_an_unreachable_endpoint_is_one_line_and_exit_2_at_once(tmp_path):
    port = _free_port()
    for url, says in [
        (f"http://127.0.0.1:{port}/v1", "connection refused"),
        ("http://no-such-host.invalid/v1", "GET http://no-such-host.invalid/v1/models failed"),
        ("not-a-url", "rollout.openai.base_url='not-a-url' is not an http(s) URL"),
    ]:
        out, seconds = _eval_against(url, tmp_path)
        line = _one_error_line(out)
        assert says in line and url in line, line
        assert seconds < 15, seconds  # one probe, no retried rollouts (they took ~35 s)
    assert not (tmp_path / "runs").exists()  # nothing was started, so nothing is left behind


class _WrongKeyServer(FakeOpenAIServer):
    """Refuses every request as OpenAI does a wrong key."""

    async def _models(self, request: web.Request) -> web.Response:
        error = {"message": "Incorrect API key provided: sk-wrong", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=401)


def test_a_server_that_refuses_the_key_is_reported_as_such_not_retried(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-wrong")
    with run_fake_server(_WrongKeyServer()) as server:
        out, _ = _eval_against(server.base_url, tmp_path, "rollout.openai.api_key_env=MY_KEY")
        sent = server.request_count
    line = _one_error_line(out)
    assert "HTTP 401" in line and "Incorrect API key provided" in line and "$MY_KEY" in line, line
    assert sent == 0  # no rollout was sent to it


def test_an_eval_whose_every_episode_is_an_infra_error_stops_with_the_cause(tmp_path):
    with run_fake_server() as server:  # /models answers, every model request fails
        server.inject(*[Fault.http(500, message="the GPU fell off the bus")] * 8)
        no_retries = ["rollout.openai.max_retries=0", "rollout.retry_limit=0"]
        out, seconds = _eval_against(server.base_url, tmp_path, f"rollout.openai.model={server.model}", *no_retries)
    line = _one_error_line(out)
    assert "all 2 episodes of this eval ended in an infrastructure error" in line, line
    assert "HTTP 500" in line and "the GPU fell off the bus" in line, line
    (run_dir,) = (tmp_path / "runs").iterdir()  # the episodes are kept to look at, and the message names them
    assert str(run_dir / "episodes.jsonl") in line
    assert json.loads((run_dir / "summary.json").read_text())["termination/infra_error"] == 1.0
    assert seconds < 30, seconds
