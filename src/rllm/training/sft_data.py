"""Supervised data as training rows: the same `TrainingRow`s (token ids + loss mask) that RL trains on.

    pairs, stats = select_trajectories(read_episode_records(run_dir), correct_only=True, task_pass_rate="mixed")
    rows, stats = rows_from_trajectories(pairs, max_length=2048)        # exactly the ids that were sampled
    rows, stats = rows_from_messages(read_jsonl(path), tokenizer, max_length=2048)   # TRL's `messages` datasets

Two sources:
- Episodes (a run's `episodes.jsonl`, training or eval): every kept trajectory becomes rows by the same prefix
  extension as RL (`training.batch.build_rows`): the sampled completion ids carry loss mask 1, prompts and
  observations 0. Nothing is re-templated, so SFT trains on exactly the tokens the model produced, with RL's
  multi-turn masks. Episodes without token ids (an endpoint reached without a tokenizer) are refused.
- OpenAI-format messages (one JSON object a line, TRL's conversational datasets): `{"messages": [...], "tools":
  [...]}` trains every assistant turn; `{"prompt": [...], "completion": [...]}` trains the assistant turns of the
  completion only. Each trained assistant turn is a step: its prompt is the chat template applied to the messages
  before it with the generation prompt (what the model is given at inference), its completion the text the
  template adds for the turn, tokenized on its own (what the model would sample), cut after the first EOS token:
  what a template prints after the end-of-turn token (Qwen's and SmolLM2's "\n") is context of the next turn, not
  trained, since sampling stops at EOS. (TRL's prompt-completion format trains that "\n" too: the one difference.)
  Steps then merge into rows by prefix extension, as episodes do.

Filters on episodes, applied in this order and each counted in `stats` (a filter that leaves nothing is an error
saying which one and with what counts): split, roles, success (`correct_only`, `Trajectory.succeeded`), reward
(`min_reward`), the task's pass rate over all its episodes (`task_pass_rate="mixed"` keeps tasks with
0 < pass rate < 1, rejection-sampling fine-tuning's rule), then `max_per_task` (first in file order).

Export: `export_trl(rows, path)` writes the rows as TRL's pre-tokenized format (`{"input_ids", "completion_mask"}`
a line), which `trl.SFTTrainer` trains on as it is (`completion_only_loss`, the default): the same tokens, the same
mask, for users who prefer TRL (`rllm sft --export-trl PATH`).

Length: a row longer than `max_length` tokens is an error by default (with counts); `overlong="truncate"` keeps its
first `max_length` tokens, `overlong="drop"` drops it (counted as `rows_dropped_overlong`).
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from rllm.errors import RllmError
from rllm.training.batch import TrainingRow, TrajectoryRef, build_rows
from rllm.types import Episode, ModelOutput, Step, Trajectory

__all__ = [
    "TrainingDataError",
    "check_data_path",
    "check_data_paths",
    "export_trl",
    "fit_length",
    "read_jsonl",
    "rows_from_messages",
    "rows_from_trajectories",
    "select_trajectories",
    "truncate_row",
]

Overlong = Literal["error", "truncate", "drop"]
_UNLIMITED = 1 << 40  # build_rows' own limits are off: fit_length applies the SFT one to whole rows


class TrainingDataError(RllmError, ValueError):
    """Offline training data (SFT rows, DPO pairs) cannot be used as it is: nothing left after filtering, no
    assistant turn, too long."""


# ---- episodes ------------------------------------------------------------------------------------------------


def select_trajectories(
    records: Iterable[dict[str, Any] | Episode],
    *,
    split: str | None = None,
    roles: Sequence[str] | None = None,
    correct_only: bool = True,
    min_reward: float | None = None,
    task_pass_rate: Literal["any", "mixed"] = "any",
    max_per_task: int | None = None,
) -> tuple[list[TrajectoryRef], dict[str, int]]:
    """The `(episode, trajectory)` pairs to train on, from `read_episode_records` records (or bare episodes), and
    the count left after each filter (module docstring). Raises `TrainingDataError` when a filter leaves nothing."""
    episodes = [
        r if isinstance(r, Episode) else r["episode"]
        for r in records
        if isinstance(r, Episode) or split is None or r["split"] == split
    ]
    pairs = [(e, t) for e in episodes for t in e.trajectories]
    stats = {"episodes": len(episodes), "trajectories": len(pairs)}
    _require(pairs, stats, "trajectories", f"no episodes{f' of split {split!r}' if split else ''} in the file")
    if roles:
        pairs = [(e, t) for e, t in pairs if t.name in roles]
        names = sorted({t.name for e in episodes for t in e.trajectories})
        _require(pairs, stats, "after_roles", f"no trajectory has a role in {list(roles)}; the roles are {names}")
    rates = _pass_rates(episodes)
    if correct_only:
        pairs = [(e, t) for e, t in pairs if t.succeeded()]
        _require(pairs, stats, "after_correct_only", "no trajectory succeeded (set correct_only=false to keep all)")
    if min_reward is not None:
        pairs = [(e, t) for e, t in pairs if t.final_reward() >= min_reward]
        _require(pairs, stats, "after_min_reward", f"no trajectory has reward >= {min_reward}")
    if task_pass_rate == "mixed":
        pairs = [(e, t) for e, t in pairs if 0 < rates[e.task_id] < 1]
        solved = sum(rate == 1 for rate in rates.values())
        why = f"no task has 0 < pass rate < 1 ({solved} of {len(rates)} tasks always solved, the others never)"
        _require(pairs, stats, "after_task_pass_rate", why)
    if max_per_task is not None:
        kept: Counter[str] = Counter()
        capped = []
        for e, t in pairs:
            if kept[e.task_id] < max_per_task:
                kept[e.task_id] += 1
                capped.append((e, t))
        pairs = capped
        stats["after_max_per_task"] = len(pairs)
    stats["tasks"] = len({e.task_id for e, _ in pairs})
    return pairs, stats


def _pass_rates(episodes: Sequence[Episode]) -> dict[str, float]:
    """Per task id: the fraction of its episodes that are correct (`Episode.is_correct`)."""
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for episode in episodes:
        outcomes[episode.task_id].append(bool(episode.is_correct))
    return {task: sum(flags) / len(flags) for task, flags in outcomes.items()}


def _require(items: list, stats: dict[str, int], key: str, why: str) -> None:
    stats[key] = len(items)
    if not items:
        counts = ", ".join(f"{k}={v}" for k, v in stats.items())
        raise TrainingDataError(f"the SFT dataset is empty after filtering: {why} (counts: {counts})")


def rows_from_trajectories(
    pairs: Sequence[TrajectoryRef], *, max_length: int | None, overlong: Overlong = "error"
) -> tuple[list[TrainingRow], dict[str, int]]:
    """Rows of exactly the sampled ids (loss mask on every sampled token), then `fit_length` (none when
    `max_length` is None)."""
    for episode, trajectory in pairs:
        for index, step in enumerate(trajectory.steps):
            if step.model_output is None or not step.model_output.has_token_ids:
                raise TrainingDataError(
                    f"episode {episode.id!r}, trajectory {trajectory.name!r}, step {index} has no token ids: it was "
                    "sampled from an endpoint without a tokenizer (chat mode). Re-run the eval with "
                    "rollout.openai.tokenizer set, or train on its messages (sft.messages)"
                )
    ones = [[1.0] * len(t.steps) for _, t in pairs]
    rows, stats = build_rows(pairs, step_advantages=ones, max_prompt_length=_UNLIMITED, max_response_length=_UNLIMITED)
    if max_length is None:
        return rows, stats
    return fit_length(rows, max_length=max_length, overlong=overlong, stats=stats)


# ---- messages ------------------------------------------------------------------------------------------------


# each offline section's data paths, and whether each is a run (a directory with episodes.jsonl, or that file)
_DATA_PATHS = {"sft": {"episodes": True, "messages": False}, "dpo": {"episodes": True, "preferences": False}}


def check_data_paths(config: Any, section: str) -> None:
    """`check_data_path` for each data path `config.<section>` sets ("sft" or "dpo")."""
    for field, run in _DATA_PATHS.get(section, {}).items():
        path = getattr(getattr(config, section), field)
        if path is not None:
            check_data_path(f"{section}.{field}", path, run=run)


def check_data_path(key: str, path: str | os.PathLike, *, run: bool) -> None:
    """`TrainingDataError` naming the setting `key` when `path` is missing, checked before a tokenizer or model
    loads. `run`: a run directory (it must hold episodes.jsonl) or that file; else a JSONL file."""
    target = Path(path)
    if run and target.is_dir():
        if not (target / "episodes.jsonl").is_file():
            hint = "give a run directory (rllm eval and rllm train write one) or an episodes.jsonl"
            raise TrainingDataError(f"{key}={path}: that directory has no episodes.jsonl; {hint}")
        return
    if target.is_file():
        return
    what = "a run directory (e.g. runs/eval-...) or its episodes.jsonl" if run else "a JSONL file, one record a line"
    raise TrainingDataError(f"{key}={path}: no such file{' or directory' if run else ''}; give {what}")


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """One JSON object a line (blank lines skipped); errors name the line."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TrainingDataError(f"{path}, line {number}: not JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise TrainingDataError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
            records.append(record)
    if not records:
        raise TrainingDataError(f"{path} holds no records")
    return records


