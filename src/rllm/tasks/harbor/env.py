"""`HarborEnv`: one episode of a Harbor task folder. A dataset row names the folder (`task_dir`); per episode:

- `reset()` reads the folder, decides where it runs (`rllm.tasks.harbor.plan`: the sandbox, or Docker) and opens
  the workspace (`rllm.tasks.harbor.workspace`); the first observation is instruction.md, `info["tools"]` the
  agent's tools: `bash` (a command in the working directory) and `finish`. A task that needs Docker where no Docker
  engine answers raises `NeedsDockerError` ("needs Docker: <why>"): an infra error, never a 0.
- `step(action)` runs the calls of one reply (`ToolAgent`'s action), each with `command_timeout` seconds and never
  past the agent's time ([agent].timeout_sec of task.toml), outputs cut to `max_output_chars`; `finish` ends the
  episode, graded. A reply with no call is told to call a tool; once the agent's time is up the episode ends, graded
  (Harbor verifies after an agent timeout too).
- `run_command(command)`: the same shell, for a harness that plays with its own loop (`--agent bash`), graded by
  `compute_final_reward()` at the end; `run_solution()` runs solution/solve.sh instead (`--agent oracle`).
- The grade: `rllm.tasks.harbor.verifier` (tests/test.sh from a pristine copy of tests/, the reward file Harbor
  reads). A verifier that gives no reward raises `HarborVerifierError` (a refused reward: the episode is an error).
  `info["success"]`: full credit (reward >= 1).

`backend`: "auto" (the sandbox when the task allows it, else Docker), "sandbox" (never Docker) or "docker" (always).
"""

from __future__ import annotations

import re
import shlex
import time
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.errors import InfraError
from rllm.tasks.harbor.plan import plan_environment
from rllm.tasks.harbor.spec import AGENT_LOGS, SOLUTION_DIR, HarborTask, load_task, resolve_env
from rllm.tasks.harbor.verifier import HarborGrade, HarborVerifierError, grade_report, read_report

__all__ = ["HarborEnv", "NeedsDockerError", "tool_schemas"]

_OPTIONS = ("command_timeout", "max_output_chars", "backend", "oracle")
_EXIT_CODE = re.compile(r"\[exit code -?\d+\]\Z")  # how the workspace ends a failed command's output
FINISH = "finish"


class NeedsDockerError(InfraError):
    """The task needs Docker (its image, services, network...) and no Docker engine can be used here. The message
    starts "needs Docker:" and says why; the episode ends as an infra error, never scored 0."""


def tool_schemas(workdir: str) -> list[dict]:
    def function(name: str, description: str, properties: dict, required: list[str]) -> dict:
        parameters = {"type": "object", "properties": properties, "required": required}
        return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}

    return [
        function(
            "bash",
            f"Run a bash command in {workdir} and see its output (a fresh shell each call; long outputs are cut; a "
            "command that runs too long is killed).",
            {"command": {"type": "string", "description": "The command."}},
            ["command"],
        ),
        function(FINISH, "Say the task is done; this ends your work.", {}, []),
    ]


