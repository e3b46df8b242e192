"""Checkpoints written atomically: a crash mid-write never leaves a checkpoint that looks complete.

Layout: `run_dir/checkpoints/step_000004/{part}.pt`, whatever the backend writes there itself (`backend.pt`, or
verl's sharded `verl/` folder), `manifest.json` (step, the parts, sha256 of every file below the folder, versions), and
`run_dir/checkpoints/latest` naming the newest complete one. A checkpoint is built in a temporary folder, every
file and the folder are fsynced, then the folder is renamed into place and `latest` is replaced (write + fsync +
rename), so readers see either the old checkpoint or the new one. Loading verifies every checksum, the manifest's
own and the step against the folder's name. Resuming (`find_resumable_checkpoint`) first repairs what a killed save
left (a set-aside complete checkpoint goes back, staging folders go), then takes the newest intact checkpoint,
saying which damaged ones it skipped.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rllm.errors import RllmError
from rllm.fsutil import (
    dumps_strict,
    install_dir_atomically,
    sha256_of_file,
    short_write_error,
    write_failure_reason,
    write_text_atomically,
)
from rllm.runs import versions, writing

__all__ = [
    "STATE_FILE",
    "CheckpointError",
    "find_resumable_checkpoint",
    "latest_checkpoint",
    "load_checkpoint",
    "plain_state_name",
    "prune_checkpoints",
    "recover_checkpoints",
    "save_checkpoint",
    "save_torch_file",
]

MANIFEST = "manifest.json"
# The torch backend's part, its trainable weights keyed by `plain_state_name`. Named here, below the backends, because
# `rllm.training.init_from` reads it too (and the torch backend calls init_from).
STATE_FILE = "backend.pt"


def plain_state_name(name: str) -> str:
    """A parameter name of a peft-wrapped model as the plain base model names it (LoRA's base layers, and the
    trained copy of a module peft trains whole: a VLM's trainable image tower)."""
    name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    return re.sub(r"\.modules_to_save\.[^.]+\.", ".", name)


class CheckpointError(RllmError, RuntimeError):
    """A checkpoint is missing, incomplete or corrupted."""


def save_checkpoint(
    run_dir: str | os.PathLike, step: int, parts: dict[str, Any], write: Callable[[Path], None] | None = None
) -> Path:
    """Write `parts` (name → torch-serialisable object) as the checkpoint of `step`, after `write(folder)` has put
    its own files into the (staging) folder; returns the checkpoint's folder. A save that fails because of the disk
    raises `rllm.runs.RunWriteError` (one line: the folder, the free space, `--resume`) after removing its staging
    folder (space a full disk needs back); `latest` still names the previous checkpoint, which still verifies."""
    root = Path(run_dir) / "checkpoints"
    final = root / f"step_{step:06d}"
    staging = root / f".{final.name}.tmp-{os.getpid()}"
    with writing(final, run_dir):
        try:
            _write_staging(staging, step, parts, write)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        install_dir_atomically(staging, final)  # a re-run of the same step replaces it
    with writing(root / "latest", run_dir):
        write_text_atomically(root / "latest", final.name)
    return final


def _write_staging(
    staging: Path, step: int, parts: dict[str, Any], write: Callable[[Path], None] | None = None
) -> None:
    """The checkpoint's files in `staging` (made afresh), its manifest last."""
    staging.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    if write is not None:
        write(staging)
    for name, obj in parts.items():
        save_torch_file(obj, staging / f"{name}.pt")
    files = {
        path.relative_to(staging).as_posix(): sha256_of_file(path)
        for path in sorted(staging.rglob("*"))
        if path.is_file()
    }
    manifest = {"step": step, "parts": sorted(parts), "files": files, "versions": versions()}
    manifest["manifest_sha256"] = _manifest_digest(manifest)  # the manifest checks itself too
    (staging / MANIFEST).write_text(dumps_strict(manifest, indent=2, sort_keys=True), encoding="utf-8")


def save_torch_file(obj: Any, path: Path) -> None:
    """`torch.save(obj, path)`, releasing the file when it fails. torch's zip writer, failing on a full disk
    ("unexpected pos"), is left holding its open file in the frames of its traceback: the space of the staging
    folder removed after it would stay taken as long as that exception lives (a caller may keep it), and a disk
    with a file open for writing cannot be remounted read-only. Such an error is raised again without those frames:
    as ENOSPC where the disk has no room left for the file (`rllm.fsutil.short_write_error`), else as torch's."""
    import torch

    try:
        torch.save(obj, path)
        return
    except RuntimeError as exc:
        if write_failure_reason(exc) is None:
            raise  # not a short write: a bug, with its traceback
        # torch does not say why: a full disk shows now, before the caller's clean-up gives space back
        error = short_write_error(str(exc), path, _tensor_bytes(obj))
    gc.collect()  # the writer, unreachable once its traceback is gone (it may sit in a reference cycle), closes
    raise error


def _tensor_bytes(obj: Any) -> int:
    """The bytes of the tensors in `obj` (nested dicts, lists, tuples: a state dict), most of what torch.save writes."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(value) for value in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(value) for value in obj)
    return 0


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text(encoding="utf-8").strip()
    if not (path / MANIFEST).exists():
        raise CheckpointError(f"{pointer} names {path.name}, which has no manifest: the run directory is damaged")
    return path


def load_checkpoint(path: str | os.PathLike) -> tuple[int, dict[str, Any]]:
    """(step, parts) of a checkpoint folder, after verifying it (`verify_checkpoint`). Checkpoints of the first
    release list no parts (every file was one) and carry no manifest checksum."""
    import torch

    path = Path(path)
    manifest = verify_checkpoint(path)
    names = manifest.get("parts", [Path(f).stem for f in manifest["files"]])
    parts = {name: torch.load(path / f"{name}.pt", map_location="cpu", weights_only=False) for name in names}
    return int(manifest["step"]), parts


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """The manifest of checkpoint folder `path` once the manifest is valid JSON, matches its own checksum and its
    folder's step, and every file it lists matches its checksum; else a `CheckpointError` naming the damaged file."""
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        step, files = int(manifest["step"]), dict(manifest["files"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint manifest {manifest_path} is damaged (not a valid manifest: {exc})") from exc
    if "manifest_sha256" in manifest and manifest["manifest_sha256"] != _manifest_digest(manifest):
        raise CheckpointError(f"checkpoint manifest {manifest_path} does not match its checksum")
    if path.name.startswith("step_") and path.name != f"step_{step:06d}":
        raise CheckpointError(f"checkpoint manifest {manifest_path} says step {step}, its folder is {path.name}")
    for filename, expected in files.items():
        file = path / filename
        if not file.exists() or sha256_of_file(file) != expected:
            raise CheckpointError(f"checkpoint file {file} is missing or does not match its checksum")
    return manifest


def recover_checkpoints(run_dir: str | os.PathLike) -> list[str]:
    """Undo what a save killed midway left behind; returns what was done, one line each. A complete checkpoint set
    aside to be replaced (`.step_N.old-PID`) whose replacement never arrived goes back in place; every other staging
    (`.step_N.tmp-PID`) or set-aside folder is removed (each is a whole checkpoint's size), and so is a new `latest`
    that was not yet renamed into place (`.latest.tmp-PID`)."""
    root = Path(run_dir) / "checkpoints"
    done: list[str] = []
    if not root.is_dir():
        return done
    with writing(root, run_dir):
        _recover(root, done)
    return done


def _recover(root: Path, done: list[str]) -> None:
    for pointer in sorted(root.glob(".latest.tmp-*")):
        pointer.unlink()
        done.append(f"removed {pointer.name}, left by a killed save")
    for folder in sorted(root.glob(".step_*")):
        name, _, kind = folder.name[1:].partition(".")
        final = root / name
        if kind.startswith("old-") and not final.exists() and (folder / MANIFEST).exists():
            os.replace(folder, final)
            done.append(f"restored {final.name} from {folder.name} (a save was killed while replacing it)")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            done.append(f"removed {folder.name}, left by a killed save")


def prune_checkpoints(run_dir: str | os.PathLike, keep: int | None) -> list[str]:
    """Remove all but the `keep` newest step folders (None: keep all), never the one `latest` names; returns the
    names removed. Each folder is first renamed out of the way (`.step_N.prune-PID`), so a kill midway leaves a
    staging-like folder that `recover_checkpoints` removes, never a half-deleted checkpoint that looks like one."""
    root = Path(run_dir) / "checkpoints"
    if keep is None or not root.is_dir():
        return []
    pointer = root / "latest"
    latest = pointer.read_text(encoding="utf-8").strip() if pointer.exists() else None
    removed = []
    for folder in sorted(root.glob("step_*"))[:-keep]:
        if folder.name == latest:
            continue
        aside = folder.with_name(f".{folder.name}.prune-{os.getpid()}")
        with writing(folder, run_dir):
            os.replace(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
        removed.append(folder.name)
    return removed


def find_resumable_checkpoint(run_dir: str | os.PathLike) -> tuple[Path | None, list[str]]:
    """The newest checkpoint of `run_dir` that verifies, after `recover_checkpoints`: the one `latest` names, else the
    newest step folder that is intact. Returns it (None when the run has none yet) and what was repaired or skipped,
    one line each. Raises `CheckpointError` naming the damaged files when checkpoints exist but none is intact."""
    root = Path(run_dir) / "checkpoints"
    notes = recover_checkpoints(run_dir)
    candidates = sorted(root.glob("step_*"), reverse=True) if root.is_dir() else []
    pointer = root / "latest"
    if pointer.exists():
        named = root / pointer.read_text(encoding="utf-8").strip()
        candidates = [named] + [c for c in candidates if c != named]
    damaged = []
    for candidate in candidates:
        try:
            verify_checkpoint(candidate)
        except CheckpointError as exc:
            damaged.append(str(exc))
            continue
        return candidate, notes + [f"skipped a damaged checkpoint: {d}" for d in damaged]
    if damaged:
        raise CheckpointError("no intact checkpoint to resume from: " + "; ".join(damaged))
    return None, notes


def _manifest_digest(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()
