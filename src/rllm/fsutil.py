"""Durable file operations shared by everything that writes state to disk (model cache, checkpoints): a folder or
file appears complete in one rename, after its contents were fsynced, or not at all; and the cache folder they
live under (`rllm_home`)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

__all__ = [
    "fsync_path",
    "install_dir_atomically",
    "rllm_home",
    "sha256_of_file",
    "write_bytes_atomically",
    "write_text_atomically",
]


def rllm_home() -> Path:
    """The root of rllm's cache: `$RLLM_HOME`, else `~/.cache/rllm`. Read on every call so tests can patch it."""
    return Path(os.environ.get("RLLM_HOME") or Path.home() / ".cache" / "rllm").expanduser()


def sha256_of_file(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_path(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)  # works for folders too, which must be synced for a rename to be durable
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install_dir_atomically(staging: Path, target: Path) -> None:
    """Make `staging` appear as `target` in one rename. An existing `target` is moved aside first, because rename
    cannot replace a non-empty directory; a crash in between leaves no folder, never half of one."""
    for path in [*staging.rglob("*"), staging]:
        fsync_path(path)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(staging, target)
    fsync_path(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_text_atomically(path: Path, text: str) -> None:
    write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """`path` appears with all of `data` or not at all; a failure before the rename removes the temporary file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
