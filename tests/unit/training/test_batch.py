"""Episodes → training rows → tensors (`rllm.training.batch`): the loss mask covers exactly the sampled tokens."""

from __future__ import annotations

import pytest

from rllm.engine import AgentExecutionEngine
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.tasks.frozenlake import FrozenLakeAgent, FrozenLakeEnv
from rllm.training.batch import (
    RowBuildError,
    TrainingRow,
    build_rows,
    collate,
    episode_trajectories,
    split_micro_batches,
    trained_steps,
)
from rllm.types import Episode, ModelOutput, Step, Trajectory

# A 4x4 lake without holes: three moves can never end the episode, so every scripted reply is a step.
OPEN_LAKE = {"id": "lake", "desc": ["SFFF", "FFFF", "FFFF", "FFFG"], "max_steps": 10}
MOVES = ["Action: right", "I will go down.\nAction: down", "Action: left"]
LIMITS = {"max_prompt_length": 4096, "max_response_length": 4096}


def _rollout(model, agent_class=FrozenLakeAgent, max_steps=3) -> Episode:
    engine = AgentExecutionEngine(
        agent_class=agent_class, env_class=FrozenLakeEnv, model=model, max_steps=max_steps, env_workers=0
    )
    return engine.execute_tasks([OPEN_LAKE])[0]


def _step(prompt, completion, logprobs=None, version=0) -> Step:
    logprobs = [-0.1 * (i + 1) for i in range(len(completion))] if logprobs is None else logprobs
    output = ModelOutput(prompt_ids=prompt, completion_ids=completion, logprobs=logprobs, weight_version=version)
    return Step(model_output=output)


def _pair(*steps, episode_id="t:0", name="agent"):
    trajectory = Trajectory(name=name, steps=list(steps))
    return Episode(id=episode_id, trajectories=[trajectory]), trajectory


def _sampled(row: TrainingRow) -> list[int]:
    return [i for i, m in enumerate(row.loss_mask) if m]


# ---- the acceptance test: a real engine episode -------------------------------------------------------------


def test_three_turn_frozenlake_episode_masks_exactly_the_sampled_tokens(smollm2_tokenizer):
    model = FakeModel(script=MOVES, tokenizer=smollm2_tokenizer, logprob=-0.25)
    episode = _rollout(model)
    steps = episode.trajectories[0].steps
    assert len(steps) == 3 and episode.metrics["token_mismatch"] == 0
    # Distinct logprobs per token, so a shifted or misplaced copy cannot pass by accident.
    for s, step in enumerate(steps):
        step.model_output.logprobs = [-(s + 1) - i / 100 for i in range(step.model_output.completion_length)]

    rows, stats = build_rows(episode_trajectories([episode]), step_advantages=[[0.5, -1.0, 2.0]], **LIMITS)

    assert len(rows) == 1 and stats["rows_split"] == 0
    row = rows[0]
    outputs = [step.model_output for step in steps]
    assert row.input_ids[: row.prompt_length] == outputs[0].prompt_ids
    assert row.input_ids == outputs[-1].prompt_ids + outputs[-1].completion_ids
    # Each completion sits right after that step's prompt, and the mask is 1 there and nowhere else.
    expected_positions, expected_logprobs, expected_advantages = [], [], []
    for output, advantage in zip(outputs, [0.5, -1.0, 2.0], strict=True):
        start = len(output.prompt_ids)
        positions = list(range(start, start + output.completion_length))
        assert [row.input_ids[p] for p in positions] == output.completion_ids
        expected_positions += positions
        expected_logprobs += output.logprobs
        expected_advantages += [advantage] * output.completion_length
    assert _sampled(row) == expected_positions
    assert [row.input_ids[p] for p in _sampled(row)] == [i for o in outputs for i in o.completion_ids]
    assert [row.old_logprobs[p] for p in expected_positions] == expected_logprobs
    assert [row.advantages[p] for p in expected_positions] == expected_advantages
    unsampled = set(range(len(row))) - set(expected_positions)
    assert all(row.old_logprobs[p] == 0.0 and row.advantages[p] == 0.0 for p in unsampled)
    assert row.group_key == "lake:agent" and row.episode_id == "lake:0" and row.step_indices == [0, 1, 2]
    assert stats["loss_tokens"] == sum(o.completion_length for o in outputs) and not row.truncated


class _HistoryRewritingAgent(FrozenLakeAgent):
    """Stores its replies upper-cased: the next prompt cannot extend the sampled tokens."""

    def update_from_model(self, output):
        action = super().update_from_model(output)
        self.messages[-1] = {"role": "assistant", "content": output.text.upper()}
        return action


