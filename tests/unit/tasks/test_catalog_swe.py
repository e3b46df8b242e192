"""SWE-bench Verified from the catalog: its rows (tests/fixtures/catalog/princeton-nlp/SWE-bench_Verified, the hub's
schema: FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings) become the Docker-mode tasks rllm's SWE environment
plays, each in its instance's image named by swebench's rule. No Docker is needed: the environment is built from
the row, never reset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rllm.tasks.catalog import CATALOG
from rllm.tasks.catalog.task import benchmark_task, load_tasks
from rllm.tasks.swe import SWEAgent, SWEEnv
from rllm.tasks.swe.swebench import image_name
from rllm.workflows.agent_env import AgentEnvWorkflow
from rllm.workflows.resolve import resolve_workflow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "catalog"
SOURCE = "princeton-nlp/SWE-bench_Verified"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def test_swebench_verified_rows_become_docker_mode_swe_tasks_in_the_image_swebench_names():
    rows = load_tasks(CATALOG["swebench_verified"], "val", str(FIXTURES))
    assert [row["instance_id"] for row in rows] == ["psf__requests-90001", "django__django-90002"]
    assert [row["image"] for row in rows] == [
        "swebench/sweb.eval.x86_64.psf_1776_requests-90001:latest",  # "__" is written "_1776_" on Docker Hub
        "swebench/sweb.eval.x86_64.django_1776_django-90002:latest",
    ]
    assert rows[0]["FAIL_TO_PASS"] == ["tests/test_utils.py::test_to_native_string_uses_the_encoding"]
    assert len(rows[1]["PASS_TO_PASS"]) == 2
    for row in rows:
        assert "invalid" not in row and row["data_source"] == "swebench_verified"
        assert row["backend"] == "docker" and row["image"] == image_name(row["instance_id"], "swebench")
        assert row["question"] == row["problem_statement"]
        assert "hints_text" not in row  # an agent evaluated on SWE-bench does not see the hints
        env = SWEEnv.from_dict(row)
        assert env.backend == "docker" and env.task["image"] == row["image"]
        assert env.task["base_commit"] == row["base_commit"] and env.task["version"] == row["version"]


def test_swebench_verified_row_out_of_format_is_a_failing_task_naming_the_field(tmp_path):
    copy = tmp_path / SOURCE
    shutil.copytree(FIXTURES / SOURCE, copy)
    data = copy / "data" / "test-00000-of-00001.jsonl"
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    rows[0]["FAIL_TO_PASS"] = "test_a, test_b"  # not a JSON list
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    bad, good = load_tasks(CATALOG["swebench_verified"], "val", str(tmp_path))
    assert "FAIL_TO_PASS is a string but not a JSON list" in bad["invalid"]
    assert "invalid" not in good and good["backend"] == "docker"


def test_swebench_verified_is_played_by_the_swe_agent_in_the_swe_environment():
    workflow, args = resolve_workflow(benchmark_task(CATALOG["swebench_verified"]))
    assert workflow is AgentEnvWorkflow
    assert args["agent_class"] is SWEAgent and args["env_class"] is SWEEnv
