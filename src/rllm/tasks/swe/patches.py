"""Unified diffs of repository trees: made with difflib, applied with `git apply` (outside any git repository it
applies to the working directory, refuses paths that leave it, and applies all or nothing). Standard library only:
this file also runs inside the sandbox, next to the workspace server, to diff the agent's tree against the base.

A diff is git-style (`diff --git a/P b/P`, `--- a/P` / `+++ b/P`, `/dev/null` for a created or deleted file), so
`git apply`, GNU `patch -p1` and SWE-bench's harness all take it. Only UTF-8 text files are diffed; others are
reported as skipped (a change to them cannot be submitted)."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

__all__ = ["PatchError", "apply_patch", "diff_files", "diff_trees", "patch_paths"]

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git", ".hg", ".tox", ".eggs"}
MAX_FILE_BYTES = 1 << 20
_RENAME_OR_COPY = ("rename from ", "rename to ", "copy from ", "copy to ")


class PatchError(ValueError):
    """A patch that does not apply, or names a path it may not."""


def diff_files(path: str, old: str | None, new: str | None) -> str:
    """The diff of one file: old None = created, new None = deleted."""
    if old == new:
        return ""
    a = old.splitlines(keepends=True) if old is not None else []
    b = new.splitlines(keepends=True) if new is not None else []
    body = list(
        difflib.unified_diff(
            a, b, "a/" + path if old is not None else "/dev/null", "b/" + path if new is not None else "/dev/null", n=3
        )
    )
    fixed = []
    for line in body:  # difflib leaves a last line without its newline: mark it as diff does
        fixed.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    header = f"diff --git a/{path} b/{path}\n"
    if old is None:
        header += "new file mode 100644\n"
    elif new is None:
        header += "deleted file mode 100644\n"
    return header + "".join(fixed)


def _walk(root: str) -> dict[str, str]:
    """Relative path -> real path of the regular files and symlinks under root, caches skipped."""
    found = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in files:
            if name.endswith((".pyc", ".pyo")) or name == ".git":  # `.git` as a file: a worktree's pointer
                continue
            full = os.path.join(directory, name)
            found[os.path.relpath(full, root)] = full
    return found


def _read(path: str) -> str | None:
    """The file's text; None when it is not a regular UTF-8 file under the size cap."""
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > MAX_FILE_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def diff_trees(old_root: str, new_root: str) -> tuple[str, list[str]]:
    """(the diff from old_root to new_root, the changed paths it cannot carry: binary, symlinks, huge files)."""
    old, new = _walk(old_root), _walk(new_root)
    parts, skipped = [], []
    for rel in sorted(set(old) | set(new)):
        a = _read(old[rel]) if rel in old else None
        b = _read(new[rel]) if rel in new else None
        if (rel in old and a is None) or (rel in new and b is None):
            if not _same_bytes(old.get(rel), new.get(rel)):
                skipped.append(rel)
            continue
        parts.append(diff_files(rel, a, b))
    return "".join(parts), skipped


def _same_bytes(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    if os.path.islink(a) or os.path.islink(b):
        return os.path.islink(a) and os.path.islink(b) and os.readlink(a) == os.readlink(b)
    try:
        return Path(a).read_bytes() == Path(b).read_bytes()
    except OSError:
        return False


def patch_paths(diff: str) -> list[str]:
    """The repository-relative paths a diff touches, in order, each once: those of its `---`/`+++` lines and of git's
    `rename from/to` and `copy from/to` lines (a pure rename or copy has no `---`/`+++`)."""
    paths: list[str] = []
    for line in diff.splitlines():
        name = None
        if line.startswith(("--- ", "+++ ")):
            name = line[4:].split("\t", 1)[0].strip()
            name = name[2:] if name.startswith(("a/", "b/")) else name
        elif line.startswith(_RENAME_OR_COPY):
            name = line.split(" ", 2)[2].strip()
        if name and name != "/dev/null" and name not in paths:
            paths.append(name)
    return paths


def apply_patch(root: str | os.PathLike, diff: str, *, reverse: bool = False, what: str = "the patch") -> None:
    """Apply a diff to the tree at root with `git apply`; PatchError with git's own words if it fails."""
    if not diff.strip():
        return
    command = ["git", "apply", "--whitespace=nowarn", *(["--reverse"] if reverse else []), "-"]
    try:
        done = subprocess.run(command, check=False, input=diff, capture_output=True, text=True, timeout=60, cwd=root)
    except FileNotFoundError as e:
        raise PatchError("git is not installed: apt-get install git") from e
    if done.returncode != 0:
        raise PatchError(f"{what} does not apply: {(done.stdout + done.stderr).strip()[-1500:]}")
