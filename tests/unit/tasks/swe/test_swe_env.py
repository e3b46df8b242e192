"""SWEEnv on a tiny real task (tests/support/swe.py): its tools, paths kept inside the repository, cut
outputs, killed commands, hidden tests out of reach, and the grade of a fix, of nothing, and of a broken fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rllm.sandbox import Sandbox
from rllm.tasks.swe.env import SWEEnv
from tests.support.swe import BUGGY, CALC, make_calc_task


@pytest.fixture(scope="module")
def calc_task(tmp_path_factory) -> dict:
    Sandbox.check()
    home = tmp_path_factory.mktemp("rllm-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLLM_HOME", str(home))
        yield make_calc_task(tmp_path_factory.mktemp("calc"))


@pytest.fixture
def env(calc_task):
    environment = SWEEnv.from_dict({**calc_task, "step_timeout": 5, "max_output_chars": 2000})
    yield environment
    environment.close()


def call(name: str, **arguments) -> dict:
    return {"tool_calls": [{"id": "c1", "name": name, "arguments": arguments}], "content": "", "errors": []}


def run(env: SWEEnv, name: str, **arguments) -> tuple[str, dict]:
    observation, reward, done, info = env.step(call(name, **arguments))
    assert reward == 0.0 and not done
    return observation[0]["content"], info


def test_reset_gives_the_issue_and_the_tools(env, calc_task):
    observation, info = env.reset()
    assert calc_task["problem_statement"] in observation
    assert [t["function"]["name"] for t in info["tools"]] == ["file_editor", "search", "execute_bash", "finish"]


def test_file_editor_commands(env):
    env.reset()
    out, _ = run(env, "file_editor", command="view", path="/testbed/calc/__init__.py")
    assert "    12\t    if x >= high + 1:" in out
    out, _ = run(env, "file_editor", command="view", path="/testbed/calc/__init__.py", view_range=[8, 9])
    assert out.splitlines() == ["     8\tdef clamp(x, low, high):", "     9\t    # keep x within [low, high]"]
    run(env, "file_editor", command="create", path="/testbed/repro.py", file_text="print(1)\n")
    out, _ = run(env, "file_editor", command="insert", path="repro.py", insert_line=0, new_str="import calc")
    out, _ = run(env, "execute_bash", cmd="python repro.py && head -1 repro.py")
    assert out.splitlines() == ["1", "import calc"]
    run(env, "file_editor", command="undo_edit", path="/testbed/repro.py")
    out, _ = run(env, "execute_bash", cmd="cat repro.py")
    assert out == "print(1)\n"
    out, info = run(
        env, "file_editor", command="str_replace", path="/testbed/calc/__init__.py", old_str="return", new_str="return "
    )
    assert "occurs 4 times" in out and info["tool_error_kinds"] == {"bad_arguments": 1}
    out, _ = run(env, "file_editor", command="view", path="/testbed")
    assert "calc/__init__.py" in out and "tests/test_visible.py" in out


def test_search_in_a_directory_and_a_file(env):
    env.reset()
    out, _ = run(env, "search", search_term="def clamp")
    assert out.endswith("calc/__init__.py (1 matches)")
    out, _ = run(env, "search", search_term="return", path="/testbed/calc/__init__.py")
    assert "5:    return a + b" in out


@pytest.mark.parametrize(
    "path",
    ["/testbed/../etc/passwd", "/etc/passwd", "../x", "/testbed/link/passwd"],
    ids=["dotdot", "abs", "rel", "symlink"],
)
def test_paths_outside_the_repository_are_refused(env, path):
    env.reset()
    run(env, "execute_bash", cmd="ln -s /etc link")
    out, info = run(env, "file_editor", command="view", path=path)
    assert out.startswith("Error: ") and ("outside the repository" in out or "'..'" in out)
    assert info["tool_error_kinds"] == {"bad_arguments": 1}
    assert info["tool_call_counts"] == {"execute_bash": {"calls": 1, "ok": 1}, "file_editor": {"calls": 1, "ok": 0}}


def test_hanging_flooding_and_lingering_commands(env):
    env.reset()
    out, info = run(env, "execute_bash", cmd="sleep 60")
    assert "timed out after 5 s" in out and info["tool_error_kinds"] == {"timeout": 1}
    out, _ = run(env, "execute_bash", cmd="yes hello | head -c 1000000")
    assert "characters truncated ...]" in out and len(out) < 2200
    run(env, "execute_bash", cmd="(sleep 300 &) ; sleep 300 & echo started")
    out, _ = run(env, "execute_bash", cmd="ps -eo comm | grep -c sleep || true")
    assert out.strip().splitlines()[0] == "0"  # nothing of an earlier call runs on


def test_the_hidden_tests_are_nowhere_in_the_workspace(env):
    env.reset()
    out, _ = run(
        env,
        "execute_bash",
        cmd="ls tests; grep -rl test_clamp_above /testbed /tmp /work /opt /.rllm 2>/dev/null; echo end",
    )
    assert out.splitlines() == ["test_visible.py", "end"]


def test_writes_outside_the_repository_do_not_reach_the_host_or_the_grade(env):
    env.reset()
    out, _ = run(env, "execute_bash", cmd="echo x > /etc/evil; echo x > /usr/evil; echo y > /tmp/ok && cat /tmp/ok")
    assert out.count("Read-only file system") == 2 and "y" in out.splitlines()
    assert not Path("/usr/evil").exists()
    _, reward, done, info = env.step(call("finish", command="submit"))
    assert (reward, done, info["grade"]) == (0.0, True, "empty_patch")


def test_bad_calls_are_told_and_counted(env):
    env.reset()
    action = {
        "tool_calls": [
            {"id": "a", "name": "nope", "arguments": {}},
            {"id": "b", "name": "execute_bash", "arguments": {"command": "ls"}},
            {"id": "c", "name": "file_editor", "arguments": {"command": "fly", "path": "/testbed"}},
            {"id": "d", "name": "execute_bash", "arguments": "not json"},
        ],
        "content": "",
        "errors": [{"kind": "truncated", "message": "the tool call JSON is cut off"}],
    }
    observation, _, done, info = env.step(action)
    texts = [m["content"] for m in observation]
    assert "unknown tool 'nope'" in texts[0] and "needs the argument(s) cmd" in texts[1]
    assert "unknown `command` 'fly'" in texts[2] and "must be a JSON object" in texts[3]
    assert texts[4] == "Error: the tool call JSON is cut off" and [m.get("tool_call_id") for m in observation[:2]] == [
        "a",
        "b",
    ]
    assert info["tool_errors"] == 5 and not done
    observation, _, done, info = env.step({"tool_calls": [], "content": "I think it works.", "errors": []})
    assert "No tool call found" in observation[0]["content"] and info["tool_error_kinds"]["no_tool_call"] == 1


def test_a_fix_scores_1_and_a_wrong_fix_0(env):
    env.reset()
    run(
        env,
        "file_editor",
        command="str_replace",
        path="/testbed/calc/__init__.py",
        old_str="    if x >= high + 1:",
        new_str="    if x > high:",
    )
    # /testbed is a git repository whose one commit is the tree as the episode began: `git diff` shows the edit
    out, _ = run(env, "execute_bash", cmd="git diff; git status --porcelain; git log --format=%s")
    assert "\n-    if x >= high + 1:\n+    if x > high:\n" in out
    assert out.endswith("\n M calc/__init__.py\nbase\n"), out
    _, reward, done, info = env.step(call("finish", command="submit", result="fixed the comparison"))
    assert (reward, done, info["success"], info["grade"], info["termination"]) == (
        1.0,
        True,
        True,
        "resolved",
        "submitted",
    )
    assert "\n-    if x >= high + 1:\n+    if x > high:\n" in env.diff and ".git" not in env.diff
    env.reset()  # a new episode: a fresh workspace, the bug back in
    out, _ = run(env, "execute_bash", cmd="grep -c 'high + 1' calc/__init__.py")
    assert out.strip() == "1"
    run(
        env,
        "file_editor",
        command="str_replace",
        path="/testbed/calc/__init__.py",
        old_str="        return high",
        new_str="        return high + 1",
    )
    _, reward, done, info = env.step(call("finish", command="submit"))
    assert (reward, info["success"], info["grade"]) == (0.0, False, "tests_failed")


def test_running_out_of_turns_grades_what_the_repository_holds(env):
    env.reset()
    run(env, "execute_bash", cmd="sed -i 's/if x >= high + 1:/if x > high:/' calc/__init__.py")
    assert env.compute_final_reward() == 1.0 and env.result.reason == "resolved"
    assert env.compute_final_reward() == 1.0  # graded once


def test_a_killed_workspace_ends_the_episode(env):
    env.reset()
    _, reward, done, info = env.step(call("execute_bash", cmd="kill -9 $PPID"))
    assert done and reward == 0.0 and info["termination"] == "sandbox_died" and info["grade"] == "no_workspace"


def test_the_sweagent_scaffold(calc_task):
    env = SWEEnv.from_dict({**calc_task, "scaffold": "sweagent"})
    try:
        _, info = env.reset()
        assert [t["function"]["name"] for t in info["tools"]] == ["bash", "str_replace_editor", "submit"]
        observation, *_ = env.step(call("bash", command="echo hi"))
        assert observation[0]["content"] == "hi\n"
        env.step(
            call(
                "str_replace_editor",
                command="str_replace",
                path="/testbed/calc/__init__.py",
                old_str="    if x >= high + 1:",
                new_str="    if x > high:",
            )
        )
        _, reward, done, _ = env.step(call("submit"))
        assert reward == 1.0 and done
    finally:
        env.close()
    with pytest.raises(ValueError, match="unknown SWE scaffold 'nope'"):
        SWEEnv.from_dict({**calc_task, "scaffold": "nope"})
    with pytest.raises(ValueError, match="lacks 'FAIL_TO_PASS'"):
        SWEEnv({k: v for k, v in calc_task.items() if k != "FAIL_TO_PASS"})


def test_fixture_sanity():
    assert BUGGY != CALC


def _swe_servers() -> dict[int, int]:
    """Live workspace-server processes: pid -> parent pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if b"rllm_swe_server" in (entry / "cmdline").read_bytes() and stat[0] not in ("Z", "X"):
                    found[int(entry.name)] = int(stat[1])
            except (OSError, ValueError, IndexError):
                pass
    return found


def _descends_from_us(pid: int) -> bool:
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def test_closing_leaves_nothing_running(calc_task):
    env = SWEEnv.from_dict(calc_task)
    env.reset()
    env.step(call("execute_bash", cmd="(sleep 300 &) ; echo started"))
    servers = _swe_servers()
    ours = {pid for pid in servers if _descends_from_us(pid)}  # other test processes may run servers too
    assert ours
    env.close()
    env.close()  # twice is fine
    assert ours & set(_swe_servers()) == set()  # gone, even one that was orphaned


def test_a_task_whose_bug_does_not_apply_is_named(calc_task):
    broken = {
        **calc_task,
        "instance_id": "calc__broken",
        "patch": calc_task["patch"].replace("if x > high:", "if x > top:"),
    }
    with pytest.raises(ValueError, match="the bug of calc__broken does not apply"):
        SWEEnv.from_dict(broken).reset()
