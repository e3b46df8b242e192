"""Where SWE tasks' files come from and live: sdists from PyPI, the Python runtime the sandbox tests with, and the
repository trees an episode and its grader see. All under `$RLLM_HOME/swe` (default `~/.cache/rllm/swe`).

- `fetch_sdist(name, version, sha256)`: the source distribution from PyPI's simple index (PEP 691 JSON; `$PIP_INDEX_URL`
  when set), checked against the pinned sha256 (the index's own hash when none is pinned), downloaded once.
- `pristine_tree(...)`: the sdist unpacked once, read-only by convention: the package as released, tests included.
- `runtime_dir()`: pytest and coverage installed once with `pip install --target` (pinned), bound read-only into the
  sandbox at `/opt/rllm-swe` and first on its PYTHONPATH, so a repository cannot shadow them. The sandbox's Python
  is the host's own base interpreter with its site-packages hidden (rllm.sandbox).
- `task_trees(task)`: a task's two trees, made once (keyed by its id, source and patches): `full` = the released
  package (or the row's local `repo_dir`) with the task's bug in it, i.e. its `patch` reversed (what the grader
  tests); `base` = `full` without the hidden test files (what the agent gets). Both are handed to the sandbox's user
  (`make_editable`) and mounted read-only under a per-run tmpfs overlay (`RepoMount`), so neither is ever written
  after it is made.

Every step writes to a temporary name and renames it into place, so a killed build never leaves a half-made tree
that a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from rllm.errors import RllmError

__all__ = [
    "RUNTIME_MOUNT",
    "RUNTIME_REQUIREMENTS",
    "SWEDataError",
    "fetch_sdist",
    "pristine_tree",
    "runtime_dir",
    "swe_home",
    "task_trees",
]

RUNTIME_MOUNT = "/opt/rllm-swe"
RUNTIME_REQUIREMENTS = ("pytest==9.2.0", "coverage==7.13.0")
_LOCK = threading.Lock()


class SWEDataError(RllmError, ValueError):
    """A task's files cannot be had: a download failed, a hash did not match, a patch does not apply."""


def swe_home() -> Path:
    from rllm.fsutil import rllm_home

    home = rllm_home() / "swe"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _index_url() -> str:
    return (os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")


def fetch_sdist(name: str, version: str, sha256: str | None = None) -> Path:
    """The sdist `name==version` from the package index, cached and hash-checked; its path."""
    cache = swe_home() / "sdists"
    normalized = name.lower().replace("_", "-").replace(".", "-")
    page = f"{_index_url()}/{normalized}/"
    try:
        request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
    except (OSError, ValueError, KeyError) as e:
        existing = sorted(cache.glob(f"*{version}.tar.gz")) + sorted(cache.glob(f"*{version}.zip"))
        for path in existing:
            if path.name.lower().replace("_", "-").startswith(f"{normalized}-") and _sha256(path) == sha256:
                return path
        raise SWEDataError(
            f"cannot read the package index at {page} ({e}); set PIP_INDEX_URL to a reachable "
            "PEP 691 index, or put the sdist in " + str(cache)
        ) from e
    wanted = [f for f in files if _is_sdist_of(f["filename"], normalized, version)]
    if not wanted:
        raise SWEDataError(f"{name}=={version} has no sdist on {page}")
    entry = wanted[0]
    expected = sha256 or entry.get("hashes", {}).get("sha256")
    path = cache / entry["filename"]
    if path.exists() and _sha256(path) == expected:
        return path
    url = urllib.parse.urljoin(page, entry["url"])
    with urllib.request.urlopen(url, timeout=120) as response:
        data = response.read()
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise SWEDataError(
            f"{entry['filename']} from {url} has sha256 {hashlib.sha256(data).hexdigest()}, "
            f"expected {expected}: refusing it"
        )
    _write_atomic(path, data)
    return path


def _is_sdist_of(filename: str, normalized: str, version: str) -> bool:
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)].lower().replace("_", "-").replace(".", "-")
            return stem == f"{normalized}-{version.replace('.', '-')}"
    return False


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, path)


