"""Checkpoints written atomically: a crash mid-write never leaves a checkpoint that looks complete.

Layout: `run_dir/checkpoints/step_000004/{part}.pt`, whatever the backend writes there itself (`backend.pt`, or
verl's sharded `verl/` folder), `manifest.json` (step, the parts, sha256 of every file below the folder, versions), and
`run_dir/checkpoints/latest` naming the newest complete one. A checkpoint is built in a temporary folder, every
file and the folder are fsynced, then the folder is renamed into place and `latest` is replaced (write + fsync +
rename), so readers see either the old checkpoint or the new one. Loading verifies every checksum.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rllm.fsutil import install_dir_atomically, sha256_of_file, write_text_atomically
from rllm.runs import versions

__all__ = ["CheckpointError", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]

MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or corrupted."""


def save_checkpoint(run_dir: str | os.PathLike, step: int, parts: dict[str, Any],
                    write: Callable[[Path], None] | None = None) -> Path:  # fmt: skip
    """Write `parts` (name → torch-serialisable object) as the checkpoint of `step`, after `write(folder)` has put
    its own files into the (staging) folder; returns the checkpoint's folder."""
    import torch

    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    staging = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    if write is not None:
        write(staging)
    for name, obj in parts.items():
        torch.save(obj, staging / f"{name}.pt")
    files = {path.relative_to(staging).as_posix(): sha256_of_file(path)
             for path in sorted(staging.rglob("*")) if path.is_file()}  # fmt: skip
    manifest = {"step": step, "parts": sorted(parts), "files": files, "versions": versions()}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    install_dir_atomically(staging, final)  # a re-run of the same step replaces it
    write_text_atomically(root / "latest", final.name)
    return final


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text(encoding="utf-8").strip()
    if not (path / MANIFEST).exists():
        raise CheckpointError(f"{pointer} names {path.name}, which has no manifest: the run directory is damaged")
    return path


def load_checkpoint(path: str | os.PathLike) -> tuple[int, dict[str, Any]]:
    """(step, parts) of a checkpoint folder, after verifying every file's checksum. Checkpoints of the first
    release list no parts: every file was one."""
    import torch

    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {MANIFEST})")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    for filename, expected in manifest["files"].items():
        file = path / filename
        if not file.exists() or sha256_of_file(file) != expected:
            raise CheckpointError(f"checkpoint file {file} is missing or does not match its checksum")
    names = manifest.get("parts", [Path(f).stem for f in manifest["files"]])
    parts = {name: torch.load(path / f"{name}.pt", map_location="cpu", weights_only=False) for name in names}
    return int(manifest["step"]), parts
