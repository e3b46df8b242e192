"""No Chromium outlives the run: `rllm train configs/web_grpo.yaml` (tiny model, real browsers) killed with SIGKILL
mid-run leaves none of its browser processes (browser, renderers, Playwright's driver) behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rllm.tasks.web.browser import chromium_pids, descendant_pids

pytestmark = [pytest.mark.reliability, pytest.mark.browser]
REPO = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_killing_the_trainer_leaves_no_browser(tmp_path, tiny_model_dir, chromium):
    args = [
        "configs/web_grpo.yaml",
        f"model.name={tiny_model_dir}",
        "data.train_size=8",
        "data.val_size=8",
        "rollout.n=2",
        "rollout.max_tokens=6",
        "rollout.max_steps=3",
        "trainer.tasks_per_step=4",
        "trainer.total_steps=3",
        "optim.micro_batch_size=2",
        f"trainer.run_dir={tmp_path}",
        "--no-progress",
    ]
    trainer = subprocess.Popen(
        [sys.executable, "-m", "rllm.cli.main", "train", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not chromium_pids(trainer.pid):
            assert trainer.poll() is None, trainer.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the trainer never started a browser"
            time.sleep(0.2)
        # mid-episode: the driver, the browser and its helpers (on a busy machine they take a while to start)
        while len(browser_side := set(descendant_pids(trainer.pid))) < 3:
            assert trainer.poll() is None, trainer.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, f"the browser's helpers never started: {browser_side}"
            time.sleep(0.2)
        time.sleep(1.0)  # contexts and renderers open
        browser_side |= set(descendant_pids(trainer.pid))
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(10)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in browser_side) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in browser_side if alive(pid)], "processes outlived the killed trainer"
    finally:
        if trainer.poll() is None:
            trainer.kill()