def test_rows_split_counts_the_same_events_as_the_engines_token_mismatch():
    episode = _rollout(FakeModel(script=MOVES, tokenizer=FakeTokenizer()), agent_class=_HistoryRewritingAgent)
    assert episode.metrics["token_mismatch"] == 2

    rows, stats = build_rows(episode_trajectories([episode]), step_advantages=[[1.0] * 3], **LIMITS)

    assert stats["rows_split"] == episode.metrics["token_mismatch"] == len(rows) - 1
    outputs = [step.model_output for step in episode.trajectories[0].steps]
    for row, output, index in zip(rows, outputs, range(3), strict=True):
        assert row.step_indices == [index]
        assert row.input_ids == output.prompt_ids + output.completion_ids
        assert _sampled(row) == list(range(len(output.prompt_ids), len(row)))


# ---- hand-built trajectories ------------------------------------------------------------------------------


def test_extending_steps_merge_with_the_delta_masked():
    pair = _pair(_step([1, 2], [3, 4], version=1), _step([1, 2, 3, 4, 5, 6], [7], version=2))
    rows, stats = build_rows([pair], step_advantages=[[1.0, 1.0]], **LIMITS)
    (row,) = rows
    assert row.input_ids == [1, 2, 3, 4, 5, 6, 7] and row.prompt_length == 2
    assert row.loss_mask == [0, 0, 1, 1, 0, 0, 1]
    assert row.old_logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.1]
    assert row.weight_versions == [1, 2] and stats["rows_split"] == 0


def test_a_step_that_does_not_extend_starts_a_new_row():
    # Step 1's prompt rewrote token 2 of the history.
    pair = _pair(_step([1, 2], [3]), _step([1, 9, 3, 5], [6]), _step([1, 9, 3, 5, 6, 8], [4]))
    rows, stats = build_rows([pair], step_advantages=[[1.0, 2.0, 3.0]], **LIMITS)
    assert stats["rows_split"] == 1 and stats["rows"] == 2
    assert [r.input_ids for r in rows] == [[1, 2, 3], [1, 9, 3, 5, 6, 8, 4]]
    assert [r.prompt_length for r in rows] == [2, 4]
    assert [r.step_indices for r in rows] == [[0], [1, 2]]
    assert rows[1].loss_mask == [0, 0, 0, 0, 1, 0, 1]
    assert rows[1].advantages == [0, 0, 0, 0, 2.0, 0, 3.0]


@pytest.mark.parametrize("advantages", [[0.7, 0.7], [0.7, -0.3]], ids=["trajectory", "stepwise"])
def test_advantages_land_on_their_steps_tokens(advantages):
    pair = _pair(_step([1], [2, 3]), _step([1, 2, 3, 4], [5, 6, 7]))
    (row,), _ = build_rows([pair], step_advantages=[advantages], **LIMITS)
    a, b = advantages
    assert row.advantages == [0.0, a, a, 0.0, b, b, b]


def test_rows_keep_input_order_and_group_keys():
    two_roles = Episode(
        id="math-7:3",
        trajectories=[
            Trajectory(name="solver", steps=[_step([1], [2])]),
            Trajectory(name="judge", steps=[_step([3], [4])]),
        ],
    )
    pairs = episode_trajectories([two_roles, _pair(_step([5], [6]), episode_id="x:0")[0]])
    rows, _ = build_rows(pairs, step_advantages=[[1.0], [2.0], [3.0]], **LIMITS)
    assert [r.group_key for r in rows] == ["math-7:solver", "math-7:judge", "x:agent"]
    assert [r.episode_id for r in rows] == ["math-7:3", "math-7:3", "x:0"]


@pytest.mark.parametrize(
    "output",
    [None, ModelOutput(text="Action: up", content="Action: up"), ModelOutput(prompt_ids=[1], completion_ids=None)],
    ids=["no-output", "text-only", "no-completion-ids"],
)
def test_steps_without_token_ids_are_refused_with_a_clear_error(output):
    pair = _pair(_step([1], [2]), Step(model_output=output), episode_id="lake-3:1")
    with pytest.raises(RowBuildError, match=r"lake-3:1.*step 1.*no token ids.*tokenizer.*token-in/token-out"):
        build_rows([pair], step_advantages=[[1.0, 1.0]], **LIMITS)


def test_logprob_length_mismatch_is_a_clear_error():
    pair = _pair(_step([1], [2, 3], logprobs=[-0.1]), episode_id="e:0")
    with pytest.raises(RowBuildError, match=r"e:0.*1 logprobs for 2 completion ids"):
        build_rows([pair], step_advantages=[[1.0]], **LIMITS)


