"""`SWEEnv`: a software-engineering task in a sandboxed repository, R2E-Gym/SWE-agent style, without Docker.

A task is a dataset row in SWE-bench's format (`instance_id`, `problem_statement`, `patch`, `test_patch`,
`FAIL_TO_PASS`, `PASS_TO_PASS`, ...; see rllm.tasks.swe.build for the generated ones). Per episode:
- `reset()` starts one sandbox session (rllm.sandbox.session) holding the task's base tree at /testbed: an
  overlay on a size-capped tmpfs over the read-only tree (nothing is copied, nothing of the host is writable), the
  hidden tests absent, no network, its own PID namespace, a cgroup, rlimits and a wall clock for the episode. The
  first observation is the issue; `info["tools"]` holds the scaffold's JSON-schema tools.
- `step(action)` runs the tool calls of one reply (ToolAgent's action: `{"tool_calls", "content", "errors"}`) in
  the session, each with `step_timeout` s, outputs cut to `max_output_chars` with a marker. Bad calls (unknown tool,
  bad arguments, a path outside the repository) are answered with an error message and counted in
  `info["tool_errors"]`; a reply with no call is told to call a tool. `finish`/`submit` ends the episode.
- `run_command(command)` runs one bash command as the scaffold's bash tool does: the workspace of a harness that
  plays the task with its own shell and turns (rllm.harnesses: `bash`, `mini-swe-agent`), graded at the end by
  `compute_final_reward()`.
- The reward: the diff of /testbed against the base, graded in a fresh sandbox (rllm.tasks.swe.grading). At the
  end of an episode that ran out of turns, `compute_final_reward()` grades what the repository holds then.
- `info["termination"]` on the last step says why it ended: submitted, sandbox_died (the session was killed: memory,
  pids, its wall clock), and `info["grade"]` the grader's reason (resolved, tests_failed, protected_path,
  patch_failed, grader_timeout, tampering, empty_patch).
Sandbox failures of ours (it cannot start) raise InfraError: the engine retries the episode.
`backend="docker"` plays the task in its own Docker image instead (rows from rllm.tasks.swe.swebench: SWE-bench,
SWE-Gym), workspace and grader both (rllm.tasks.swe.docker); without Docker, reset() raises DockerUnavailableError.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.tasks.swe.tools import FINISH_TOOLS, server_call, tool_schemas

__all__ = ["SWEEnv", "issue_prompt"]

_HERE = Path(__file__).parent
# scaffold -> (its bash tool, that tool's command argument): what `run_command` calls
_SHELL_TOOL = {"r2egym": ("execute_bash", "cmd"), "sweagent": ("bash", "command")}
_EXIT_CODE = re.compile(r"\[exit code -?\d+\]\Z")  # how the workspace server ends a failed command's output
_BIN_MOUNT = "/opt/rllm-bin"
_OPTIONS = (
    "scaffold",
    "step_timeout",
    "max_output_chars",
    "episode_timeout",
    "partial_credit",
    "grade_timeout",
    "memory_mb",
    "repo_size_mb",
    "backend",
)


def issue_prompt(task: dict) -> str:
    return (
        "A Python repository is checked out at /testbed. A user reported this issue:\n\n"
        f"<issue>\n{task['problem_statement'].strip()}\n</issue>\n\n"
        "Change the repository's non-test source files so that the issue is resolved. The tests that check your fix "
        "are hidden; do not edit or add tests. Work step by step: find the code involved, reproduce the problem with "
        "a small script, fix the code, run your script again to check the fix, then call the finish tool."
    )


class SWEEnv(BaseEnv):
    def __init__(
        self,
        task: dict,
        *,
        scaffold: str = "r2egym",
        step_timeout: float = 90.0,
        max_output_chars: int = 10000,
        episode_timeout: float = 1800.0,
        partial_credit: bool = False,
        grade_timeout: float = 300.0,
        memory_mb: int = 2048,
        repo_size_mb: int = 256,
        sandbox: Any = None,
        backend: str = "sandbox",
    ) -> None:
        tool_schemas(scaffold)  # an unknown scaffold fails here, naming the known ones
        for key in ("instance_id", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS", "patch", "test_patch"):
            if key not in task:
                raise ValueError(
                    f"SWEEnv: the task row lacks {key!r}; rows need SWE-bench's keys (see rllm.tasks.swe.build)"
                )
        self.task, self.scaffold = task, scaffold
        self.step_timeout, self.max_output_chars = float(step_timeout), int(max_output_chars)
        self.episode_timeout, self.partial_credit = float(episode_timeout), bool(partial_credit)
        self.grade_timeout, self.memory_mb, self.repo_size_mb = float(grade_timeout), int(memory_mb), int(repo_size_mb)
        if backend not in ("sandbox", "docker"):
            raise ValueError(f"SWEEnv: unknown backend {backend!r}: use 'sandbox' or 'docker' (rllm.tasks.swe.docker)")
        self.sandbox, self.backend = sandbox, backend
        self.session = None
        self.result = None  # the GradeResult, once graded
        self.tool_errors: dict[str, int] = {}
        self.tool_calls: dict[str, dict[str, int]] = {}  # tool -> {"calls", "ok"} (rllm.metrics: tool/<name>/...)

    @classmethod
    def from_dict(cls, task: dict) -> SWEEnv:
        task = dict(task)
        options = {key: task.pop(key) for key in _OPTIONS if key in task}
        return cls(task, **options)

    # ---- the episode -----------------------------------------------------------------------------------------

    def reset(self) -> tuple[Any, dict]:
        from rllm.sandbox import RepoMount, SandboxLimits, default_sandbox, host_python
        from rllm.tasks.swe.grading import repo_pythonpath, task_test_setup
        from rllm.tasks.swe.store import RUNTIME_MOUNT, runtime_dir, task_trees

        self.close()
        self.result, self.tool_errors, self.tool_calls = None, {}, {}
        if self.backend == "docker":  # the task's own image: rllm.tasks.swe.docker
            from rllm.tasks.swe.docker import open_session

            self.session = open_session(self.task, wall_s=self.episode_timeout, memory_mb=self.memory_mb)
            return issue_prompt(self.task), {"tools": tool_schemas(self.scaffold)}
        base, _ = task_trees(self.task)
        sandbox = self.sandbox or default_sandbox()
        limits = SandboxLimits(
            wall_s=self.episode_timeout,
            cpu_s=int(self.episode_timeout),
            memory_mb=self.memory_mb,
            pids=256,
            tmpfs_mb=256,
            output_bytes=1 << 20,
        )
        files = {
            "rllm_swe_server.py": (_HERE / "workspace_server.py").read_text(),
            "rllm_swe_patches.py": (_HERE / "patches.py").read_text(),
        }
        _, test_env = task_test_setup(self.task)  # the agent's `python -m pytest` finds the code as the grader does
        env = {
            **test_env,
            "PYTHONPATH": ":".join([RUNTIME_MOUNT, *repo_pythonpath(test_env)]),
            "RLLM_SWE_PATH_PREFIX": _BIN_MOUNT,
        }
        argv = [host_python()[1], "-s", "-B", "/work/rllm_swe_server.py"]
        binds = {str(runtime_dir()): RUNTIME_MOUNT, str(_python_bin()): _BIN_MOUNT}
        repo = RepoMount(str(base), size_mb=self.repo_size_mb)
        self.session = sandbox.session(argv, files=files, limits=limits, env=env, repo=repo, ro_binds=binds)
        self.session.request({"op": "ping"}, timeout_s=60)
        return issue_prompt(self.task), {"tools": tool_schemas(self.scaffold)}

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        from rllm.sandbox import SessionClosedError

        action = action if isinstance(action, dict) else {"tool_calls": [], "content": str(action or ""), "errors": []}
        calls, errors = action.get("tool_calls") or [], action.get("errors") or []
        if any(call.get("name") in FINISH_TOOLS for call in calls):
            return self._end("submitted")
        messages = []
        try:
            for call in calls:
                messages.append(self._run(call))
        except SessionClosedError as e:
            return self._end("sandbox_died", detail=str(e))
        for error in errors:
            self._count(error.get("kind", "malformed"))
            messages.append({"role": "tool", "content": f"Error: {error.get('message', 'malformed tool call')}"})
        if not messages:
            self._count("no_tool_call")
            messages.append(
                {
                    "role": "user",
                    "content": "No tool call found in your reply. Call one of the tools; "
                    "when your fix is done, call the finish tool.",
                }
            )
        return messages, 0.0, False, self._info()

    def compute_final_reward(self) -> float:
        """rLLM's hook, called once the episode is over: grade what the repository holds (once)."""
        if self.result is None:
            self._grade()
        return self.result.reward

    def run_command(self, command: str) -> str:
        """Run one bash command in /testbed, as the scaffold's bash tool runs it (the step timeout, the output cap,
        counted in `tool_calls` under that tool): the workspace a harness's shell uses (`rllm.harnesses.base`).
        Returns the output (stdout and stderr together), ending in a line `[exit code N]` when the command failed:
        its own code, 137 when it was killed for running too long (as SIGKILL's), 1 when it was refused (an
        interactive program). A sandbox that died under the agent (memory, pids, its wall clock) is told as text, as
        a step tells it, and graded as it is then (nothing to grade: reward 0)."""
        from rllm.sandbox import SessionClosedError

        tool, argument = _SHELL_TOOL[self.scaffold]
        try:
            _, output, failure = self._call({"name": tool, "arguments": {argument: command}})
        except SessionClosedError as e:
            self._count("sandbox_died")
            return f"Error: the workspace's sandbox has ended ({e}); no command can run any more\n[exit code 1]"
        if failure is not None and not _EXIT_CODE.search(output):
            output += f"\n[exit code {137 if failure == 'timeout' else 1}]"
        return output

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()

    # ---- helpers -----------------------------------------------------------------------------------------------

    def _run(self, call: dict) -> dict:
        name, output, _ = self._call(call)
        return _tool_message(call, name, output)

    def _call(self, call: dict) -> tuple[str, str, str | None]:
        """(the scaffold's tool name, the output, why it failed or None) of one tool call, counted."""
        name, arguments = str(call.get("name")), call.get("arguments")
        target = server_call(self.scaffold, name, arguments if arguments is not None else {})
        if isinstance(target, str):
            self._count("bad_call")
            return name, f"Error: {target}", "bad_call"
        tool, args = target
        request = {
            "op": "tool",
            "name": tool,
            "args": args,
            "timeout_s": self.step_timeout,
            "max_chars": self.max_output_chars,
        }
        reply = self.session.request(request, timeout_s=self.step_timeout + 30)
        failure = str(reply.get("error_kind") or "tool_error") if reply.get("is_error") else None
        if failure:
            self._count(failure)
        counts = self.tool_calls.setdefault(name, {"calls": 0, "ok": 0})  # a tool of the scaffold (server_call)
        counts["calls"] += 1
        counts["ok"] += int(failure is None)
        return name, str(reply.get("output", "")), failure

    def _grade(self, detail: str = "") -> None:
        from rllm.sandbox import SessionClosedError
        from rllm.tasks.swe.grading import GradeResult, grade

        try:
            reply = self.session.request({"op": "diff"}, timeout_s=120) if self.session else None
        except SessionClosedError as e:
            reply, detail = None, str(e)
        if reply is None:  # the workspace is gone: nothing can be submitted
            self.result = GradeResult(0.0, False, "no_workspace", detail or "the sandbox session had ended")
            return
        self.diff, self.skipped = str(reply.get("diff", "")), list(reply.get("skipped", []))
        if self.backend == "docker":
            from rllm.tasks.swe.docker import grade_in_docker

            self.result = grade_in_docker(
                self.task, self.diff, partial_credit=self.partial_credit, timeout_s=self.grade_timeout
            )
            return
        self.result = grade(
            self.task, self.diff, sandbox=self.sandbox, partial_credit=self.partial_credit, timeout_s=self.grade_timeout
        )

    def _end(self, termination: str, detail: str = "") -> tuple[Any, float, bool, dict]:
        self._grade(detail)
        info = {
            **self._info(),
            "termination": termination,
            "success": self.result.resolved,
            "grade": self.result.reason,
            "grade_detail": self.result.detail[:2000],
        }
        if detail:
            info["detail"] = detail[:2000]
        return "done", self.result.reward, True, info

    def _count(self, kind: str) -> None:
        self.tool_errors[kind] = self.tool_errors.get(kind, 0) + 1

    def _info(self) -> dict:
        return {
            "tool_errors": sum(self.tool_errors.values()),
            "tool_error_kinds": dict(self.tool_errors),
            "tool_call_counts": {name: dict(counts) for name, counts in self.tool_calls.items()},
        }


def _tool_message(call: dict, name: str, content: str) -> dict:
    message = {"role": "tool", "name": name, "content": content}
    if call.get("id"):
        message["tool_call_id"] = call["id"]
    return message


def _python_bin() -> Path:
    """A directory with `python` and `python3` naming the sandbox's interpreter (it is not on the sandbox's PATH)."""
    from rllm.sandbox import host_python
    from rllm.tasks.swe.store import swe_home

    directory = swe_home() / "bin"
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        link = directory / name
        if not link.is_symlink() or os.readlink(link) != host_python()[1]:
            tmp = directory / f".{name}.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(host_python()[1])
            os.replace(tmp, link)
    return directory
