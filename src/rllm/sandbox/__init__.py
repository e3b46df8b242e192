"""The sandbox: the only place rllm runs model-written code (bubblewrap, a cgroup per run, seccomp; fails closed).

Used by the code reward (`rllm.rewards.code`), the python tool (`rllm.tools.builtin`) and the SWE task
(`rllm.tasks.swe`), through the names below only. Its modules:

- `runner`: `Sandbox` (one-shot runs, `run` / `run_async`, and `session`), `SandboxLimits`, `SandboxResult`,
  `RepoMount` (a repository the program may edit), `make_editable`, `default_sandbox()` (the shared one), and
  `bwrap_only_command` (bwrap alone, for measuring).
- `session`: `SandboxSession`, one long-lived program spoken to in JSON lines (an SWE episode's workspace), and
  `SessionClosedError`.
- `process`: the plumbing both share: `CappedBuffer` (a capped output buffer), `host_python()` (the interpreter the
  sandbox exposes read-only), the kill that takes a run down, bwrap's status channel.
- `_cgroup`: the per-run cgroups (memory without swap, pids), private to the package.

It sits below rewards and tools in the layers (`pyproject.toml`'s import-linter contract) and imports neither.
"""

from rllm.sandbox.process import CappedBuffer, host_python
from rllm.sandbox.runner import (
    RepoMount,
    Sandbox,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    bwrap_only_command,
    default_sandbox,
    make_editable,
)
from rllm.sandbox.session import SandboxSession, SessionClosedError

__all__ = [
    "CappedBuffer",
    "RepoMount",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSession",
    "SandboxUnavailableError",
    "SessionClosedError",
    "bwrap_only_command",
    "default_sandbox",
    "host_python",
    "make_editable",
]
