"""SWE-bench rows from a local file, and the Docker mode (rllm.tasks.swe.swebench, rllm.tasks.swe.docker).

Without a Docker engine the Docker paths run against a FAKE `docker` executable first on PATH: it records its
argv and, for `docker run`, runs the command locally with the mounts mapped to their host directories and a fresh
copy of a small git repository standing in for the image's /testbed, so the workspace server's JSON protocol, its
git diff and the grading script run for real. Never send `execute_bash` through the fake: outside a container the
server's clean-up after a command (kill_others) would reach this machine's processes.
Paths in the tool calls are relative: the fake cannot map the absolute /testbed of a request.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rllm.tasks.swe import docker as swe_docker
from rllm.tasks.swe.docker import DockerSession, DockerUnavailableError, docker_available, grade_in_docker
from rllm.tasks.swe.env import SWEEnv
from rllm.tasks.swe.patches import diff_files
from rllm.tasks.swe.rllm_swe_harness import RESTORED_MARKER
from rllm.tasks.swe.store import SWEDataError
from rllm.tasks.swe.swebench import EvalSpec, image_name, load_swe_rows

DOCKER_REASON = docker_available()

CALC = "def clamp(x, low, high):\n    if x < low:\n        return low\n    if x > high:\n        return high\n"
CALC += "    return x\n"
BUGGY = CALC.replace("if x > high:", "if x >= high + 1:")
TESTS = textwrap.dedent("""\
    from calc import clamp


    def test_inside():
        assert clamp(5, 0, 10) == 5


    def test_above():
        assert clamp(10.5, 0, 10) == 10
""")


def swebench_row(**overrides) -> dict:
    """A row as SWE-bench's JSON dumps hold it (the test lists JSON-encoded, hints and dates included)."""
    row = {
        "repo": "calc-org/calc",
        "instance_id": "calc-org__calc-7",
        "base_commit": "0" * 40,
        "patch": diff_files("calc/__init__.py", BUGGY, CALC),
        "test_patch": diff_files("tests/test_calc.py", None, TESTS),
        "problem_statement": "clamp(10.5, 0, 10) returns 10.5, but it should return 10.",
        "hints_text": "look at the comparison",
        "created_at": "2024-01-01T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_above"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_inside"]),
        "environment_setup_commit": "1" * 40,
    }
    return {**row, **overrides}


# ---- loading rows -------------------------------------------------------------------------------------------------


def test_loads_jsonl_and_json_rows(tmp_path):
    jsonl = tmp_path / "swe.jsonl"
    jsonl.write_text(json.dumps(swebench_row()) + "\n\n" + json.dumps(swebench_row(instance_id="a__b-1")) + "\n")
    rows = load_swe_rows(jsonl)
    assert [row["instance_id"] for row in rows] == ["calc-org__calc-7", "a__b-1"]
    row = rows[0]
    assert row["FAIL_TO_PASS"] == ["tests/test_calc.py::test_above"]
    assert row["PASS_TO_PASS"] == ["tests/test_calc.py::test_inside"]
    assert row["image"] == "swebench/sweb.eval.x86_64.calc-org_1776_calc-7:latest"
    assert row["backend"] == "docker"
    assert row["environment_setup_commit"] == "1" * 40
    assert "hints_text" not in row and "created_at" not in row  # an agent does not see SWE-bench's hints
    listed = tmp_path / "swe.json"
    listed.write_text(json.dumps([swebench_row(FAIL_TO_PASS=["t::a"], version=3.0)]))
    (row,) = load_swe_rows(listed, images="swegym")
    assert row["FAIL_TO_PASS"] == ["t::a"] and row["version"] == "3.0"
    assert row["image"] == "xingyaoww/sweb.eval.x86_64.calc-org_s_calc-7"


def test_a_row_s_own_image_wins(tmp_path):
    path = tmp_path / "r2e.jsonl"
    r2e_image = "slimshetty/swebench-verified:sweb.eval.x86_64.astropy__astropy-12907"
    path.write_text(json.dumps(swebench_row(docker_image=r2e_image, parsed_commit="{}")) + "\n")
    (row,) = load_swe_rows(path)
    assert row["image"] == r2e_image and "parsed_commit" not in row


