"""Supervised data as training rows (`rllm.training.sft_data`): exact sampled ids from episodes, assistant-only
masks from conversations, filters with counts, length limits, and clear errors for data that cannot train."""

from __future__ import annotations

import json

import pytest

from rllm.runs import RunLog, read_episode_records
from rllm.training.sft_data import (
    TrainingDataError,
    export_trl,
    fit_length,
    read_jsonl,
    rows_from_messages,
    rows_from_trajectories,
    select_trajectories,
)
from tests.support.episodes import episode_records, sampled_episode

# ---- episodes -------------------------------------------------------------------------------------------------


def test_episode_rows_are_exactly_the_sampled_ids_with_rl_masks():
    pairs, _ = select_trajectories([sampled_episode("a", 0, 1.0, turns=2)])
    rows, stats = rows_from_trajectories(pairs, max_length=64)
    assert len(rows) == 1 and stats["rows_split"] == 0
    row = rows[0]
    assert row.input_ids == [1, 2, 3, 10, 20, 7, 8, 11, 20]
    assert row.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 1]  # completions only; prompt and observation are context
    assert stats["loss_tokens"] == 4


def test_filters_apply_in_order_and_count_what_each_left():
    episodes = [
        sampled_episode("solved", 0, 1.0),
        sampled_episode("solved", 1, 1.0),  # pass rate 1
        sampled_episode("mixed", 0, 1.0),
        sampled_episode("mixed", 1, 0.0),
        sampled_episode("mixed", 2, 0.5),  # pass rate 2/3
        sampled_episode("never", 0, 0.0),
    ]
    pairs, stats = select_trajectories(episode_records(episodes), task_pass_rate="mixed")
    assert [e.id for e, _ in pairs] == ["mixed:0", "mixed:2"]
    assert stats["trajectories"] == 6 and stats["after_correct_only"] == 4 and stats["after_task_pass_rate"] == 2
    pairs, stats = select_trajectories(episode_records(episodes), min_reward=0.75, max_per_task=1)
    assert [e.id for e, _ in pairs] == ["solved:0", "mixed:0"]
    assert stats["after_min_reward"] == 3 and stats["after_max_per_task"] == 2 and stats["tasks"] == 2
    pairs, _ = select_trajectories(episode_records(episodes), correct_only=False)
    assert len(pairs) == 6


def test_split_and_role_filters():
    records = episode_records([sampled_episode("a", 0, 1.0, name="solver"), sampled_episode("a", 1, 1.0, name="judge")])
    records += episode_records([sampled_episode("b", 0, 1.0, name="solver")], split="val")
    pairs, _ = select_trajectories(records, split="train", roles=["solver"])
    assert [e.id for e, _ in pairs] == ["a:0"]
    with pytest.raises(TrainingDataError, match=r"no trajectory has a role in \['critic'\]; the roles are \['judge', "):
        select_trajectories(records, roles=["critic"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"no trajectory succeeded .*after_correct_only=0"),
        ({"correct_only": False, "min_reward": 2.0}, r"no trajectory has reward >= 2.0 .*trajectories=2"),
        ({"correct_only": False, "task_pass_rate": "mixed"}, r"0 of 1 tasks always solved"),
        ({"split": "val"}, r"no episodes of split 'val'"),
    ],
)
def test_a_filter_that_leaves_nothing_says_which_with_counts(kwargs, message):
    with pytest.raises(TrainingDataError, match=message):
        select_trajectories(episode_records([sampled_episode("a", 0, 0.0), sampled_episode("a", 1, 0.0)]), **kwargs)


def test_episodes_without_token_ids_are_refused_naming_the_fix():
    pairs, _ = select_trajectories([sampled_episode("a", 0, 1.0, ids=False)])
    with pytest.raises(TrainingDataError, match=r"step 0 has no token ids.*rollout.openai.tokenizer.*sft.messages"):
        rows_from_trajectories(pairs, max_length=64)


def test_episodes_round_trip_through_a_run_directory(tmp_path):
    log = RunLog(tmp_path)
    log.log_episodes(3, [sampled_episode("a", 0, 1.0), sampled_episode("a", 1, 0.0)], "eval")
    log.close()
    pairs, stats = select_trajectories(read_episode_records(tmp_path))
    rows, _ = rows_from_trajectories(pairs, max_length=64)
    assert stats["after_correct_only"] == 1 and rows[0].input_ids == [1, 2, 3, 10, 20]


# ---- length ----------------------------------------------------------------------------------------------------


def _long_rows():
    pairs, _ = select_trajectories([sampled_episode("a", 0, 1.0, turns=3), sampled_episode("b", 0, 1.0)])
    return rows_from_trajectories(pairs, max_length=64)[0]  # 13 and 5 tokens


