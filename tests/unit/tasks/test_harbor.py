"""Harbor task folders (rllm.tasks.harbor): the folder format and its one-line errors, where a task runs (the sandbox
or Docker, by the rule of rllm.tasks.harbor.plan), the oracle scoring 1 and the untouched task 0 on every shipped
example through the real sandbox, the verifier's named errors (never a 0), the needs-Docker reason without a
daemon, the tests' pristine copy, and the task and `--agent oracle` through rllm's loop. The `harbor` package's own
models check the shipped examples and a folder made by its `tasks init` when its wheel can be had (pip download, or
$RLLM_HARBOR_WHEELS): it needs Python >= 3.12, so its modules are imported in a subprocess with a shim for 3.12's
typing.override (its task, config and path models load under 3.11 that way; its verifier does not: 3.12 f-strings)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

from rllm.sandbox import Sandbox
from rllm.tasks import get_task, is_task_name
from rllm.tasks.harbor import (
    EXAMPLES,
    HarborEnv,
    HarborTaskError,
    HarborVerifierError,
    NeedsDockerError,
    load_task,
    make_harbor_tasks,
)
from rllm.tasks.harbor import spec as spec_module
from rllm.tasks.harbor.plan import plan_environment, script_needs_network
from rllm.tasks.harbor.verifier import grade_report

SHIPPED = sorted(p.name for p in EXAMPLES.iterdir() if (p / "task.toml").is_file())
HARBOR_VERSION = "0.26.0"


@pytest.fixture(scope="module", autouse=True)
def _sandbox_and_home(tmp_path_factory):
    Sandbox.check()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLLM_HOME", str(tmp_path_factory.mktemp("rllm-home")))
        yield


def make_task(
    root: Path,
    name: str,
    *,
    dockerfile: str | None = "FROM ubuntu:24.04\nWORKDIR /app\n",
    test_sh: str = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    solve_sh: str = "#!/bin/bash\ntrue\n",
    toml: str = "[verifier]\ntimeout_sec = 30.0\n\n[agent]\ntimeout_sec = 60.0\n",
    files: dict[str, str] | None = None,
) -> Path:
    folder = root / name
    for part in ("environment", "tests", "solution"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(toml)
    (folder / "instruction.md").write_text(f"Do the {name} task.\n")
    if dockerfile is not None:
        (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "tests" / "test.sh").write_text(test_sh)
    (folder / "solution" / "solve.sh").write_text(solve_sh)
    for path, text in (files or {}).items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    return folder


def grade(folder: Path, *, oracle: bool, before_grading: str | None = None, **options) -> float:
    env = HarborEnv.from_dict({"id": folder.name, "task_dir": str(folder), "oracle": oracle, **options})
    try:
        env.reset()
        if oracle:
            env.run_solution()
        if before_grading:
            env.run_command(before_grading)
        return env.compute_final_reward()
    finally:
        env.close()


# ---- the folder format ----------------------------------------------------------------------------------------


def test_the_shipped_examples_are_rows_named_by_their_folders():
    assert len(SHIPPED) >= 3
    rows = make_harbor_tasks(EXAMPLES, 100, split="val")
    assert [row["id"] for row in rows] == SHIPPED
    for row in rows:
        assert row["instruction"] == (EXAMPLES / row["id"] / "instruction.md").read_text()
        assert Path(row["task_dir"]) == EXAMPLES / row["id"]
    assert len(make_harbor_tasks(EXAMPLES, 2, seed=3, split="val")) == 2
    train = make_harbor_tasks(EXAMPLES, 10, split="train")
    assert len(train) == 10 and {row["id"] for row in train} == set(SHIPPED)
    one = make_harbor_tasks(EXAMPLES / SHIPPED[0], 5, split="val")  # one task folder is a set of one
    assert [row["id"] for row in one] == [SHIPPED[0]]


def test_a_directory_of_task_folders_is_a_task_name(tmp_path):
    assert is_task_name(str(EXAMPLES)) and not is_task_name(str(tmp_path))
    task = get_task(str(EXAMPLES))
    assert task.name == str(EXAMPLES) and task.env is HarborEnv
    assert [row["id"] for row in task.make_tasks(100, seed=0, split="val")] == SHIPPED


def test_rllm_train_takes_a_folder_as_its_task(monkeypatch):
    from rllm.cli.main import _resolve_config_name, build_parser

    monkeypatch.chdir(EXAMPLES.parent)
    args = build_parser().parse_args(["train", "examples", "trainer.total_steps=1"])
    _resolve_config_name(args)
    assert args.config is None and args.overrides == ["data.task=examples", "trainer.total_steps=1"]
    args = build_parser().parse_args(["eval", "examples"])
    _resolve_config_name(args)
    assert args.config == "examples"  # rllm eval reads a non-file as a task already


def test_canary_lines_are_not_shown_and_defaults_are_harbors(tmp_path):
    folder = make_task(tmp_path, "canary", toml="")
    (folder / "instruction.md").write_text("<!-- harbor-canary GUID 123 -->\n\nThe task.\n")
    task = load_task(folder)
    assert task.instruction == "The task.\n"
    assert (task.agent_timeout_s, task.verifier_timeout_s, task.network) == (600.0, 600.0, "public")


def test_bad_folders_are_one_line_each_and_the_others_run(tmp_path, caplog):
    make_task(tmp_path, "good")
    (make_task(tmp_path, "no-tests") / "tests" / "test.sh").unlink()
    broken = make_task(tmp_path, "broken-toml", toml="[verifier\ntimeout_sec = 1\n")
    make_task(tmp_path, "wrong-type", toml='[agent]\ntimeout_sec = "soon"\n')
    make_task(tmp_path, "steps", toml='[[steps]]\nname = "one"\n')
    make_task(tmp_path, "separate", toml='[verifier]\nenvironment_mode = "separate"\n')
    make_task(tmp_path, "gpu", toml="[environment]\ngpus = 1\n")
    make_task(tmp_path, "compose", files={"environment/docker-compose.yaml": "services: {}\n"})
    with caplog.at_level(logging.WARNING, logger="rllm.tasks.harbor"):
        rows = make_harbor_tasks(tmp_path, 10, split="val")
    assert [row["id"] for row in rows] == ["good"]
    lines = {r.getMessage().split(":")[0]: r.getMessage() for r in caplog.records}
    assert len(caplog.records) == 7 and all("\n" not in r.getMessage() for r in caplog.records)
    assert lines[str(tmp_path / "no-tests")].endswith(
        "no tests/test.sh; add the verifier script, which writes the reward to /logs/verifier/reward.txt"
    )
    toml_line = lines[str(broken / "task.toml")]
    assert "not valid TOML" in toml_line and re.search(r"line \d+", toml_line)
    assert "[agent].timeout_sec must be a number" in lines[str(tmp_path / "wrong-type" / "task.toml")]
    assert "multi-step" in lines[str(tmp_path / "steps" / "task.toml")]
    assert "verifier runs in a container of its own" in lines[str(tmp_path / "separate" / "task.toml")]
    assert "GPUs" in lines[str(tmp_path / "gpu" / "task.toml")]
    assert "Docker Compose" in lines[str(tmp_path / "compose" / "task.toml")]
    caplog.clear()
    make_harbor_tasks(tmp_path, 10, split="train")  # the same folder again: no second report
    assert not caplog.records
    with pytest.raises(HarborTaskError, match="no task can be played"):
        make_harbor_tasks(tmp_path / "no-tests", 1)


# ---- sandbox or Docker ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dockerfile", "toml", "why"),
    [
        ("FROM python:3.12-slim\nWORKDIR /srv/app\nENV A=1 PATH=/x:$PATH\nCOPY . /srv/app/\n", "", None),
        (
            "FROM ubuntu:24.04\nWORKDIR /app\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends bash \\\n"
            "    && rm -rf /var/lib/apt/lists/*\n",
            "",
            None,
        ),
        (
            "FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get install -y no-such-package-rllm\n",
            "",
            "line 3 installs no-such-package-rllm with apt, which this machine lacks",
        ),
        ("FROM python:3.12\nWORKDIR /app\nRUN pip install numpy==2.0\n", "", "installs numpy with pip"),
        ("FROM node:20\nWORKDIR /app\n", "", "builds on the image 'node:20'"),
        ("FROM python:3.12 AS build\nFROM ubuntu:24.04\nWORKDIR /app\n", "", "second build stage"),
        ("FROM ubuntu:24.04\nWORKDIR /app\nCOPY data.txt /data/data.txt\n", "", "copies to /data/data.txt, outside"),
        ("FROM ubuntu:24.04\nWORKDIR /app\nRUN make install\n", "", "line 3 runs `make install`"),
        ("FROM ubuntu:24.04\n", "", "sets no WORKDIR"),
        ("FROM ubuntu:24.04\nWORKDIR /\n", "", "must be a directory of its own"),
        ("FROM ubuntu:24.04\nWORKDIR /app\n", '[environment]\ndocker_image = "me/img:1"\n', "prebuilt image"),
    ],
)
def test_the_sandbox_or_docker_rule(tmp_path, dockerfile, toml, why):
    folder = make_task(tmp_path, "t", dockerfile=dockerfile, toml=toml, files={"environment/data.txt": "x\n"})
    plan = plan_environment(load_task(folder))
    if why is None:
        assert plan.sandbox, plan.docker_reason
    else:
        assert plan.docker_reason is not None and why in plan.docker_reason, plan.docker_reason


def test_the_rule_reads_installs_copies_and_scripts(tmp_path):
    dockerfile = "FROM python:3.12\nWORKDIR /app\nCOPY src/ ./src/\nRUN pip install -q pytest && mkdir -p out\n"
    folder = make_task(tmp_path, "t", dockerfile=dockerfile, files={"environment/src/a.py": "A = 1\n"})
    plan = plan_environment(load_task(folder))
    assert plan.sandbox and plan.pytest and plan.copies == [("src", "/app/src")] and plan.dirs == ["/app/out"]
    assert plan_environment(load_task(make_task(tmp_path, "bare", dockerfile=None))).copies == [(".", "/app")]
    assert script_needs_network("#!/bin/bash\n# curl in a comment\necho curl\n") is None
    assert "line 2 downloads" in script_needs_network("set -e\nx=$(curl -LsSf https://x) || true\n")
    assert "line 1 installs with apt" in script_needs_network("DEBIAN_FRONTEND=noninteractive apt-get -y -q update\n")
    tb2 = make_task(tmp_path, "tb2", test_sh="#!/bin/bash\napt-get update\napt-get install -y curl\n")
    assert "tests/test.sh line 2 installs with apt" in plan_environment(load_task(tb2)).docker_reason
    solve = make_task(tmp_path, "solve", solve_sh="#!/bin/bash\npip install requests\n")
    assert plan_environment(load_task(solve)).sandbox  # a model agent never runs solve.sh
    assert "solution/solve.sh line 2 installs with pip" in plan_environment(load_task(solve), oracle=True).docker_reason


def test_a_task_that_needs_docker_ends_with_the_reason_not_a_zero(tmp_path, monkeypatch):
    folder = make_task(tmp_path, "node", dockerfile="FROM node:20\nWORKDIR /app\n")
    monkeypatch.setattr("rllm.tasks.swe.docker.docker_available", lambda: "no Docker engine is reachable (test)")
    env = HarborEnv.from_dict({"id": "node", "task_dir": str(folder)})
    with pytest.raises(NeedsDockerError, match=r"^needs Docker: environment/Dockerfile line 1 builds on the image"):
        env.reset()
    sandbox_only = HarborEnv.from_dict({"id": "node", "task_dir": str(folder), "backend": "sandbox"})
    with pytest.raises(NeedsDockerError, match="backend='sandbox'"):
        sandbox_only.reset()

    from rllm.engine.workflow_engine import AgentWorkflowEngine
    from rllm.models.fake import FakeModel
    from rllm.tasks.harbor import HarborAgent
    from rllm.types import TerminationReason
    from rllm.workflows.agent_env import AgentEnvWorkflow

    engine = AgentWorkflowEngine(
        workflow_class=AgentEnvWorkflow,
        workflow_args={"agent_class": HarborAgent, "env_class": HarborEnv, "max_steps": 2},
        model=FakeModel("never called"),
        retry_limit=0,
    )
    (episode,) = engine.execute_tasks([{"id": "node", "task_dir": str(folder)}])
    assert episode.termination_reason is TerminationReason.INFRA_ERROR and not episode.is_correct
    assert episode.info["error"].startswith("NeedsDockerError: needs Docker: ")


FAKE_DOCKER = r"""#!/usr/bin/env python3
import base64, json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
if args[:2] == ["image", "inspect"]:
    sys.exit(1)
