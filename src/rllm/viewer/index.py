"""The episode index of one run: a few columns per line of `episodes.jsonl`, built once and kept up to date.

A run can hold 100,000+ episodes (hundreds of MB), too many to parse on every page. `EpisodeIndex` reads the file
once and keeps, per line, where it is (byte offset, length) and what the table filters and sorts on (step, split,
episode and task id, the task's content key, reward, correctness, termination reason, roles, turns, sampled
tokens). It is cached on disk under `$RLLM_HOME/view-index/` (not in the run directory: a run directory holds what
the run wrote, and a reader must not add to it), keyed by the file's path, and `refresh()` indexes only the bytes
appended since:
- a half-written last line (the run is writing it now, or was killed mid-write) is left for the next refresh;
- a line that is not an episode record (corrupted) gets an entry marked `error`, shown, never fatal;
- a file that shrank or whose beginning changed (a resumed run cuts what it wrote after its checkpoint) is indexed
  again from the start.
A text search scans the file's bytes with one regular expression (memory-mapped), then maps matches to lines.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "EpisodeIndex", "summarize_record", "task_key"]

INDEX_VERSION = 2  # 2: the task_key column
CHUNK_BYTES = 1 << 25  # read 32 MiB at a time
HEAD_BYTES = 4096  # the beginning of the file, hashed to notice a file rewritten rather than appended to
# what one index entry holds, in this order (`EpisodeIndex.columns`)
COLUMNS = (
    "line",
    "offset",
    "length",
    "step",
    "split",
    "episode_id",
    "task_id",
    "task_key",
    "reward",
    "correct",
    "termination",
    "roles",
    "turns",
    "tokens",
    "mismatch",
    "error",
)
# keys that name a task rather than say what it is: the engine numbers tasks without an id by their position in
# the batch, and generators number theirs per seed, so the same id can be two different questions in two runs
ID_KEYS = frozenset({"id", "uid", "task_id", "idx", "index"})


def task_key(task: Any, task_id: str) -> str:
    """What pairs one task across runs and checkpoints: a hash of the task's content (the dataset row without its
    id keys, `ID_KEYS`), never its id. An episode that recorded no task falls back to its id, marked `id:`."""
    if task is None:
        return f"id:{task_id}"
    content = {k: v for k, v in task.items() if k not in ID_KEYS} if isinstance(task, dict) else task
    text = json.dumps(content, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def summarize_record(data: Any) -> dict[str, Any]:
    """The index columns of one parsed line (an episode record, or a bare episode of an older eval run)."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if "episode" in data:
        episode, step, split = data["episode"], data.get("step"), data.get("split")
    elif "trajectories" in data:
        episode, step, split = data, 0, "eval"
    else:
        raise ValueError(f"neither an episode record nor an episode (keys {sorted(data)[:6]})")
    trajectories = episode.get("trajectories") or []
    rewards = [_trajectory_reward(t) for t in trajectories]
    task_id = str(episode.get("id", "")).rsplit(":", 1)[0]
    return {
        "step": step if isinstance(step, int) else 0,
        "split": split if isinstance(split, str) else "eval",
        "episode_id": str(episode.get("id", "")),
        "task_id": task_id,
        "task_key": task_key(episode.get("task"), task_id),
        "reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "correct": bool(episode.get("is_correct")),
        "termination": episode.get("termination_reason") or "none",
        "roles": sorted({str(t.get("name", "agent")) for t in trajectories}),
        "turns": sum(len(t.get("steps") or []) for t in trajectories),
        "tokens": sum(
            len(((s.get("model_output") or {}).get("completion_ids")) or [])
            for t in trajectories
            for s in t.get("steps") or []
        ),
        "mismatch": int((episode.get("metrics") or {}).get("token_mismatch", 0) or 0),
        "error": None,
    }


def _trajectory_reward(trajectory: dict[str, Any]) -> float:
    """`Trajectory.final_reward` on the JSON form: `reward` when set, else the sum of its step rewards."""
    if trajectory.get("reward") is not None:
        return float(trajectory["reward"])
    return float(sum(float(step.get("reward") or 0.0) for step in trajectory.get("steps") or []))  # "NaN": float


