"""Episodes → training rows → padded tensors, keeping the exact token ids that were sampled (docs/architecture.md,
"Token exactness": rows merge by prefix extension, loss mask 1 on the model's own tokens only).

    pairs = episode_trajectories(episodes)                      # [(episode, trajectory), ...]
    rows, stats = build_rows(pairs, step_advantages=adv, max_prompt_length=1024, max_response_length=2048)
    for micro in split_micro_batches(rows, micro_batch_size=4):
        batch = collate(micro, pad_id=tokenizer.pad_token_id)
        logprobs = token_logprobs(model(batch["input_ids"], ...).logits[:, :-1], batch["target_ids"])
        loss = ... * batch["target_mask"]

Rows. A trajectory becomes rows by prefix extension: the first step's `prompt_ids` open a row; each later step
whose `prompt_ids` start with the row so far (prompt0 + A0 + obs1 + ...) joins it, the ids between the row's end and
its completion (observation, chat-template delta) getting loss mask 0 and its completion loss mask 1. A step that
does not extend (a template or agent that rewrote history) starts a new row; `stats["rows_split"]` counts those,
the same event the engine's `token_mismatch` metric counts from the rendering side. Only ids from `ModelOutput`
are used, never re-tokenized text: a step without ids is an error, not something to repair.

Length limits (the engine already keeps rows within them; these are the safety net for anything else). A row's
prompt is its first step's prompt, its response everything after (completions and the deltas between them).
- Response over `max_response_length`: `overlong="truncate"` drops the tokens past the limit and marks the row
  `truncated` (`rows_truncated`); `overlong="mask"` keeps every token but zeroes the row's loss mask (`rows_masked`).
- Prompt over `max_prompt_length`: the row's loss mask is zeroed in both modes (`rows_masked`). We do not cut the
  prompt from the left as verl does: that removes the system prompt and early turns, so the model would be trained
  on completions in a context it never saw, against logprobs sampled in another one. With "truncate" the masked
  row is also cut to `max_prompt_length + max_response_length` (and marked `truncated`: `truncated` always means
  tokens were dropped), since its tokens no longer carry any loss.
So with "truncate" every row fits `max_prompt_length + max_response_length`. A masked row is kept, not dropped:
group sizes and per-sequence loss normalisation stay what the trainer expects. Nothing here raises for length.

Alignment. In a `TrainingRow` and in `collate`'s unshifted tensors, index t describes token t: `loss_mask[t]` is 1
when token t was sampled, `old_logprobs[t]` is its sampling logprob, `advantages[t]` its advantage. A causal LM
predicts token t from the logits at t-1, so `collate` also returns the shifted view the loss needs, all
`[B, L-1]`: `target_ids = input_ids[:, 1:]`, `target_mask = loss_mask[:, 1:]`, `target_old_logprobs`,
`target_advantages`; position t of these pairs with `logits[:, t]`. Token 0 has no predicting logit; it is always a
prompt token (a prompt must be non-empty), so nothing is lost.

This module imports torch only inside `collate`: building rows is pure Python, cheap and testable without it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rllm.errors import RllmError
from rllm.types import Episode, ModelOutput, Step, Trajectory

if TYPE_CHECKING:
    import torch

__all__ = [
    "RowBuildError",
    "TrainingRow",
    "build_rows",
    "collate",
    "collate_packed",
    "episode_trajectories",
    "nonfinite_tokens",
    "pack_rows",
    "split_micro_batches",
    "trained_steps",
]

Overlong = Literal["truncate", "mask"]
TrajectoryRef = tuple[Episode, Trajectory]


class RowBuildError(RllmError, ValueError):
    """The episodes cannot be turned into training rows as they are (missing ids, inconsistent lengths)."""


@dataclass
class TrainingRow:
    """One training sequence: a prompt and every later token of the steps it merges. Per-token lists all have
    `len(input_ids)` entries and index t describes token t (see the module docstring for the shifted view)."""

    input_ids: list[int]
    prompt_length: int
    loss_mask: list[int]  # 1 exactly on sampled (completion) tokens that are trained on
    old_logprobs: list[float]  # sampling logprob on sampled tokens, 0.0 elsewhere
    advantages: list[float]  # the sampled token's step advantage where loss_mask is 1, else 0.0
    group_key: str  # "task_id:role": the group advantages were computed over
    episode_id: str
    trajectory_name: str
    trajectory_index: int = 0  # position of its trajectory in build_rows' input (a trajectory may span rows)
    rewards: list[float] = field(default_factory=list)  # a step's critic reward on its last sampled token, else 0.0
    returns: list[float] | None = None  # PPO with a critic: GAE returns (value targets), set by apply_gae
    old_values: list[float] | None = None  # ... and the critic's values at rollout time
    step_indices: list[int] = field(default_factory=list)  # steps of the trajectory this row holds
    weight_versions: list[int] = field(default_factory=list)  # one per step in step_indices
    completion_starts: list[int] = field(default_factory=list)  # where each step in step_indices' completion starts
    truncated: bool = False  # tokens past max_response_length were dropped
    prox_logprobs: list[float] | None = None  # off_policy.mode=decoupled: the trainer's log-probs before the update
    images: list[str] = field(default_factory=list)  # a VLM row's images, in the order of their image tokens

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)

    def __len__(self) -> int:
        return len(self.input_ids)


def episode_trajectories(episodes: Iterable[Episode]) -> list[TrajectoryRef]:
    """Every (episode, trajectory) pair, in episode then trajectory order: the input `build_rows` expects."""
    return [(episode, trajectory) for episode in episodes for trajectory in episode.trajectories]


# ---- building rows ----------------------------------------------------------------------------------------


@dataclass
class _OpenRow:
    """A row being filled."""

    row: TrainingRow

    def append(
        self,
        ids: Sequence[int],
        *,
        logprobs: Sequence[float] | None = None,
        advantage: float = 0.0,
        reward: float = 0.0,
    ) -> None:
        """Append ids; with `logprobs` they are sampled tokens (mask 1; `reward` on the last one), without they are
        context (mask 0)."""
        row = self.row
        row.input_ids.extend(ids)
        row.rewards.extend([0.0] * len(ids))
        if logprobs is None:
            row.loss_mask.extend([0] * len(ids))
            row.old_logprobs.extend([0.0] * len(ids))
            row.advantages.extend([0.0] * len(ids))
        else:
            row.loss_mask.extend([1] * len(ids))
            row.old_logprobs.extend(float(x) for x in logprobs)
            row.advantages.extend([float(advantage)] * len(ids))
            if ids:
                row.rewards[-1] = float(reward)


def build_rows(
    trajectories: Sequence[TrajectoryRef],
    *,
    step_advantages: Sequence[Sequence[float]],
    max_prompt_length: int,
    max_response_length: int,
    overlong: Overlong = "truncate",
    step_rewards: Sequence[Sequence[float]] | None = None,
) -> tuple[list[TrainingRow], dict[str, int]]:
    """Training rows from `(episode, trajectory)` pairs; `step_advantages[i][j]` is the advantage of step j of
    trajectory i (trajectory-level estimators repeat one value for every step). Rows come out in input order.
    `step_rewards[i][j]` (what a critic's GAE sees, `ScoredBatch.step_rewards`) goes on the last sampled token of
    that step in `row.rewards`; without it the rewards are 0.

    Returns `(rows, stats)` with stats `rows`, `rows_split` (steps that did not extend their row), `rows_truncated`,
    `rows_masked` (loss mask zeroed for length), `loss_tokens`. Raises `RowBuildError` for a step without token
    ids or logprobs, or for lengths that disagree. See the module docstring for merging and length limits.
    """
    if overlong not in ("truncate", "mask"):
        raise ValueError(f"overlong must be 'truncate' or 'mask', got {overlong!r}")
    if max_prompt_length < 1 or max_response_length < 1:
        raise ValueError("max_prompt_length and max_response_length must be >= 1")
    if step_rewards is None:
        step_rewards = [[0.0] * len(trajectory.steps) for _, trajectory in trajectories]
    for name, given in (("step_advantages", step_advantages), ("step_rewards", step_rewards)):
        if len(given) != len(trajectories):
            raise RowBuildError(f"{name} has {len(given)} entries for {len(trajectories)} trajectories")
    stats = {"rows": 0, "rows_split": 0, "rows_truncated": 0, "rows_masked": 0, "loss_tokens": 0}
    rows: list[TrainingRow] = []
    for index, ((episode, trajectory), advantages, rewards) in enumerate(
        zip(trajectories, step_advantages, step_rewards, strict=True)
    ):
        for open_row in _merge_steps(episode, trajectory, advantages, rewards, stats):
            open_row.row.trajectory_index = index
            rows.append(_fit(open_row, max_prompt_length, max_response_length, overlong, stats))
    stats["rows"] = len(rows)
    stats["loss_tokens"] = sum(row.num_loss_tokens for row in rows)
    return rows, stats


def _merge_steps(
    episode: Episode,
    trajectory: Trajectory,
    advantages: Sequence[float],
    rewards: Sequence[float],
    stats: dict[str, int],
) -> list[_OpenRow]:
    """One trajectory's rows, merged by prefix extension, before any length limit."""
    for name, given in (("step advantages", advantages), ("step rewards", rewards)):
        if len(given) != len(trajectory.steps):
            raise RowBuildError(
                f"episode {episode.id!r}, trajectory {trajectory.name!r}: {len(given)} {name} "
                f"for {len(trajectory.steps)} steps"
            )
    rows: list[_OpenRow] = []
    current: _OpenRow | None = None
    for index, (step, advantage, reward) in enumerate(zip(trajectory.steps, advantages, rewards, strict=True)):
        output = _token_output(episode, trajectory, index, step)
        prompt, images = output.prompt_ids, output.prompt_images or []
        # The same image placeholder ids with other images behind them do not extend the row.
        if current is not None and _extends(prompt, current.row.input_ids) and _extends(images, current.row.images):
            current.append(prompt[len(current.row.input_ids) :])  # observation / template delta: context only
        else:
            if current is not None:
                stats["rows_split"] += 1
            current = _OpenRow(_new_row(episode, trajectory, prompt))
            current.append(prompt)
            rows.append(current)
        current.row.images = list(images)
        current.row.completion_starts.append(len(current.row.input_ids))
        current.append(output.completion_ids, logprobs=output.logprobs, advantage=advantage, reward=reward)
        current.row.step_indices.append(index)
        current.row.weight_versions.append(output.weight_version)
    return rows


def _extends(prompt: Sequence[Any], context: Sequence[Any]) -> bool:
    return len(prompt) >= len(context) and list(prompt[: len(context)]) == list(context)


def _new_row(episode: Episode, trajectory: Trajectory, prompt: Sequence[int]) -> TrainingRow:
    return TrainingRow(
        input_ids=[],
        prompt_length=len(prompt),
        loss_mask=[],
        old_logprobs=[],
        advantages=[],
        group_key=f"{episode.task_id}:{trajectory.name}",
        episode_id=episode.id,
        trajectory_name=trajectory.name,
    )


def _token_output(episode: Episode, trajectory: Trajectory, index: int, step: Step) -> ModelOutput:
    """The step's ModelOutput, checked to hold everything training needs."""
    where = f"episode {episode.id!r}, trajectory {trajectory.name!r}, step {index}"
    output = step.model_output
    if output is None or not output.has_token_ids:
        raise RowBuildError(
            f"{where} has no token ids: training needs the exact ids that were sampled, and re-tokenizing the "
            "text would change them. Roll out with a tokenizer (a model client given `tokenizer=`) or a "
            "token-in/token-out client (LocalModel, vLLM, an OpenAI-compatible server that returns token ids)."
        )
    if output.logprobs is None:
        raise RowBuildError(
            f"{where} has no sampling logprobs; use a client that returns them (the PPO ratio needs them)"
        )
    if len(output.logprobs) != len(output.completion_ids):
        raise RowBuildError(
            f"{where}: {len(output.logprobs)} logprobs for {len(output.completion_ids)} completion ids; "
            "there must be exactly one logprob per sampled token"
        )
    if not output.prompt_ids:
        raise RowBuildError(f"{where} has an empty prompt: its first token would have no logits to predict it")
    return output


# ---- length limits ----------------------------------------------------------------------------------------


def _fit(
    open_row: _OpenRow, max_prompt_length: int, max_response_length: int, overlong: Overlong, stats: dict[str, int]
) -> TrainingRow:
    """Apply the length limits to one row (see the module docstring); never raises."""
    row = open_row.row
    prompt_over = row.prompt_length > max_prompt_length
    response_over = len(row) - row.prompt_length > max_response_length
    if not (prompt_over or response_over):
        return row
    if prompt_over or overlong == "mask":
        _mask(row)
        stats["rows_masked"] += 1
        if overlong == "truncate":
            _cut(open_row, max_prompt_length + max_response_length)
        return row
    _cut(open_row, row.prompt_length + max_response_length)
    stats["rows_truncated"] += 1
    return row


def _mask(row: TrainingRow) -> None:
    # Sampling logprobs stay: they are still what was sampled; only the loss is switched off.
    row.loss_mask = [0] * len(row)
    row.advantages = [0.0] * len(row)


def _cut(open_row: _OpenRow, length: int) -> None:
    """Keep the first `length` tokens, and the steps of which at least the first sampled token is kept."""
    row = open_row.row
    if len(row) <= length:
        return
    kept = [i for i, start in enumerate(row.completion_starts) if start < length]
    row.step_indices = [row.step_indices[i] for i in kept]
    row.weight_versions = [row.weight_versions[i] for i in kept]
    row.completion_starts = [row.completion_starts[i] for i in kept]
    cut_reward = sum(row.rewards[length:])
    row.input_ids = row.input_ids[:length]
    row.loss_mask = row.loss_mask[:length]
    row.old_logprobs = row.old_logprobs[:length]
    row.advantages = row.advantages[:length]
    row.rewards = row.rewards[:length]
    sampled = [t for t, mask in enumerate(row.loss_mask) if mask]
    if sampled:  # the reward of a cut-off step stays on the last kept sampled token, as for a finished one
        row.rewards[sampled[-1]] += cut_reward
    row.prompt_length = min(row.prompt_length, length)
    row.truncated = True


def trained_steps(trajectories: Sequence[TrajectoryRef], rows: Sequence[TrainingRow]) -> dict[int, list[Any]]:
    """What an update used for each step of `rows`, keyed by `id(trajectory)` of `build_rows`' input: per step (None
    for a step in no row) `{"advantage": ...}`, one number when its completion's tokens share it (trajectory and
    step estimators), else one per token (GAE, distillation); with `"trainer_logprobs"` (one per token) where the
    update computed them (`off_policy.mode=decoupled`). Read from the rows after the update, so it is exactly what
    was trained; the run log keeps it beside the episode for `rllm view`."""
    out: dict[int, list[Any]] = {}
    for row in rows:
        trajectory = trajectories[row.trajectory_index][1]
        steps = out.setdefault(id(trajectory), [None] * len(trajectory.steps))
        for index, start in zip(row.step_indices, row.completion_starts, strict=True):
            output = trajectory.steps[index].model_output
            end = min(start + (output.completion_length if output is not None else 0), len(row))
            advantages = row.advantages[start:end]
            uniform = bool(advantages) and all(a == advantages[0] for a in advantages)
            entry: dict[str, Any] = {"advantage": advantages[0] if uniform else advantages}
            if row.prox_logprobs is not None:
                entry["trainer_logprobs"] = row.prox_logprobs[start:end]
            steps[index] = entry
    return out


# ---- micro-batches and tensors ----------------------------------------------------------------------------


def split_micro_batches(rows: Sequence[TrainingRow], micro_batch_size: int) -> list[list[TrainingRow]]:
    """Rows in micro-batches of at most `micro_batch_size`, sorted by length so rows of similar length share a
    micro-batch and padding is small. Longest first: a micro-batch that does not fit in memory fails at once, not
    at the end of the step. Rows with the same prompt (the samples of one task) stay next to each other, ordered
    by their longest row, so they share micro-batches and the torch backend computes their prompt once
    (`rllm.training.backends.shared_prefix`). Deterministic: ties keep input order. Every row appears exactly once.

    Micro-batches mix groups and change with the batch, so a token-mean loss must be normalised by the token count
    of the whole mini-batch, not per micro-batch, or the result would depend on this split.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    longest: dict[tuple[int, ...], tuple[int, int]] = {}  # prompt -> (-its longest row, its first index)
    prompts = [tuple(row.input_ids[: row.prompt_length]) for row in rows]
    for i, prompt in enumerate(prompts):
        longest[prompt] = min(longest.get(prompt, (0, i)), (-len(rows[i]), i))
    order = sorted(range(len(rows)), key=lambda i: (longest[prompts[i]], -len(rows[i]), i))
    return [[rows[i] for i in order[k : k + micro_batch_size]] for k in range(0, len(order), micro_batch_size)]


def nonfinite_tokens(rows: Sequence[TrainingRow]) -> int:
    """Loss tokens whose recorded sampler log-prob is NaN or infinite (a broken sampler): the loss masks them."""
    return sum(
        1 for row in rows for lp, m in zip(row.old_logprobs, row.loss_mask, strict=True) if m and not math.isfinite(lp)
    )


def collate(rows: Sequence[TrainingRow], *, pad_id: int, pad_to_multiple: int | None = None) -> dict[str, torch.Tensor]:
    """Right-padded tensors for a micro-batch, padded to its longest row (rounded up to `pad_to_multiple`).

    Token-aligned, `[B, L]`: `input_ids` (long, `pad_id` on padding), `attention_mask` (long), `position_ids`
    (long, 0.. along each row), `loss_mask` (float, 1 on trained sampled tokens), `old_logprobs`, `advantages`
    (float). Next-token view, `[B, L-1]`, position t paired with `logits[:, t]`: `target_ids`, `target_mask`,
    `target_old_logprobs`, `target_advantages`, `target_prox_logprobs` when the rows carry them (decoupled
    off-policy mode), and `target_returns` / `target_old_values` when the rows carry a critic's targets. Also
    `prompt_lengths` `[B]`. Padding is 0 in every mask.
    """
    import torch

    if not rows:
        raise ValueError("collate needs at least one row")
    length = max(len(row) for row in rows)
    if pad_to_multiple:
        length = -(-length // pad_to_multiple) * pad_to_multiple
    length = max(length, 2)  # the shifted view needs at least one position

    def padded(values: list[list[Any]], pad: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([v + [pad] * (length - len(v)) for v in values], dtype=dtype)

    input_ids = padded([row.input_ids for row in rows], pad_id, torch.long)
    attention_mask = padded([[1] * len(row) for row in rows], 0, torch.long)
    loss_mask = padded([row.loss_mask for row in rows], 0, torch.float32)
    old_logprobs = padded([row.old_logprobs for row in rows], 0.0, torch.float32)
    advantages = padded([row.advantages for row in rows], 0.0, torch.float32)
    # Right padding: real tokens sit at 0..n-1 already; padding positions are never attended to.
    position_ids = torch.arange(length, dtype=torch.long).expand(len(rows), length).clone()
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "loss_mask": loss_mask,
        "old_logprobs": old_logprobs,
        "advantages": advantages,
        "target_ids": input_ids[:, 1:],
        "target_mask": loss_mask[:, 1:],
        "target_old_logprobs": old_logprobs[:, 1:],
        "target_advantages": advantages[:, 1:],
        "prompt_lengths": torch.tensor([row.prompt_length for row in rows], dtype=torch.long),
    }
    with_prox = [row.prox_logprobs is not None for row in rows]
    if any(with_prox):
        if not all(with_prox):
            raise RowBuildError(
                "some rows carry prox_logprobs (off_policy.mode=decoupled) and some do not: the "
                "trainer recomputes them for every row of an update"
            )
        batch["target_prox_logprobs"] = padded([row.prox_logprobs for row in rows], 0.0, torch.float32)[:, 1:]
    with_critic = [row.returns is not None and row.old_values is not None for row in rows]
    if any(with_critic):
        if not all(with_critic):
            raise RowBuildError(
                "some rows have critic targets (returns, old_values) and some do not: "
                "apply_gae sets them on every row of a batch"
            )
        batch["target_returns"] = padded([row.returns for row in rows], 0.0, torch.float32)[:, 1:]
        batch["target_old_values"] = padded([row.old_values for row in rows], 0.0, torch.float32)[:, 1:]
    return batch


# ---- packing ------------------------------------------------------------------------------------------------


def pack_rows(rows: Sequence[TrainingRow], capacity: int) -> list[list[int]]:
    """Indices of `rows` grouped into packs of at most `capacity` tokens (first fit, longest first); a row longer
    than `capacity` is a pack of its own."""
    packs: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(rows)), key=lambda i: -len(rows[i])):
        size = len(rows[index])
        slot = next((p for p, free in enumerate(room) if free >= size), None)
        if slot is None:
            packs.append([index])
            room.append(capacity - size)
        else:
            packs[slot].append(index)
            room[slot] -= size
    return packs


def collate_packed(rows: Sequence[TrainingRow], *, pad_id: int) -> dict[str, torch.Tensor]:
    """`rows` concatenated into ONE sequence (`collate`'s keys, `[1, L]`) that trains exactly as the rows apart:
    positions restart at 0 in each row, and `attention_mask` is a ready 4-D boolean mask `[1, 1, L, L]` (causal,
    within a row only), which transformers uses as it is. A row's first token is a prompt token (loss mask 0), so no
    target crosses from one row into the next."""
    import torch

    joined = TrainingRow(
        input_ids=[t for row in rows for t in row.input_ids],
        prompt_length=rows[0].prompt_length,
        loss_mask=[m for row in rows for m in row.loss_mask],
        old_logprobs=[x for row in rows for x in row.old_logprobs],
        advantages=[x for row in rows for x in row.advantages],
        group_key=rows[0].group_key,
        episode_id=rows[0].episode_id,
        trajectory_name=rows[0].trajectory_name,
    )
    if any(row.loss_mask and row.loss_mask[0] for row in rows):
        raise RowBuildError(
            "collate_packed: a row trains its first token, which would be predicted from the row packed before it"
        )
    batch = collate([joined], pad_id=pad_id)
    segment = torch.tensor([i for i, row in enumerate(rows) for _ in row.input_ids])
    positions = torch.tensor([p for row in rows for p in range(len(row))])
    length = batch["input_ids"].shape[1]
    if length > len(segment):  # collate's minimum width of 2 (a one-token row): the pad is a segment of its own
        segment = torch.cat([segment, torch.full((length - len(segment),), len(rows))])
        positions = torch.cat([positions, torch.zeros(length - len(positions), dtype=torch.long)])
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    batch["attention_mask"] = (causal & (segment[:, None] == segment[None, :]))[None, None]
    batch["position_ids"] = positions[None]
    return batch