def test_advantage_shape_must_match_the_steps():
    pair = _pair(_step([1], [2]), _step([1, 2], [3]))
    with pytest.raises(RowBuildError, match="1 step advantages for 2 steps"):
        build_rows([pair], step_advantages=[[1.0]], **LIMITS)
    with pytest.raises(RowBuildError, match="2 entries for 1 trajectories"):
        build_rows([pair], step_advantages=[[1.0, 1.0], [1.0]], **LIMITS)


# ---- length limits ----------------------------------------------------------------------------------------

# prompt [1, 2, 3] + A0 [4, 5, 6] + obs [7, 8] + A1 [9, 10, 11]: a response of 8 tokens.
_LONG = (_step([1, 2, 3], [4, 5, 6]), _step([1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]))


def test_a_row_exactly_at_the_limits_is_untouched():
    rows, stats = build_rows([_pair(*_LONG)], step_advantages=[[1.0, 1.0]], max_prompt_length=3, max_response_length=8)
    assert len(rows[0]) == 11 and rows[0].num_loss_tokens == 6 and not rows[0].truncated
    assert stats["rows_truncated"] == stats["rows_masked"] == 0


@pytest.mark.parametrize(("limit", "steps_kept", "loss_tokens"), [(5, [0], 3), (6, [0, 1], 4)])
def test_overlong_response_is_truncated(limit, steps_kept, loss_tokens):
    rows, stats = build_rows(
        [_pair(*_LONG)], step_advantages=[[1.0, 1.0]], max_prompt_length=3, max_response_length=limit
    )
    (row,) = rows
    assert row.input_ids == list(range(1, 4 + limit)) and row.truncated
    assert len(row.loss_mask) == len(row.old_logprobs) == len(row.advantages) == len(row)
    assert row.step_indices == steps_kept and len(row.weight_versions) == len(steps_kept)
    assert row.num_loss_tokens == loss_tokens and stats["rows_truncated"] == 1 and stats["rows_masked"] == 0


def test_overlong_response_is_masked_when_asked():
    rows, stats = build_rows(
        [_pair(*_LONG)], step_advantages=[[1.0, 1.0]], max_prompt_length=3, max_response_length=5, overlong="mask"
    )
    (row,) = rows
    assert len(row) == 11 and not row.truncated
    assert row.num_loss_tokens == 0 and set(row.advantages) == {0.0}
    assert stats["rows_masked"] == 1 and stats["rows_truncated"] == 0 and stats["loss_tokens"] == 0


@pytest.mark.parametrize(("overlong", "length"), [("truncate", 2 + 4), ("mask", 11)])
def test_overlong_prompt_masks_the_row_in_both_modes(overlong, length):
    rows, stats = build_rows(
        [_pair(*_LONG)], step_advantages=[[1.0, 1.0]], max_prompt_length=2, max_response_length=4, overlong=overlong
    )
    (row,) = rows
    assert row.num_loss_tokens == 0 and len(row) == length
    assert row.input_ids == list(range(1, length + 1))  # never cut from the left
    assert stats["rows_masked"] == 1 and stats["rows_truncated"] == 0


# ---- what an update used, per step (the run log's `trained`, shown by rllm view) ---------------------------


def test_trained_steps_reads_each_steps_advantages_back_from_its_rows():
    # three steps; step 1 does not extend, so the trajectory spans two rows
    pair = _pair(_step([1, 2], [3]), _step([1, 9, 3, 5], [6, 7]), _step([1, 9, 3, 5, 6, 7, 8], [4]))
    rows, _ = build_rows([pair], step_advantages=[[1.0, 2.0, 3.0]], **LIMITS)
    assert [r.completion_starts for r in rows] == [[2], [4, 7]]
    rows[1].advantages[5] = -0.5  # a per-token advantage (GAE, distillation) on step 1's second token
    rows[1].prox_logprobs = [0.0, 0.0, 0.0, 0.0, -1.5, -2.5, 0.0, -3.5]
    trained = trained_steps([pair], rows)
    assert list(trained) == [id(pair[1])]
    assert trained[id(pair[1])] == [
        {"advantage": 1.0},
        {"advantage": [2.0, -0.5], "trainer_logprobs": [-1.5, -2.5]},
        {"advantage": 3.0, "trainer_logprobs": [-3.5]},
    ]


def test_trained_steps_marks_steps_cut_by_the_length_limit_as_untrained():
    pair = _pair(*_LONG)
    rows, _ = build_rows([pair], step_advantages=[[1.0, 2.0]], max_prompt_length=3, max_response_length=5)
    assert rows[0].completion_starts == [3]  # step 1's completion was cut off
    assert trained_steps([pair], rows)[id(pair[1])] == [{"advantage": 1.0}, None]


