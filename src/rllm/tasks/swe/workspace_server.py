"""The SWE workspace server: runs inside the sandbox for a whole episode and carries out the agent's tool calls on
the repository at /testbed. Standard library only (the sandbox's Python has nothing else); it speaks one JSON
object per line on stdin/stdout (rllm.sandbox.session).

Requests: {"op": "tool", "name": ..., "args": {...}, "timeout_s": s, "max_chars": n} -> {"output": str,
"is_error": bool, "error_kind": str | None}; {"op": "diff"} -> {"diff": str, "skipped": [paths]};
{"op": "ping"} -> {"pong": true}. With RLLM_SWE_BASE=git (a Docker image whose /testbed is a git checkout at the
task's base commit) the diff is `git add -A; git diff --cached HEAD`, binary files left out and listed as skipped.

A /testbed that is not a git repository (a generated task's tree) is made one at start (`init_git`): the tree as
the episode starts is committed, so `git diff`/`git status` in the agent's commands show its changes, as in a
checkout. The submitted diff still comes from comparing the tree with the read-only base (`diff_trees`, which skips
`.git`): the agent may commit, reset or delete the repository's history without changing what is graded.

Every path is resolved inside the repository: '..' is refused, and a path whose real location (symlinks followed)
is outside /testbed is refused. A command runs as `bash -c` in /testbed in a session of its own, with a timeout;
when it ends or times out, every other process of the sandbox's user but this server is killed, so nothing runs on
between calls. Outputs are cut to `max_chars` (head and tail kept) with a marker saying how much was cut.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rllm_swe_patches import diff_trees

REPO = os.environ.get("RLLM_SWE_REPO", "/testbed")
BASE = os.environ.get("RLLM_SWE_BASE", "/.rllm/lower")
GIT_DIR = "/tmp/.rllm-git"
BLOCKED = ("ipython", "jupyter", "nohup", "vim", "vi", "nano", "emacs", "less", "more", "top", "htop", "watch")
MAX_SEARCH_FILES = 100
_history: dict[str, list[str]] = {}  # path -> earlier contents, for undo_edit


class ToolError(Exception):
    """The call's arguments or target are wrong: the agent is told, the episode goes on."""


# ---- paths --------------------------------------------------------------------------------------------------


def resolve(path: object, *, must_exist: bool = True) -> str:
    if not isinstance(path, str) or not path.strip():
        raise ToolError("`path` must be a non-empty string (an absolute path under /testbed or one relative to it)")
    if "\x00" in path or ".." in path.replace("\\", "/").split("/"):
        raise ToolError(f"path {path!r} may not contain '..': give a path inside {REPO}")
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(REPO, path))
    real = os.path.realpath(full)
    if real != REPO and not real.startswith(REPO + "/"):
        raise ToolError(f"path {path!r} is outside the repository {REPO}")
    if must_exist and not os.path.exists(real):
        raise ToolError(f"path {path!r} does not exist")
    return real


def show(path: str) -> str:
    return os.path.relpath(path, REPO) if path != REPO else "."


def truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters truncated ...]\n{text[len(text) - tail :]}"


# ---- file_editor --------------------------------------------------------------------------------------------


def _read_text(path: str) -> str:
    if os.path.isdir(path):
        raise ToolError(f"{show(path)} is a directory")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise ToolError(f"{show(path)} is not a UTF-8 text file") from None


def _write_text(path: str, text: str) -> None:
    old = _read_text(path) if os.path.exists(path) else None
    _history.setdefault(path, []).append(old)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _numbered(text: str, start: int = 1) -> str:
    return "".join(f"{i:6d}\t{line}\n" for i, line in enumerate(text.splitlines(), start))


def _view(path: str, view_range: object) -> str:
    if os.path.isdir(path):
        lines = []
        for directory, dirs, files in os.walk(path):
            depth = directory[len(path) :].count("/")
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__" and depth < 1)
            for name in sorted(dirs + [f for f in files if not f.startswith(".")]):
                lines.append(show(os.path.join(directory, name)) + ("/" if name in dirs else ""))
        return f"Files and directories up to 2 levels deep in {show(path)}:\n" + "\n".join(lines)
    text = _read_text(path)
    if view_range is None:
        return _numbered(text)
    if not (isinstance(view_range, list) and len(view_range) == 2 and all(isinstance(v, int) for v in view_range)):
        raise ToolError("`view_range` must be two integers [start, end] (end -1 = to the last line)")
    lines = text.splitlines()
    start, end = view_range
    end = len(lines) if end == -1 else end
    if not 1 <= start <= max(end, 1) or end > len(lines):
        raise ToolError(f"`view_range` {view_range} is outside the file's lines 1..{len(lines)}")
    return _numbered("\n".join(lines[start - 1 : end]), start)


