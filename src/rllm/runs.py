"""The one run directory, written the same way by `rllm eval` and `rllm train`, and read back here.

    runs/<name>/
      config.yaml       the resolved config (`rllm.config.dump_config`)
      manifest.json     kind (eval | train), library versions, seeds, model; a training run's numerics
      episodes.jsonl    one record per episode: {"step": int, "split": "train" | "val" | "eval", "episode": {...}},
                        training episodes also "trained": per trajectory, what the update used per step (advantages,
                        trainer log-probs where computed; `rllm.training.batch.trained_steps`), null if not trained
      metrics.jsonl     training: one line per step and per validation ({"step": int, ...metrics}); a step's
                        alarms are its `alarm/<name>` keys (`rllm.health`; `rllm audit` replays them)
      summary.json      eval: the episode summary (`rllm.metrics`)
      exactness.json    the token-exactness report (`rllm.exactness.report`): per step and in all, prefix breaks by
                        cause, round-trip and tool-format failures, re-tokenizations, split rows, |logp_train -
                        logp_sample|, and the problems an audit fails on; train: rewritten (atomically) at every
                        step from the step's `exactness/*` metrics; eval: written once
      result.json       train: validation before/after and the last step's metrics
      checkpoints/      train: atomic checkpoints (`rllm.training.checkpoint`)
      tensorboard/      train, when enabled
      images/           the images of the episodes, once each, named by their content's hash (`rllm.images`)

Choices:
- A run directory is `<root>/<name>`; without a name it is `<kind>-<task>[-<estimator>]-<YYYYmmdd-HHMMSS>`, with
  `-1`, `-2`, ... appended when that exists already. A given name that exists is an error (two runs never mix).
- `step` in an episode record is the number of updates the weights had when it was sampled: 0 for eval and for
  validation before training.
- `read_episodes` reads every kind of run: this format, and bare episodes (eval runs before this format). A torn
  last line (a crash mid-write) is skipped with a warning; any other line that is not a record is an error naming
  the file and the line. On resume, `RunLog` drops what a crashed run wrote after its checkpoint (torn line too).
- Images (data URLs in an episode's messages or observations) are written to `images/` and the record holds
  `rllm-image:<sha256>.<ext>` instead (`rllm.images.store_images`), so a screenshot repeated in every later prompt
  is stored once; reading puts the data URLs back. An image is written before the line that refers to it, so a
  kill leaves at most an image no line refers to. A record without images is written exactly as before: the
  serialised line is searched for a data URL, and only a line with one is rewritten.
- Every JSON file is strict JSON (`rllm.fsutil.dumps_strict`): a non-finite float is the string "NaN", "Infinity"
  or "-Infinity"; `load_metrics` reads those back as floats.
- A write that fails because of the disk (full, over quota, read-only, the run directory removed; torch's zip
  writer's "unexpected pos") raises `RunWriteError`: one line naming the file, the free space there and
  `--resume` (`writing`), which the CLI prints as `error: ...` (exit 2). What is on disk stays resumable.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rllm.errors import RllmError
from rllm.exactness import PREFIX as EXACTNESS_PREFIX
from rllm.exactness import REPORT_FILE as EXACTNESS_FILE
from rllm.exactness import report as exactness_report
from rllm.fsutil import (
    decode_nonfinite,
    dumps_strict,
    format_bytes,
    free_space,
    write_failure_reason,
    write_text_atomically,
)
from rllm.images import load_images, store_images
from rllm.types import Episode

__all__ = [
    "RunFormatError",
    "RunLog",
    "RunWriteError",
    "add_to_manifest",
    "create_run_dir",
    "drop_logs",
    "holds_nothing",
    "is_unstarted_train_run",
    "load_metrics",
    "read_episode_records",
    "read_episodes",
    "read_manifest",
    "versions",
    "view_command",
    "write_exactness",
    "write_json",
    "write_manifest",
    "writing",
]

SPLITS = ("train", "val", "eval")
TRAINING_KINDS = ("train", "sft", "dpo")  # manifest kinds of runs that train (and so resume)
_IMAGES = "images"  # the run's folder of episode images
# what a training run writes before its first checkpoint (rllm sft and dpo: their data counts too)
_FIRST_FILES = {
    "manifest.json",
    "config.yaml",
    "metrics.jsonl",
    "episodes.jsonl",
    "tensorboard",
    "checkpoints",
    "sft_data.json",
    "dpo_data.json",
    _IMAGES,
}
_FIRST_FILES.add("resumes.jsonl")  # what a resume changed (rllm.training.resume), before the first checkpoint too
_FIRST_FILES.add(EXACTNESS_FILE)  # rewritten at every step, the first one's included
# what a kill mid-write of these leaves (the manifest: the trainer adds its kernel choice once the model is loaded)
_ATOMIC_LEFTOVERS = (".config.yaml.tmp-", f".{EXACTNESS_FILE}.tmp-", ".manifest.json.tmp-")
_LOGS = ("metrics.jsonl", "episodes.jsonl")


class RunFormatError(RllmError, ValueError):
    """A run file holds something that is not what rllm writes there."""


class RunWriteError(RllmError):
    """A run could not write `path` because of its disk (`reason`: full, read-only, its folder removed...). Its
    message is the one line a user needs: the file, the free space there, and what to do: `--resume` the run once
    there is room (`resumable`), else run the command again."""

    def __init__(self, path: Path, reason: str, run_dir: Path, *, resumable: bool) -> None:
        self.path, self.reason, self.run_dir, self.resumable = path, reason, run_dir, resumable
        free = free_space(path)
        room = f"{format_bytes(free)} free there" if free is not None else "free space unknown"
        then = f"continue it with --resume {run_dir}" if resumable else "run the command again"
        super().__init__(f"cannot write {path}: {reason} ({room}); make room (or fix the folder), then {then}")

    def not_resumable(self) -> RunWriteError:
        """The same failure for a run whose directory was removed since (a failed start): it must start again."""
        return RunWriteError(self.path, self.reason, self.run_dir, resumable=False)


@contextmanager
def writing(path: str | os.PathLike, run_dir: str | os.PathLike) -> Iterator[None]:
    """Around a write of `path` in the run directory `run_dir`: a failure the disk is to blame for
    (`rllm.fsutil.write_failure_reason`) becomes a `RunWriteError` (one line); any other error passes unchanged."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        reason = write_failure_reason(exc)
        if reason is None:
            raise
        raise RunWriteError(Path(path), reason, Path(run_dir), resumable=_is_training_run(Path(run_dir))) from exc