if args and args[0] == "exec":
    command = " ".join(args)
    if "command -v bash" in command:
        print("bash\nt")
    elif "verify.sh" in command:
        for key, value in (("exit", "0"), ("elapsed", "1"), ("reward.txt", "1\n")):
            print("@@rllm-harbor", key, base64.b64encode(value.encode()).decode())
    else:
        print("ran in the container")
elif args and args[0] in ("info", "run"):
    print("fake")
"""


def test_a_task_that_needs_docker_runs_in_docker_when_an_engine_answers(tmp_path, monkeypatch):
    """Docker's command lines, with a fake `docker` CLI (no engine here): build, run, exec, cp, rm."""
    bin_dir, log = tmp_path / "bin", tmp_path / "docker.log"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    toml = '[agent]\ntimeout_sec = 60.0\n[environment]\nmemory_mb = 1024\nnetwork_mode = "no-network"\n'
    folder = make_task(tmp_path, "node", dockerfile="FROM node:20\nWORKDIR /app\n", toml=toml)
    env = HarborEnv.from_dict({"id": "node", "task_dir": str(folder)})
    try:
        env.reset()
        assert env.workspace.kind == "docker"
        assert env.run_command("ls") == "ran in the container\n"
        assert env.compute_final_reward() == 1.0 and env.result.resolved
    finally:
        env.close()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    commands = [call[0] for call in calls]
    assert commands[:4] == ["info", "image", "build", "run"] and commands[-1] == "rm"
    build, run = calls[2], calls[3]
    assert build[-1] == str(folder / "environment") and build[2].startswith("rllm-harbor-node:")
    assert ["--memory", "1024m"] == run[run.index("--memory") : run.index("--memory") + 2] and "none" in run
    assert ["cp", f"{folder / 'tests'}/."] == calls[-3][:2]  # the pristine tests, then the verifier