# ---- micro-batches and collate ----------------------------------------------------------------------------


def _row(ids, prompt_length, logprobs, advantage, episode_id="e:0") -> TrainingRow:
    n = len(ids) - prompt_length
    return TrainingRow(
        input_ids=ids,
        prompt_length=prompt_length,
        loss_mask=[0] * prompt_length + [1] * n,
        old_logprobs=[0.0] * prompt_length + logprobs,
        advantages=[0.0] * prompt_length + [advantage] * n,
        group_key="e:agent",
        episode_id=episode_id,
        trajectory_name="agent",
    )


def test_collate_aligns_targets_and_masks_for_next_token_prediction():
    torch = pytest.importorskip("torch")
    rows = [_row([5, 6, 7, 8], 2, [-0.5, -0.25], 2.0), _row([9, 10], 1, [-0.75], -1.0)]
    batch = collate(rows, pad_id=0)

    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert batch["loss_mask"].tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]]  # token-aligned
    # Shifted: position t pairs with logits[:, t], which predict input_ids[:, t + 1].
    assert batch["target_ids"].tolist() == [[6, 7, 8], [10, 0, 0]]
    assert batch["target_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    assert batch["target_old_logprobs"].tolist() == [[0.0, -0.5, -0.25], [-0.75, 0.0, 0.0]]
    assert batch["target_advantages"].tolist() == [[0.0, 2.0, 2.0], [-1.0, 0.0, 0.0]]
    assert batch["prompt_lengths"].tolist() == [2, 1]
    assert batch["input_ids"].dtype == torch.long and batch["target_mask"].dtype == torch.float32

    # An oracle LM whose logits at t put all mass on input_ids[t + 1]: under the mask, every target has logprob 0,
    # and the masked positions are exactly the sampled tokens (any off-by-one would pick up a -inf-ish value).
    logits = torch.full((2, 4, 16), -30.0)
    for b in range(2):
        for t in range(3):
            logits[b, t, batch["input_ids"][b, t + 1]] = 30.0
    logprobs = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["target_ids"].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(logprobs * batch["target_mask"], torch.zeros(2, 3), atol=1e-6)
    assert batch["target_ids"][batch["target_mask"].bool()].tolist() == [7, 8, 10]


def test_collate_pads_to_a_multiple():
    pytest.importorskip("torch")
    batch = collate([_row([1, 2, 3, 4, 5], 2, [0.0] * 3, 1.0)], pad_id=99, pad_to_multiple=4)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 99, 99, 99]]
    assert batch["target_mask"].shape == (1, 7) and batch["loss_mask"][0, 5:].tolist() == [0, 0, 0]


def test_micro_batches_sort_by_length_and_keep_every_row_once():
    lengths = [3, 9, 5, 9, 2, 7, 5]
    rows = [_row(list(range(n)), 1, [0.0] * (n - 1), 1.0, episode_id=f"e:{i}") for i, n in enumerate(lengths)]
    micro = split_micro_batches(rows, 3)
    assert [len(m) for m in micro] == [3, 3, 1]
    flat = [r.episode_id for m in micro for r in m]
    assert sorted(flat) == sorted(r.episode_id for r in rows)
    # Longest first; ties keep input order, so the split is deterministic.
    assert flat == ["e:1", "e:3", "e:5", "e:2", "e:6", "e:0", "e:4"]
    assert split_micro_batches(rows, 3) == micro
    with pytest.raises(ValueError):
        split_micro_batches(rows, 0)


def test_micro_batches_keep_the_samples_of_one_prompt_together():
    """Two tasks x 3 samples, interleaved: each task's rows stay adjacent (its prompt is computed once per
    micro-batch), the task with the longest row first, longest first within a task."""
    lengths = {("a", 0): 6, ("b", 0): 9, ("a", 1): 8, ("b", 1): 5, ("a", 2): 7, ("b", 2): 7}
    prompts = {"a": [1, 2, 3], "b": [4, 5, 6]}
    rows = [
        _row(prompts[t] + list(range(n - 3)), 3, [0.0] * (n - 3), 1.0, episode_id=f"{t}:{k}")
        for (t, k), n in lengths.items()
    ]
    micro = split_micro_batches(rows, 3)
    assert [[r.episode_id for r in m] for m in micro] == [["b:0", "b:2", "b:1"], ["a:1", "a:2", "a:0"]]


def test_import_does_not_pull_torch():
    import subprocess
    import sys

    code = "import sys, rllm.training.batch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