class HarborEnv(BaseEnv):
    def __init__(
        self,
        task: dict,
        *,
        command_timeout: float = 120.0,
        max_output_chars: int = 10000,
        backend: str = "auto",
        oracle: bool = False,
        sandbox: Any = None,
    ) -> None:
        if "task_dir" not in task:
            raise ValueError("HarborEnv: the row lacks 'task_dir' (rows come from rllm.tasks.harbor.make_harbor_tasks)")
        if backend not in ("auto", "sandbox", "docker"):
            raise ValueError(f"HarborEnv: backend must be 'auto', 'sandbox' or 'docker', got {backend!r}")
        self.task, self.backend, self.oracle, self.sandbox = task, backend, bool(oracle), sandbox
        self.command_timeout, self.max_output_chars = float(command_timeout), int(max_output_chars)
        self.workspace: Any = None
        self.spec: HarborTask | None = None
        self.result: HarborGrade | None = None
        self.error: HarborVerifierError | None = None
        self.deadline = float("inf")
        self.tool_errors: dict[str, int] = {}
        self.tool_calls: dict[str, dict[str, int]] = {}

    @classmethod
    def from_dict(cls, task: dict) -> HarborEnv:
        task = dict(task)
        options = {key: task.pop(key) for key in _OPTIONS if key in task}
        return cls(task, **options)

    # ---- the episode -----------------------------------------------------------------------------------------

    def reset(self) -> tuple[Any, dict]:
        self.close()
        self.result, self.error, self.tool_errors, self.tool_calls = None, None, {}, {}
        self.spec = spec = load_task(self.task["task_dir"])
        self.workspace = self._open(spec, oracle=self.oracle)
        self.deadline = time.monotonic() + spec.agent_timeout_s
        return spec.instruction, {"tools": tool_schemas(self.workspace.workdir or "the working directory")}

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        action = action if isinstance(action, dict) else {"tool_calls": [], "content": str(action or ""), "errors": []}
        calls, errors = action.get("tool_calls") or [], action.get("errors") or []
        if any(call.get("name") == FINISH for call in calls):
            return self._end("finished")
        if self._time_left() <= 0:
            return self._end("agent_timeout")
        messages = []
        for call in calls:
            messages.append(_tool_message(call, self._call(call)))
        for error in errors:
            self._count(error.get("kind", "malformed"))
            messages.append({"role": "tool", "content": f"Error: {error.get('message', 'malformed tool call')}"})
        if not messages:
            self._count("no_tool_call")
            messages.append(
                {
                    "role": "user",
                    "content": "No tool call found in your reply. Call bash; when the task is done, call finish.",
                }
            )
        return messages, 0.0, False, self._info()

    def run_command(self, command: str) -> str:
        """One bash command in the working directory, as the bash tool runs it (rllm.harnesses' Workspace): its
        output, ending in `[exit code N]` when it failed."""
        left = self._time_left()
        if left <= 0:
            self._count("agent_timeout")
            return (
                f"Error: the agent's time is up ({self.spec.agent_timeout_s:g} s, [agent].timeout_sec)\n[exit code 1]"
            )
        timeout = max(round(min(self.command_timeout, left), 1), 0.1)  # what the agent is told, readable
        output, failure = self.workspace.run(command, timeout, self.max_output_chars)
        self._record("bash", failure)
        if failure is not None and not _EXIT_CODE.search(output):
            output += f"\n[exit code {137 if failure == 'timeout' else 1}]"
        return output

    def run_solution(self) -> dict:
        """Harbor's oracle: solution/ at /solution and `solve.sh` run in the working directory with [solution].env,
        its output in /logs/agent/oracle.txt, within the agent's time. What it did, for the episode's info."""
        spec = self.spec
        if not (spec.solution_dir / "solve.sh").is_file():
            raise HarborVerifierError("no_solution", f"{spec.path}: no solution/solve.sh for the oracle to run")
        self.workspace.put(spec.solution_dir, "solution")
        variables = {"DEBIAN_FRONTEND": "noninteractive", **resolve_env(spec.solution_env, f"{spec.path}/task.toml")}
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
        script = f"{SOLUTION_DIR}/solve.sh"
        log = f"{AGENT_LOGS}/oracle.txt"
        command = f"chmod +x {script} 2>/dev/null; env {assignments} bash -c {shlex.quote(script)} > {log} 2>&1"
        command += f"; code=$?; tail -c 2000 {log}; exit $code"
        output, failure = self.workspace.run(command, max(self._time_left(), 1.0), self.max_output_chars)
        return {"solution_output": output[-2000:], "solution_failure": failure}

    def compute_final_reward(self) -> float:
        """The verifier's reward (once); a verifier that gave none raises its HarborVerifierError (each time)."""
        if self.result is None and self.error is None:
            self._grade()
        if self.error is not None:
            raise self.error
        return self.result.reward

    def close(self) -> None:
        workspace, self.workspace = self.workspace, None
        if workspace is not None:
            workspace.close()

    # ---- helpers ---------------------------------------------------------------------------------------------

    def _open(self, spec: HarborTask, *, oracle: bool) -> Any:
        from rllm.tasks.harbor.workspace import DockerWorkspace, SandboxWorkspace

        plan = plan_environment(spec, oracle=oracle)
        variables = resolve_env(spec.environment_env, f"{spec.path}/task.toml")
        if self.backend != "docker" and plan.sandbox:
            plan.env.update(variables)
            return SandboxWorkspace(spec, plan, sandbox=self.sandbox)
        why = plan.docker_reason or "backend='docker' was asked for"
        if self.backend == "sandbox":
            raise NeedsDockerError(f"needs Docker: {why} (and backend='sandbox' was asked for)")
        from rllm.tasks.swe.docker import docker_available

        if (unavailable := docker_available()) is not None:
            raise NeedsDockerError(f"needs Docker: {why}; but {unavailable}")
        return DockerWorkspace(spec, env=variables)

    def _grade(self) -> None:
        from rllm.sandbox import SessionClosedError

        spec = self.spec
        try:
            self.workspace.put(spec.tests_dir, "tests")
            variables = resolve_env(spec.verifier_env, f"{spec.path}/task.toml")
            prefix = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items()) + " " if variables else ""
            command = prefix + self.workspace.verify_command(spec.verifier_timeout_s)
            output, failure = self.workspace.run(command, spec.verifier_timeout_s + 60, 200_000)
            report = read_report(output)
            if failure == "timeout" and "exit" not in report:
                limit = f"{spec.verifier_timeout_s:g} s ([verifier].timeout_sec)"
                raise HarborVerifierError("verifier_timeout", f"tests/test.sh ran past the verifier's timeout, {limit}")
            self.result = grade_report(report, spec.verifier_timeout_s)
        except SessionClosedError as e:
            self.error = HarborVerifierError("verifier_died", f"the sandbox ended while the tests ran ({e.reason})")
        except HarborVerifierError as e:
            self.error = e

    def _end(self, termination: str) -> tuple[Any, float, bool, dict]:
        reward = self.compute_final_reward()  # raises the verifier's error: the episode ends as a refused reward
        info = {
            **self._info(),
            "termination": termination,
            "success": self.result.resolved,
            "rewards": dict(self.result.rewards),
            "verifier_output": self.result.detail[-2000:],
        }
        return "done", reward, True, info

    def _call(self, call: dict) -> str:
        name, arguments = str(call.get("name")), call.get("arguments")
        if name != "bash":
            self._count("bad_call")
            return f"Error: unknown tool {name!r}: the tools are bash and finish"
        if not isinstance(arguments, dict) or not isinstance(arguments.get("command"), str):
            self._count("bad_call")
            return 'Error: call bash with {"command": "<a bash command>"}'
        if set(arguments) - {"command"}:
            self._count("bad_call")
            return f"Error: bash takes only 'command', not {sorted(set(arguments) - {'command'})}"
        return self.run_command(arguments["command"])

    def _time_left(self) -> float:
        return self.deadline - time.monotonic()

    def _record(self, tool: str, failure: str | None) -> None:
        counts = self.tool_calls.setdefault(tool, {"calls": 0, "ok": 0})
        counts["calls"] += 1
        counts["ok"] += int(failure is None)
        if failure:
            self._count(failure)

    def _count(self, kind: str) -> None:
        self.tool_errors[kind] = self.tool_errors.get(kind, 0) + 1

    def _info(self) -> dict:
        return {
            "tool_errors": sum(self.tool_errors.values()),
            "tool_error_kinds": dict(self.tool_errors),
            "tool_call_counts": {name: dict(counts) for name, counts in self.tool_calls.items()},
            "backend": getattr(self.workspace, "kind", None),
        }


def _tool_message(call: dict, content: str) -> dict:
    message = {"role": "tool", "name": str(call.get("name")), "content": content}
    if call.get("id"):
        message["tool_call_id"] = call["id"]
    return message
