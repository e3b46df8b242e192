"""Old names that keep working for one release, each with a DeprecationWarning that names the new one.

Two kinds, one table each, so a release can drop them by deleting rows:

- `MOVED_MODULES`: a module that moved (`rllm.envs.frozenlake` -> `rllm.tasks.frozenlake`). An import finder
  installed by `import rllm` answers the old path with the new module object itself (no copy: classes keep their
  identity) after warning once per path; `python -m old.path` runs the new module.
- `MOVED_NAMES` + `moved_attribute`: a module attribute that moved, served from the old module's `__getattr__`.
- `apply_renames(...)`: keyword arguments or config keys that were renamed (`n_parallel_agents` -> `n_parallel`).

Light on purpose: `import rllm` installs the finder, so this module imports nothing heavy.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

__all__ = [
    "MOVED_MODULES",
    "MOVED_NAMES",
    "apply_renames",
    "install_moved_module_finder",
    "moved_attribute",
    "warn_renamed",
]

# old module path -> new module path
MOVED_MODULES: dict[str, str] = {
    "rllm.agents.arithmetic": "rllm.tasks.arithmetic",
    "rllm.envs.arithmetic": "rllm.tasks.arithmetic",
    "rllm.data.builtin": "rllm.tasks",  # its old names (get_builtin_task, ...) are served by rllm.data
    "rllm.data.countdown": "rllm.tasks.countdown",
    "rllm.agents.code": "rllm.tasks.code",
    "rllm.data.code": "rllm.tasks.code",  # its HumanEval loader: rllm.tasks.humaneval (rllm.tasks.code forwards it)
    "rllm.envs.code": "rllm.tasks.code",
    "rllm.data.mcp_kb": "rllm.tasks.mcp_kb",
    "rllm.envs.mcp_kb": "rllm.tasks.mcp_kb",
    "rllm.agents.frozenlake": "rllm.tasks.frozenlake",
    "rllm.envs.frozenlake": "rllm.tasks.frozenlake",
    "rllm.agents.math": "rllm.tasks.math",
    "rllm.data.math": "rllm.tasks.math",
    "rllm.envs.math": "rllm.tasks.math",
    "rllm.training.rft": "rllm.rft",  # it runs an eval and then SFT, so it sits above both
    "rllm.workflows.rollout_fn": "rllm.gateway.rollout",  # @rllm.rollout belongs to the gateway it runs through
    # the sandbox is one package of its own, below rewards and tools (rllm.sandbox's public names)
    "rllm.rewards._cgroup": "rllm.sandbox._cgroup",
    "rllm.rewards.sandbox": "rllm.sandbox.runner",
    "rllm.rewards.sandbox_process": "rllm.sandbox.process",
    "rllm.rewards.sandbox_session": "rllm.sandbox.session",
    # SWE is one package: env, agent, tools, data builder, grading and their scripts (workspace_server.py, run by
    # path only, was never importable on the host: it imports the patches module under its in-sandbox name)
    "rllm.agents.swe": "rllm.tasks.swe.agent",
    "rllm.envs.swe": "rllm.tasks.swe",
    "rllm.envs.swe.build": "rllm.tasks.swe.build",
    "rllm.envs.swe.docker": "rllm.tasks.swe.docker",
    "rllm.envs.swe.env": "rllm.tasks.swe.env",
    "rllm.envs.swe.grading": "rllm.tasks.swe.grading",
    "rllm.envs.swe.mutate": "rllm.tasks.swe.mutate",
    "rllm.envs.swe.patches": "rllm.tasks.swe.patches",
    "rllm.envs.swe.rllm_swe_harness": "rllm.tasks.swe.rllm_swe_harness",
    "rllm.envs.swe.rllm_swe_report": "rllm.tasks.swe.rllm_swe_report",
    "rllm.envs.swe.rllm_swe_trace": "rllm.tasks.swe.rllm_swe_trace",
    "rllm.envs.swe.statements": "rllm.tasks.swe.statements",
    "rllm.envs.swe.store": "rllm.tasks.swe.store",
    "rllm.envs.swe.swebench": "rllm.tasks.swe.swebench",
    "rllm.envs.swe.tools": "rllm.tasks.swe.tools",
    # web is one package: env, agent, browser pool, actions, MiniWoB++ pages, oracle, BrowserGym adapter
    "rllm.agents.web": "rllm.tasks.web.agent",
    "rllm.envs.web": "rllm.tasks.web",
    "rllm.envs.web.actions": "rllm.tasks.web.actions",
    "rllm.envs.web.browser": "rllm.tasks.web.browser",
    "rllm.envs.web.browsergym": "rllm.tasks.web.browsergym",
    "rllm.envs.web.env": "rllm.tasks.web.env",
    "rllm.envs.web.miniwob": "rllm.tasks.web.miniwob",
    "rllm.envs.web.oracle": "rllm.tasks.web.oracle",
}


# old `module.attribute` -> its new `module.attribute`; a module serves its rows with `moved_attribute` from its
# `__getattr__` (the old module path may itself be an alias, see MOVED_MODULES)
MOVED_NAMES: dict[str, str] = {
    "rllm.data.BuiltinTask": "rllm.tasks.Task",
    "rllm.data.get_builtin_task": "rllm.tasks.get_task",
    "rllm.tasks.BuiltinTask": "rllm.tasks.Task",  # reached as rllm.data.builtin.BuiltinTask
    "rllm.tasks.get_builtin_task": "rllm.tasks.get_task",
    "rllm.tasks.code.HUMANEVAL_SIZE": "rllm.tasks.humaneval.HUMANEVAL_SIZE",  # reached as rllm.data.code.*
    "rllm.tasks.code.load_humaneval": "rllm.tasks.humaneval.load_humaneval",
    "rllm.tasks.code.make_humaneval_tasks": "rllm.tasks.humaneval.make_humaneval_tasks",
    "rllm.training.backends.torch_model.plain_state_name": "rllm.training.checkpoint.plain_state_name",
    "rllm.training.trainer.load_metrics": "rllm.runs.load_metrics",
    "rllm.workflows.runtime.ModelThread": "rllm.workflows.runtime.Conversation",
}


def moved_attribute(module: str, name: str) -> Any:
    """For a module's `__getattr__`: what `module.name` moved to (`MOVED_NAMES`), after a warning naming it."""
    new = MOVED_NAMES.get(f"{module}.{name}")
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warn_renamed(f"{module}.{name}", new)
    path, _, attribute = new.rpartition(".")
    return getattr(importlib.import_module(path), attribute)


