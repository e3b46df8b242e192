"""The alarms' rules (`rllm.health`) on step histories in `metrics.jsonl`'s schema and on real `Episode`s: each rule
fires on the pathology it names, at the step where its threshold is crossed, and not on the clean demo's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllm.audit import audit_run
from rllm.health import DETECTORS, HealthMonitor, episode_flags, episode_signals, replay
from rllm.runs import RunLog
from rllm.types import Episode, ModelOutput, Step, TerminationReason, Trajectory

# The demo's numbers (make demo, 15 steps of GRPO on Qwen2.5-Coder-0.5B): entropy, response length, reward (= success
# rate: the reward is correctness), groups with all-equal rewards of 8.
DEMO = [
    (1.169, 6.09, 0.156, 5), (0.523, 4.81, 0.469, 5), (0.779, 5.13, 0.219, 5), (0.536, 4.88, 0.125, 6),
    (0.465, 4.97, 0.281, 7), (0.307, 4.69, 0.438, 5), (0.286, 4.78, 0.406, 5), (0.370, 4.91, 0.531, 4),
    (0.534, 4.78, 0.312, 6), (0.492, 4.91, 0.375, 5), (0.455, 5.03, 0.344, 4), (0.314, 5.00, 0.562, 6),
    (0.171, 4.69, 0.781, 7), (0.480, 5.00, 0.375, 5), (0.402, 4.75, 0.406, 4),
]  # fmt: skip


def _step(step: int, **values) -> dict:
    base = {
        "step": step, "reward_mean": 0.5, "success_rate": 0.5, "entropy": 0.5, "approx_kl": 0.0,
        "clip_fraction": 0.0, "response_length_mean": 20.0, "batch/groups": 8, "batch/uniform_groups": 4,
        "mismatch/abs_diff_mean": 2e-6, "mismatch/frac_beyond": 0.0, "token_mismatch": 0, "turns_mean": 1.0,
        "episodes": 32, "health/empty_rate": 0.0, "health/repetitive_rate": 0.0, "health/truncated_rate": 0.0,
        "health/protected_edits": 0,
    }  # fmt: skip
    return {**base, **values}


def _demo() -> list[dict]:
    return [
        _step(i, entropy=e, response_length_mean=n, reward_mean=r, success_rate=r, **{"batch/uniform_groups": u})
        for i, (e, n, r, u) in enumerate(DEMO, start=1)
    ]


def _first(history: list[dict]) -> dict[str, int]:
    found: dict[str, int] = {}
    for alarm in replay(history):
        found.setdefault(alarm.name, alarm.step)
    return found


def test_the_clean_demo_raises_nothing():
    assert replay(_demo()) == []


@pytest.mark.parametrize(
    ("name", "series", "step"),
    [
        ("entropy_collapse", {"entropy": [0.6, 0.2, 0.02, 0.01, 0.01]}, 4),
        ("kl_spike", {"approx_kl": [0.001, 0.002, 0.001, 0.03, 0.001]}, 4),  # 10x the median, above 0.02
        ("kl_spike", {"approx_kl": [0.0, 0.15]}, 2),  # above the ceiling
        ("clip_spike", {"clip_fraction": [0.01, 0.02, 0.01, 0.12]}, 4),
        ("length_drift", {"response_length_mean": [10, 11, 15, 24, 30]}, 5),  # paid for length
        ("length_drift", {"response_length_mean": [40, 38, 30, 15, 12]}, 5),  # paid for brevity
        ("reward_without_success", {"reward_mean": [0.1, 0.1, 0.15, 0.25, 0.5], "success_rate": [0.1] * 5}, 5),
        ("no_signal", {"batch/uniform_groups": [8, 8, 7, 8, 8, 8]}, 6),
        ("truncation", {"health/truncated_rate": [0.1, 0.4, 0.5]}, 3),
        ("empty_replies", {"health/empty_rate": [0.3, 0.0, 0.3, 0.5]}, 4),
        ("repetitive_replies", {"health/repetitive_rate": [0.5, 0.5]}, 2),
        ("logprob_mismatch", {"mismatch/abs_diff_mean": [0.001, 0.001, 0.002, 0.08]}, 4),
        ("logprob_mismatch", {"mismatch/abs_diff_mean": [0.002, 0.002, 0.002, 0.015]}, 4),  # growing
        ("prefix_breaks", {"token_mismatch": [0, 1, 5], "turns_mean": [2.0] * 3, "episodes": [16] * 3}, 3),
        ("protected_tests", {"health/protected_edits": [0, 0, 1]}, 3),
    ],
)
def test_each_rule_fires_where_its_threshold_is_crossed(name, series, step):
    steps = max(len(values) for values in series.values())
    history = [_step(i + 1, **{key: values[i] for key, values in series.items()}) for i in range(steps)]
    found = _first(history)
    assert found.get(name) == step, found
    assert set(found) == {name}  # nothing else in the clean base moved


def test_every_detector_is_tested_and_states_its_rule():
    tested = {name for name, _, _ in test_each_rule_fires_where_its_threshold_is_crossed.pytestmark[0].args[1]}
    assert tested == {detector.name for detector in DETECTORS}
    assert all(detector.rule for detector in DETECTORS)


def test_a_reward_rising_over_a_saturated_success_rate_is_no_alarm():
    # every reply succeeds already (success can rise no further): a reward that keeps rising is no evidence of hacking
    history = [_step(i + 1, reward_mean=r, success_rate=1.0) for i, r in enumerate([1.2, 1.4, 1.6, 1.8, 2.0])]
    assert _first(history) == {}


def test_a_spike_needs_history_or_the_ceiling():
    # one noisy early value above the floor but below the ceiling is no spike without three steps to compare with
    assert _first([_step(1, approx_kl=0.001), _step(2, approx_kl=0.05)]) == {}


def test_the_monitor_reports_an_alarm_when_it_starts_and_resumes_from_the_log():
    history = [_step(i, **{"health/truncated_rate": 0.9}) for i in range(1, 5)]
    monitor = HealthMonitor()
    started = [[a.name for a in monitor.observe(m)[1]] for m in history]
    assert started == [[], ["truncation"], [], []]  # once, at its first step, though it lasts
    resumed = HealthMonitor(history[:3])  # a resumed run: the alarm was on already
    alarms, new = resumed.observe(history[3])
    assert [a.name for a in alarms] == ["truncation"] and new == []


def _reply(text: str, ids: list[int], finish: str = "stop", **info) -> Step:
    return Step(model_output=ModelOutput(text=text, completion_ids=ids, finish_reason=finish), info=info)


def _episode(eid: str, *steps: Step, reason=TerminationReason.ENV_DONE) -> Episode:
    return Episode(id=eid, trajectories=[Trajectory(steps=list(steps))], termination_reason=reason)


def test_episode_flags_read_the_replies_and_the_grade():
    loop = [1, 2, 3, 4] * 6  # 24 tokens, 3 distinct 4-grams... of 21
    prose = list(range(24))
    assert episode_flags(_episode("a", _reply("  ", [5]))) == {"empty"}
    assert episode_flags(_episode("b", _reply("x " * 24, loop))) == {"repetitive"}
    assert episode_flags(_episode("c", _reply("x " * 24, prose))) == set()
    assert episode_flags(_episode("d", _reply("abc", [1, 2], finish="length"))) == {"truncated"}
    assert episode_flags(_episode("e", _reply("ok", [1]), reason=TerminationReason.MAX_RESPONSE_LENGTH)) == {
        "truncated"
    }
    assert episode_flags(_episode("f", _reply("diff", [1], grade="protected_path"))) == {"protected"}
    tool_call_only = Step(model_output=ModelOutput(text="", tool_calls=[{"name": "ls", "arguments": "{}"}]))
    assert episode_flags(_episode("g", tool_call_only)) == set()  # a reply that is a tool call is not empty
    signals = episode_signals([_episode("a", _reply("", [])), _episode("c", _reply("fine", [1]))])
    assert signals == {
        "health/empty_rate": 0.5,
        "health/repetitive_rate": 0.0,
        "health/truncated_rate": 0.0,
        "health/protected_edits": 0,
    }


def test_audit_of_a_run_logged_without_signals_reads_them_from_its_episodes(tmp_path):
    """A run from before the trainer logged `health/*`: the audit computes them from episodes.jsonl, joins steps
    into one span and links the episodes that show it."""
    run = tmp_path / "old"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"kind": "train"}))
    log = RunLog(Path(run))
    for step in (1, 2, 3):
        metrics = {k: v for k, v in _step(step).items() if not k.startswith("health/") and k != "step"}
        log.log(step, metrics)
        cut = [_episode(f"s{step}-{i}", _reply("abc", [1, 2], finish="length")) for i in range(2)]
        log.log_episodes(step, [*cut, _episode(f"s{step}-ok", _reply("fine", [1]))], "train")
    report = audit_run(run)
    (span,) = report.alarms
    assert (span.name, span.steps, report.steps, report.ok) == ("truncation", [2, 3], 3, False)
    assert span.episodes == [(2, "s2-0"), (2, "s2-1"), (3, "s3-0"), (3, "s3-1")]
    assert span.line().startswith("alarm truncation at steps 2-3: 67% of the episodes were cut")