def _is_training_run(run_dir: Path) -> bool:
    """Whether `run_dir`'s manifest names a training kind (`--resume` continues it); False when it cannot be read."""
    try:
        return json.loads((run_dir / "manifest.json").read_text(encoding="utf-8")).get("kind") in TRAINING_KINDS
    except (OSError, ValueError, AttributeError):
        return False


# ---- creating a run --------------------------------------------------------------------------------------------


def _name_part(part: str) -> str:
    return re.sub(r"[^\w.+-]+", "-", part).strip("-.") or "run"


def create_run_dir(root: str | os.PathLike, name: str | None, *parts: str) -> Path:
    """A new folder `root/name`, or `root/<parts joined by '-'>-<time>` (unique) when `name` is None."""
    if name is not None:
        path = Path(root) / name
        try:
            with writing(path, path):
                path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise RunFormatError(
                f"run directory {path} exists already; choose another trainer.name or resume it (--resume {path})"
            ) from None
        return path
    # a task named hub:name or by a path (a folder of Harbor tasks) gives one folder name, without ':' or '/'
    base = Path(root) / "-".join([*(_name_part(part) for part in parts), time.strftime("%Y%m%d-%H%M%S")])
    path, i = base, 1
    while True:
        try:
            with writing(path, path):
                path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            path, i = Path(f"{base}-{i}"), i + 1


