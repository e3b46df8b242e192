"""docs/architecture.md must stay true of the code: every `path.py:function` it names (relative to src/rllm/) is
defined there, every `rllm.module` it names exists, every test file it cites is in the repository, and its table of
layers is the import-linter layers contract in pyproject.toml. Read from the source's syntax trees and the TOML,
nothing imported, so a rename, a move or a new layer fails here rather than leaving the page wrong. And no
docstring cites a design file the repository does not hold."""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src" / "rllm"
COMPAT_SRC = ROOT / "compat" / "src" / "rllm"  # the rllm-compat distribution's part of the package: `compat/...`

# `training/step.py:train_step`
_FUNCTION_REF = re.compile(r"`([\w/]+\.py):([A-Za-z_][\w.]*)`")
# `rllm.training.batch`, `rllm.models.base.SamplingParams`
_MODULE_REF = re.compile(r"`(rllm(?:\.[A-Za-z_]\w*)+)`")
# `tests/contract/test_token_extension.py`
_TEST_REF = re.compile(r"`((?:compat/)?tests/[\w/]+\.py)`")
_PLACEHOLDER = "X"  # the compat rule's `rllm.compat.X`: any module
# a row of the layers table: `| 8 | `rllm.engine`, `rllm.gateway` | ... |`
_LAYER_ROW = re.compile(r"^\| (\d+) \| ([^|]*) \|", re.MULTILINE)


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _names_in(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """What a module or class body defines: functions, classes, assigned names, imported names."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({target.id: node for target in targets if isinstance(target, ast.Name)})
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update({(alias.asname or alias.name).split(".")[0]: node for alias in node.names})
    return names


def _defines(path: Path, dotted: str) -> bool:
    """Whether `dotted` (`name`, `Class.method`) is defined in the module at `path`."""
    body: list[ast.stmt] = _tree(path).body
    for part in dotted.split("."):
        node = _names_in(body).get(part)
        if node is None:
            return False
        body = node.body if isinstance(node, ast.ClassDef) else []
    return True


def _module_file(parts: list[str]) -> Path | None:
    """The file of module `rllm.<parts>`: native, or served from rllm.compat by its one rule."""
    for root in (SRC, COMPAT_SRC, COMPAT_SRC / "compat"):  # rllm.X, rllm.compat.X, rllm.X served from rllm.compat.X
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _module_name_exists(name: str) -> bool:
    """`rllm.a.b.c`: the longest prefix that is a module, the rest names defined in it."""
    parts = name.split(".")[1:]
    if _PLACEHOLDER in parts:
        return True
    for cut in range(len(parts), 0, -1):
        found = _module_file(parts[:cut])
        if found is not None:
            rest = ".".join(parts[cut:])
            return not rest or _defines(found, rest)
    return False


def test_the_page_names_the_step_by_step_path():
    references = _FUNCTION_REF.findall(_page())
    # the GRPO walk-through alone names some forty functions: far fewer means the pattern stopped matching
    assert len(references) >= 40, references
    assert ("training/step.py", "train_step") in references


@pytest.mark.parametrize("path, name", sorted(set(_FUNCTION_REF.findall(_page()))))
def test_every_function_the_page_names_exists(path, name):
    file = SRC / path if (SRC / path).is_file() else COMPAT_SRC / path
    assert file.is_file(), f"docs/architecture.md names src/rllm/{path}, which does not exist"
    assert _defines(file, name), f"docs/architecture.md names {path}:{name}, which {file} does not define"


def test_every_module_the_page_names_exists():
    missing = [name for name in sorted(set(_MODULE_REF.findall(_page()))) if not _module_name_exists(name)]
    assert not missing, f"docs/architecture.md names modules or names that do not exist: {missing}"


def test_every_test_file_the_page_cites_exists():
    missing = [path for path in sorted(set(_TEST_REF.findall(_page()))) if not (ROOT / path).is_file()]
    assert not missing, f"docs/architecture.md cites test files that do not exist: {missing}"


def _page_layers() -> list[set[str]]:
    """The layers table of the page's "Layers and the import rule" section, top to bottom."""
    section = _page().split("## Layers and the import rule", 1)[1].split("\n## ", 1)[0]
    rows = _LAYER_ROW.findall(section)
    assert [int(number) for number, _ in rows] == list(range(1, len(rows) + 1)), rows
    return [set(re.findall(r"`rllm\.(\w+)`", modules)) for _, modules in rows]


def _contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert len(contracts) == 1, "pyproject.toml should hold one layers contract"
    return [{name.strip() for name in layer.split("|")} for layer in contracts[0]["layers"]]


def test_the_layers_table_is_the_import_linter_contract():
    assert _page_layers() == _contract_layers(), (
        "docs/architecture.md's layers table and pyproject.toml's layers contract differ: update the table"
    )


def test_no_docstring_cites_a_design_file_the_repository_lacks():
    citing = [
        str(path.relative_to(ROOT))
        for folder in ("src", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if "DESIGN.md" in path.read_text(encoding="utf-8") and path != Path(__file__).resolve()
    ]
    assert not citing, f"these cite DESIGN.md, which is not in the repository; cite docs/architecture.md: {citing}"