# ---- playing and grading in the real sandbox ------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_the_oracle_scores_1_and_the_untouched_task_0(name):
    assert grade(EXAMPLES / name, oracle=True) == 1.0
    assert grade(EXAMPLES / name, oracle=False) == 0.0


def test_a_shell_agent_solves_a_task_through_the_tool_calls():
    folder = EXAMPLES / "fix-median-bug"
    env = HarborEnv.from_dict({"id": folder.name, "task_dir": str(folder), "command_timeout": 2})
    try:
        instruction, info = env.reset()
        assert "median" in instruction and [t["function"]["name"] for t in info["tools"]] == ["bash", "finish"]

        def bash(command: str) -> str:
            call = {"id": "c1", "name": "bash", "arguments": {"command": command}}
            observation, reward, done, _ = env.step({"tool_calls": [call], "content": "", "errors": []})
            assert reward == 0.0 and not done
            return observation[0]["content"]

        assert bash("pwd; ls") == "/app\nstats.py\n"
        assert bash("ls /tests /solution /logs") == "/logs:\nagent\nartifacts\nverifier\n\n/solution:\n\n/tests:\n"
        assert "Read-only file system" in bash("touch /tests/test.sh")
        assert bash("python3 -c 'import stats; print(stats.median([4, 1, 3, 2]))'") == "3\n"
        assert bash("sleep 30").endswith("[the command timed out after 2 s and was killed]\n[exit code 137]")
        fix = (folder / "solution" / "solve.sh").read_text()
        bash(fix)
        observation, reward, done, info = env.step({"tool_calls": [{"name": "finish", "arguments": {}}]})
        assert (observation, reward, done, info["success"], info["termination"]) == (
            "done",
            1.0,
            True,
            True,
            "finished",
        )
        assert info["tool_call_counts"] == {"bash": {"calls": 6, "ok": 5}} and info["backend"] == "sandbox"
    finally:
        env.close()


