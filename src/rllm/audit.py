"""What `rllm audit RUN` and the viewer's health panel show: a run's alarms, replayed from what it wrote.

    report = audit_run("runs/train-arithmetic-grpo-...")
    report.ok, report.alarms   # AlarmSpan(name, steps, message, episodes), one per detector and run of steps
    report.exactness           # the token-exactness report's problems (`rllm.exactness.exactness_findings`)

The rules are `rllm.health`'s, applied to the run's `metrics.jsonl` (training steps, in order) exactly as the
trainer applied them while it ran. A run written before the trainer logged its episode signals (`health/*`) gets
them from its `episodes.jsonl`, so an older run is audited by the same rules. An eval run is one step: the rules
that need several steps do not apply to it, the others do (edited protected tests, prefix breaks).

Choices:
- Consecutive steps of one detector are one span, named with its first step's message: a collapse that lasts 40
  steps is one line, not 40.
- A span links to up to `MAX_LINKS` episodes that show it where the detector has an episode signal (empty or
  repetitive replies, truncation, protected tests); for the others, to the steps (the viewer opens their episodes).
- The run's `exactness.json` (`rllm.exactness`), where it has one, is judged by the current rules; its problems
  fail the audit as alarms do.
- Reading follows `rllm.runs` (a torn last line is skipped, anything else malformed is an error naming the line).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rllm.errors import RllmError
from rllm.exactness import REPORT_FILE, exactness_findings
from rllm.health import DETECTORS, Alarm, episode_signals, flagged_episodes, is_train_step, replay
from rllm.metrics import summarize_episodes
from rllm.runs import load_metrics, read_episode_records, read_manifest

__all__ = ["AlarmSpan", "AuditReport", "audit_run"]

MAX_LINKS = 5
_BY_NAME = {detector.name: detector for detector in DETECTORS}


@dataclass
class AlarmSpan:
    """Detector `name` fired at each of `steps` (consecutive); `episodes` are (step, episode id) that show it."""

    name: str
    steps: list[int]
    message: str
    episodes: list[tuple[int, str]] = field(default_factory=list)

    def line(self) -> str:
        where = f"step {self.steps[0]}" if len(self.steps) == 1 else f"steps {self.steps[0]}-{self.steps[-1]}"
        return f"alarm {self.name} at {where}: {self.message}"


@dataclass
class AuditReport:
    run_dir: str
    kind: str
    steps: int
    alarms: list[AlarmSpan]
    exactness: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.alarms and not self.exactness

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def audit_run(run_dir: str | os.PathLike) -> AuditReport:
    """The alarms of the run in `run_dir` (a training run's steps, or an eval run as one step)."""
    path = Path(run_dir)
    if not (path / "metrics.jsonl").exists() and not (path / "episodes.jsonl").exists():
        raise RllmError(
            f"{path} is not a run directory (no metrics.jsonl or episodes.jsonl); give a run, e.g. runs/<name>"
        )
    kind = _kind(path)
    # read only where needed: a run that logged its signals and raised no episode alarm is audited from its metrics
    episodes = functools.cache(lambda: _episodes_by_step(path, "eval" if kind == "eval" else "train"))
    history = _eval_history(path, episodes) if kind == "eval" else _train_history(path, episodes)
    spans = _spans(replay(history))
    for span in spans:
        span.episodes = _links(span, episodes)
    return AuditReport(str(path), kind, len(history), spans, _exactness_problems(path))


def _exactness_problems(path: Path) -> list[str]:
    file = path / REPORT_FILE
    if not file.exists():
        return []
    try:
        report = json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        return [f"{file} is not JSON (damaged); the run's steps are in metrics.jsonl"]
    return exactness_findings(report)


def _kind(path: Path) -> str:
    manifest = read_manifest(path)
    if manifest is None:
        return "eval" if (path / "summary.json").exists() else "train"
    return str(manifest.get("kind", "train"))


def _episodes_by_step(path: Path, split: str) -> dict[int, list]:
    by_step: dict[int, list] = {}
    if (path / "episodes.jsonl").exists():
        for record in read_episode_records(path, split):
            by_step.setdefault(record["step"], []).append(record["episode"])
    return by_step


def _train_history(path: Path, episodes: Callable[[], dict[int, list]]) -> list[dict[str, Any]]:
    history = [m for m in load_metrics(path) if is_train_step(m)] if (path / "metrics.jsonl").exists() else []
    for metrics in history:
        if any(key.startswith("health/") for key in metrics):
            continue
        logged = episodes().get(metrics["step"])  # a run from before the signals: they come from its episodes
        if logged:
            metrics.update(episode_signals(logged))
    return history


def _eval_history(path: Path, episodes: Callable[[], dict[int, list]]) -> list[dict[str, Any]]:
    by_step = episodes()
    logged = [episode for step in sorted(by_step) for episode in by_step[step]]
    if not logged:
        return []
    return [{"step": 0, **summarize_episodes(logged), **episode_signals(logged)}]


def _spans(alarms: list[Alarm]) -> list[AlarmSpan]:
    spans: list[AlarmSpan] = []
    open_spans: dict[str, AlarmSpan] = {}
    for alarm in alarms:  # in step order; training steps are numbered 1, 2, 3, ...
        span = open_spans.get(alarm.name)
        if span is not None and span.steps[-1] == alarm.step - 1:
            span.steps.append(alarm.step)
            continue
        span = AlarmSpan(alarm.name, [alarm.step], alarm.message)
        open_spans[alarm.name] = span
        spans.append(span)
    return spans


def _links(span: AlarmSpan, episodes: Callable[[], dict[int, list]]) -> list[tuple[int, str]]:
    detector, found = _BY_NAME[span.name], []
    if detector.signal is None:  # a rule over step metrics only: no episode shows it more than another
        return found
    for step in span.steps:
        for episode in flagged_episodes(detector, episodes().get(step, [])):
            found.append((step, episode.id))
            if len(found) == MAX_LINKS:
                return found
    return found