def test_overlong_rows_are_an_error_with_counts_by_default():
    with pytest.raises(
        TrainingDataError,
        match=r"1 of 2 sequences are longer than sft.max_length=8 tokens \(longest "
        r"13\).*sft.overlong=truncate",
    ):
        fit_length(_long_rows(), max_length=8)


def test_overlong_rows_truncate_or_drop_when_asked():
    rows, stats = fit_length(_long_rows(), max_length=8, overlong="truncate")
    assert [len(r) for r in rows] == [8, 5] and rows[0].truncated and stats["rows_truncated"] == 1
    assert rows[0].loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
    rows, stats = fit_length(_long_rows(), max_length=8, overlong="drop")
    assert [len(r) for r in rows] == [5] and stats["rows_dropped_overlong"] == 1
    with pytest.raises(TrainingDataError, match=r"no row has a token to train on within sft.max_length=3"):
        fit_length(_long_rows(), max_length=3, overlong="truncate")  # only prompt tokens would be left


# ---- messages ----------------------------------------------------------------------------------------------------


def _chat(i: int) -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"What is {i}+{i}?"},
        {"role": "assistant", "content": str(2 * i)},
        {"role": "user", "content": "Times two?"},
        {"role": "assistant", "content": str(4 * i)},
    ]


def test_messages_train_every_assistant_turn_up_to_its_end_of_turn(shipped_tokenizer):
    tok = shipped_tokenizer
    rows, stats = rows_from_messages([{"messages": _chat(3)}], tok, max_length=512)
    assert len(rows) == 1 and stats["rows_split"] == 0
    row = rows[0]
    trained = [tok.decode([t]) for t, m in zip(row.input_ids, row.loss_mask, strict=True) if m]
    assert trained == ["6", tok.eos_token, "1", "2", tok.eos_token] or trained == [
        "6",
        tok.eos_token,
        "12",
        tok.eos_token,
    ]
    # the whole row is the template's rendering of the conversation, up to the last end-of-turn token
    text = tok.apply_chat_template(_chat(3), tokenize=False)
    assert text.startswith(tok.decode(row.input_ids)) and text[len(tok.decode(row.input_ids)) :].strip() == ""


def test_prompt_completion_records_train_the_completion_only(smollm2_tokenizer):
    chat = _chat(2)
    rows, _ = rows_from_messages([{"prompt": chat[:4], "completion": chat[4:]}], smollm2_tokenizer, max_length=512)
    trained = smollm2_tokenizer.decode([t for t, m in zip(rows[0].input_ids, rows[0].loss_mask, strict=True) if m])
    assert trained == "8" + smollm2_tokenizer.eos_token


def test_tools_reach_the_template(qwen_tokenizer):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "calc",
                "description": "Evaluate.",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        }
    ]
    with_tools, _ = rows_from_messages([{"messages": _chat(1), "tools": tools}], qwen_tokenizer, max_length=1024)
    without, _ = rows_from_messages([{"messages": _chat(1)}], qwen_tokenizer, max_length=1024)
    assert "calc" in qwen_tokenizer.decode(with_tools[0].input_ids)
    assert with_tools[0].num_loss_tokens == without[0].num_loss_tokens


def test_records_without_an_assistant_turn_are_counted_and_named(smollm2_tokenizer):
    records = [{"messages": _chat(1)}, {"messages": _chat(1)[:2]}, {"prompt": _chat(1), "completion": []}]
    with pytest.raises(TrainingDataError, match=r"2 of 3 records have no assistant turn to train on \(records 2, 3\)"):
        rows_from_messages(records, smollm2_tokenizer, max_length=512)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "hello"}, r"record 1 has keys \['text'\]: expected 'messages'"),
        ({"prompt": "hi", "completion": "there"}, r"plain-text prompt/completion is not supported"),
        ({"messages": [{"content": "no role"}]}, r"a list of objects with a 'role'"),
    ],
)
def test_records_in_no_known_format_are_refused(smollm2_tokenizer, record, message):
    with pytest.raises(TrainingDataError, match=message):
        rows_from_messages([record], smollm2_tokenizer, max_length=512)


def test_read_jsonl_names_the_bad_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"messages": []}\n\n[1, 2]\n')
    with pytest.raises(TrainingDataError, match=r"data.jsonl, line 3: expected a JSON object, got list"):
        read_jsonl(path)
    path.write_text("\n")
    with pytest.raises(TrainingDataError, match="holds no records"):
        read_jsonl(path)


def test_export_writes_trl_pretokenized_rows(tmp_path):
    rows = _long_rows()
    assert export_trl(rows, tmp_path / "rows.jsonl") == 2
    lines = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert lines == [{"input_ids": r.input_ids, "completion_mask": r.loss_mask} for r in rows]
