"""A full disk, a read-only one and a vanished run directory end `rllm train` with one line, at every write of a run
(issue 42 §2); and every JSON file a run writes is strict JSON, a non-finite metric included (§5).

The run directory lives on a small tmpfs of its own (mounted here: root only, else skipped), filled for real just
before the write under test by a hook around the function that makes it, and emptied again before `--resume`.
`rllm train` runs in this process (`rllm.cli.main.main`), so a hook can fire in the middle of a run, and the tiny
model loads once: the whole chain of failures and resumes costs a few seconds."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rllm.cli.main import main
from rllm.runs import load_metrics
from rllm.training.checkpoint import find_resumable_checkpoint
from tests.support.training import CONFIG, TINY_CLI


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a run of the tiny model writes about 1 MiB to it."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        check=False,
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"a small file system is needed to fill, and mount is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> None:
    """Write `disk/filler` until not one more byte fits (big pieces first, then single bytes: tmpfs hands out whole
    pages, and the filler's last one must be full too)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert shutil.disk_usage(disk).free == 0


def make_room(disk: Path) -> None:
    (disk / "filler").unlink(missing_ok=True)


def remount(disk: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(disk)], check=True)  # refused while a file is open


def before(monkeypatch, owner: Any, name: str, when: Callable[..., bool], do: Callable[[], None]) -> None:
    """Run `do` (fill the disk...) once, just before the first call of `owner.name` for which `when(*args)` holds."""
    original = getattr(owner, name)
    fired = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not fired and when(*args, **kwargs):
            fired.append(True)
            do()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)


def train(capsys, *args: str) -> tuple[int, str]:
    """`rllm train ...` in this process: its exit code and what it printed on stderr."""
    capsys.readouterr()
    code = main(["train", *args])
    return code, capsys.readouterr().err


def one_error_line(code: int, err: str, path: Path, reason: str, then: str) -> str:
    """The run ended with exit code 2 and one `error:` line naming the file, the reason, the free space and what
    to do: no traceback."""
    assert code == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err[-3000:]
    line = errors[0]
    assert line.startswith(f"error: cannot write {path}: ") and reason in line, line
    assert re.search(r"\((\d+ B|\d+\.\d [KMG]iB) free there\)", line), line
    assert line.endswith(then), line
    return line


def test_every_write_of_a_run_on_a_full_disk_costs_one_line_and_resume_continues(
    disk, tiny_model_dir, monkeypatch, capsys
):
    import torch

    import rllm.runs
    import rllm.training.checkpoint
    import rllm.training.resume
    import rllm.training.trainer

    run_dir = disk / "a"
    resume = f"continue it with --resume {run_dir}"
    common = [f"model.name={tiny_model_dir}", f"trainer.run_dir={disk}", *TINY_CLI, "--no-progress"]
    args = [CONFIG, *common, "trainer.name=a", "trainer.total_steps=2"]
    checkpoint = rllm.training.checkpoint

    # the checkpoint of step 2 (torch's zip writer: "unexpected pos"): nothing of it is left, step 1 still verifies
    with monkeypatch.context() as m:
        saving_step_2 = lambda obj, path, *_, **__: ".step_000002." in str(path)  # noqa: E731
        before(m, torch, "save", saving_step_2, lambda: fill(disk))
        one_error_line(
            *train(capsys, *args), run_dir / "checkpoints" / "step_000002", ": no space left on device (", resume
        )
    make_room(disk)
    assert not list((run_dir / "checkpoints").glob(".step_*")), "the failed save's staging folder is left"
    assert find_resumable_checkpoint(run_dir)[0] == run_dir / "checkpoints" / "step_000001"

    # the episodes of step 2 (a batch of records bigger than a page: it needs new space)
    with monkeypatch.context() as m:
        before(m, rllm.runs.RunLog, "log_episodes", lambda log, step, *_: step == 2, lambda: fill(disk))
        one_error_line(
            *train(capsys, "--resume", str(run_dir)), run_dir / "episodes.jsonl", "no space left on device", resume
        )
    make_room(disk)

    # `latest`, once step 2's folder is in place: `latest` still names step 1
    with monkeypatch.context() as m:
        before(m, checkpoint, "write_text_atomically", lambda path, _: path.name == "latest", lambda: fill(disk))
        code, err = train(capsys, "--resume", str(run_dir))
    one_error_line(code, err, run_dir / "checkpoints" / "latest", "no space left on device", resume)
    make_room(disk)
    assert (run_dir / "checkpoints" / "latest").read_text() == "step_000001"

    # resumes.jsonl, the record of a longer run: a new file
    longer = ["--resume", str(run_dir), "trainer.total_steps=3"]
    with monkeypatch.context() as m:
        before(m, rllm.training.resume, "dumps_strict", lambda *_, **__: True, lambda: fill(disk))
        one_error_line(*train(capsys, *longer), run_dir / "resumes.jsonl", "no space left on device", resume)
    make_room(disk)

    # metrics.jsonl on a disk gone read-only (an append that fits in the file's last page needs no new space)
    with monkeypatch.context() as m:
        before(m, rllm.runs.RunLog, "log", lambda log, step, _: step == 3, lambda: remount(disk, "ro"))
        try:
            code, err = train(capsys, *longer)
        finally:
            remount(disk, "rw")
        one_error_line(code, err, run_dir / "metrics.jsonl", "read-only file system", resume)

    # result.json, after the last checkpoint
    with monkeypatch.context() as m:
        before(m, rllm.training.trainer, "write_json", lambda path, _: path.name == "result.json", lambda: fill(disk))
        one_error_line(*train(capsys, *longer), run_dir / "result.json", "no space left on device", resume)
    make_room(disk)
    assert not (run_dir / "result.json").exists()  # no torn result left behind

    code, err = train(capsys, *longer)
    assert code == 0, err[-3000:]
    assert [m["step"] for m in load_metrics(run_dir) if "reward_mean" in m] == [1, 2, 3]
    assert json.loads((run_dir / "result.json").read_text())["steps"] == 3
    assert_strict_json_everywhere(run_dir)


