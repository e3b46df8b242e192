"""SWE, web and the sandbox each became one package (`rllm.tasks.swe`, `rllm.tasks.web`, `rllm.sandbox`). Their old
module paths keep working for one release: each imports, warns naming the new path, and is the new module itself
(so every class and function keeps its identity). And nothing in the repository still uses an old path."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import rllm  # noqa: F401 - installs the moved-module finder
from rllm._deprecation import MOVED_MODULES

ROOT = Path(__file__).resolve().parents[2]
NEW_PACKAGES = ("rllm.sandbox", "rllm.tasks.swe", "rllm.tasks.web")
MOVED = {
    old: new for old, new in MOVED_MODULES.items() if any(new == p or new.startswith(p + ".") for p in NEW_PACKAGES)
}


def test_the_moved_modules_are_listed():
    assert MOVED["rllm.rewards.sandbox"] == "rllm.sandbox.runner"


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_path_warns_and_is_the_new_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"module {re.escape(old)} is deprecated.*use {re.escape(new)}$"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new and module.__spec__.name == new


def test_names_reached_through_an_old_path_are_the_new_objects(monkeypatch):
    import rllm.sandbox

    monkeypatch.delitem(sys.modules, "rllm.rewards.sandbox", raising=False)
    with pytest.warns(DeprecationWarning):
        from rllm.rewards.sandbox import Sandbox, default_sandbox
    assert Sandbox is rllm.sandbox.Sandbox and default_sandbox is rllm.sandbox.default_sandbox


def _old_path_pattern() -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(re.escape(old) for old in sorted(MOVED, reverse=True)) + r")\b")


def _files_to_scan() -> list[Path]:
    files = [p for folder in ("src", "tests", "benchmarks", "examples") for p in (ROOT / folder).rglob("*.py")]
    files += [*(ROOT / "docs").rglob("*.md"), *(ROOT / "configs").glob("*.yaml"), ROOT / "README.md"]
    files += [ROOT / "Makefile", ROOT / "pyproject.toml", ROOT / "scripts" / "wheel_test.sh"]
    skip = {ROOT / "src" / "rllm" / "_deprecation.py", Path(__file__).resolve()}
    return [p for p in files if p not in skip and not any(part.endswith("_example") for part in p.parts)]


def test_nothing_in_the_repository_uses_an_old_path():
    pattern = _old_path_pattern()
    using = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _files_to_scan()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not using, "these still name an old module path; use the new one:\n" + "\n".join(using)