def versions() -> dict[str, str]:
    """Python's and the installed versions of rllm and the libraries a run's numbers depend on."""
    found = {"python": platform.python_version()}
    for package in ("rllm", "torch", "transformers", "peft", "vllm"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def is_unstarted_train_run(path: str | os.PathLike) -> bool:
    """Whether `path` is a training run directory stopped before its first checkpoint: it holds nothing but what a
    training run writes before that (manifest, config, logs, TensorBoard events, a checkpoints folder with no step
    in it) and its manifest, where it can be read (a kill may have torn it), says a training kind (`train`, `sft`,
    `dpo`). A mistyped path, a folder of runs or an eval run is not one."""
    path = Path(path)
    if not path.is_dir() or any(
        entry.name not in _FIRST_FILES and not _is_config_leftover(entry.name) for entry in path.iterdir()
    ):
        return False
    if any((path / "checkpoints").glob("step_*")):
        return False
    try:
        return json.loads((path / "manifest.json").read_text(encoding="utf-8")).get("kind") in TRAINING_KINDS
    except (OSError, ValueError, AttributeError):  # not written yet, or torn
        return True


def view_command(run_dir: object) -> str:
    """The command that opens `run_dir` in the viewer (printed by `rllm train` at its start and end). It lives here,
    not in `rllm.viewer`, so that the trainer can print it without importing the viewer's server."""
    return f"rllm view {run_dir}"


def holds_nothing(path: str | os.PathLike) -> bool:
    """Whether a run directory holds nothing a user would look at: what a run writes when it is created (manifest,
    config, data counts, an empty TensorBoard or checkpoints folder), no logged line, no checkpoint, no result. A
    run that failed or was stopped like that is removed (`AgentTrainer`), never listed as a stopped run."""
    path = Path(path)
    for entry in path.iterdir():
        if entry.name in _LOGS:
            if entry.stat().st_size:
                return False
        elif entry.name == "checkpoints":
            if any(entry.glob("step_*")):
                return False
        elif entry.name not in _FIRST_FILES and not _is_config_leftover(entry.name):
            return False
    return True


def drop_logs(run_dir: Path) -> None:
    """What a run killed before its first checkpoint logged (its logs, its exactness report, the temporary files of
    interrupted atomic writes), removed so that it starts over; its config.yaml and manifest stay."""
    for name in ("metrics.jsonl", "episodes.jsonl", EXACTNESS_FILE):
        (run_dir / name).unlink(missing_ok=True)
    _remove_leftovers(run_dir)


def _remove_leftovers(run_dir: Path) -> None:
    """The temporary files of atomic writes a kill interrupted (`_is_config_leftover`)."""
    for leftover in run_dir.iterdir():
        if _is_config_leftover(leftover.name):
            leftover.unlink(missing_ok=True)


def _is_config_leftover(name: str) -> bool:
    """The temporary file of a config.yaml, exactness.json or manifest.json write that a kill interrupted (each is
    written atomically)."""
    return name.startswith(_ATOMIC_LEFTOVERS)


def write_manifest(run_dir: Path, kind: str, config: Any, numerics: dict[str, Any] | None = None) -> None:
    """`manifest.json` (kind, versions, seeds, model; a training run's `numerics`, `rllm.training.numerics`) and
    `config.yaml` of a new run. The config is written atomically, once: a resume reads it back as the run's own
    (`rllm.training.resume`) and never rewrites it."""
    from rllm.config import dump_config

    manifest = {
        "kind": kind,
        "versions": versions(),
        "seed": config.trainer.seed,
        "data_seeds": {"train": config.data.seed, "val": config.data.val_seed},
        "model": config.model.name,
    }
    if numerics is not None:
        manifest["numerics"] = numerics
    write_json(run_dir / "manifest.json", manifest)
    with writing(run_dir / "config.yaml", run_dir):
        write_text_atomically(run_dir / "config.yaml", dump_config(config))


# ---- writing ---------------------------------------------------------------------------------------------------


class RunLog:
    """Appends to a run's `metrics.jsonl` and `episodes.jsonl` (and TensorBoard scalars when enabled). With
    `resume_step`, lines of later steps (written before a crash, a torn one included) are dropped first, so the
    files match an uninterrupted run."""

    def __init__(self, run_dir: Path, *, tensorboard: bool = False, resume_step: int | None = None) -> None:
        self.metrics_path = run_dir / "metrics.jsonl"
        self.episodes_path = run_dir / "episodes.jsonl"
        self.images_dir = run_dir / _IMAGES
        self.run_dir = run_dir
        self._exactness: list[dict[str, Any]] = []  # the exactness.json series: one entry per step
        if resume_step is not None:
            for path in (self.metrics_path, self.episodes_path):
                with writing(path, run_dir):
                    _truncate_after(path, resume_step)
            with writing(run_dir, run_dir):
                _remove_leftovers(run_dir)  # a kill mid-write of the report left its temporary file
            if self.metrics_path.exists():  # the report again from what is kept, so it never names a dropped step
                kept = [line for line in load_metrics(run_dir) if self._add_exactness(line["step"], line)]
                if kept or (run_dir / EXACTNESS_FILE).exists():
                    write_exactness(run_dir, "train", self._exactness)
        self._tb = _tensorboard_writer(run_dir) if tensorboard else None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        line = dumps_strict({"step": step, **metrics}, sort_keys=True) + "\n"
        with writing(self.metrics_path, self.run_dir), open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(line)
        if self._add_exactness(step, metrics):
            write_exactness(self.run_dir, "train", self._exactness)
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def _add_exactness(self, step: int, metrics: dict[str, Any]) -> bool:
        """Add the step's `exactness/*` metrics to the report's series; False when it has none (validation, SFT)."""
        entry = {k[len(EXACTNESS_PREFIX) :]: v for k, v in metrics.items() if k.startswith(EXACTNESS_PREFIX)}
        if entry:
            self._exactness.append({"step": step, **entry})
        return bool(entry)

    def log_episodes(
        self, step: int, episodes: Iterable[Episode], split: str, trained: dict[int, list[Any]] | None = None
    ) -> None:
        """Append one record per episode; `trained` (`rllm.training.batch.trained_steps`) adds what the update
        used, per trajectory (None for one that did not train), as the record's `trained`."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        with writing(self.episodes_path, self.run_dir), open(self.episodes_path, "a", encoding="utf-8") as f:
            f.writelines(self._line(_episode_record(step, split, episode, trained)) for episode in episodes)

    def _line(self, record: dict[str, Any]) -> str:
        line = dumps_strict(record)
        if "data:image/" in line:  # a text-only record (the common case) is not walked
            line = dumps_strict(store_images(record, self.images_dir))
        return line + "\n"

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _episode_record(step: int, split: str, episode: Episode, trained: dict[int, list[Any]] | None) -> dict[str, Any]:
    record = {"step": step, "split": split, "episode": episode.model_dump(mode="json")}
    if trained:
        record["trained"] = [trained.get(id(trajectory)) for trajectory in episode.trajectories]
    return record


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    """`run_dir`'s manifest.json, or None where it is missing or unreadable (a kill may have torn it)."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def add_to_manifest(run_dir: Path, key: str, value: Any) -> None:
    """`key: value` added to an existing run's manifest.json, atomically (the run's only record of it: never torn)."""
    manifest = {**(read_manifest(run_dir) or {}), key: value}
    path = run_dir / "manifest.json"
    with writing(path, run_dir):
        write_text_atomically(path, dumps_strict(manifest, indent=2, sort_keys=True) + "\n")


def write_json(path: str | os.PathLike, data: Any) -> None:
    """`data` as strict JSON (`dumps_strict`) in `path`, a file of a run directory (its folder). A write that
    fails (a full disk) removes what it began, so no torn file is left to read as the run's result."""
    path = Path(path)
    text = dumps_strict(data, indent=2, sort_keys=True) + "\n"
    with writing(path, path.parent):
        try:
            path.write_text(text, encoding="utf-8")
        except BaseException:
            with suppress(OSError):  # a read-only disk: the write's own error is the one to report
                path.unlink(missing_ok=True)
            raise


def write_exactness(run_dir: Path, kind: str, steps: list[dict[str, Any]]) -> None:
    """The run's `exactness.json` (`rllm.exactness.report` of `steps`), replaced atomically: a kill leaves the last
    step's report or the one before it, never a torn file."""
    path = Path(run_dir) / EXACTNESS_FILE
    text = dumps_strict(exactness_report(kind, steps), indent=2, sort_keys=True) + "\n"
    with writing(path, run_dir):
        write_text_atomically(path, text)


# ---- reading ---------------------------------------------------------------------------------------------------


def read_episode_records(path: str | os.PathLike, split: str | None = None) -> list[dict[str, Any]]:
    """`{"step", "split", "episode": Episode}` for every episode of a run directory (or its `episodes.jsonl`), in
    file order; `split` keeps one split. Bare episodes (older eval runs) read as step 0 of split "eval"."""
    file = Path(path) / "episodes.jsonl" if Path(path).is_dir() else Path(path)
    images = file.parent / _IMAGES
    images = images if images.is_dir() else None  # a run without images is not walked
    records = []
    for number, data in _json_lines(file):
        where = f"{file}, line {number}"
        if not isinstance(data, dict):
            raise RunFormatError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if "episode" in data:
            record = {"step": data.get("step"), "split": data.get("split"), "episode": data["episode"]}
        elif "id" in data and "trajectories" in data:
            record = {"step": 0, "split": "eval", "episode": data}
        else:
            raise RunFormatError(
                f"{where} is neither an episode record ({{'step', 'split', 'episode'}}) nor an "
                f"episode; it has keys {sorted(data)[:8]}"
            )
        if record["split"] not in SPLITS or not isinstance(record["step"], int):
            raise RunFormatError(f"{where}: step must be an int and split one of {SPLITS}")
        if images is not None:
            record["episode"] = load_images(record["episode"], images)
        try:
            record["episode"] = Episode.model_validate(record["episode"])
        except ValidationError as exc:
            raise RunFormatError(f"{where}: not a valid episode: {exc.errors()[0]['msg']}") from None
        if split is None or record["split"] == split:
            records.append(record)
    return records


def read_episodes(path: str | os.PathLike, split: str | None = None) -> list[Episode]:
    """The episodes of a run directory (or its `episodes.jsonl`), eval or training; see `read_episode_records`."""
    return [record["episode"] for record in read_episode_records(path, split)]


def load_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every line of a training run's `metrics.jsonl`, non-finite values ("NaN", "Infinity") back as floats."""
    return [
        {key: decode_nonfinite(value) for key, value in data.items()}
        for _, data in _json_lines(Path(run_dir) / "metrics.jsonl")
    ]


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-empty line; a torn last line is skipped with a warning."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):
                raise RunFormatError(f"{path}, line {number} is not JSON") from None
            warnings.warn(f"{path}: skipped a torn last line (line {number}; the run stopped mid-write)", stacklevel=3)


def _truncate_after(path: Path, step: int) -> None:
    """Drop the lines of steps > `step`. A run appends in step order, so they are the file's tail: the file is cut
    where they begin, in one system call, so a kill during a resume leaves it whole or cut, never half rewritten. A
    torn last line (a kill mid-append) is dropped with a warning; a line that does not parse anywhere else, or that
    comes after a later step's, is corruption, refused with its line number (nothing is changed then)."""
    if not path.exists():
        return
    lines = path.read_bytes().splitlines(keepends=True)
    offset, cut = 0, None
    for number, line in enumerate(lines, start=1):
        line_step = _step_of(line)
        if line_step is None and number < len(lines):
            raise RunFormatError(
                f"{path}:{number} is not a log record (corrupted in the middle of the file); "
                "repair or remove that line, then resume"
            )
        if line_step is None:
            warnings.warn(f"{path}: dropped a torn last line (a run killed mid-write)", UserWarning, stacklevel=3)
        if line_step is None or line_step > step:
            cut = offset if cut is None else cut
        elif cut is not None:
            raise RunFormatError(
                f"{path}:{number} is a record of step {line_step} after one of a later step (not "
                "written by rllm in this order); repair the file, then resume"
            )
        offset += len(line)
    if cut is not None:
        os.truncate(path, cut)


def _step_of(line: str | bytes) -> float | None:
    """The step of a log line; None for a line that is not a record (torn by a crash mid-write, or corrupted)."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):  # ValueError: JSONDecodeError, or UTF-8 torn mid-character
        return None


def _tensorboard_writer(run_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # the tensorboard package is missing
        raise RllmError("trainer.tensorboard=true needs the tensorboard package: pip install tensorboard") from exc
    return SummaryWriter(log_dir=str(run_dir / "tensorboard"))