def test_the_tests_are_a_pristine_copy_and_old_rewards_do_not_count():
    folder = EXAMPLES / "first-primes"
    cheat = "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && ln -s /app /tmp/.rllm-harbor-logs/x"
    assert grade(folder, oracle=False, before_grading=cheat) == 0.0


def test_the_verifier_errors_are_named_never_a_zero(tmp_path):
    def outcome(test_sh: str, toml: str = "[verifier]\ntimeout_sec = 30.0\n") -> float | str:
        folder = make_task(tmp_path, f"t{len(list(tmp_path.iterdir()))}", test_sh=test_sh, toml=toml)
        try:
            return grade(folder, oracle=False)
        except HarborVerifierError as e:
            assert e.kind in str(e)
            return str(e)

    assert outcome("#!/bin/bash\necho silent\n").startswith("verifier_no_reward: tests/test.sh wrote neither")
    assert outcome("#!/bin/bash\necho boom >&2\nexit 3\n").startswith("verifier_crashed: tests/test.sh exited 3")
    assert outcome("#!/bin/bash\nsleep 30\n", "[verifier]\ntimeout_sec = 2.0\n").startswith(
        "verifier_timeout: tests/test.sh ran past the verifier's timeout, 2 s"
    )
    assert outcome("#!/bin/bash\necho nope > /logs/verifier/reward.txt\n").startswith("verifier_bad_reward")
    two = '#!/bin/bash\necho \'{"a": 1, "b": 0.5}\' > /logs/verifier/reward.json\n'
    assert "none is 'reward'" in outcome(two)
    assert outcome("#!/bin/bash\necho '{\"score\": 0.25}' > /logs/verifier/reward.json\n") == 0.25
    both = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    both += 'echo \'{"reward": 0.5, "x": 1}\' > /logs/verifier/reward.json\n'
    assert outcome(both) == 0.5  # reward.json first, as Harbor reads them
    assert outcome("echo 0.75 > /logs/verifier/reward.txt; exit 1\n") == 0.75  # no shebang; the exit code is not read
    env_toml = '[verifier]\ntimeout_sec = 30.0\n[verifier.env]\nVALUE = "${RLLM_HARBOR_TEST_VALUE:-0.5}"\n'
    assert outcome("#!/bin/bash\necho $VALUE > /logs/verifier/reward.txt\n", env_toml) == 0.5
    with pytest.raises(HarborVerifierError, match="verifier_died"):
        grade_report({}, 10)


