"""Durable file operations shared by everything that writes state to disk (model cache, checkpoints): a folder or
file appears complete in one rename, after its contents were fsynced, or not at all; the cache folder they live
under (`rllm_home`); JSON that strict parsers read (`dumps_strict`); and what a failed write says about the disk
(`write_failure_reason`, `free_space`; `short_write_error` for torch's zip writer, which says nothing of why), which
`rllm.runs` turns into one line for the user."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "NONFINITE_STRINGS",
    "decode_nonfinite",
    "dumps_strict",
    "format_bytes",
    "free_space",
    "fsync_path",
    "install_dir_atomically",
    "rllm_home",
    "sha256_of_file",
    "short_write_error",
    "write_bytes_atomically",
    "write_failure_reason",
    "write_text_atomically",
]

# How a non-finite float is written to a JSON file (JSON has no such numbers; Python's default writes bare NaN and
# Infinity, which strict parsers, jq and browsers refuse): JavaScript's names, so `Number(s)` and `float(s)` read
# them back. docs/runs.md states it.
NONFINITE_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


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


# ---- strict JSON ------------------------------------------------------------------------------------------------


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """`json.dumps(data, **kwargs)` that a strict parser reads: a non-finite float is written as the string "NaN",
    "Infinity" or "-Infinity" (`NONFINITE_STRINGS`), never as a bare token. The common case (all finite) is one
    `json.dumps`; only data that holds a non-finite number is walked."""
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError:  # "Out of range float values are not JSON compliant" (or a circular reference: raised again)
        return json.dumps(_encode_nonfinite(data), allow_nan=False, **kwargs)


def _encode_nonfinite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _encode_nonfinite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode_nonfinite(item) for item in value]
    return value


def decode_nonfinite(value: Any) -> Any:
    """A value as `dumps_strict` wrote it, with "NaN", "Infinity" and "-Infinity" back as floats (for values known
    to be numbers: a metric; typed fields are read back by pydantic, which parses those strings itself)."""
    return NONFINITE_STRINGS.get(value, value) if isinstance(value, str) else value


# ---- a write that failed because of the disk ------------------------------------------------------------------

# errno of a write that failed because of where it writes, not because of rllm: what to tell the user
_DISK_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "its folder was removed",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}
# what torch's zip writer (caffe2's inline_container.cc) raises when a write comes up short: "[enforce fail at
# inline_container.cc:672] . unexpected pos 640 vs 534", "PytorchStreamWriter failed writing file data/0", or its
# C++ stream's "basic_ios::clear: iostream error" (each seen on a full tmpfs)
_TORCH_WRITE_FAILURES = ("unexpected pos", "PytorchStreamWriter failed", "file write failed", "iostream error")


# what a checkpoint file needs beyond its tensors' bytes (zip headers and records, the pickle), rounded well up
_PICKLE_ROOM = 1 << 20


def short_write_error(message: str, path: str | os.PathLike, needed: int) -> Exception:
    """The error to raise for torch's zip writer coming up short (`message`, its text) while writing about `needed`
    bytes (its tensors') to `path`. Measured at once, before a clean-up gives space back: ENOSPC where the file system
    there has less room left than that file needed (the disk filled up: `write_failure_reason` says "no space left
    on device"), else `message` as torch's RuntimeError (a quota, a file size limit, an I/O error: "torch's
    checkpoint writer could not write it all")."""
    free = free_space(path)
    if free is not None and free < needed + _PICKLE_ROOM:
        return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({message})", os.fspath(path))
    return RuntimeError(message)


def write_failure_reason(exc: BaseException) -> str | None:
    """Why a write failed, when the disk is to blame (full, over quota, read-only, its folder removed, no
    permission), in a few words; None for any other error (a bug: left to its traceback)."""
    if isinstance(exc, OSError):
        return _DISK_ERRNOS.get(exc.errno) if exc.errno is not None else None
    if isinstance(exc, RuntimeError) and "open file failed with strerror: " in str(exc):  # torch, opening its file
        return str(exc).rsplit("strerror: ", 1)[1].strip().lower()  # "Read-only file system"
    if isinstance(exc, RuntimeError) and any(text in str(exc) for text in _TORCH_WRITE_FAILURES):
        return "torch's checkpoint writer could not write it all"
    return None


def free_space(path: str | os.PathLike) -> int | None:
    """Bytes free to unprivileged users on the file system of `path`, or of its nearest existing parent (the
    path may be what could not be written, or its folder may be gone); None when even that cannot be read."""
    path = Path(path).absolute()
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def format_bytes(size: int) -> str:
    """`size` for people: "0 B", "512 B", "3.2 MiB", "41.0 GiB"."""
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