def file_editor(args: dict) -> str:
    command = args.get("command")
    if command == "view":
        return _view(resolve(args.get("path")), args.get("view_range"))
    if command == "create":
        path = resolve(args.get("path"), must_exist=False)
        if os.path.exists(path):
            raise ToolError(f"{show(path)} already exists: use str_replace or insert to edit it")
        if not isinstance(args.get("file_text"), str):
            raise ToolError("`create` needs `file_text` (the whole file)")
        _write_text(path, args["file_text"])
        return f"File created: {show(path)}"
    if command == "str_replace":
        path = resolve(args.get("path"))
        old, new = args.get("old_str"), args.get("new_str", "")
        if not isinstance(old, str) or not old:
            raise ToolError("`str_replace` needs a non-empty `old_str` copied exactly from the file")
        if not isinstance(new, str):
            raise ToolError("`new_str` must be a string")
        text = _read_text(path)
        count = text.count(old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ToolError(
                f"`old_str` {where} in {show(path)}: it must match exactly one place "
                "(copy it from `view`, with its indentation, and add context lines if needed)"
            )
        _write_text(path, text.replace(old, new, 1))
        line = text[: text.index(old)].count("\n") + 1
        snippet = "\n".join(text.replace(old, new, 1).splitlines()[max(0, line - 4) : line + new.count("\n") + 3])
        return f"The file {show(path)} has been edited. A snippet of it now:\n" + _numbered(snippet, max(1, line - 3))
    if command == "insert":
        path = resolve(args.get("path"))
        line, new = args.get("insert_line"), args.get("new_str")
        lines = _read_text(path).splitlines(keepends=True)
        if not isinstance(line, int) or not 0 <= line <= len(lines):
            raise ToolError(f"`insert_line` must be an integer in 0..{len(lines)} (0 = before the first line)")
        if not isinstance(new, str):
            raise ToolError("`insert` needs `new_str`")
        if line and not lines[line - 1].endswith("\n"):
            lines[line - 1] += "\n"
        lines.insert(line, new if new.endswith("\n") else new + "\n")
        _write_text(path, "".join(lines))
        return f"Inserted {new.count(chr(10)) + 1} line(s) after line {line} of {show(path)}."
    if command == "undo_edit":
        path = resolve(args.get("path"), must_exist=False)
        if not _history.get(path):
            raise ToolError(f"no edit of {show(path)} to undo")
        old = _history[path].pop()
        if old is None:
            os.remove(path)
            return f"Undid the creation of {show(path)}."
        with open(path, "w", encoding="utf-8") as f:
            f.write(old)
        return f"Undid the last edit of {show(path)}."
    raise ToolError(f"unknown `command` {command!r}: use view, create, str_replace, insert or undo_edit")


# ---- search -------------------------------------------------------------------------------------------------


def search(args: dict) -> str:
    term = args.get("search_term")
    if not isinstance(term, str) or not term:
        raise ToolError("`search` needs a non-empty `search_term`")
    path = resolve(args.get("path") or REPO)
    if os.path.isfile(path):
        hits = [f"{i}:{line}" for i, line in enumerate(_read_text(path).splitlines(), 1) if term in line]
        if not hits:
            return f"No matches for {term!r} in {show(path)}"
        return f"Matches for {term!r} in {show(path)}:\n" + "\n".join(hits)
    counts: dict[str, int] = {}
    for directory, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            full = os.path.join(directory, name)
            try:
                with open(full, encoding="utf-8") as f:
                    n = f.read().count(term)
            except (OSError, UnicodeDecodeError):
                continue
            if n:
                counts[show(full)] = n
                if len(counts) > MAX_SEARCH_FILES:
                    return f"More than {MAX_SEARCH_FILES} files match {term!r}: search a narrower term or path."
    if not counts:
        return f"No matches for {term!r} in {show(path)}"
    listing = "\n".join(f"{name} ({n} matches)" for name, n in counts.items())
    return f"Found {sum(counts.values())} matches for {term!r} in {show(path)}:\n{listing}"


# ---- execute_bash -------------------------------------------------------------------------------------------


def execute_bash(args: dict, timeout_s: float) -> tuple[str, bool]:
    command = args.get("cmd", args.get("command"))
    if not isinstance(command, str) or not command.strip():
        raise ToolError("`execute_bash` needs `cmd`, a bash command")
    first = command.strip().split()[0]
    if first in BLOCKED:
        raise ToolError(f"{first!r} is interactive or long-running and not available here; run a script instead")
    env = dict(os.environ, PATH=os.environ.get("RLLM_SWE_PATH_PREFIX", "") + ":" + os.environ.get("PATH", ""))
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    chunks, size, deadline, timed_out = [], 0, time.monotonic() + timeout_s, False
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if not selector.select(min(remaining, 0.5)):
                if proc.poll() is not None:  # a background child holds the pipe: the command itself is done
                    break
                continue
            data = os.read(proc.stdout.fileno(), 1 << 16)
            if not data:
                break
            if size < 4 << 20:  # keep the first 4 MiB; the rest is drained and dropped
                chunks.append(data)
            size += len(data)
    if timed_out:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()  # reaped first: a zombie of ours would look alive to kill_others
    kill_others()
    proc.stdout.close()
    text = b"".join(chunks).decode("utf-8", errors="replace")
    if size > 4 << 20:
        text += f"\n[... {size - (4 << 20)} more bytes of output dropped ...]"
    if timed_out:
        return text + f"\n[the command timed out after {timeout_s:g} s and was killed]", True
    return text + ("" if proc.returncode == 0 else f"\n[exit code {proc.returncode}]"), False


def kill_others() -> None:
    """SIGKILL every process of this user in the sandbox but this server (and the init, which is not ours)."""
    me, uid = os.getpid(), os.getuid()
    for _ in range(3):  # a process may fork while we look: look again
        found = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in (me, 1):
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state != "Z" and os.stat(f"/proc/{entry}").st_uid == uid:  # zombies: already dead, init reaps
                    os.kill(int(entry), signal.SIGKILL)
                    found = True
            except (OSError, IndexError):
                pass
        if not found:
            return
        time.sleep(0.01)


def git_diff() -> dict:
    env = dict(os.environ, GIT_LITERAL_PATHSPECS="1")  # a path is a path, not a glob

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, env=env, capture_output=True, check=False)
        if done.returncode != 0:
            raise OSError(done.stderr.decode(errors="replace").strip()[-1000:])
        return done.stdout.decode("utf-8", errors="replace")

    try:
        git("add", "-A")
        stats = git("diff", "--cached", "--no-renames", "--numstat", "-z", "HEAD").split("\0")
        skipped = [s.split("\t", 2)[2] for s in stats if s.startswith("-\t-\t")]  # binary: no text diff applies
        if skipped:
            git("reset", "-q", "--", *skipped)
        diff = git(
            "diff",
            "--cached",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "HEAD",
        )
    except OSError as e:
        return {"diff": "", "skipped": [], "error": f"git diff failed: {e}"}
    return {"diff": diff, "skipped": skipped}