def test_the_agents_time_limit_ends_the_episode_graded(tmp_path):
    folder = make_task(tmp_path, "slow", toml="[agent]\ntimeout_sec = 1.0\n")
    env = HarborEnv.from_dict({"id": "slow", "task_dir": str(folder)})
    try:
        env.reset()
        call = {"name": "bash", "arguments": {"command": "sleep 5; echo late"}}
        observation, *_ = env.step({"tool_calls": [call]})
        assert "timed out after 1" in observation[0]["content"]
        _, reward, done, info = env.step({"tool_calls": [call]})
        assert (reward, done, info["termination"]) == (1.0, True, "agent_timeout")
    finally:
        env.close()


# ---- through rllm's loop --------------------------------------------------------------------------------------


def test_agent_oracle_through_the_eval_config(tmp_path, monkeypatch):
    from rllm.config import load_config
    from rllm.evaluation import evaluate
    from rllm.models.fake import FakeModel
    from rllm.runs import read_episodes

    monkeypatch.setattr("rllm.evaluation.make_eval_model", lambda config, run_dir: FakeModel("unused"))
    runs = [f"trainer.run_dir={tmp_path}", "trainer.name=oracle"]
    summary, run_dir = evaluate(load_config(None, [f"data.task={EXAMPLES}", "agent=oracle", *runs]))
    assert summary["episodes"] == len(SHIPPED) and summary["success_rate"] == 1.0 and summary["reward_mean"] == 1.0
    episodes = read_episodes(run_dir)
    assert sorted(e.task["id"] for e in episodes) == SHIPPED
    assert all(e.trajectories[0].name == "oracle" and len(e.trajectories[0].steps) == 1 for e in episodes)

    from rllm.harnesses import HarnessError, harness_workflow

    with pytest.raises(HarnessError, match="has none to run"):
        harness_workflow("oracle", get_task("arithmetic"))


