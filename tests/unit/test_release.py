"""0.1.0 is the first release, so it carries no aliases of names that were never released: the version has one
source and the CHANGELOG's newest section is that version; pre-release module paths, keywords, config keys and
flags are errors; heavy public names load lazily in one way only; and `rllm.data` is rLLM's (rllm.compat)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

import rllm
from rllm.cli.main import build_parser
from rllm.config import ConfigError, load_config
from rllm.engine import AgentWorkflowEngine
from rllm.models.fake import FakeModel
from rllm.workflows.single_turn import SingleTurnWorkflow

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "rllm"

# the packages whose public names include heavy ones (torch, aiohttp), loaded from their `_LAZY` table on first use
LAZY_PACKAGES = {"rllm", "rllm.inference", "rllm.models", "rllm.testing"}


def test_the_wheel_version_is_rllm_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rllm.__version__"}
    assert rllm.__version__ == "0.1.0"


def test_the_changelogs_newest_section_is_this_version_with_a_date():
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert re.fullmatch(rf"{re.escape(rllm.__version__)} — \d{{4}}-\d\d-\d\d", headings[0]), headings[0]


@pytest.mark.parametrize(
    "old",
    ["rllm._deprecation", "rllm.envs.frozenlake", "rllm.agents.math", "rllm.data.builtin", "rllm.rewards.sandbox"],
)
def test_a_pre_release_module_path_is_not_importable(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


@pytest.mark.parametrize(
    "module, name",
    [
        ("rllm.tasks", "get_builtin_task"),
        ("rllm.tasks", "TASK_NAMES"),
        ("rllm.tasks.code", "load_humaneval"),
        ("rllm.workflows.runtime", "ModelThread"),
    ],
)
def test_a_pre_release_name_is_an_attribute_error(module, name):
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), name)


def test_a_pre_release_engine_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="n_parallel_tasks"):
        AgentWorkflowEngine(workflow_class=SingleTurnWorkflow, model=FakeModel("x"), n_parallel_tasks=2)


def test_a_pre_release_config_key_is_an_unknown_key_naming_the_keys_there(tmp_path):
    config = tmp_path / "old.yaml"
    config.write_text("rollout:\n  backend: openai\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"rollout\.backend: unknown key; valid keys here: server, "):
        load_config(config)
    with pytest.raises(
        ConfigError, match=r"unknown key 'rollout\.trajectory_timeout' \(did you mean .*episode_timeout"
    ):
        load_config(None, ["rollout.trajectory_timeout=5"])


def test_a_pre_release_eval_flag_is_refused_not_taken_for_an_abbreviation():
    with pytest.raises(SystemExit):  # `--n` is not --no-progress
        build_parser().parse_args(["eval", "frozenlake", "--n", "2"])
    assert build_parser().parse_args(["eval", "frozenlake", "--no-progress"]).no_progress


def test_rllm_data_is_rllms_dataset_package():
    from rllm.compat.data.dataset import Dataset as CompatDataset
    from rllm.compat.data.dataset import DatasetRegistry as CompatRegistry
    from rllm.data import DatasetRegistry
    from rllm.data.dataset import Dataset

    assert DatasetRegistry is CompatRegistry and Dataset is CompatDataset


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _native_modules_with_a_module_getattr() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if "compat" in path.relative_to(SRC).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in tree.body):
            found[_module_name(path)] = tree
    return found


def test_one_lazy_mechanism_only_where_names_are_heavy():
    found = _native_modules_with_a_module_getattr()
    assert set(found) == LAZY_PACKAGES, (
        "only rllm, rllm.inference, rllm.models and rllm.testing have a module __getattr__ (their _LAZY table)"
    )
    for module, tree in found.items():
        assert "_LAZY" in _defined_names(tree), f"{module}'s __getattr__ has no _LAZY table"


def _defined_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return names


@pytest.mark.parametrize("module", sorted(LAZY_PACKAGES))
def test_each_lazy_name_resolves_and_others_are_attribute_errors(module):
    package = importlib.import_module(module)
    for name, where in package._LAZY.items():  # read from the source: importing LocalModel's module imports torch
        defined = _defined_names(ast.parse(Path(importlib.util.find_spec(where).origin).read_text(encoding="utf-8")))
        assert name in defined, f"{module}._LAZY[{name!r}] is {where!r}, which does not define it"
    with pytest.raises(AttributeError, match=re.escape(f"module {module!r} has no attribute 'no_such_name'")):
        package.no_such_name  # noqa: B018