@pytest.mark.parametrize(
    ("instance_id", "rule", "image"),
    [
        ("django__django-11099", "swebench", "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"),
        ("astropy__astropy-12907", "swebench", "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"),
        ("sympy__sympy-20590", "swebench", "swebench/sweb.eval.x86_64.sympy_1776_sympy-20590:latest"),
        ("Project-MONAI__MONAI-907", "swegym", "xingyaoww/sweb.eval.x86_64.project-monai_s_monai-907"),
        ("getmoto__moto-5752", "swegym", "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752"),
    ],
)
def test_image_names_follow_the_published_rules(instance_id, rule, image):
    assert image_name(instance_id, rule) == image


def test_bad_rows_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    row = swebench_row()
    del row["base_commit"]
    path.write_text(json.dumps(swebench_row()) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(SWEDataError, match=r"row 1 \(calc-org__calc-7\) lacks 'base_commit'"):
        load_swe_rows(path)
    path.write_text(json.dumps({"repo_name": "pandas", "docker_image": "x", "expected_output_json": "{}"}) + "\n")
    with pytest.raises(SWEDataError, match="R2E-Gym row"):
        load_swe_rows(path)
    path.write_text(json.dumps(swebench_row(PASS_TO_PASS="not json")) + "\n")
    with pytest.raises(SWEDataError, match="PASS_TO_PASS is a string but not a JSON list"):
        load_swe_rows(path)
    with pytest.raises(ValueError, match="unknown image rule"):
        load_swe_rows(path, images="dockerhub")


def test_parquet_without_pyarrow_names_the_install(tmp_path, monkeypatch):
    path = tmp_path / "swe.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # None in sys.modules: the import fails
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(SWEDataError, match="pip install pyarrow"):
        load_swe_rows(path)


def test_grading_without_swebench_names_the_install(monkeypatch):
    from rllm.tasks.swe.swebench import eval_spec

    monkeypatch.setitem(sys.modules, "swebench", None)
    monkeypatch.setitem(sys.modules, "swebench.harness", None)
    with pytest.raises(SWEDataError, match="pip install swebench"):
        eval_spec(swebench_row())


# ---- without Docker -----------------------------------------------------------------------------------------------


def test_docker_available_says_why_not(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker CLI at all
    assert "docker CLI is not installed" in docker_available()


def test_docker_backend_fails_clearly_without_an_engine(tmp_path, monkeypatch, fake_docker):
    monkeypatch.setenv("FAKE_DOCKER_DOWN", "1")
    reason = docker_available()
    assert "no Docker engine is reachable" in reason and "Cannot connect to the Docker daemon" in reason
    assert "start dockerd or set DOCKER_HOST" in reason
    env = SWEEnv.from_dict({**load_one(tmp_path), "backend": "docker"})
    with pytest.raises(DockerUnavailableError, match="no Docker engine is reachable"):
        env.reset()
    with pytest.raises(ValueError, match="unknown backend 'podman'"):
        SWEEnv(swebench_row(), backend="podman")


@pytest.mark.skipif(DOCKER_REASON is None, reason="a Docker engine is reachable here")
def test_this_machine_says_why_it_has_no_docker():
    reason = docker_available()  # the real CLI (or its absence), no fake
    assert "start dockerd or set DOCKER_HOST" in reason or "install Docker" in reason


# ---- against a fake docker ------------------------------------------------------------------------------------------

FAKE_DOCKER = """#!{python}
import json, os, shutil, sys, tempfile
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[0] == "info":
    if os.environ.get("FAKE_DOCKER_DOWN"):
        sys.exit("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?")
    print("27.0.0")
    sys.exit(0)
if args[0] in ("pull", "rm") or args[:2] == ["image", "inspect"]:
    sys.exit(0)
assert args[0] == "run", args
mounts, env, workdir, i = {{}}, {{}}, None, 1
while args[i].startswith("-"):
    if args[i] in ("-i", "--rm", "--init"):
        i += 1
        continue
    flag, value, i = args[i], args[i + 1], i + 2
    if flag == "-v":
        source, target, _ = value.split(":")
        mounts[target + "/"] = source + "/"
    elif flag == "-e":
        env.update([value.split("=", 1)])
testbed = tempfile.mkdtemp(dir=os.environ["FAKE_TMP"])  # a fresh container: a fresh copy of the image's /testbed
shutil.copytree(os.environ["FAKE_TESTBED"], testbed, dirs_exist_ok=True)


def local(text):
    for target, source in mounts.items():
        text = text.replace(target, source)
    return text.replace("/testbed", testbed)


os.chdir(testbed)
command = [local(arg) for arg in args[i + 1 :]]
os.execvpe(command[0], command, dict(os.environ, **{{k: local(v) for k, v in env.items()}}))
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    """A fake `docker` first on PATH; returns the list of argv it was called with (read on demand)."""
    bin_dir, testbed, scratch = tmp_path / "bin", tmp_path / "testbed", tmp_path / "containers"
    bin_dir.mkdir()
    scratch.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER.format(python=sys.executable))
    (bin_dir / "docker").chmod(0o755)
    make_testbed(testbed)
    log = tmp_path / "docker-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setenv("FAKE_TESTBED", str(testbed))
    monkeypatch.setenv("FAKE_TMP", str(scratch))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def make_testbed(root: Path) -> None:
    """The image's /testbed: a git checkout at the base commit (the bug in, the hidden tests out)."""
    (root / "calc").mkdir(parents=True)
    (root / "calc" / "__init__.py").write_text(BUGGY)
    (root / "README").write_text("calc\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=root, check=True)


def load_one(tmp_path: Path) -> dict:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(swebench_row()) + "\n")
    (row,) = load_swe_rows(path)
    return row


def pytest_eval_spec(task: dict) -> EvalSpec:
    """What swebench's spec gives, for the fake image: apply the test patch, run pytest -rA between the markers."""
    script = (
        f"git apply -v - <<'EOF_114329324912'\n{task['test_patch']}\nEOF_114329324912\n"
        f"echo '>>>>> Start Test Output'\n{sys.executable} -m pytest -rA -p no:cacheprovider tests/test_calc.py\n"
        "echo '>>>>> End Test Output'\n"
    )

    def read_log(log: str) -> dict[str, str] | None:
        if ">>>>> Start Test Output" not in log:
            return None
        status = dict((name, word.lower()) for word, name in re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", log, re.M))
        return {t: status.get(t, "missing") for t in task["FAIL_TO_PASS"] + task["PASS_TO_PASS"]}

    return EvalSpec(script, read_log)


def test_session_speaks_json_lines_and_diffs_against_git_head(fake_docker):
    with DockerSession("swebench/sweb.eval.x86_64.calc-org_1776_calc-7:latest", memory_mb=1024) as session:
        assert session.request({"op": "ping"}, timeout_s=30) == {"pong": True}
        edit = {"command": "str_replace", "path": "calc/__init__.py", "old_str": "x >= high + 1", "new_str": "x > high"}
        reply = session.request({"op": "tool", "name": "file_editor", "args": edit}, timeout_s=30)
        assert not reply["is_error"], reply
        create = {"command": "create", "path": "notes.txt", "file_text": "checked\n"}
        assert not session.request({"op": "tool", "name": "file_editor", "args": create}, timeout_s=30)["is_error"]
        found = session.request({"op": "tool", "name": "search", "args": {"search_term": "clamp"}}, timeout_s=30)
        assert "calc/__init__.py" in found["output"]
        reply = session.request({"op": "diff"}, timeout_s=30)
        proc = session._run.proc
    assert reply["skipped"] == []
    assert "diff --git a/calc/__init__.py b/calc/__init__.py" in reply["diff"]
    assert "-    if x >= high + 1:\n+    if x > high:" in reply["diff"]
    assert "+++ b/notes.txt" in reply["diff"]  # new files are part of the submission (git add -A)
    assert proc.poll() is not None and not session.alive  # nothing left running
    run, rm = fake_docker()[-2:]
    assert run[:4] == ["run", "-i", "--rm", "--init"] and rm == ["rm", "-f", session.name]
    for flag in (
        ["--network", "none"],
        ["--memory", "1024m"],
        ["--pids-limit", "512"],
        ["-w", "/testbed"],
        ["-e", "RLLM_SWE_REPO=/testbed"],
        ["-e", "RLLM_SWE_BASE=git"],
    ):
        assert any(run[i : i + 2] == flag for i in range(len(run))), flag
    assert any(arg.endswith(":/rllm:ro") for arg in run)
    assert run[run.index("swebench/sweb.eval.x86_64.calc-org_1776_calc-7:latest") + 1 : -1] == ["sh", "-c"]
    with pytest.raises(Exception, match="closed"):
        session.request({"op": "ping"}, timeout_s=5)


def test_grader_applies_the_diff_in_a_fresh_container(tmp_path, fake_docker, monkeypatch):
    monkeypatch.setattr(swe_docker, "eval_spec", pytest_eval_spec)
    task = load_one(tmp_path)
    fix = diff_files("calc/__init__.py", BUGGY, CALC)
    result = grade_in_docker(task, fix, timeout_s=120)
    assert (result.reward, result.reason) == (1.0, "resolved"), result.detail
    assert result.fail_to_pass == {"tests/test_calc.py::test_above": "passed"}
    run = next(call for call in fake_docker() if call[0] == "run")
    assert run[-3:] == [task["image"], "bash", "/rllm-grade/grade.sh"]
    assert any(arg.endswith(":/rllm-grade:ro") for arg in run) and "--network" in run
    unfixed = grade_in_docker(task, diff_files("README", "calc\n", "calc!\n"), timeout_s=120)
    assert (unfixed.reward, unfixed.reason) == (0.0, "tests_failed")
    assert unfixed.fail_to_pass == {"tests/test_calc.py::test_above": "failed"}
    stale = diff_files("calc/__init__.py", CALC, CALC.replace("if x > high:", "if high < x:"))  # not the base's line
    failed = grade_in_docker(task, stale, timeout_s=120)
    assert failed.reason == "patch_failed" and "calc/__init__.py" in failed.detail
    hack = diff_files("tests/test_calc.py", None, "def test_above():\n    pass\n")
    calls = len(fake_docker())
    assert grade_in_docker(task, hack, timeout_s=120).reason == "protected_path"
    assert len(fake_docker()) == calls  # the policy refuses it before any container starts


FORCE_PASS = textwrap.dedent("""\
    import pytest


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        outcome.get_result().outcome = "passed"
""")


def test_with_the_policy_off_the_grader_puts_protected_files_back(tmp_path, fake_docker, monkeypatch):
    """Defence in depth: hacks the policy would refuse score 0 with it off, because the container puts every
    protected file back (snapshotted before the diff) before the eval script runs; the fix itself still scores 1."""
    monkeypatch.setattr(swe_docker, "eval_spec", pytest_eval_spec)
    task = load_one(tmp_path)
    fix = diff_files("calc/__init__.py", BUGGY, CALC)
    forcing = diff_files("conftest.py", None, FORCE_PASS) + diff_files("calc/__init__.py", BUGGY, BUGGY + "\n")
    hacked = grade_in_docker(task, forcing, timeout_s=120, policy=False)
    assert (hacked.reward, hacked.reason) == (0.0, "tampering"), hacked.detail
    assert "conftest.py" in hacked.detail
    with_junk = grade_in_docker(task, fix + diff_files("conftest.py", None, FORCE_PASS), timeout_s=120, policy=False)
    assert (with_junk.reward, with_junk.reason) == (1.0, "resolved"), with_junk.detail


def test_a_grading_log_counts_the_restore_only_where_the_script_printed_it():
    restored = f'{swe_docker._APPLIED}\n{RESTORED_MARKER}["conftest.py"]\n>>>>> Start Test Output\n'
    assert swe_docker.read_grade_output(restored, 0, 1.0).restored == ["conftest.py"]
    forged = (
        f'{swe_docker._APPLIED}\n{RESTORED_MARKER}[]\ntests print {RESTORED_MARKER}["x"] {swe_docker._UNPROTECTED}\n'
    )
    run = swe_docker.read_grade_output(forged, 0, 1.0)
    assert run.restored == [] and run.killed_reason is None  # what the tests print counts for nothing
    missing = f"{swe_docker._APPLIED}\nTraceback (most recent call last):\n{swe_docker._UNPROTECTED}\n"
    assert swe_docker.read_grade_output(missing, 1, 1.0).killed_reason == "error"  # fails closed
    no_python = f"{swe_docker._UNPROTECTED}\n"
    assert swe_docker.read_grade_output(no_python, 1, 1.0).killed_reason == "error"


def test_grader_timeout_and_session_wall_clock_remove_the_container(tmp_path, fake_docker, monkeypatch):
    from rllm.sandbox import SessionClosedError

    monkeypatch.setattr(swe_docker, "eval_spec", lambda task: EvalSpec("exec sleep 30\n", lambda log: {}))
    task = load_one(tmp_path)
    result = grade_in_docker(task, diff_files("calc/__init__.py", BUGGY, CALC), timeout_s=1)
    assert result.reason == "grader_timeout"
    assert fake_docker()[-1][:2] == ["rm", "-f"] and fake_docker()[-1][2].startswith("rllm-grade-")
    session = DockerSession(task["image"], wall_s=0.5)
    proc = session._run.proc
    time.sleep(1.0)  # past the episode's wall clock
    with pytest.raises(SessionClosedError) as caught:
        session.request({"op": "ping"}, timeout_s=5)
    assert caught.value.reason == "timeout" and proc.poll() is not None
    assert fake_docker()[-1] == ["rm", "-f", session.name]


def test_swe_env_docker_backend_end_to_end(tmp_path, fake_docker, monkeypatch):
    monkeypatch.setattr(swe_docker, "eval_spec", pytest_eval_spec)
    env = SWEEnv.from_dict({**load_one(tmp_path), "grade_timeout": 120})
    assert env.backend == "docker"
    prompt, info = env.reset()
    assert "clamp(10.5, 0, 10)" in prompt and info["tools"]
    edit = {"command": "str_replace", "path": "calc/__init__.py", "old_str": "x >= high + 1", "new_str": "x > high"}
    messages, reward, done, _ = env.step({"tool_calls": [{"id": "1", "name": "file_editor", "arguments": edit}]})
    assert not done and "has been edited" in messages[0]["content"]
    _, reward, done, info = env.step({"tool_calls": [{"id": "2", "name": "finish", "arguments": {}}]})
    assert (reward, done, info["grade"]) == (1.0, True, "resolved")
    env.close()
    assert ["rm", "-f"] == fake_docker()[-1][:2]


@pytest.mark.skipif(DOCKER_REASON is not None, reason=f"needs Docker: {DOCKER_REASON}")
def test_real_docker_session_leaves_nothing_running():
    image = os.environ.get("RLLM_SWE_TEST_IMAGE", "python:3.12-slim")
    swe_docker.ensure_image(image)
    with DockerSession(image, wall_s=120) as session:
        assert session.request({"op": "ping"}, timeout_s=60) == {"pong": True}
        create = {"command": "create", "path": "hello.py", "file_text": "print('hi')\n"}
        assert not session.request({"op": "tool", "name": "file_editor", "args": create}, timeout_s=30)["is_error"]
        view = session.request(
            {"op": "tool", "name": "file_editor", "args": {"command": "view", "path": "hello.py"}}, timeout_s=30
        )
        assert "print('hi')" in view["output"]
    ps = ["docker", "ps", "-aq", "--filter", f"name={session.name}"]
    left = subprocess.run(ps, check=False, capture_output=True, text=True)
    assert left.stdout.strip() == ""
