"""`codex_cli`: OpenAI's Codex CLI (`codex exec`, npm `@openai/codex`), a terminal coding agent, as a harness. It
plays the episode non-interactively against the gateway's Responses API and its final message is the answer.

    npm install -g @openai/codex@0.171.0          # or agent_args.cli_path / $RLLM_CODEX_BIN: the `codex` to run

Each episode runs in a fresh temporary folder, deleted afterwards: `workspace/` (the agent's working root),
`home/` (HOME and CODEX_HOME: its `config.toml` names the session URL as a custom model provider, so no login and
no OpenAI account), `tmp/` (TMPDIR) and the CLI's stdout/stderr files. Its environment is built from scratch (PATH,
LANG, those folders, the gateway key), so nothing of the host's HOME, credentials or keys reaches it.

Choices:

- Tools: Codex's own (a shell in the workspace, `write_stdin`, `view_image`, ...), sent to the gateway as function
  tools. The built-in tools Codex would send in other shapes, which the gateway refuses with a 400 ("tools[4] has
  type 'namespace'" for sub-agents, "has type 'web_search'"), are switched off, with goals, update checks,
  analytics and feedback. `agent_args.tools` are refused: Codex cannot be given rllm's tools.
- Sandbox: Codex's own (it ships a bubblewrap), `agent_args.sandbox`, default `workspace-write`: the commands the
  model runs see the filesystem read-only except the workspace and TMPDIR, and have no network at all. The Codex
  process itself runs outside any sandbox (it must reach the gateway on the host's loopback, which a fresh
  `bwrap --unshare-net` namespace lacks), confined only by the throwaway folders above. Where unprivileged user
  namespaces are off, its bubblewrap fails every command: `sandbox: danger-full-access` runs them unconfined.
- Limits: `agent_args.timeout_s` (300) of wall clock; past it the whole process group is killed and the episode
  ends as `timeout`. Codex has no turn limit, so `rollout.max_steps` is not enforced here. Failed calls are not
  retried (`request_max_retries = 0`): the gateway keeps a call's failure for the episode, a retry would only
  repeat it.
- Output: the last 20k characters of stdout (the final message) and stderr (the transcript: commands, outputs,
  errors) are kept in `job.output`, so they are stored with the episode; a non-zero exit raises with the code and
  the end of stderr. `agent_args.instructions` become Codex's `developer_instructions`, added after its own prompt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from rllm.errors import RllmError
from rllm.gateway.server import API_KEY_ENV
from rllm.harnesses.base import HarnessError, HarnessJob
from rllm.types import TerminationReason
from rllm.workflows.runtime import TerminationEvent

__all__ = ["CODEX_VERSION", "CodexCliError", "codex_cli"]

CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"  # the version this harness's config was checked against (`--strict-config` enforces it)
BIN_ENV = "RLLM_CODEX_BIN"
OUTPUT_CHARS = 20_000  # kept of stdout and of stderr each
ERROR_CHARS = 2_000  # of stderr, in an exception's message
KEY_ENV = "RLLM_CODEX_API_KEY"  # the variable the provider reads its key from (the gateway's, or a placeholder)
SANDBOXES = ("read-only", "workspace-write", "danger-full-access")


class CodexCliError(RllmError):
    """`codex exec` exited with a non-zero code; the message has the code and the end of its stderr."""


def codex_cli(job: HarnessJob) -> str:
    """One `codex exec` run of `job.instruction` in a fresh workspace, against `job.base_url`; its final message."""
    binary = find_codex(job.args.get("cli_path"))
    if job.tools:
        names = ", ".join(tool.name for tool in job.tools)
        raise HarnessError(
            f"the codex-cli harness plays with Codex's own tools (a shell); drop agent_args.tools ({names})"
        )
    sandbox = job.args.get("sandbox", "workspace-write")
    if sandbox not in SANDBOXES:
        raise HarnessError(f"agent_args.sandbox: {sandbox!r} is not one of {', '.join(SANDBOXES)}")
    timeout = float(job.args.get("timeout_s", 300))
    with tempfile.TemporaryDirectory(prefix="rllm-codex-", ignore_cleanup_errors=True) as folder:
        root = Path(folder)
        for name in ("workspace", "home", "tmp"):
            (root / name).mkdir()
        (root / "home" / "config.toml").write_text(codex_config(job))
        (root / "prompt.txt").write_text(job.instruction)
        argv = [binary, "exec", "--skip-git-repo-check", "--ephemeral", "--strict-config", "--color", "never"]
        argv += ["--sandbox", sandbox, "--cd", str(root / "workspace"), "-o", str(root / "answer.txt"), "-"]
        code = _run(argv, root, timeout, job)
        stderr = job.output.get("stderr", "")
        if code is None:
            raise TerminationEvent(
                TerminationReason.TIMEOUT, f"codex timed out after {timeout:g}s; stderr ends:\n{stderr[-ERROR_CHARS:]}"
            )
        if code != 0:
            raise CodexCliError(f"codex exited with code {code}; stderr ends:\n{stderr[-ERROR_CHARS:]}")
        answer = root / "answer.txt"
        # -o holds the final message alone; stdout has it too, as a fallback for a run that wrote no file
        return (answer.read_text() if answer.exists() else job.output.get("stdout", "")).rstrip()


def find_codex(cli_path: str | None = None) -> str:
    """The `codex` to run: `cli_path`, else $RLLM_CODEX_BIN, else the one on PATH."""
    candidate = cli_path or os.environ.get(BIN_ENV) or "codex"
    found = shutil.which(candidate)
    if found is None:
        raise HarnessError(
            f"the codex-cli harness needs the Codex CLI ({candidate!r} not found): "
            f"npm install -g {CODEX_PACKAGE}@{CODEX_VERSION}, or point agent_args.cli_path or ${BIN_ENV} at it"
        )
    return found


def codex_config(job: HarnessJob) -> str:
    """$CODEX_HOME/config.toml: the session URL as the only provider, and nothing that calls anywhere else."""
    lines = [
        f"model = {_toml(job.model)}",
        'model_provider = "rllm"',
        "check_for_update_on_startup = false",
        'web_search = "disabled"',  # a `web_search` tool, which the gateway refuses (it serves function tools)
    ]
    if job.instructions:
        lines.append(f"developer_instructions = {_toml(job.instructions)}")
    lines += [
        "[features]",
        "goals = false",
        "[agents]",
        "enabled = false",  # sub-agents come as a `namespace` tool, which the gateway refuses
        "[analytics]",
        "enabled = false",
        "[feedback]",
        "enabled = false",
        "[sandbox_workspace_write]",
        "exclude_slash_tmp = true",  # the host's /tmp stays read-only; the episode's own TMPDIR is writable
        "[model_providers.rllm]",
        'name = "rllm gateway"',
        f"base_url = {_toml(job.base_url)}",
        f"env_key = {_toml(KEY_ENV)}",
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    return "\n".join(lines) + "\n"


def _toml(text: str) -> str:
    # a JSON string without ASCII escaping is a valid TOML basic string (only \" \\ \n \uXXXX-style escapes)
    return json.dumps(text, ensure_ascii=False)


def _environment(root: Path) -> dict[str, str]:
    home = str(root / "home")
    return {
        "PATH": os.environ.get("PATH", os.defpath),  # the npm `codex` launcher needs node
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": home,
        "CODEX_HOME": home,
        # Codex refuses to set up its sandbox helper under TMPDIR; with TMPDIR beside CODEX_HOME, not above it, a
        # run under the system /tmp still gets one
        "TMPDIR": str(root / "tmp"),
        KEY_ENV: os.environ.get(API_KEY_ENV) or "none",
        "NO_COLOR": "1",
    }


def _run(argv: list[str], root: Path, timeout: float, job: HarnessJob) -> int | None:
    """Run codex to completion or `timeout`; its exit code (None: timed out), its output tails in `job.output`.
    Output goes to files, not pipes, so a straggler that keeps them open cannot hang the wait."""
    out_path, err_path = root / "stdout.txt", root / "stderr.txt"
    with open(root / "prompt.txt") as stdin, open(out_path, "w") as out, open(err_path, "w") as err:
        # its own process group (start_new_session), so a timeout kills codex and the commands it started
        process = subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=out,
            stderr=err,
            cwd=root / "workspace",
            env=_environment(root),
            start_new_session=True,
        )
        try:
            code: int | None = process.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            code = None
        except BaseException:  # interrupted: never leave an agent running
            _kill_group(process)
            raise
    job.output["stdout"] = _tail(out_path)
    job.output["stderr"] = _tail(err_path)
    return code


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _tail(path: Path) -> str:
    with open(path, "rb") as file:
        file.seek(max(0, path.stat().st_size - 4 * OUTPUT_CHARS))  # UTF-8: at most 4 bytes a character
        return file.read().decode(errors="replace")[-OUTPUT_CHARS:]