# ---- the harbor package's own view -----------------------------------------------------------------------------

# task.toml's fields in harbor 0.26.0 (harbor/models/task/config.py: TaskConfig and its sections)
HARBOR_FIELDS = {
    None: set(
        "schema_version version task metadata verifier agent environment solution source steps artifacts".split()
    ),
    "task": set("name version description authors keywords".split()),
    "verifier": set("timeout_sec env user environment_mode environment collect network_mode allowed_hosts".split()),
    "agent": set("timeout_sec user network_mode allowed_hosts".split()),
    "environment": set(
        "build_timeout_sec docker_image os cpus memory_mb storage_mb gpus gpu_types tpu mcp_servers env skills_dir "
        "healthcheck workdir allow_internet network_mode allowed_hosts memory storage".split()
    ),
    "solution": {"env"},
}
HARBOR_FIELDS[None].add("multi_step_reward_strategy")


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_examples_follow_harbors_schema(name):
    folder = EXAMPLES / name
    config = tomllib.loads((folder / "task.toml").read_text())
    assert set(config) <= HARBOR_FIELDS[None] and config["schema_version"] == "1.4"
    for section, value in config.items():
        if section in HARBOR_FIELDS and section != "metadata":
            assert set(value) <= HARBOR_FIELDS[section], (section, set(value) - HARBOR_FIELDS[section])
    assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*", config["task"]["name"])
    for path in ("instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
        assert (folder / path).is_file(), path
    for script in ("tests/test.sh", "solution/solve.sh"):
        assert (folder / script).read_text().startswith("#!/bin/bash\n")
    assert plan_environment(load_task(folder), oracle=True).sandbox  # each runs offline in the sandbox


@pytest.fixture(scope="module")
def harbor_path() -> str:
    """PYTHONPATH holding harbor 0.26.0 and its `toml` dependency, unpacked from the wheels in $RLLM_HARBOR_WHEELS or
    from `pip download` (cached in the temp folder); skips, saying why, when neither can be had."""
    cache = Path(tempfile.gettempdir()) / f"rllm-test-harbor-{HARBOR_VERSION}"
    given = os.environ.get("RLLM_HARBOR_WHEELS")
    wheels = Path(given) if given else cache / "wheels"
    if not (cache / ".complete").exists() or given:
        wheels.mkdir(parents=True, exist_ok=True)
        for requirement in [] if given else [f"harbor=={HARBOR_VERSION}", "toml==0.10.2"]:
            pip = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--only-binary", ":all:"]
            pip += ["--python-version", "3.12", "-d", str(wheels), "-q", "--disable-pip-version-check"]
            try:
                done = subprocess.run(pip, capture_output=True, text=True, timeout=180, check=False)
            except subprocess.TimeoutExpired:
                pytest.skip(f"pip download {requirement} took too long")
            if done.returncode:
                pytest.skip(f"cannot download {requirement} (or set RLLM_HARBOR_WHEELS): {done.stderr.strip()[-300:]}")
        for wheel in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(cache / "site")
        (cache / ".complete").write_text("ok")
    return str(cache / "site")


def run_harbor(harbor_path: str, code: str, *args: str) -> dict:
    """`code` under harbor's modules in a subprocess; typing.override (Python 3.12) is shimmed for 3.11."""
    prelude = (
        "import typing, typing_extensions\ntyping.override = getattr(typing, 'override', typing_extensions.override)\n"
    )
    env = {**os.environ, "PYTHONPATH": harbor_path}
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode:
        if "No module named" in done.stderr and any(m in done.stderr for m in ("'typer'", "'rich'", "'pathspec'")):
            pytest.skip(f"harbor's modules need a package this venv lacks: {done.stderr.strip().splitlines()[-1]}")
        raise AssertionError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


VALIDATE = """
import json, sys
from harbor.models.task.task import Task
from harbor.models.trial.paths import EnvironmentPaths
paths = EnvironmentPaths()
out = {"paths": [str(paths.tests_dir), str(paths.solution_dir), str(paths.agent_dir), str(paths.reward_text_path),
                 str(paths.reward_json_path)], "tasks": {}}
for folder in sys.argv[1:]:
    task = Task(folder)
    out["tasks"][folder] = {"valid": Task.is_valid_dir(folder), "instruction": task.instruction,
                            "agent": task.config.agent.timeout_sec, "verifier": task.config.verifier.timeout_sec,
                            "network": task.config.environment.network_mode.value}
print(json.dumps(out))
"""


def test_harbors_own_models_accept_the_shipped_examples(harbor_path):
    folders = [str(EXAMPLES / name) for name in SHIPPED]
    seen = run_harbor(harbor_path, VALIDATE, *folders)
    assert seen["paths"] == [
        spec_module.TESTS_DIR,
        spec_module.SOLUTION_DIR,
        spec_module.AGENT_LOGS,
        spec_module.REWARD_TXT,
        spec_module.REWARD_JSON,
    ]
    for folder in folders:
        ours, theirs = load_task(folder), seen["tasks"][folder]
        assert theirs["valid"] and theirs["instruction"] == ours.instruction
        assert (theirs["agent"], theirs["verifier"], theirs["network"]) == (
            ours.agent_timeout_s,
            ours.verifier_timeout_s,
            ours.network,
        )


def test_a_task_made_by_harbor_tasks_init_runs_unchanged(harbor_path, tmp_path):
    init = """
    import json, sys
    from pathlib import Path
    from harbor.cli.init import _init_task
    from harbor.models.task.config import VerifierEnvironmentMode
    out = Path(sys.argv[1])
    _init_task("rllm/default-init", out)
    _init_task("rllm/shared-init", out, verifier_mode=VerifierEnvironmentMode.SHARED, no_pytest=True)
    print(json.dumps(sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())))
    """
    made = run_harbor(harbor_path, init, str(tmp_path))
    assert "shared-init/task.toml" in made and "shared-init/tests/test.sh" in made
    default, shared = tmp_path / "default-init", tmp_path / "shared-init"
    # harbor's default task: its verifier runs in a container of its own (tests/Dockerfile), which rllm refuses
    with pytest.raises(HarborTaskError, match="its verifier runs in a container of its own.*which rllm does not play"):
        load_task(default)
    # the shared-verifier template as written: its test.sh writes no reward yet, a named error
    with pytest.raises(HarborVerifierError, match="verifier_no_reward"):
        grade(shared, oracle=False)
    # filled in as a task author does; task.toml and environment/Dockerfile stay as harbor wrote them
    (shared / "instruction.md").write_text("Write the word hello to /app/hello.txt.\n")
    with (shared / "solution" / "solve.sh").open("a") as f:
        f.write("\necho hello > /app/hello.txt\n")
    with (shared / "tests" / "test.sh").open("a") as f:
        f.write('\nif [ "$(cat /app/hello.txt)" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    assert (grade(shared, oracle=True), grade(shared, oracle=False)) == (1.0, 0.0)
    seen = run_harbor(harbor_path, VALIDATE, str(shared))
    assert seen["tasks"][str(shared)]["valid"]
