"""0.1.0 is the first release, so it carries no aliases of names that were never released: the version has one
source and the CHANGELOG's newest section is that version; pre-release module paths, keywords, config keys and
flags are errors; and `rllm.data` is rLLM's (rllm.compat)."""

from __future__ import annotations

import importlib
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