# Packages whose frames stand between a user's line and the deprecated thing it used: rllm itself (a constructor
# forwarding keyword arguments to its base class, a config validator), the import system (an old module path) and
# pydantic (which calls rllm's validators).
_INTERNAL_PACKAGES = ("rllm", "importlib", "pydantic", "pydantic_core")


def warn_renamed(old: str, new: str) -> None:
    """A DeprecationWarning attributed to the user's line: the first frame outside `_INTERNAL_PACKAGES`, however
    many of rllm's own calls lie in between. A fixed stacklevel would point into rllm wherever a call goes through
    one more frame (a subclass's `__init__`), and Python's default filters hide warnings attributed to a library."""
    message = _renamed_message(old, new)
    frame = sys._getframe(1)
    while frame is not None and _is_internal(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
    if frame is None:  # called from rllm at the top of the stack (no user code): attribute it to the caller
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return
    caller_globals = frame.f_globals
    warnings.warn_explicit(  # what warnings.warn does once it has found its frame (no module_globals, as it: a
        message,  # `python -m` module's loader cannot give the source of `__main__`, and linecache would ask it)
        DeprecationWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=caller_globals.get("__name__", "<string>"),
        registry=caller_globals.setdefault("__warningregistry__", {}),
    )


def _is_internal(module: str) -> bool:
    return module.partition(".")[0] in _INTERNAL_PACKAGES


def _renamed_message(old: str, new: str) -> str:
    return f"{old} is deprecated and will be removed in the next release; use {new}"


class RenamedTwiceError(TypeError, ValueError):
    """An old name and its new one were both given (a TypeError for arguments, a ValueError for pydantic)."""


def apply_renames(values: dict[str, Any], renames: dict[str, str], label: str) -> dict[str, Any]:
    """`values` with old keys replaced by their new ones, warning for each; giving both is an error. `label` shows
    a key as the user wrote it: `"AgentWorkflowEngine({}=...)"`, `"config key rollout.{}"`."""
    out = dict(values)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise RenamedTwiceError(
                f"{label.format(old)} (deprecated) and {label.format(new)} are both given; "
                f"keep only {label.format(new)}"
            )
        warn_renamed(label.format(old), label.format(new))
        out[new] = out.pop(old)
    return out


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new = MOVED_MODULES[spec.name]
        warn_renamed(f"module {spec.name}", new)  # at the importing line: the import system's frames are skipped
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system is about to overwrite it with the old path's
        return module

    def exec_module(self, module: Any) -> None:
        """Nothing to run (the new module is already imported): only put its own spec back."""
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname: str) -> Any:
        """What `python -m old.path` runs: the new module as `__main__`."""
        new = MOVED_MODULES[fullname]
        message = _renamed_message(f"python -m {fullname}", f"python -m {new}")
        # warned from the __main__ code itself: Python shows a DeprecationWarning by default only there
        source = (
            f"import runpy, warnings\nwarnings.warn({message!r}, DeprecationWarning)\n"
            f"runpy.run_module({new!r}, run_name='__main__', alter_sys=True)\n"
        )
        return compile(source, f"<moved module {fullname}>", "exec")


_FINDER = _MovedModuleFinder()


def install_moved_module_finder() -> None:
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
