"""Preference pairs (`rllm.training.dpo_data`): success/failure pairs of one task and role on exactly the sampled
ids, TRL preference records, length limits, clear errors with counts, and the export TRL reads back to our ids."""

from __future__ import annotations

import json

import pytest

from rllm.training.dpo_data import export_trl_preferences, pairs_from_episodes, pairs_from_preferences
from rllm.training.sft_data import TrainingDataError
from rllm.types import Episode, ModelOutput, Step, Trajectory
from tests.support.episodes import episode_records, sampled_episode


def test_pairs_match_successes_with_failures_of_the_same_task_in_file_order():
    episodes = [
        sampled_episode("a", 0, 1.0),
        sampled_episode("a", 1, 0.0),
        sampled_episode("a", 2, 1.0),
        sampled_episode("a", 3, 0.0),
        sampled_episode("a", 4, 0.0),
        sampled_episode("solved", 0, 1.0),
        sampled_episode("never", 0, 0.0),
    ]
    pairs, stats = pairs_from_episodes(episode_records(episodes), max_pairs_per_task=5, max_length=64)
    assert [(p.chosen.episode_id, p.rejected.episode_id) for p in pairs] == [("a:0", "a:1"), ("a:2", "a:3")]
    assert (stats["groups"], stats["groups_all_succeeded"], stats["groups_all_failed"]) == (3, 1, 1)
    assert pairs[0].key == "a:agent" and pairs[0].chosen.input_ids == [1, 2, 3, 10, 20]
    pairs, _ = pairs_from_episodes(episode_records(episodes), max_length=64)  # max_pairs_per_task defaults to 1
    assert len(pairs) == 1


def test_multi_turn_sides_share_their_prompt_and_train_only_sampled_tokens():
    pairs, _ = pairs_from_episodes(
        [sampled_episode("t", 0, 1.0, turns=2), sampled_episode("t", 1, 0.0, turns=3)], max_length=64
    )
    (pair,) = pairs
    assert pair.chosen.input_ids[:3] == pair.rejected.input_ids[:3] == [1, 2, 3]
    assert pair.rejected.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]  # observations are context


def test_roles_and_splits_pair_separately():
    solver = [sampled_episode("a", 0, 1.0, name="solver"), sampled_episode("a", 1, 0.0, name="solver")]
    judge = [sampled_episode("a", 2, 1.0, name="judge")]
    pairs, stats = pairs_from_episodes(episode_records(solver + judge), max_length=64)
    assert [p.key for p in pairs] == ["a:solver"] and stats["groups_all_succeeded"] == 1
    with pytest.raises(TrainingDataError, match=r"no task of split 'val' has both .*with a role in \['judge'\]"):
        pairs_from_episodes(episode_records(solver + judge), split="val", roles=["judge"], max_length=64)


def test_no_pair_says_why_with_counts():
    with pytest.raises(TrainingDataError, match=r"no preference pairs: .*groups=2, all succeeded=1, all failed=1"):
        pairs_from_episodes([sampled_episode("a", 0, 1.0), sampled_episode("b", 0, 0.0)], max_length=64)


def test_a_side_that_splits_into_several_rows_is_counted_not_paired():
    first = ModelOutput(prompt_ids=[1, 2], completion_ids=[3], logprobs=[0.0])
    rewrites_history = ModelOutput(prompt_ids=[9, 9], completion_ids=[4], logprobs=[0.0])
    rewritten = Trajectory(steps=[Step(model_output=first), Step(model_output=rewrites_history)], reward=0.0)
    episodes = [sampled_episode("a", 0, 1.0), Episode(id="a:1", trajectories=[rewritten]), sampled_episode("a", 2, 0.0)]
    with pytest.raises(TrainingDataError, match="split trajectories=1"):
        pairs_from_episodes(episodes, max_length=64)
    pairs, stats = pairs_from_episodes(
        episodes + [sampled_episode("b", 0, 1.0), sampled_episode("b", 1, 0.0)], max_length=64
    )
    assert [p.key for p in pairs] == ["b:agent"] and stats["trajectories_split"] == 1


def test_long_pairs_error_truncate_or_drop():
    episodes = [
        sampled_episode("a", 0, 1.0, turns=3),
        sampled_episode("a", 1, 0.0),
        sampled_episode("b", 0, 1.0),
        sampled_episode("b", 1, 0.0),
    ]
    with pytest.raises(
        TrainingDataError,
        match=r"1 of 2 pairs have a side longer than dpo.max_length=8 tokens "
        r"\(longest 13\).*dpo.overlong=truncate",
    ):
        pairs_from_episodes(episodes, max_length=8)
    pairs, stats = pairs_from_episodes(episodes, max_length=8, overlong="truncate")
    assert len(pairs[0].chosen) == 8 and pairs[0].chosen.truncated and stats["pairs"] == 2
    pairs, stats = pairs_from_episodes(episodes, max_length=8, overlong="drop")
    assert [p.key for p in pairs] == ["b:agent"] and stats["pairs_dropped_overlong"] == 1


