"""What the viewer shows, as plain data: the runs under the given folders, their metrics, the episode table of a
query, and one episode with its conversation and its token overlay. `rllm.viewer.server` serves it as JSON; the
run's alarms (`rllm.audit`) come with the lines of the episodes that show them.

Runs are read in the one run format (`rllm.runs`), whatever wrote them and whenever: eval and training runs, runs
of the first release (bare episodes, no `trained` field), a run being written now. Nothing here writes into a run.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from rllm.audit import audit_run
from rllm.errors import RllmError
from rllm.exactness import REPORT_FILE as EXACTNESS_FILE
from rllm.exactness import exactness_findings
from rllm.fsutil import decode_nonfinite
from rllm.viewer.index import EpisodeIndex

__all__ = ["NotARunError", "ViewerRun", "discover_runs", "query_episodes"]

RUN_FILES = ("manifest.json", "episodes.jsonl", "metrics.jsonl")  # any one makes a folder a run
SORTABLE = (
    "line",
    "step",
    "split",
    "episode_id",
    "task_id",
    "reward",
    "correct",
    "termination",
    "turns",
    "tokens",
    "mismatch",
)
RUNNING_WITHIN_S = 120.0  # a run whose logs changed this recently, with no result yet, is shown as running
KIND_LABELS = {"train": "RL", "eval": "eval", "sft": "SFT", "dpo": "DPO", "rft": "RFT"}  # manifest kind -> shown
RL_KINDS = ("train",)  # the kinds whose config's `algorithm` section (the advantage estimator) was used


class NotARunError(RllmError, ValueError):
    """A path given to `rllm view` is neither a run directory nor a folder of them."""


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in RUN_FILES)


def discover_runs(paths: list[str | os.PathLike]) -> list[Path]:
    """The run directories among `paths`: each is a run, or a folder whose direct subfolders include runs."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if is_run_dir(path):
            found.append(path)
            continue
        runs = sorted((p for p in path.iterdir() if is_run_dir(p)), key=lambda p: p.name) if path.is_dir() else []
        if not runs:
            what = "does not exist" if not path.exists() else "is not a run directory and holds none"
            raise NotARunError(
                f"{path} {what}. rllm view expects a run directory (written by rllm train, sft, dpo or eval: it "
                f"holds {', '.join(RUN_FILES)}, config.yaml) or a folder of them, such as runs/"
            )
        found.extend(runs)
    return found


