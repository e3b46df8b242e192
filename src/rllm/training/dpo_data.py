"""Preference pairs for DPO, built on the same rows (token ids + loss mask) as RL and SFT.

    pairs, stats = pairs_from_episodes(read_episode_records(run_dir), max_pairs_per_task=2, max_length=2048)
    pairs, stats = pairs_from_preferences(read_jsonl(path), tokenizer, max_length=2048)

- From episodes (a training or eval run): trajectories are grouped by task and role (`task_id:name`, RL's groups);
  in each group the successful ones (`Trajectory.succeeded`) are matched with the failed ones in file order, at
  most `max_pairs_per_task` pairs. Each side is one row of exactly the sampled ids: multi-turn trajectories of a
  task share their first prompt and are masked as in RL (a side's log-probability sums its sampled tokens; the
  observations between them are context). A trajectory whose turns do not extend each other (more than one row) is
  left out and counted (`trajectories_split`).
- From a JSONL of TRL preference records: `{"prompt": [messages], "chosen": [messages], "rejected": [messages]}`
  (optional `tools`); each side is tokenized as `sft_data.rows_from_messages` does prompt/completion records.

A pair whose sides do not fit `max_length` is an error with counts (`overlong="error"`), or cut to it
("truncate"), or dropped and counted ("drop"). No pair at all is an error saying why, with counts.
`export_trl_preferences` writes pairs as TRL's plain-text format (prompt, chosen, rejected strings).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rllm.training.advantages import group_key
from rllm.training.batch import TrainingRow, TrajectoryRef
from rllm.training.sft_data import Overlong, TrainingDataError, rows_from_messages, rows_from_trajectories, truncate_row
from rllm.types import Episode

__all__ = ["PreferencePair", "export_trl_preferences", "pairs_from_episodes", "pairs_from_preferences"]


@dataclass
class PreferencePair:
    """One preference: the chosen and the rejected row (same prompt), and their reference log-probabilities (the
    sum over each row's trained tokens) once computed."""

    chosen: TrainingRow
    rejected: TrainingRow
    key: str  # "task_id:role", or "record N"
    ref_chosen: float | None = None
    ref_rejected: float | None = None

    @property
    def length(self) -> int:
        return max(len(self.chosen), len(self.rejected))


def pairs_from_episodes(
    records: Iterable[dict[str, Any] | Episode],
    *,
    split: str | None = None,
    roles: Sequence[str] | None = None,
    max_pairs_per_task: int = 1,
    max_length: int,
    overlong: Overlong = "error",
) -> tuple[list[PreferencePair], dict[str, int]]:
    """Success/failure pairs of the same task and role (module docstring) and counts."""
    episodes = [
        r if isinstance(r, Episode) else r["episode"]
        for r in records
        if isinstance(r, Episode) or split is None or r["split"] == split
    ]
    groups: dict[str, tuple[list[TrajectoryRef], list[TrajectoryRef]]] = defaultdict(lambda: ([], []))
    for episode in episodes:
        for trajectory in episode.trajectories:
            if not roles or trajectory.name in roles:
                groups[group_key(episode, trajectory)][0 if trajectory.succeeded() else 1].append((episode, trajectory))
    stats = {
        "episodes": len(episodes),
        "groups": len(groups),
        "groups_all_succeeded": 0,
        "groups_all_failed": 0,
        "trajectories_split": 0,
    }
    pairs = []
    for key, (won, lost) in groups.items():
        stats["groups_all_succeeded"] += not lost
        stats["groups_all_failed"] += not won
        for chosen, rejected in list(zip(won, lost, strict=False))[:max_pairs_per_task]:
            sides = [_single_row(side) for side in (chosen, rejected)]
            if None in sides:
                stats["trajectories_split"] += 1
                continue
            pairs.append(PreferencePair(sides[0], sides[1], key))
    if not pairs:
        where = f" of split {split!r}" if split else ""
        raise TrainingDataError(
            f"no preference pairs: no task{where} has both a successful and a failed trajectory"
            f"{f' with a role in {list(roles)}' if roles else ''} (groups={stats['groups']}, all succeeded="
            f"{stats['groups_all_succeeded']}, all failed={stats['groups_all_failed']}, split trajectories="
            f"{stats['trajectories_split']}): sample more attempts a task (rollout.val_n) or use harder/easier tasks"
        )
    return _fit_pairs(pairs, max_length, overlong, stats)


def _single_row(side: TrajectoryRef) -> TrainingRow | None:
    rows, _ = rows_from_trajectories([side], max_length=None)
    return rows[0] if len(rows) == 1 else None


def pairs_from_preferences(
    records: Sequence[dict[str, Any]], tokenizer: Any, *, max_length: int, overlong: Overlong = "error"
) -> tuple[list[PreferencePair], dict[str, int]]:
    """Pairs from TRL-style conversational preference records (module docstring)."""
    pairs = []
    for number, record in enumerate(records, 1):
        missing = [key for key in ("prompt", "chosen", "rejected") if key not in record]
        if missing:
            raise TrainingDataError(
                f"record {number} lacks {missing}: a preference record is {{prompt, chosen, "
                "rejected}, each a list of messages (tools optional)"
            )
        sides = []
        for side in ("chosen", "rejected"):
            conversation = {"prompt": record["prompt"], "completion": record[side], "tools": record.get("tools")}
            rows, _ = rows_from_messages([conversation], tokenizer, max_length=None)
            if len(rows) != 1:
                raise TrainingDataError(
                    f"record {number}: its {side} side does not render as one extension of the "
                    "prompt (the chat template rewrites earlier turns)"
                )
            sides.append(rows[0])
        pairs.append(PreferencePair(sides[0], sides[1], f"record {number}"))
    return _fit_pairs(pairs, max_length, overlong, {"records": len(records)})


def _fit_pairs(
    pairs: list[PreferencePair], max_length: int, overlong: Overlong, stats: dict[str, int]
) -> tuple[list[PreferencePair], dict[str, int]]:
    long = [pair for pair in pairs if pair.length > max_length]
    if long and overlong == "error":
        longest = max(pair.length for pair in long)
        raise TrainingDataError(
            f"{len(long)} of {len(pairs)} pairs have a side longer than dpo.max_length="
            f"{max_length} tokens (longest {longest}): raise dpo.max_length, or set "
            "dpo.overlong=truncate (keep the first tokens) or dpo.overlong=drop"
        )
    kept, dropped = [], 0
    for pair in pairs:
        for row in (pair.chosen, pair.rejected):
            if len(row) > max_length and overlong == "truncate":
                truncate_row(row, max_length)
        if pair.length > max_length or not (pair.chosen.num_loss_tokens and pair.rejected.num_loss_tokens):
            dropped += 1
            continue
        kept.append(pair)
    stats = {**stats, "pairs": len(kept), "pairs_dropped_overlong": dropped}
    if not kept:
        raise TrainingDataError(
            f"no pair keeps a trained token on both sides within dpo.max_length={max_length} "
            f"({dropped} of {len(pairs)} dropped): raise dpo.max_length"
        )
    return kept, stats


def export_trl_preferences(pairs: Sequence[PreferencePair], tokenizer: Any, path: str | os.PathLike) -> int:
    """Write `pairs` as TRL's plain-text preference format, one `{"prompt", "chosen", "rejected"}` object a line: the
    shared prompt's text (everything before the first trained token) and each side's text after it, decoded with
    special tokens. TRL re-tokenizes the text (the same ids where tokenization round-trips, as it does for the
    shipped tokenizers' chat text) and trains every token after the prompt, observations of multi-turn sides
    included. Returns the number of pairs written."""
    with open(path, "w", encoding="utf-8") as handle:
        for pair in pairs:
            start = min(pair.chosen.loss_mask.index(1), pair.rejected.loss_mask.index(1))
            if pair.chosen.input_ids[:start] != pair.rejected.input_ids[:start]:
                raise TrainingDataError(f"pair {pair.key}: its sides do not share their prompt")
            text = {
                side: tokenizer.decode(getattr(pair, side).input_ids[start:], skip_special_tokens=False)
                for side in ("chosen", "rejected")
            }
            prompt = tokenizer.decode(pair.chosen.input_ids[:start], skip_special_tokens=False)
            handle.write(json.dumps({"prompt": prompt, **text}) + "\n")
    return len(pairs)
