"""The Codex CLI (`codex exec`, npm `@openai/codex`) as a harness against a real gateway over a scripted model with
the SmolLM2 tokenizer: a shell command in its sandboxed workspace, then the answer, recorded token-exactly. Skipped
when no `codex` is installed (`npm install -g @openai/codex@<CODEX_VERSION>`, or $RLLM_CODEX_BIN)."""

from __future__ import annotations

import json

import pytest

from rllm.harnesses.base import HarnessError, HarnessJob
from rllm.harnesses.codex_cli import CODEX_VERSION, CodexCliError, codex_cli, find_codex
from rllm.types import TerminationReason
from rllm.workflows.runtime import TerminationEvent
from tests.support.gateway import fake, serving


def _require_codex() -> None:
    try:
        find_codex()
    except HarnessError:
        pytest.skip(f"no Codex CLI: npm install -g @openai/codex@{CODEX_VERSION} (or set $RLLM_CODEX_BIN)")


def _shell(command: str) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'exec_command', 'arguments': {'cmd': command}})}\n</tool_call>"


def test_codex_runs_a_command_in_its_workspace_and_answers(smollm2_tokenizer):
    _require_codex()
    command = "echo hello > note.txt && cat note.txt && pwd"
    model = fake([_shell(command), "done"], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway:
        job = HarnessJob(
            task={"question": "say done"},
            base_url=gateway.session_url("cli"),
            instruction="Reply with the word done.",
            args={"timeout_s": 60, "instructions": "Be brief."},
        )
        answer = codex_cli(job)
        session = gateway.sessions["cli"]
    assert answer == "done"
    assert len(session.records) == 2
    assert session.token_mismatches() == 0
    # the command ran (in the sandbox, in the episode's workspace) and Codex sent its output back
    result = json.dumps(session.records[1].messages)
    assert "hello" in result and "rllm-codex-" in result and "/workspace" in result
    assert "Be brief." in json.dumps(session.records[0].messages)
    assert "done" in job.output["stdout"] and "exec_command" not in job.output["stdout"]
    assert job.output["stderr"]


def test_a_failed_call_is_a_nonzero_exit_with_its_stderr(smollm2_tokenizer):
    _require_codex()
    with serving(fake([], tokenizer=smollm2_tokenizer)) as gateway:  # no reply scripted: the gateway answers 502
        job = HarnessJob(task={}, base_url=gateway.session_url("bad"), instruction="Hi.", args={"timeout_s": 60})
        with pytest.raises(CodexCliError, match=r"exited with code 1(.|\n)*502"):
            codex_cli(job)
        assert len(gateway.sessions["bad"].records) == 0  # one try, no retries
    assert "502" in job.output["stderr"]


def test_a_run_past_its_time_limit_is_killed_and_ends_as_timeout(smollm2_tokenizer):
    _require_codex()
    model = fake([_shell("sleep 30"), "done"], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway:
        job = HarnessJob(task={}, base_url=gateway.session_url("slow"), instruction="Wait.", args={"timeout_s": 3})
        with pytest.raises(TerminationEvent, match="timed out after 3s") as caught:
            codex_cli(job)
    assert caught.value.reason is TerminationReason.TIMEOUT


def test_a_missing_cli_names_the_install_command(tmp_path):
    with pytest.raises(HarnessError, match=f"npm install -g @openai/codex@{CODEX_VERSION}"):
        find_codex(str(tmp_path / "no-codex"))
