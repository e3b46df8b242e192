"""The token-exactness report (`rllm.exactness`): its totals, the findings an audit fails on, and `exactness.json` as
training (`RunLog`) and `rllm eval` write it. The counts themselves are checked over real templates and rollouts in
tests/contract/test_exactness_report.py."""

from __future__ import annotations

import json

import pytest

from rllm.config import load_config
from rllm.exactness import MAX_LOGPROB_DIFF, exactness_findings, report, step_metrics
from rllm.runs import RunLog, create_run_dir, is_unstarted_train_run, write_manifest
from rllm.types import Episode, ModelOutput, Step, Trajectory

EXACT_STEP = {"turns": 4, "prefix_breaks": 0, "round_trip_failures": 0, "tool_format_failures": 0, "rows_split": 0}


def measured(step: int, mean: float, worst: float, share: float, tokens: int) -> dict:
    return {
        **EXACT_STEP,
        "step": step,
        "logprob_abs_diff_mean": mean,
        "logprob_abs_diff_max": worst,
        "logprob_frac_beyond": share,
        "logprob_tokens": tokens,
        "logprob_threshold": 0.2,
    }


def test_totals_add_the_counts_and_weigh_the_logprob_means_by_tokens():
    steps = [measured(1, 0.1, 0.3, 0.0, 10), {**measured(2, 0.4, 0.5, 0.005, 30), "template_breaks": 2}]
    totals = report("train", steps)["totals"]
    assert totals["steps"] == 2 and totals["turns"] == 8 and totals["template_breaks"] == 2
    assert totals["logprob_tokens"] == 40 and totals["logprob_steps"] == 2
    assert totals["logprob_abs_diff_mean"] == pytest.approx((0.1 * 10 + 0.4 * 30) / 40)
    assert totals["logprob_frac_beyond"] == pytest.approx(0.005 * 30 / 40)
    assert totals["logprob_abs_diff_max"] == 0.5


def test_an_exact_run_and_legitimate_breaks_have_no_findings():
    legit = {**EXACT_STEP, "step": 2, "prefix_breaks": 3, "template_breaks": 2, "history_breaks": 1}
    steps = [measured(1, 1e-7, 2e-6, 0.0, 50), {**legit, "retokenized": 3, "rows_split": 3}]
    data = report("train", steps)
    assert data["problems"] == [] == exactness_findings(data)


@pytest.mark.parametrize(
    ("key", "words"),
    [("round_trip_failures", "round trip"), ("tool_format_failures", "reads as none")],
)
def test_each_round_trip_or_tool_format_failure_is_a_finding_naming_its_count_and_first_step(key, words):
    steps = [{**EXACT_STEP, "step": 1}, {**EXACT_STEP, "step": 2, key: 2}, {**EXACT_STEP, "step": 3, key: 1}]
    for kind in ("train", "eval"):
        (line,) = exactness_findings(report(kind, steps))
        assert line.startswith("3 ") and words in line and "first at step 2" in line


def test_outputs_without_ids_and_unexplained_row_splits_fail_a_training_run_only():
    steps = [{**EXACT_STEP, "step": 1, "outputs_without_ids": 2, "prefix_breaks": 1, "rows_split": 2}]
    train = exactness_findings(report("train", steps))
    assert len(train) == 2 and "no token ids" in train[0] and "split without a counted prefix break" in train[1]
    assert train[1].startswith("1 ")  # one split beyond the one break
    assert exactness_findings(report("eval", steps)) == []


@pytest.mark.parametrize(
    ("worst", "share", "fails"),
    [(MAX_LOGPROB_DIFF, 0.01, False), (MAX_LOGPROB_DIFF * 1.5, 0.0, True), (0.3, 0.02, True)],
)
def test_a_logprob_gap_over_the_limits_is_a_finding(worst, share, fails):
    findings = exactness_findings(report("train", [measured(1, 0.01, 0.1, 0.0, 9), measured(2, 0.05, worst, share, 9)]))
    assert bool(findings) == fails
    if fails:
        assert findings[0].startswith("step 2:") and f"{worst:.3g}" in findings[0]


