"""The pieces behind "a full disk costs one line" and "every run file is strict JSON" (issue 42 §2, §5), without a
file system to fill: which failures are the disk's, the line they become, and the non-finite encoding. The real
full disk, at every write point of `rllm train`: tests/smoke/test_full_disk.py."""

from __future__ import annotations

import errno
import json
import math
import shutil
from pathlib import Path

import pytest

from rllm.fsutil import (
    decode_nonfinite,
    dumps_strict,
    format_bytes,
    free_space,
    short_write_error,
    write_failure_reason,
)
from rllm.runs import RunLog, RunWriteError, load_metrics, write_json, writing


@pytest.mark.parametrize(
    "code, reason",
    [
        (errno.ENOSPC, "no space left on device"),
        (errno.EDQUOT, "disk quota exceeded"),
        (errno.EROFS, "read-only file system"),
        (errno.ENOENT, "its folder was removed"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_a_write_the_disk_refused_becomes_one_line_naming_file_space_and_resume(tmp_path, code, reason):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_json(run_dir / "manifest.json", {"kind": "train"})
    with pytest.raises(RunWriteError) as caught, writing(run_dir / "metrics.jsonl", run_dir):
        raise OSError(code, "the system's words")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot write {run_dir / 'metrics.jsonl'}: {reason} (")
    assert f"{format_bytes(free_space(run_dir))} free there" in message
    assert message.endswith(f"then continue it with --resume {run_dir}")
    assert caught.value.not_resumable().args[0].endswith("then run the command again")


def test_torchs_zip_writer_errors_are_the_disks_and_other_errors_pass_unchanged(tmp_path):
    for text in (
        "[enforce fail at inline_container.cc:672] . unexpected pos 640 vs 534",
        "basic_ios::clear: iostream error",
    ):
        assert write_failure_reason(RuntimeError(text)) == "torch's checkpoint writer could not write it all"
    opening = RuntimeError(
        "[enforce fail at inline_container.cc:747] . open file failed with strerror: Read-only file system"
    )
    assert write_failure_reason(opening) == "read-only file system"
    for error in (RuntimeError("CUDA out of memory"), OSError(errno.EISDIR, "is a directory"), ValueError("x")):
        assert write_failure_reason(error) is None
        with pytest.raises(type(error)), writing(tmp_path / "f", tmp_path):  # a bug keeps its traceback
            raise error


def test_torchs_short_write_is_no_space_left_where_the_file_did_not_fit(tmp_path, monkeypatch):
    """torch's zip writer says only "unexpected pos": measured as it fails, a disk with less room than the file needed
    is full; with room to spare the failure is something else, and the line says only what is known."""
    message = "[enforce fail at inline_container.cc:672] . unexpected pos 640 vs 534"
    roomy = short_write_error(message, tmp_path / "state.pt", needed=1024)
    assert type(roomy) is RuntimeError and str(roomy) == message
    assert write_failure_reason(roomy) == "torch's checkpoint writer could not write it all"
    too_big = short_write_error(message, tmp_path / "state.pt", needed=free_space(tmp_path) + 1)
    assert isinstance(too_big, OSError) and too_big.errno == errno.ENOSPC and message in str(too_big)

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=4096))  # a page left: a full disk
    full = short_write_error(message, tmp_path / "checkpoints" / "state.pt", needed=1024)
    with pytest.raises(RunWriteError) as caught, writing(tmp_path / "checkpoints", tmp_path):
        raise full
    assert "cannot write" in str(caught.value) and ": no space left on device (4.0 KiB free there)" in str(caught.value)


def test_an_eval_run_or_an_unreadable_manifest_is_told_to_run_again(tmp_path, monkeypatch):
    write_json(tmp_path / "manifest.json", {"kind": "eval"})
    with pytest.raises(RunWriteError, match="then run the command again$"), writing(tmp_path / "x", tmp_path):
        raise OSError(errno.ENOSPC, "full")
    # the nearest folder that exists is measured (asked of disk_usage, not compared between two readings of a disk
    # that other tests write to meanwhile)
    measured, disk_usage = [], shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: measured.append(path) or disk_usage(path))
    assert free_space(tmp_path / "gone" / "deeper") is not None
    assert measured[-1] == tmp_path


def test_non_finite_numbers_are_strings_that_read_back_as_floats(tmp_path):
    data = {"a": [1.5, math.inf, {"b": -math.inf}], "c": math.nan, "d": "NaN", "e": (2, 3)}
    text = dumps_strict(data, sort_keys=True)
    assert text == '{"a": [1.5, "Infinity", {"b": "-Infinity"}], "c": "NaN", "d": "NaN", "e": [2, 3]}'
    assert dumps_strict({"x": 1.0}, indent=2) == json.dumps({"x": 1.0}, indent=2)  # finite: what json writes
    assert decode_nonfinite("Infinity") == math.inf and decode_nonfinite("inf") == "inf"
    log = RunLog(tmp_path)
    log.log(1, {"loss": math.nan, "reward_mean": math.inf, "note": "kept"})
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    json.loads(line, parse_constant=lambda token: pytest.fail(f"bare {token}"))
    (metrics,) = load_metrics(tmp_path)
    assert math.isnan(metrics["loss"]) and metrics["reward_mean"] == math.inf and metrics["note"] == "kept"
    assert format_bytes(0) == "0 B" and format_bytes(3 << 20) == "3.0 MiB"


def test_a_failed_write_json_leaves_no_torn_file(tmp_path, monkeypatch):
    target = tmp_path / "result.json"

    def half_then_full(self: Path, text: str, encoding: str) -> None:
        with open(self, "w", encoding=encoding) as handle:
            handle.write(text[:5])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full)
    with pytest.raises(RunWriteError, match="result.json: no space left on device"):
        write_json(target, {"steps": 3})
    assert not target.exists()
