"""The compatibility room's rule and its walls: `rllm.compat.X` is served as `rllm.X`, native packages fall back to
their compat twin's names, and no native module imports compat or one of rLLM's paths."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import rllm
import rllm.compat

SRC = Path(rllm.__file__).resolve().parent
COMPAT = SRC / "compat"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _native_files() -> list[Path]:
    return [path for path in SRC.rglob("*.py") if COMPAT not in path.parents]


def _compat_leaf_modules() -> list[str]:
    """Every compat module that is not a package, as rLLM's path (`rllm.agents.tool_agent`)."""
    names = [_module_name(path) for path in COMPAT.rglob("*.py") if path.name != "__init__.py"]
    return sorted(name.replace("rllm.compat.", "rllm.", 1) for name in names if not name.startswith("rllm.compat._"))


def test_an_rllm_path_is_the_compat_module_itself():
    tool_env = importlib.import_module("rllm.environments.tools.tool_env")
    assert tool_env is importlib.import_module("rllm.compat.environments.tools.tool_env")
    assert tool_env.__spec__.name == "rllm.compat.environments.tools.tool_env"  # pickles and reloads name the real one
    from rllm.environments.tools.tool_env import ToolEnvironment

    assert ToolEnvironment is tool_env.ToolEnvironment


def test_a_native_package_serves_rllm_names_it_lacks_and_keeps_its_own():
    from rllm.agents import BaseAgent, ToolAgent
    from rllm.engine import AgentExecutionEngine, RolloutEngine

    assert BaseAgent.__module__ == "rllm.agents.base"  # a collision: rllm's own wins
    assert ToolAgent.__module__ == "rllm.compat.agents.tool_agent"
    assert AgentExecutionEngine.__module__ == "rllm.engine.execution"
    assert RolloutEngine.__module__.startswith("rllm.compat.engine.rollout")
    with pytest.raises(ImportError, match="NoSuchName"):
        from rllm.agents import NoSuchName  # noqa: F401
    assert "BaseAgent" in rllm.compat.collisions()["rllm.agents"]


def test_no_compat_module_is_shadowed_by_a_native_one():
    """The rule answers `rllm.X` from compat only where rllm has no `rllm.X`: a native module at the same path would
    hide rLLM's silently."""
    assert [name for name in _compat_leaf_modules() if _is_native(name)] == []
    assert importlib.import_module("rllm.utils") is importlib.import_module("rllm.compat.utils")


def test_native_code_never_imports_compat_or_an_rllm_path():
    """import-linter (`make lint`) checks `rllm.compat`; rLLM's paths are served by the finder, which a static import
    graph cannot see, so they are checked here from each native file's imports."""
    offenders = []
    for path in _native_files():
        if path == SRC / "__init__.py":
            continue  # imports rllm.compat first: that installs the finder
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.startswith("rllm.compat") or (rllm.compat.twin_of(name) and not _is_native(name)):
                    offenders.append(f"{path.relative_to(SRC)}: {name}")
    assert offenders == []


def _is_native(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (SRC / relative).with_suffix(".py").is_file() or (SRC / relative / "__init__.py").is_file()


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([lint, "--no-cache"], capture_output=True, text=True, cwd=SRC.parents[1], check=False)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "BROKEN" not in done.stdout


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("rllm.engine.rollout.tinker_engine", "Tinker backend"),
        ("rllm.trainer.tinker", "Tinker backend"),
        ("rllm.engine.rollout.fireworks_engine", "Fireworks backend"),
        ("rllm.workflows.eval_protocol_workflow", "eval-protocol"),
        ("rllm.integrations.strands", "mcp<2.2"),
    ],
)
def test_rllm_paths_that_cannot_be_served_say_why_and_what_to_use(path, names):
    with pytest.raises(ImportError, match=names) as caught:
        importlib.import_module(path)
    assert "rllm" in str(caught.value).split(":", 1)[1]  # names something of rllm's to use instead