def _record(i: int) -> dict:
    return {
        "prompt": [{"role": "user", "content": f"{i}+{i}?"}],
        "chosen": [{"role": "assistant", "content": f"{2 * i}"}],
        "rejected": [{"role": "assistant", "content": "no idea"}],
    }


def test_preference_records_tokenize_each_side_after_the_shared_prompt(smollm2_tokenizer):
    tok = smollm2_tokenizer
    (pair,), stats = pairs_from_preferences([_record(4)], tok, max_length=256)
    assert stats["pairs"] == 1
    trained = {
        side: tok.decode([t for t, m in zip(row.input_ids, row.loss_mask, strict=True) if m])
        for side, row in (("chosen", pair.chosen), ("rejected", pair.rejected))
    }
    assert trained == {"chosen": "8" + tok.eos_token, "rejected": "no idea" + tok.eos_token}
    start = pair.chosen.loss_mask.index(1)
    assert pair.chosen.input_ids[:start] == pair.rejected.input_ids[:start]
    with pytest.raises(TrainingDataError, match=r"record 2 lacks \['rejected'\]"):
        pairs_from_preferences([_record(1), {"prompt": [], "chosen": []}], tok, max_length=256)


def test_exported_preferences_tokenize_back_to_our_ids_in_trl(smollm2_tokenizer, tmp_path):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from rllm.models.registry import build_tiny_model

    pairs, _ = pairs_from_preferences([_record(i) for i in range(3)], smollm2_tokenizer, max_length=256)
    assert export_trl_preferences(pairs, smollm2_tokenizer, tmp_path / "prefs.jsonl") == 3
    lines = [json.loads(line) for line in (tmp_path / "prefs.jsonl").read_text().splitlines()]
    assert set(lines[0]) == {"prompt", "chosen", "rejected"} and lines[0]["chosen"].endswith("<|im_end|>")
    args = trl.DPOConfig(output_dir=str(tmp_path / "trl"), report_to=[], use_cpu=True, bf16=False, max_length=None)
    trainer = trl.DPOTrainer(
        model=build_tiny_model(smollm2_tokenizer),
        ref_model=build_tiny_model(smollm2_tokenizer),
        args=args,
        processing_class=smollm2_tokenizer,
        train_dataset=datasets.Dataset.from_json(str(tmp_path / "prefs.jsonl")),
    )
    for example, pair in zip(trainer.train_dataset, pairs, strict=True):
        assert example["prompt_ids"] + example["chosen_ids"] == pair.chosen.input_ids
        assert example["prompt_ids"] + example["rejected_ids"] == pair.rejected.input_ids


def test_every_dpo_data_key_reaches_the_pairs(tmp_path, smollm2_tokenizer):
    """The `dpo` section's data keys through `load_dpo_pairs` (what `rllm dpo` calls), on a run directory."""
    from rllm.config import load_config
    from rllm.runs import RunLog
    from rllm.training.dpo import load_dpo_pairs

    (tmp_path / "run").mkdir()
    log = RunLog(tmp_path / "run")
    log.log_episodes(1, [sampled_episode("a", i, float(i % 2 == 0), name="solver") for i in range(4)], "train")
    log.log_episodes(
        1, [sampled_episode("a", 9, 1.0, name="judge"), sampled_episode("a", 8, 0.0, name="judge", turns=3)], "val"
    )
    log.close()

    def load(*keys):
        return load_dpo_pairs(load_config(None, [f"dpo.episodes={tmp_path / 'run'}", *keys]), smollm2_tokenizer)

    pairs, stats = load("dpo.max_pairs_per_task=2")
    assert [p.key for p in pairs] == ["a:solver", "a:solver", "a:judge"] and stats["groups"] == 2
    pairs, _ = load("dpo.split=train", "dpo.max_pairs_per_task=2")
    assert len(pairs) == 2
    pairs, _ = load("dpo.roles=[judge]", "dpo.max_length=8", "dpo.overlong=truncate")
    assert [p.key for p in pairs] == ["a:judge"] and len(pairs[0].rejected) == 8
    with pytest.raises(TrainingDataError, match="dpo.max_length=8"):
        load("dpo.roles=[judge]", "dpo.max_length=8")
    path = tmp_path / "prefs.jsonl"
    path.write_text(json.dumps(_record(2)) + "\n")
    pairs, stats = load_dpo_pairs(load_config(None, [f"dpo.preferences={path}"]), smollm2_tokenizer)
    assert stats["pairs"] == 1 and pairs[0].key == "record 1"