def init_git() -> str | None:
    """Make /testbed a git repository whose one commit is the tree as the episode starts; why not, or None."""
    if os.path.exists(os.path.join(REPO, ".git")):
        return None
    os.environ.update(GIT_IDENTITY)  # the agent's own `git commit` works too, with no config file
    # the repository's own directory lives on /tmp, /testbed/.git being a file that points there: git chmods its
    # lock files, which the overlay at /testbed refuses (EPERM)
    init = ["init", "-q", f"--separate-git-dir={GIT_DIR}"]
    # --force: the sdist's own .gitignore (tabulate's ignores its version.py) must not hide base files from `git diff`
    steps = (init, ["add", "-A", "--force"], ["commit", "-q", "--no-verify", "--allow-empty", "-m", "base"])
    for args in steps:
        done = subprocess.run(
            ["git", "-c", "init.defaultBranch=main", *args],
            cwd=REPO,
            capture_output=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            return f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()[-500:]}"
    return None


# a fixed identity and date: the base commit has the same id in every episode of a task, and no config is read
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "rllm",
    "GIT_AUTHOR_EMAIL": "rllm@localhost",
    "GIT_COMMITTER_NAME": "rllm",
    "GIT_COMMITTER_EMAIL": "rllm@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
}


# ---- the loop -----------------------------------------------------------------------------------------------


def handle(request: dict) -> dict:
    op = request.get("op")
    if op == "ping":
        return {"pong": True}
    if op == "diff":
        if BASE == "git":
            return git_diff()
        diff, skipped = diff_trees(BASE, REPO)
        return {"diff": diff, "skipped": skipped}
    if op != "tool":
        return {"output": f"unknown op {op!r}", "is_error": True, "error_kind": "protocol"}
    name, args = request.get("name"), request.get("args")
    max_chars = int(request.get("max_chars", 10000))
    if not isinstance(args, dict):
        return {"output": "the tool's arguments must be a JSON object", "is_error": True, "error_kind": "bad_arguments"}
    try:
        if name == "file_editor":
            output, timed_out = file_editor(args), False
        elif name == "search":
            output, timed_out = search(args), False
        elif name == "execute_bash":
            output, timed_out = execute_bash(args, float(request.get("timeout_s", 30)))
        else:
            return {"output": f"unknown tool {name!r}", "is_error": True, "error_kind": "unknown_tool"}
    except ToolError as e:
        return {"output": f"Error: {e}", "is_error": True, "error_kind": "bad_arguments"}
    except OSError as e:  # e.g. the tmpfs is full, a file is not writable
        return {"output": f"Error: {e}", "is_error": True, "error_kind": "os_error"}
    return {
        "output": truncate(output, max_chars),
        "is_error": timed_out,
        "error_kind": "timeout" if timed_out else None,
    }


def main() -> None:
    os.umask(0o022)
    if BASE != "git":  # a Docker image's /testbed is a checkout already
        if (why := init_git()) is not None:  # a plain directory then: the episode works without git, as before
            sys.stderr.write(f"rllm_swe_server: /testbed is not a git repository: {why}\n")
    for line in sys.stdin:
        try:
            request = json.loads(line)
            reply = handle(request) if isinstance(request, dict) else {"output": "not an object", "is_error": True}
        except ValueError as e:
            reply = {"output": f"bad request: {e}", "is_error": True, "error_kind": "protocol"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
