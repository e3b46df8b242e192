"""`rllm train configs/swe_grpo.yaml` end to end on a tiny random-init model: SWE episodes in sandboxed workspaces
(a local task file: the calc fixture), graded at the end of each, a GRPO update, validation before and after."""

from __future__ import annotations

import json

from rllm.runs import load_metrics, read_episodes
from tests.support.cli import rllm_run
from tests.support.swe import make_calc_task
from tests.support.training import ONE_TINY_STEP


def test_rllm_train_runs_the_swe_config(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "home"))
    row = make_calc_task(tmp_path)
    rows = [{**row, "instance_id": f"calc__calc-{i}"} for i in range(2)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = [
        "configs/swe_grpo.yaml",
        f"model.name={tiny_model_dir}",
        f"data.task_args.file={tmp_path / 'tasks.jsonl'}",
    ]
    data = ["data.train_size=2", "data.val_size=1"]
    _, run = rllm_run("train", *config, *data, *ONE_TINY_STEP, run_root=tmp_path / "runs", name="swe")
    episodes = read_episodes(run, split="train")
    assert len(episodes) == 2 * 2 and all(e.termination_reason.value == "max_turns" for e in episodes)
    assert all(
        e.trajectories[0].reward == 0.0 and "tool_error_kinds" in e.trajectories[0].steps[-1].info for e in episodes
    )  # random text: no tool calls, nothing changed, graded 0
    assert len(read_episodes(run, split="val")) == 2  # before and after
    assert [m["step"] for m in load_metrics(run) if "reward_mean" in m] == [1]
