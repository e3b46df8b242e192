"""The sandbox's repository layouts (RepoMount: overlay as root, or a copy) and its long-lived sessions: edits stay
on a tmpfs inside, the host tree is never written, limits hold, and nothing outlives a session."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rllm.errors import InfraError
from rllm.sandbox import RepoMount, Sandbox, SandboxLimits, SessionClosedError, make_editable
from tests.support.processes import processes_with

LIMITS = SandboxLimits(wall_s=10, cpu_s=10, memory_mb=256, pids=32, tmpfs_mb=16)


@pytest.fixture(scope="module", autouse=True)
def sandbox_works():
    Sandbox.check()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "repo" / "README").write_text("hello\n")
    make_editable(tmp_path / "repo")
    return tmp_path / "repo"


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("copy", [False, True], ids=["overlay", "copy"])
def test_a_repo_is_editable_inside_and_untouched_outside(tree, copy):
    before = snapshot(tree)
    script = (
        "pwd; id -u; echo 'x = 2' >> pkg/a.py; cat pkg/a.py; rm README; mkdir new; echo n > new/f; ls -a | tr '\\n' ' '"
    )
    result = Sandbox(LIMITS).run(["/bin/sh", "-c", script], repo=RepoMount(str(tree), copy=copy))
    assert result.ok, result
    lines = result.stdout.decode().splitlines()
    assert lines[:4] == ["/testbed", "65534", "x = 1", "x = 2"]
    assert "README" not in lines[4] and "new" in lines[4]
    assert snapshot(tree) == before  # the host tree is never written


@pytest.mark.parametrize("copy", [False, True], ids=["overlay", "copy"])
def test_a_repo_cannot_fill_the_host_disk(tree, copy):
    repo = RepoMount(str(tree), size_mb=4, copy=copy)
    result = Sandbox(LIMITS).run(
        ["/bin/sh", "-c", "head -c 8000000 /dev/zero > big; echo rc=$?; ls -la big"], repo=repo
    )
    assert "No space left on device" in result.stderr.decode() or "File too large" in result.stderr.decode()
    assert not (tree / "big").exists()


def test_read_only_binds_and_env(tree, tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "tool.txt").write_text("tool\n")
    os.chmod(tmp_path / "ro", 0o755)
    result = Sandbox(LIMITS).run(
        ["/bin/sh", "-c", "cat /opt/x/tool.txt; echo $MY_VAR; touch /opt/x/w 2>&1"],
        ro_binds={str(tmp_path / "ro"): "/opt/x"},
        env={"MY_VAR": "v"},
    )
    out = result.stdout.decode().splitlines()
    assert out[:2] == ["tool", "v"] and "Read-only file system" in out[2]


def test_layout_mistakes_are_named(tree):
    sandbox = Sandbox(LIMITS)
    with pytest.raises(ValueError, match="new absolute directory"):
        RepoMount(str(tree), dest="/usr/x")
    with pytest.raises(ValueError, match="not a directory"):
        RepoMount(str(tree / "nope"))
    with pytest.raises(ValueError, match="may not override"):
        sandbox.run(["true"], env={"PATH": "/x"})
    with pytest.raises(ValueError, match="shadow the sandbox's own"):
        sandbox.run(["true"], ro_binds={str(tree): "/etc/x"})
    with pytest.raises(ValueError, match="need the bubblewrap sandbox"), pytest.warns(RuntimeWarning):
        Sandbox(LIMITS, unsafe=True).run(["true"], repo=RepoMount(str(tree)))


def test_a_failed_repo_setup_is_an_infra_error(tree, monkeypatch):
    from rllm.sandbox import runner as sandbox_module

    monkeypatch.setattr(sandbox_module, "_COPY_REPO", sandbox_module._COPY_REPO.replace("cp -R", "false"))
    with pytest.raises(InfraError, match="cannot copy the repository"):
        Sandbox(LIMITS).run(["true"], repo=RepoMount(str(tree), copy=True))


def session(sandbox: Sandbox, code: str, **kwargs):
    return sandbox.session(sandbox.python_argv("/work/server.py"), files={"server.py": code}, **kwargs)


SERVER = """import json, os, sys, time
for line in sys.stdin:
    m = json.loads(line)
    if m["op"] == "sleep":
        time.sleep(m["s"])
    if m["op"] == "exit":
        sys.exit(3)
    if m["op"] == "hog":
        x = bytearray(1 << 30)
    if m["op"] == "write":
        open(m["path"], "a").write("y\\n")
    sys.stdout.write(json.dumps({"echo": m, "cwd": os.getcwd(), "pid": os.getpid()}) + "\\n")
    sys.stdout.flush()
"""


def test_a_session_keeps_its_state_between_requests_and_leaves_nothing(tree):
    sandbox = Sandbox(LIMITS)
    with session(sandbox, SERVER, repo=RepoMount(str(tree))) as s:
        first = s.request({"op": "write", "path": "pkg/a.py"}, timeout_s=5)
        s.request({"op": "write", "path": "pkg/a.py"}, timeout_s=5)
        assert first["cwd"] == "/testbed" and s.alive
        check = sandbox.run(["true"])  # other runs go on beside a session
        assert check.ok
    assert not s.alive
    assert (tree / "pkg" / "a.py").read_text() == "x = 1\n"
    assert processes_with("/work/server.py") == []


@pytest.mark.parametrize(("op", "reason"), [("exit", "exit:3"), ("hog", "memory"), ("sleep", "no_reply")])
def test_a_dead_or_silent_session_raises_with_the_reason(op, reason):
    s = session(Sandbox(LIMITS), SERVER)
    try:
        with pytest.raises(SessionClosedError) as caught:
            s.request({"op": op, "s": 30}, timeout_s=2)
        assert caught.value.reason == reason and not s.alive
        with pytest.raises(SessionClosedError):
            s.request({"op": "ping"}, timeout_s=2)
    finally:
        s.close()


def test_a_session_dies_at_its_wall_clock():
    s = session(Sandbox(LIMITS), SERVER, limits=SandboxLimits(wall_s=1.5, cpu_s=5, memory_mb=128))
    assert s.request({"op": "ping"}, timeout_s=5)["echo"] == {"op": "ping"}
    time.sleep(2.5)
    with pytest.raises(SessionClosedError) as caught:
        s.request({"op": "ping"}, timeout_s=2)
    assert caught.value.reason == "timeout"


def test_a_reply_that_is_not_json_ends_the_session():
    s = session(Sandbox(LIMITS), "import sys\nfor line in sys.stdin:\n    print('not json', flush=True)\n")
    with pytest.raises(SessionClosedError) as caught:
        s.request({"op": "ping"}, timeout_s=5)
    assert caught.value.reason == "bad_reply"


def test_a_session_outlives_the_thread_that_opened_it():
    """bwrap's --die-with-parent follows the thread that started it: sessions start from one long-lived thread."""
    import threading

    opened = []
    thread = threading.Thread(target=lambda: opened.append(session(Sandbox(LIMITS), SERVER)))
    thread.start()
    thread.join()
    time.sleep(0.5)
    with opened[0] as s:
        assert s.alive and s.request({"op": "ping"}, timeout_s=5)["echo"] == {"op": "ping"}