def rows_from_messages(
    records: Sequence[dict[str, Any]],
    tokenizer: Any,
    *,
    max_length: int | None,
    overlong: Overlong = "error",
    vision: Any = None,
) -> tuple[list[TrainingRow], dict[str, int]]:
    """Rows from TRL-style conversational records (module docstring), then `fit_length`. A record without a
    trained assistant turn, or in neither format, is an error naming how many records and which ones. With
    `vision` (a VLM's `VisionProcessor`) messages may hold images: they render as the VLM's rollouts do, and each
    row carries its images."""
    pairs, empty = [], []
    for number, record in enumerate(records, 1):
        messages, first_trained = _conversation(record, number)
        steps = _assistant_steps(tokenizer, messages, first_trained, record.get("tools"), number, vision)
        if not steps:
            empty.append(number)
            continue
        pairs.append((Episode(id=f"record{number}:0"), Trajectory(name="assistant", steps=steps)))
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        raise TrainingDataError(
            f"{len(empty)} of {len(records)} records have no assistant turn to train on (records "
            f"{shown}); every record needs one (role 'assistant', in 'completion' for the "
            "prompt/completion format)"
        )
    return rows_from_trajectories(pairs, max_length=max_length, overlong=overlong)


def _conversation(record: dict[str, Any], number: int) -> tuple[list[dict], int]:
    """The record's messages and the index of the first one whose assistant turns are trained."""
    if "messages" in record:
        messages, first = record["messages"], 0
    elif "prompt" in record and "completion" in record:
        if not isinstance(record["prompt"], list) or not isinstance(record["completion"], list):
            raise TrainingDataError(
                f"record {number}: prompt and completion must be lists of messages "
                "(conversational format); plain-text prompt/completion is not "
                "supported"
            )
        messages, first = record["prompt"] + record["completion"], len(record["prompt"])
    else:
        raise TrainingDataError(
            f"record {number} has keys {sorted(record)}: expected 'messages' (with optional "
            "'tools') or 'prompt' and 'completion'"
        )
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise TrainingDataError(f"record {number}: messages must be a list of objects with a 'role'")
    return messages, first


