"""`rllm train configs/web_grpo.yaml` end to end on a tiny random-init model: MiniWoB++ episodes in a real headless
Chromium, a GRPO update, validation before and after; then `rllm eval` of the config on the validation tasks."""

from __future__ import annotations

import pytest

from rllm.runs import load_metrics, read_episodes
from tests.support.cli import rllm_run
from tests.support.training import ONE_TINY_STEP

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _chromium(chromium):
    return chromium


def test_rllm_train_runs_the_web_config(tmp_path, tiny_model_dir):
    config = ["configs/web_grpo.yaml", f"model.name={tiny_model_dir}", "data.train_size=2", "data.val_size=2"]
    _, run = rllm_run("train", *config, *ONE_TINY_STEP, run_root=tmp_path / "runs", name="web")
    episodes = read_episodes(run, split="train")
    assert len(episodes) == 2 * 2
    for episode in episodes:  # random text: no action parses, so each turn reports an error and the page waits
        last = episode.trajectories[0].steps[-1]
        assert episode.trajectories[0].reward == 0.0 and last.info["action_errors"] >= 1
        assert last.info["task"] in ("click-test", "click-button", "enter-text")
    assert len(read_episodes(run, split="val")) == 2 * 2  # before and after
    assert [m["step"] for m in load_metrics(run) if "reward_mean" in m] == [1]


def test_rllm_eval_runs_the_web_config_on_the_validation_tasks(tmp_path, tiny_model_dir):
    config = ["configs/web_grpo.yaml", f"model.name={tiny_model_dir}", "data.task_args={}", "data.val_size=3"]
    out, _ = rllm_run(
        "eval", *config, "rollout.max_tokens=4", "rollout.max_steps=1", run_root=tmp_path / "runs", name="web-eval"
    )
    from rllm.tasks.web.miniwob import split_tasks

    run_dir = out.stdout.split("run directory")[1].split()[0]
    episodes = read_episodes(run_dir, split="eval")
    assert len(episodes) == 3
    assert {e.trajectories[0].steps[-1].info["task"] for e in episodes} <= set(split_tasks()["validation"])


def test_a_vision_model_sees_screenshots_of_the_pages(tmp_path, tiny_vlm_dir):
    """`env_args.screenshot=true` with a VLM: each turn shows the page's text and its screenshot; the turns of an
    episode extend each other (one row each) and train exactly as sampled."""
    config = ["configs/web_grpo.yaml", f"model.name={tiny_vlm_dir}", "data.train_size=2", "data.val_size=0"]
    screenshots = ["env_args.screenshot=true", "env_args.viewport=[160,210]"]
    _, run = rllm_run("train", *config, *screenshots, *ONE_TINY_STEP, run_root=tmp_path / "runs", name="web-vlm")
    (step,) = [m for m in load_metrics(run) if "reward_mean" in m]
    assert step["batch/rows_split"] == 0 and step["mismatch/abs_diff_max"] < 1e-4
    for episode in read_episodes(run, split="train"):
        steps = episode.trajectories[0].steps
        assert [len(s.model_output.prompt_images) for s in steps] == list(range(1, len(steps) + 1))