def pristine_tree(name: str, version: str, sha256: str | None = None) -> Path:
    """The sdist unpacked (its single top directory's contents), once."""
    target = swe_home() / "pristine" / f"{name}-{version}"
    if target.is_dir():
        return target
    archive = fetch_sdist(name, version, sha256)
    with _LOCK, tempfile.TemporaryDirectory(dir=swe_home()) as tmp:
        if target.is_dir():
            return target
        unpacked = Path(tmp, "unpacked")
        _unpack(archive, unpacked)
        tops = list(unpacked.iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else unpacked
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(root, target)
    return target


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                _check_member(member, archive)
            z.extractall(dest)
        return
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")  # refuses absolute paths, '..', links out and device files


def _check_member(member: str, archive: Path) -> None:
    path = PurePosixPath(member)
    if path.is_absolute() or ".." in path.parts:
        raise SWEDataError(f"{archive.name} holds an unsafe path {member!r}")


def runtime_dir() -> Path:
    """pytest and coverage for the sandbox's Python, installed once per Python version and pin set."""
    pins = hashlib.sha256(" ".join(RUNTIME_REQUIREMENTS).encode()).hexdigest()[:10]
    target = swe_home() / f"runtime-py{sys.version_info.major}{sys.version_info.minor}-{pins}"
    if (target / ".complete").exists():
        return target
    with _LOCK:
        if (target / ".complete").exists():
            return target
        tmp = Path(tempfile.mkdtemp(dir=swe_home(), prefix=".runtime-"))
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(tmp),
            *RUNTIME_REQUIREMENTS,
        ]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SWEDataError(
                f"cannot install the SWE sandbox runtime ({' '.join(RUNTIME_REQUIREMENTS)}) with pip: "
                f"{done.stderr.strip()[-1500:]}"
            )
        (tmp / ".complete").write_text("\n".join(RUNTIME_REQUIREMENTS))
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would keep the sandbox's user out
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    return target


def task_trees(task: dict) -> tuple[Path, Path]:
    """(base, full) trees of a generated task (see the module docstring), made once."""
    from rllm.sandbox import make_editable
    from rllm.tasks.swe.patches import apply_patch, patch_paths

    if task.get("repo_dir"):  # a local pristine tree (the user's own repository, or a test's)
        pristine, source = Path(task["repo_dir"]), str(Path(task["repo_dir"]).resolve())
    else:
        sdist = task.get("sdist") or {}
        pristine = pristine_tree(sdist.get("name") or task["repo"], task["version"], sdist.get("sha256"))
        source = json.dumps(sdist, sort_keys=True)
    key = hashlib.sha256("\0".join([source, task["patch"], task["test_patch"]]).encode()).hexdigest()[:12]
    root = swe_home() / "tasks" / f"{_safe_name(task['instance_id'])}-{key}"
    base, full = root / "base", root / "full"
    if (root / ".complete").exists():
        return base, full
    with _LOCK:
        if (root / ".complete").exists():
            return base, full
        shutil.rmtree(root, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=swe_home(), prefix=".task-"))
        try:
            shutil.copytree(pristine, tmp / "full", symlinks=True)
            apply_patch(tmp / "full", task["patch"], reverse=True, what=f"the bug of {task['instance_id']}")
            shutil.copytree(tmp / "full", tmp / "base", symlinks=True)
            for path in patch_paths(task["test_patch"]):
                (tmp / "base" / path).unlink(missing_ok=True)
            for tree in (tmp / "full", tmp / "base"):
                make_editable(tree)
            os.chmod(tmp, 0o755)
            (tmp / ".complete").write_text(task["instance_id"])
            root.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was renamed into place
    return base, full


def _safe_name(instance_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in instance_id)