def _assistant_steps(
    tokenizer: Any, messages: list[dict], first_trained: int, tools: Any, number: int, vision: Any = None
) -> list[Step]:
    """One step per trained assistant message: prompt = the messages before it with the generation prompt, completion
    = the text the template adds for it, cut after the first EOS (the rest opens the next prompt)."""
    from rllm.models.chat import encode_text, render_text

    def render(upto: int, generation: bool) -> tuple[str, list[str]]:
        if vision is not None:
            return vision.render_text(messages[:upto], tools=tools, add_generation_prompt=generation)
        return render_text(tokenizer, messages[:upto], tools=tools, add_generation_prompt=generation), []

    steps = []
    for index in range(first_trained, len(messages)):
        if messages[index]["role"] != "assistant":
            continue
        prompt, images = render(index, True)
        full, _ = render(index + 1, False)
        if not full.startswith(prompt):
            raise TrainingDataError(
                f"record {number}, message {index}: the chat template does not render the turn "
                "as an extension of the conversation before it (with the generation prompt), so "
                "the assistant's tokens cannot be told apart"
            )
        completion = _cut_after_eos(encode_text(tokenizer, full[len(prompt) :]), tokenizer.eos_token_id)
        output = ModelOutput(
            prompt_ids=encode_text(tokenizer, prompt),
            completion_ids=completion,
            logprobs=[0.0] * len(completion),
            prompt_images=images or None,
        )
        steps.append(Step(model_output=output))
    return steps