class ViewerRun:
    """One run directory as the viewer reads it; its episode index is built on first use and refreshed on each."""

    def __init__(self, path: Path, run_id: str, cache_dir: Path | None) -> None:
        self.path, self.id = path, run_id
        self._cache_dir = cache_dir
        self._index: EpisodeIndex | None = None
        self._tokenizer: Any = None
        self._tokenizer_error: str | None = None
        self._recomputed: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._index_lock = threading.Lock()  # held while indexing, which can take seconds: nothing else waits on it

    # ---- the run ---------------------------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        return _read_json(self.path / "manifest.json") or {}

    def config(self) -> dict[str, Any]:
        try:
            data = yaml.safe_load((self.path / "config.yaml").read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return {}
        return data if isinstance(data, dict) else {}

    def kind(self) -> str:
        return str(self.manifest().get("kind") or ("train" if (self.path / "metrics.jsonl").exists() else "eval"))

    def summary(self) -> dict[str, Any]:
        """What the run list shows of this run. `estimator` only for an RL run: SFT and DPO runs record the config's
        `algorithm` section reset to its defaults, which says nothing about them."""
        config, manifest = self.config(), self.manifest()
        eval_summary = _read_json(self.path / "summary.json")
        result = _read_json(self.path / "result.json") or eval_summary
        metrics, _ = self.metrics()
        kind = self.kind()
        return {
            "id": self.id,
            "path": str(self.path),
            "kind": kind,
            "kind_label": KIND_LABELS.get(kind, kind),
            "model": manifest.get("model") or (config.get("model") or {}).get("name"),
            "task": (config.get("data") or {}).get("task"),
            "estimator": (config.get("algorithm") or {}).get("advantage") if kind in RL_KINDS else None,
            "status": self._status(result is not None),
            "steps": max((m["step"] for m in metrics), default=0),
            "episodes": self._episode_count(),
            "started": manifest.get("created") or _mtime(self.path / "config.yaml"),
            "success": _success_rate(eval_summary, metrics),
            "eval_summary": eval_summary,
        }

    def _episode_count(self) -> int:
        """From the index when it is up to date; else the file's complete lines, counted without parsing them (the
        run list neither waits for an index being built nor builds one)."""
        index, count = self._index, 0
        try:
            if index is not None and index.indexed_bytes == (self.path / "episodes.jsonl").stat().st_size:
                return len(index.entries)
            with open(self.path / "episodes.jsonl", "rb") as f:
                while chunk := f.read(1 << 24):
                    count += chunk.count(b"\n")
        except OSError:  # no episodes (yet)
            return 0
        return count

    def _status(self, finished: bool) -> str:
        if finished:
            return "finished"
        changed = max((_mtime(self.path / name) or 0.0) for name in ("metrics.jsonl", "episodes.jsonl"))
        return "running" if time.time() - changed < RUNNING_WITHIN_S else "stopped"

    def metrics(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The lines of `metrics.jsonl` that parse, and a note for each that does not (torn or corrupted)."""
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return [], []
        lines, problems = [], []
        raw = path.read_bytes()
        for number, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict) or not isinstance(data.get("step"), int):
                    raise ValueError("no step")
                lines.append({key: decode_nonfinite(value) for key, value in data.items()})  # "NaN": a float
            except ValueError:
                torn = not raw.endswith(b"\n") and number == raw.count(b"\n") + 1
                problems.append(f"metrics.jsonl line {number}: " + ("being written" if torn else "not a record"))
        return lines, problems

    def exactness(self) -> dict[str, Any] | None:
        """The run's token-exactness report (`exactness.json`, `rllm.exactness`) with its findings recomputed by
        the rules of this version (a report written by an older one is judged the same way); None without one."""
        report = _read_json(self.path / EXACTNESS_FILE)
        if report is None:
            return None
        report["problems"] = exactness_findings(report)
        return report

    def series(self) -> dict[str, Any]:
        """Every numeric metric as `[[step, value], ...]`, in step order (train steps and validations apart)."""
        metrics, problems = self.metrics()
        series: dict[str, list[list[float]]] = {}
        for line in metrics:
            for key, value in line.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    series.setdefault(key, []).append([line["step"], value if math.isfinite(value) else None])
        return {"series": series, "problems": problems}

    def health(self) -> dict[str, Any]:
        """The run's alarms (`rllm.audit`, the rules of `rllm.health`), each with the episode-table lines of the
        episodes that show it; a run whose logs cannot be read yet has none, with the reason in `problems`."""
        try:
            report = audit_run(self.path)
        except (RllmError, OSError, ValueError) as exc:
            return {"alarms": [], "ok": True, "problems": [str(exc)]}
        split = "eval" if report.kind == "eval" else "train"
        entries = (e for e in self.index().entries if not e["error"] and e["split"] == split)
        lines = {(e["step"], e["episode_id"]): e["line"] for e in entries}
        alarms = [
            {
                "name": span.name,
                "steps": span.steps,
                "message": span.message,
                "episodes": [
                    {"step": step, "episode_id": eid, "line": lines.get((step, eid))} for step, eid in span.episodes
                ],
            }
            for span in report.alarms
        ]
        return {"alarms": alarms, "ok": not alarms, "problems": []}  # exactness problems: the exactness card

    # ---- episodes --------------------------------------------------------------------------------------------

    def index(self) -> EpisodeIndex:
        with self._index_lock:
            if self._index is None:
                self._index = EpisodeIndex(self.path / "episodes.jsonl", self._cache_dir)
            return self._index.refresh()

    def record(self, line: int) -> dict[str, Any]:
        """The parsed record of `line` (KeyError when there is no such line; ValueError when it is corrupt)."""
        index = self.index()
        if not 1 <= line <= len(index.entries):
            raise KeyError(line)
        entry = index.entries[line - 1]
        if entry["error"]:
            raise ValueError(f"line {line} of episodes.jsonl is {entry['error']}")
        data = json.loads(index.read_line(line))
        return data if "episode" in data else {"step": 0, "split": "eval", "episode": data}

    def recomputed_trained(self, step: int) -> dict[tuple[str, int], Any] | None:
        """For a run written before the trainer recorded `trained`: what the update of training step `step` used,
        recomputed from that step's logged episodes with the run's algorithm config, keyed by (episode id,
        trajectory index). Exact for the estimators that need nothing else (not remax's greedy rollouts, a critic's
        values or a teacher's log-probs: None then, as for a config this version cannot read)."""
        with self._lock:
            if step in self._recomputed:
                return self._recomputed[step]
        from rllm.config import ConfigError, load_config
        from rllm.training.advantages import score_episodes
        from rllm.training.batch import build_rows, trained_steps
        from rllm.types import Episode

        result = None
        try:
            config = load_config(self.path / "config.yaml")
        except (ConfigError, OSError, ValueError):
            config = None
        algorithm = config.algorithm if config is not None else None
        if (
            algorithm is not None
            and not any(algorithm.uses_advantage(n) for n in ("remax", "gae"))
            and (config.distill.teacher is None)
        ):
            index = self.index()
            lines = [e["line"] for e in index.entries if e["split"] == "train" and e["step"] == step and not e["error"]]
            episodes = [Episode.model_validate(json.loads(index.read_line(line))["episode"]) for line in lines]
            batch = score_episodes(episodes, algorithm, max_tokens=config.rollout.max_tokens)
            rows, _ = build_rows(
                batch.trajectories,
                step_advantages=batch.step_advantages,
                max_prompt_length=config.rollout.max_prompt_length,
                max_response_length=config.rollout.max_response_length,
            )
            by_id = trained_steps(batch.trajectories, rows)
            result = {
                (episode.id, i): by_id.get(id(trajectory))
                for episode in episodes
                for i, trajectory in enumerate(episode.trajectories)
            }
        with self._lock:
            self._recomputed = {**dict(list(self._recomputed.items())[-7:]), step: result}  # the last few steps
        return result

    def tokenizer(self) -> tuple[Any, str | None]:
        """The run's tokenizer (for the overlay's token texts), or None and why not."""
        with self._lock:
            if self._tokenizer is None and self._tokenizer_error is None:
                name = (self.config().get("model") or {}).get("name") or self.manifest().get("model")
                try:
                    from rllm.models.registry import load_tokenizer

                    self._tokenizer = load_tokenizer(name)
                except Exception as exc:  # any failure only costs the token texts: ids are shown instead
                    self._tokenizer_error = f"tokenizer of {name!r} not loadable ({type(exc).__name__}); ids shown"
            return self._tokenizer, self._tokenizer_error


def query_episodes(index: EpisodeIndex, params: dict[str, str]) -> dict[str, Any]:
    """One page of the episode table: filters (`split`, `step`, `correct` 1|0, `termination`, `task` substring of
    the task id, `task_id` exact, `task_key` the task's content (`index.task_key`), `role`, `reward_min`,
    `reward_max`, `errors` 1, `q` text search), `sort` (a column; `-col` descending), `page` (from 1) and
    `per_page`. Returns the page and the total that matched; with `task_key`, also `where`: the (split, step)
    pairs holding that task and their episode counts, before the other filters (the comparison's step choices)."""
    entries, where = index.entries, None
    if params.get("task_key"):
        entries = [e for e in entries if e["task_key"] == params["task_key"]]
        counts = Counter((e["step"], e["split"]) for e in entries)  # in step order
        where = [{"split": split, "step": step, "episodes": n} for (step, split), n in sorted(counts.items())]
    if params.get("task_id"):
        entries = [e for e in entries if e["task_id"] == params["task_id"]]
    if params.get("split"):
        entries = [e for e in entries if e["split"] == params["split"]]
    if params.get("step", "") != "":
        step = int(params["step"])
        entries = [e for e in entries if e["step"] == step]
    if params.get("correct") in ("0", "1"):
        want = params["correct"] == "1"
        entries = [e for e in entries if e["correct"] is want]
    if params.get("termination"):
        entries = [e for e in entries if e["termination"] == params["termination"]]
    if params.get("task"):
        entries = [e for e in entries if params["task"] in e["task_id"]]
    if params.get("role"):
        entries = [e for e in entries if params["role"] in e["roles"]]
    for key, keep in (("reward_min", lambda r, x: r >= x), ("reward_max", lambda r, x: r <= x)):
        if params.get(key, "") != "":
            bound = float(params[key])
            entries = [e for e in entries if e["reward"] is not None and keep(e["reward"], bound)]
    if params.get("errors") == "1":
        entries = [e for e in entries if e["error"]]
    if params.get("q"):
        lines = index.search(params["q"])
        entries = [e for e in entries if e["line"] in lines]
    sort = params.get("sort") or "line"
    column = sort.lstrip("-")
    if column not in SORTABLE:
        raise ValueError(f"sort must be one of {', '.join(SORTABLE)} (prefix '-' for descending), got {sort!r}")
    if column != "line" or sort.startswith("-"):
        entries = sorted(entries, key=lambda e: _sort_key(e[column]), reverse=sort.startswith("-"))
    per_page = max(1, min(int(params.get("per_page") or 50), 500))
    page = max(1, int(params.get("page") or 1))
    return {
        "total": len(entries),
        "page": page,
        "per_page": per_page,
        "rows": entries[(page - 1) * per_page : page * per_page],
        "pending": index.pending_bytes > 0,
        "where": where,
    }


def facets(index: EpisodeIndex) -> dict[str, Any]:
    """The values the filters can take: splits with their steps, termination reasons, roles, corrupt lines."""
    terminations, roles = set(), set()
    errors = 0
    for entry in index.entries:
        if entry["error"]:
            errors += 1
            continue
        terminations.add(entry["termination"])
        roles.update(entry["roles"])
    return {"steps": index.steps(), "terminations": sorted(terminations), "roles": sorted(roles), "errors": errors}


def _success_rate(eval_summary: dict[str, Any] | None, metrics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The success rate the run list shows: an eval run's (summary.json), else the last finite validation one
    (`val/success_rate` in metrics.jsonl) with its step; None for a run that has neither."""
    if eval_summary is not None and _finite(eval_summary.get("success_rate")):
        return {"value": eval_summary["success_rate"], "source": "eval", "step": None}
    for line in reversed(metrics):
        if _finite(line.get("val/success_rate")):
            return {"value": line["val/success_rate"], "source": "validation", "step": line["step"]}
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sort_key(value: Any) -> tuple[int, Any]:
    return (1, 0) if value is None else (0, value)  # missing values (corrupt lines) last


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
