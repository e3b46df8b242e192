"""Asynchronous training (`rollout.max_staleness`) end to end on a tiny random-init model: the staleness bound read
back from the recorded weight versions, the overlap, exact resume with rollouts in flight, and the mismatch metric."""

from __future__ import annotations

import pytest
import torch

from rllm.runs import load_metrics, read_episode_records
from rllm.training.checkpoint import latest_checkpoint, load_checkpoint
from rllm.training.trainer import is_time_metric
from tests.support.envs import LetterEnv
from tests.support.training import TINY, env_trainer, final_state

TASKS = [{"id": f"t{i}", "letter": letter} for i, letter in enumerate("eatoinsr")]


def _run(tmp_path, tiny_model_dir, name, extra=(), steps=5):
    overrides = [
        *TINY,
        f"model.name={tiny_model_dir}",
        f"trainer.total_steps={steps}",
        "rollout.n_parallel=1",
        "rollout.n=4",
        "data.val_size=0",
        "trainer.tensorboard=false",
        f"trainer.run_dir={tmp_path}",
        f"trainer.name={name}",
        *extra,
    ]
    env_trainer(LetterEnv, TASKS, overrides).train()
    return [m for m in load_metrics(tmp_path / name) if "reward_mean" in m]


@pytest.mark.parametrize("staleness", [1, 2])
def test_each_step_trains_on_rollouts_exactly_max_staleness_versions_old(tmp_path, tiny_model_dir, staleness):
    steps = _run(tmp_path, tiny_model_dir, "async", [f"rollout.max_staleness={staleness}"])
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5]
    for m in steps:
        k = m["step"]
        # step k's rollouts used the weights pushed after step k - 1 - s (the initial ones before that)
        assert m["rollout_weight_version"] == max(0, k - 1 - staleness)
        assert m["off_policy/staleness_max"] == min(k - 1, staleness) <= staleness
        assert m["weight_version"] == k and m["skipped_update"] == 0
    # the same bound from the episodes themselves: every sampled token's version against the step that trained it
    for record in read_episode_records(tmp_path / "async", split="train"):
        k, episode = record["step"], record["episode"]
        versions = {step.model_output.weight_version for t in episode.trajectories for step in t.steps}
        assert versions == {max(0, k - 1 - staleness)}
    assert any(m["grad_norm"] > 0 for m in steps)
    assert all("time_wait_rollout_s" in m for m in steps)


def test_synchronous_training_is_on_policy_and_measures_no_mismatch(tmp_path, tiny_model_dir):
    steps = _run(tmp_path, tiny_model_dir, "sync", steps=2)
    for m in steps:
        assert m["rollout_weight_version"] == m["step"] - 1 and m["off_policy/staleness_max"] == 0
        # float32 sampler and trainer on the same weights: the log-probs agree to rounding
        assert m["mismatch/tokens"] > 0 and m["mismatch/abs_diff_max"] < 1e-4
        assert m["mismatch/frac_beyond"] == 0 and m["off_policy/nonfinite_tokens"] == 0


def test_a_stale_step_measures_its_policy_lag_as_mismatch(tmp_path, tiny_model_dir):
    """With s = 1 the trainer's weights are one update ahead of the sampler's from step 3 on: the mismatch metric
    sees that lag (with lr 1e-2 on a tiny model, clearly above float rounding)."""
    steps = _run(tmp_path, tiny_model_dir, "lag", ["rollout.max_staleness=1"], steps=3)
    assert steps[0]["mismatch/abs_diff_max"] < 1e-4  # step 1: version 0 trained from version 0
    assert steps[2]["mismatch/abs_diff_mean"] > 1e-3  # step 3: version 1 trained from version 2


def test_an_async_run_stopped_and_resumed_equals_an_uninterrupted_one(tmp_path, tiny_model_dir):
    """Stopped after step 2 with step 3's rollouts already sampled (s = 2: steps 3 and 4): the checkpoint keeps them,
    the resumed run trains them instead of sampling them again, and ends bitwise where the uninterrupted run ends."""
    extra = ["rollout.max_staleness=2", "trainer.save_every=1"]
    _run(tmp_path, tiny_model_dir, "straight", extra)
    _run(tmp_path, tiny_model_dir, "resumed", [*extra, "trainer.stop_after=2"])
    step, parts = load_checkpoint(latest_checkpoint(tmp_path / "resumed"))
    assert step == 2 and [r["step"] for r in parts["trainer"]["pending_rollouts"]] == [3, 4]
    _run(tmp_path, tiny_model_dir, "resumed", [*extra, f"trainer.resume={tmp_path / 'resumed'}"])
    (_, a), (_, b) = final_state(tmp_path / "straight"), final_state(tmp_path / "resumed")
    assert a["trainable"].keys() == b["trainable"].keys()
    assert all(torch.equal(a["trainable"][name], b["trainable"][name]) for name in a["trainable"])

    def comparable(run):
        return [{k: v for k, v in m.items() if not is_time_metric(k)} for m in load_metrics(tmp_path / run)]

    assert comparable("straight") == comparable("resumed")

    def trained(run):  # (step, task) of every trained episode: none lost, none twice
        records = read_episode_records(tmp_path / run, split="train")
        return sorted((r["step"], r["episode"].id) for r in records)

    assert trained("straight") == trained("resumed") and len(trained("straight")) == 5 * 2 * 4


