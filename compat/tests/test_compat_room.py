"""The compatibility room's rule and its walls: `rllm.compat.X` is served as `rllm.X`, native packages fall back to
their compat twin's names, no native module imports compat or one of rLLM's paths, and without the rllm-compat
distribution an rLLM path fails with one line naming it."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rllm
import rllm.compat

SRC = Path(rllm.__file__).resolve().parent  # the core package
COMPAT = Path(rllm.compat.__file__).resolve().parent  # its own distribution's: compat/src/rllm/compat in a checkout
REPOSITORY = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(COMPAT.parents[1]).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _native_files() -> list[Path]:
    return [path for path in SRC.rglob("*.py") if COMPAT not in path.parents]


def _imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
    return names


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
    """The core's import graph (lint-imports, built from src/rllm) cannot see this distribution, nor rLLM's paths,
    which the finder serves: both are checked here from each native file's imports."""
    offenders = []
    for path in _native_files():
        if path == SRC / "__init__.py":
            continue  # imports rllm.compat first, where it is installed: that installs the finder
        for name in _imported_names(path):
            if name.startswith("rllm.compat") or (rllm.compat.twin_of(name) and not _is_native(name)):
                offenders.append(f"{path.relative_to(SRC)}: {name}")
    assert offenders == []


def test_compat_never_imports_the_cli_or_the_viewer():
    """The core's contract "the library never imports the CLI or the viewer", for this package (outside that graph)."""
    offenders = [
        f"{path.relative_to(COMPAT)}: {name}"
        for path in COMPAT.rglob("*.py")
        for name in _imported_names(path)
        if name.split(".")[:2] in (["rllm", "cli"], ["rllm", "viewer"])
    ]
    assert offenders == []


_WITHOUT_COMPAT = """
import sys
# as where rllm-compat is not installed: its editable finder and path entries gone
sys.path[:] = [p for p in sys.path if "rllm_compat" not in p and not p.endswith("compat/src")]
sys.meta_path[:] = [f for f in sys.meta_path if "rllm_compat" not in getattr(f, "__module__", "")]
import rllm
assert rllm.BaseAgent.__module__ == "rllm.agents.base"
try:
    import rllm.environments.tools.tool_env
except ModuleNotFoundError as error:
    print(error)
"""


def test_without_the_distribution_rllm_imports_and_an_rllm_path_names_it():
    if (SRC / "compat").is_dir():
        pytest.skip("rllm-compat is installed in the core's own folder (wheels): it cannot be taken away here")
    command = [sys.executable, "-c", textwrap.dedent(_WITHOUT_COMPAT)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        "No module named 'rllm.environments' (rLLM v0.2's modules are in the rllm-compat distribution: "
        "pip install 'rllm[compat]')"
    )


def _is_native(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (SRC / relative).with_suffix(".py").is_file() or (SRC / relative / "__init__.py").is_file()


def test_the_import_contracts_hold():
    """The core's (pyproject.toml) and this distribution's (compat/pyproject.toml: no circles inside it)."""
    lint = Path(sys.executable).with_name("lint-imports")
    for command in ([lint, "--no-cache"], [sys.executable, "compat/scripts/lint_imports.py"]):
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPOSITORY, check=False)
        assert done.returncode == 0, done.stdout[-2000:]
        assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


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