def _episode(metrics: dict, outputs: list[ModelOutput]) -> Episode:
    steps = [Step(model_output=output) for output in outputs]
    return Episode(id="t:0", task={}, trajectories=[Trajectory(steps=steps)], metrics=metrics)


def test_step_metrics_count_the_episodes_and_take_rows_and_logprobs_from_the_step():
    with_ids = ModelOutput(text="a", prompt_ids=[1], completion_ids=[2], logprobs=[-0.1])
    episodes = [
        _episode({"token_mismatch": 1, "exactness/template_breaks": 1, "exactness/retokenized": 1}, [with_ids] * 2),
        _episode({}, [ModelOutput(text="b")]),
    ]
    update = {"batch/rows_split": 1, "mismatch/abs_diff_mean": 0.01, "mismatch/abs_diff_max": 0.02}
    update |= {"mismatch/frac_beyond": 0.0, "mismatch/tokens": 5.0}
    metrics = step_metrics(episodes, update, threshold=0.2)
    assert metrics == {
        "exactness/turns": 3,
        "exactness/prefix_breaks": 1,
        "exactness/template_breaks": 1,
        "exactness/history_breaks": 0,
        "exactness/round_trip_failures": 0,
        "exactness/tool_format_failures": 0,
        "exactness/retokenized": 1,
        "exactness/outputs_without_ids": 1,
        "exactness/rows_split": 1,
        "exactness/logprob_abs_diff_mean": 0.01,
        "exactness/logprob_abs_diff_max": 0.02,
        "exactness/logprob_frac_beyond": 0.0,
        "exactness/logprob_tokens": 5.0,
        "exactness/logprob_threshold": 0.2,
    }
    assert "exactness/logprob_tokens" not in step_metrics(episodes, {"mismatch/tokens": 0.0})  # nothing measured


def _read(run_dir) -> dict:
    return json.loads((run_dir / "exactness.json").read_text())


def test_training_writes_the_report_at_every_step_and_resume_rebuilds_it_from_the_kept_steps(tmp_path):
    log = RunLog(tmp_path)
    log.log(0, {"val/reward_mean": 0.5})  # validation: no report yet
    assert not (tmp_path / "exactness.json").exists()
    log.log(1, {"reward_mean": 1.0, "exactness/turns": 4, "exactness/round_trip_failures": 1})
    assert _read(tmp_path)["steps"] == [{"step": 1, "turns": 4, "round_trip_failures": 1}]
    log.log(2, {"exactness/turns": 6, "exactness/logprob_abs_diff_max": float("nan")})
    data = _read(tmp_path)
    assert [s["step"] for s in data["steps"]] == [1, 2] and data["totals"]["turns"] == 10
    assert data["steps"][1]["logprob_abs_diff_max"] == "NaN"  # strict JSON
    assert len(data["problems"]) == 1 and "first at step 1" in data["problems"][0]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # replaced atomically, no leftover
    RunLog(tmp_path, resume_step=1)  # the run resumes from step 1's checkpoint: step 2 is dropped, report too
    assert [s["step"] for s in _read(tmp_path)["steps"]] == [1]


def test_the_report_and_its_leftover_are_part_of_a_run_stopped_before_its_first_checkpoint(tmp_path):
    run = create_run_dir(tmp_path, "run", "train")
    write_manifest(run, "train", load_config(None, []))
    RunLog(run).log(1, {"exactness/turns": 2})
    (run / ".exactness.json.tmp-123").write_text("{")
    assert is_unstarted_train_run(run)


def test_an_eval_run_writes_the_report_of_its_episodes(tmp_path, monkeypatch, smollm2_tokenizer):
    from tests.support.training import eval_with

    overrides = ["data.val_size=3", "rollout.val_n=1", f"trainer.run_dir={tmp_path}", "trainer.name=e"]
    _, episodes = eval_with(monkeypatch, smollm2_tokenizer, lambda text: "42", overrides)
    data = _read(tmp_path / "e")
    assert data["kind"] == "eval" and data["problems"] == [] and len(data["steps"]) == 1
    assert data["steps"][0]["turns"] == sum(len(t.steps) for e in episodes for t in e.trajectories) > len(episodes)
    assert data["totals"]["prefix_breaks"] == 0 and data["totals"]["outputs_without_ids"] == 0