def _cut_after_eos(ids: list[int], eos_id: int | None) -> list[int]:
    return ids[: ids.index(eos_id) + 1] if eos_id is not None and eos_id in ids else ids


# ---- length --------------------------------------------------------------------------------------------------


def fit_length(
    rows: list[TrainingRow], *, max_length: int, overlong: Overlong = "error", stats: dict[str, int] | None = None
) -> tuple[list[TrainingRow], dict[str, int]]:
    """Apply the SFT length limit to whole rows (module docstring); adds `rows_truncated`/`rows_dropped_overlong`
    to `stats`. A row whose loss mask is empty after truncation is dropped and counted too."""
    stats = dict(stats or {})
    long = [row for row in rows if len(row) > max_length]
    if long and overlong == "error":
        longest = max(len(row) for row in long)
        raise TrainingDataError(
            f"{len(long)} of {len(rows)} sequences are longer than sft.max_length={max_length} "
            f"tokens (longest {longest}): raise sft.max_length, or set sft.overlong=truncate (keep "
            "the first tokens) or sft.overlong=drop"
        )
    kept, dropped = [], 0
    for row in rows:
        if len(row) > max_length and overlong == "truncate":
            truncate_row(row, max_length)
        if len(row) > max_length or row.num_loss_tokens == 0:
            dropped += 1
            continue
        kept.append(row)
    stats.update(
        rows=len(kept),
        rows_truncated=sum(row.truncated for row in kept),
        rows_dropped_overlong=dropped,
        loss_tokens=sum(row.num_loss_tokens for row in kept),
    )
    if not kept:
        raise TrainingDataError(
            f"no row has a token to train on within sft.max_length={max_length} "
            f"({dropped} of {len(rows)} rows dropped): raise sft.max_length"
        )
    return kept, stats


def truncate_row(row: TrainingRow, length: int) -> None:
    """Keep the first `length` tokens of `row` (every per-token list), marking it truncated."""
    for name in ("input_ids", "loss_mask", "old_logprobs", "advantages", "rewards"):
        setattr(row, name, getattr(row, name)[:length])
    row.truncated = True


# ---- export --------------------------------------------------------------------------------------------------


def export_trl(rows: Sequence[TrainingRow], path: str | os.PathLike) -> int:
    """Write `rows` as TRL's pre-tokenized SFT format, one `{"input_ids", "completion_mask"}` object a line; returns
    the number of rows written."""
    if any(row.images for row in rows):
        raise TrainingDataError(
            "these rows hold images, which TRL's pre-tokenized format cannot carry; train them with rllm sft"
        )
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({"input_ids": row.input_ids, "completion_mask": row.loss_mask}) + "\n")
    return len(rows)