class EpisodeIndex:
    """The index of one `episodes.jsonl` (see the module docstring). Thread-safe: the viewer's request threads
    share one per run."""

    def __init__(self, path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> None:
        self.path = Path(path)
        self.cache_path = _cache_path(self.path, cache_dir) if cache_dir is not None else None
        self.entries: list[dict[str, Any]] = []
        self.offsets: list[int] = []  # byte offset of each entry's line, ascending (for mapping search matches)
        self.indexed_bytes = 0
        self.pending_bytes = 0  # a last line not yet complete (being written, or torn by a kill)
        self._head = b""
        self._lock = threading.Lock()
        self._load_cache()

    # ---- building ------------------------------------------------------------------------------------------

    def refresh(self) -> EpisodeIndex:
        """Index what was appended since the last refresh (everything again if the file was rewritten)."""
        with self._lock:
            size = self.path.stat().st_size if self.path.exists() else 0
            if size < self.indexed_bytes or (self.indexed_bytes and self._read_head() != self._head):
                self._reset()
            if size > self.indexed_bytes:
                added = self._index_from(self.indexed_bytes, size)
                if added:
                    self._save_cache()
            self.pending_bytes = size - self.indexed_bytes
        return self

    def _reset(self) -> None:
        self.entries, self.offsets, self.indexed_bytes, self._head = [], [], 0, b""

    def _index_from(self, start: int, size: int) -> int:
        """Index the complete lines in [start, size); returns how many were added."""
        offset, added, carry = start, 0, b""
        with open(self.path, "rb") as f:
            f.seek(start)
            while offset + len(carry) < size:  # in chunks: a run's file can be larger than memory should hold
                data = carry + f.read(min(CHUNK_BYTES, size - offset - len(carry)))
                end = data.rfind(b"\n") + 1  # complete lines only: the rest is being written (or in the next chunk)
                if end == 0 and offset + len(data) >= size:
                    break
                for raw in data[:end].split(b"\n")[:-1]:
                    if raw.strip():
                        self._add(raw, offset)
                        added += 1
                    offset += len(raw) + 1
                carry = data[end:]
        self.indexed_bytes = offset
        if not self._head:
            self._head = self._read_head()
        return added

    def _add(self, raw: bytes, offset: int) -> None:
        line = len(self.entries) + 1
        try:
            entry = summarize_record(json.loads(raw))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            entry = {
                "step": None,
                "split": None,
                "episode_id": "",
                "task_id": "",
                "task_key": "",
                "reward": None,
                "correct": None,
                "termination": None,
                "roles": [],
                "turns": 0,
                "tokens": 0,
                "mismatch": 0,
                "error": f"not an episode record: {str(exc)[:200]}",
            }
        entry.update(line=line, offset=offset, length=len(raw))
        self.entries.append(entry)
        self.offsets.append(offset)

    def _read_head(self) -> bytes:
        with open(self.path, "rb") as f:
            return hashlib.sha1(f.read(min(HEAD_BYTES, self.indexed_bytes))).digest()

    # ---- the on-disk cache -----------------------------------------------------------------------------------

    def _load_cache(self) -> None:
        if self.cache_path is None or not self.cache_path.exists():
            return
        try:
            data = json.loads(self.cache_path.read_text(encoding="utf-8"))
            if data["version"] != INDEX_VERSION or data["path"] != str(self.path.resolve()):
                return
            rows = data["rows"]
            self.entries = [dict(zip(COLUMNS, row, strict=True)) for row in rows]
            self.offsets = [entry["offset"] for entry in self.entries]
            self.indexed_bytes, self._head = data["indexed_bytes"], bytes.fromhex(data["head"])
        except (OSError, ValueError, KeyError, TypeError):  # a torn or foreign cache: index again
            self._reset()

    def _save_cache(self) -> None:
        if self.cache_path is None:
            return
        data = {
            "version": INDEX_VERSION,
            "path": str(self.path.resolve()),
            "indexed_bytes": self.indexed_bytes,
            "head": self._head.hex(),
            "rows": [[entry[c] for c in COLUMNS] for entry in self.entries],
        }
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
            os.replace(tmp, self.cache_path)  # atomic: a reader never sees half a cache
        except OSError:  # a read-only cache folder: the index lives in memory only
            pass

    # ---- reading ------------------------------------------------------------------------------------------

    def read_line(self, line: int) -> bytes:
        """The raw bytes of line `line` (1-based, as in the file)."""
        entry = self.entries[line - 1]
        with open(self.path, "rb") as f:
            f.seek(entry["offset"])
            return f.read(entry["length"])

    def search(self, text: str, entries: Iterable[dict[str, Any]] | None = None) -> set[int]:
        """Line numbers whose record contains `text` (case-insensitive; JSON-escaped as the file writes it)."""
        needle = json.dumps(text)[1:-1].encode("utf-8")  # as the run's writer escaped it
        pattern = re.compile(re.escape(needle), re.IGNORECASE)
        found: set[int] = set()
        if not self.indexed_bytes:
            return found
        with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            position = 0
            while True:
                match = pattern.search(data, position, self.indexed_bytes)
                if match is None:
                    break
                index = bisect.bisect_right(self.offsets, match.start()) - 1
                entry = self.entries[index]
                found.add(entry["line"])
                position = entry["offset"] + entry["length"] + 1  # one match per line is enough
        return found

    def steps(self) -> dict[str, list[int]]:
        """The steps present per split."""
        out: dict[str, set[int]] = {}
        for entry in self.entries:
            if entry["split"] is not None:
                out.setdefault(entry["split"], set()).add(entry["step"])
        return {split: sorted(steps) for split, steps in sorted(out.items())}


def _cache_path(path: Path, cache_dir: str | os.PathLike) -> Path:
    key = hashlib.sha1(str(path.resolve()).encode("utf-8")).hexdigest()[:20]
    return Path(cache_dir) / f"{key}.json"