def test_torchs_zip_writer_on_a_full_disk_says_no_space_left(disk):
    """torch.save's writer failing on a full disk ("unexpected pos") is raised as ENOSPC, its file released; with room
    again the same save succeeds."""
    import torch

    from rllm.training.checkpoint import save_torch_file

    state = {"weight": torch.ones(64, 1024), "moments": [torch.zeros(64, 1024)]}  # 512 KiB
    fill(disk)
    with pytest.raises(OSError) as caught:
        save_torch_file(state, disk / "state.pt")
    assert caught.value.errno == errno.ENOSPC, caught.value
    assert any(text in str(caught.value) for text in ("unexpected pos", "PytorchStreamWriter", "file write failed"))
    (disk / "state.pt").unlink()
    make_room(disk)
    save_torch_file(state, disk / "state.pt")
    assert torch.equal(torch.load(disk / "state.pt")["weight"], state["weight"])


def test_a_failed_start_and_a_vanished_run_directory_cost_one_line(disk, tiny_model_dir, monkeypatch, capsys):
    import rllm.runs

    common = [
        CONFIG,
        f"model.name={tiny_model_dir}",
        f"trainer.run_dir={disk}",
        *TINY_CLI,
        "--no-progress",
        "trainer.total_steps=1",
    ]
    # config.yaml of a new run: the run directory that held nothing is removed, so the advice is to start again
    with monkeypatch.context() as m:
        before(m, rllm.runs, "write_text_atomically", lambda path, _: path.name == "config.yaml", lambda: fill(disk))
        code, err = train(capsys, *common, "trainer.name=b")
    one_error_line(code, err, disk / "b" / "config.yaml", "no space left on device", "run the command again")
    assert not (disk / "b").exists()
    make_room(disk)

    # the run directory removed under a running run
    with monkeypatch.context() as m:
        gone = lambda: shutil.rmtree(disk / "c")  # noqa: E731
        before(m, rllm.runs.RunLog, "log_episodes", lambda log, step, *_: step == 1, gone)
        code, err = train(capsys, *common, "trainer.name=c")
    one_error_line(code, err, disk / "c" / "episodes.jsonl", "its folder was removed", "run the command again")


def test_every_json_file_of_a_run_is_strict_json_with_a_non_finite_metric(tmp_path, tiny_model_dir, monkeypatch):
    """Rewards of 1e308 make reward_mean overflow to infinity (the issue's case): metrics.jsonl and result.json
    say "Infinity", which `load_metrics` and the viewer read back as a number."""
    from rllm.tasks.arithmetic import ArithmeticEnv
    from rllm.viewer.data import ViewerRun

    def huge_reward(self, action):
        observation, _, done, info = original(self, action)
        return observation, 1e308, done, info

    original = ArithmeticEnv.step
    monkeypatch.setattr(ArithmeticEnv, "step", huge_reward)
    run_dir = tmp_path / "runs" / "inf"
    args = [CONFIG, f"model.name={tiny_model_dir}", f"trainer.run_dir={tmp_path / 'runs'}", *TINY_CLI, "--no-progress"]
    assert main(["train", *args, "trainer.name=inf", "trainer.total_steps=1"]) == 0

    assert_strict_json_everywhere(run_dir)
    step = next(m for m in load_metrics(run_dir) if m["step"] == 1 and "reward_mean" in m)
    assert step["reward_mean"] == math.inf
    assert '"reward_mean": "Infinity"' in (run_dir / "metrics.jsonl").read_text()
    series = ViewerRun(run_dir, "inf", None).series()["series"]
    assert [1, None] in series["reward_mean"]  # drawn as a gap, as before


def assert_strict_json_everywhere(run_dir: Path) -> None:
    """Every *.json and *.jsonl file under `run_dir` parses with a parser that refuses NaN and Infinity."""

    def refuse(token: str) -> None:
        raise ValueError(f"bare {token} is not JSON")

    files = sorted([*run_dir.rglob("*.json"), *run_dir.rglob("*.jsonl")])
    assert {"manifest.json", "metrics.jsonl", "episodes.jsonl", "result.json"} <= {f.name for f in files}
    for file in files:
        text = file.read_text(encoding="utf-8")
        documents = text.splitlines() if file.suffix == ".jsonl" else [text]
        for number, document in enumerate(documents, start=1):
            try:
                json.loads(document, parse_constant=refuse)
            except ValueError as exc:
                raise AssertionError(f"{file}, document {number}: {exc}") from None