def test_a_nan_sampler_logprob_is_masked_and_counted_not_trained(tmp_path, tiny_model_dir, monkeypatch):
    """A sampler that reports a NaN log-prob for one token: that token leaves the loss, the step says how many, the
    update is finite and taken."""
    from rllm.inference.model import LocalModel

    real = LocalModel.generate

    async def one_nan(self, prompt, sampling=None):
        output = await real(self, prompt, sampling)
        if output.logprobs:
            output.logprobs[0] = float("nan")
        return output

    monkeypatch.setattr(LocalModel, "generate", one_nan)
    steps = _run(tmp_path, tiny_model_dir, "nan", steps=1)
    (m,) = steps
    assert m["off_policy/nonfinite_tokens"] == 2 * 4 * 2  # tasks x samples x turns, one token each
    assert m["skipped_update"] == 0 and m["skipped_nonfinite"] == 0 and m["grad_norm"] > 0


def test_partial_rollouts_keep_the_bound_and_lose_no_episode_across_a_resume(tmp_path, tiny_model_dir):
    """partial_rollouts: the push does not wait for the step in flight; the first-token versions still respect the
    bound, and a run stopped after step 2 and resumed trains every sampled episode once."""
    extra = ["rollout.max_staleness=1", "rollout.partial_rollouts=true", "trainer.save_every=1"]
    _run(tmp_path, tiny_model_dir, "partial", [*extra, "trainer.stop_after=2"])
    steps = _run(tmp_path, tiny_model_dir, "partial", [*extra, f"trainer.resume={tmp_path / 'partial'}"])
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5]
    assert all(m["off_policy/staleness_max"] <= 1 for m in steps)
    records = read_episode_records(tmp_path / "partial", split="train")
    per_step = {}
    for record in records:
        per_step.setdefault(record["step"], []).append(record["episode"].id)
    assert sorted(per_step) == [1, 2, 3, 4, 5] and all(len(ids) == 2 * 4 for ids in per_step.values())
    # the tasks trained: 5 steps x 2 tasks taken in order from the seeded sampler, none skipped, none twice
    straight = _run(tmp_path, tiny_model_dir, "straight", extra)
    straight_ids = sorted(r["episode"].task_id for r in read_episode_records(tmp_path / "straight", split="train"))
    assert sorted(r["episode"].task_id for r in records) == straight_ids and len(straight) == 5


def test_decoupled_truncated_correction_trains_a_stale_run_end_to_end(tmp_path, tiny_model_dir):
    """mode decoupled through the trainer: the proximal log-probs are recomputed for every row, the mismatch is
    measured on all of them, and the stale steps' importance weights are truncated into [is_low, is_high]."""
    extra = [
        "rollout.max_staleness=1",
        "algorithm.off_policy.mode=decoupled",
        "algorithm.off_policy.is_level=token",
        "algorithm.off_policy.is_high=1.05",
        "algorithm.off_policy.is_low=0.95",
        "algorithm.off_policy.mismatch_threshold=0.01",
    ]
    steps = _run(tmp_path, tiny_model_dir, "decoupled", extra, steps=3)
    for m in steps:
        assert m["mismatch/tokens"] == m["batch/loss_tokens"]  # every row's tokens, not one mini-batch's
        assert m["skipped_update"] == 0 and "off_policy/is_weight_mean" in m
    assert steps[0]["off_policy/is_truncated_fraction"] == 0 and steps[0]["mismatch/frac_beyond"] == 0
    assert steps[2]["off_policy/is_truncated_fraction"] > 0  # step 3 trains version-1 samples at version 2
    assert steps[2]["mismatch/frac_beyond"] > 0


def test_bfloat16_rollouts_sample_from_a_synced_copy_and_show_their_mismatch(tmp_path, tiny_model_dir):
    """`rollout.dtype=bfloat16` with float32 training: the sampler is its own bf16 copy (the trainer's weights stay
    float32), updated after every step, and the bf16 rounding shows up in the mismatch metric."""
    steps = _run(tmp_path, tiny_model_dir, "bf16", ["rollout.dtype=bfloat16"], steps=2)
    for m in steps:
        assert m["rollout_weight_version"] == m["step"] - 1 and m["off_policy/staleness_max"] == 0
        assert m["mismatch/tokens"] > 0 and m["mismatch/abs_diff_mean"] > 1e-4  # bf16 rounding, not float noise
    assert steps[1]["weight_version"] == 2 and any(m["grad_norm"] > 0 for m in steps)
