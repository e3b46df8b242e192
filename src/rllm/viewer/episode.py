"""One episode as the viewer shows it: each trajectory's steps as a conversation, and its training rows token by
token (the overlay).

The overlay is built by the trainer's own `rllm.training.batch.build_rows`, with the run's length limits, from
the token ids the episode recorded: the tokens, their loss mask (trained vs context) and sampling log-probs, the
steps and weight versions are exactly what the update saw, and a new row where a step did not extend the one
before (a token mismatch) is marked. What the update used on top of that (advantages, the trainer's log-probs
where it computed them) comes from the record's `trained` field, written by the trainer since `rllm view`
exists. For a training episode of a run written before, the server recomputes them from its step's episodes
(`ViewerRun.recomputed_trained`) where the estimator allows; validation and eval episodes have none, and the
overlay says which case it is.
"""

from __future__ import annotations

import itertools
from typing import Any

from rllm.images import replace_image_refs
from rllm.training.batch import RowBuildError, build_rows
from rllm.types import Episode

__all__ = ["conversation", "episode_view", "overlay"]

DEFAULT_LIMIT = 10**9  # eval runs have no length limits: every token is kept


def episode_view(record: dict[str, Any], config: dict[str, Any], tokenizer: Any, note: str | None, *,
                 image_base: str = "") -> dict[str, Any]:  # fmt: skip
    """The episode, its conversation per trajectory and its overlay per trajectory. In the conversation a stored
    image (`rllm-image:<name>`, `rllm.images`) becomes the URL `image_base + name` the page shows it from."""
    episode = Episode.model_validate(record["episode"])
    trained = record.get("trained") or [None] * len(episode.trajectories)
    source = record.get("trained_source", "recorded") if record.get("trained") else None
    return {
        "step": record.get("step"),
        "split": record.get("split"),
        "episode": record["episode"],
        "trajectories": [
            {
                "name": t.name,
                "reward": t.final_reward(),
                "is_correct": t.succeeded(),
                "turns": replace_image_refs(conversation(t), lambda name: image_base + name),
                "overlay": {
                    **overlay(episode, i, trained[i] if i < len(trained) else None, config, tokenizer, note),
                    "advantages": source if i < len(trained) and trained[i] is not None else None,
                },
            }
            for i, t in enumerate(episode.trajectories)
        ],
    }


def conversation(trajectory: Any) -> list[dict[str, Any]]:
    """Per step: the messages new since the step before (system, user, tool results, observations), the model's
    reply (text, reasoning, tool calls), the observation the env returned (unless the next step's messages show
    it), reward, done and info."""
    turns, seen = [], []
    for step in trajectory.steps:
        messages = list(step.chat_completions)
        rewritten = bool(seen) and messages[: len(seen)] != seen
        new = messages if rewritten or not seen else messages[len(seen) :]
        if not rewritten and seen and new and new[0].get("role") == "assistant":
            new = new[1:]  # the previous reply, shown with the previous step
        output = step.model_output
        turns.append({
            "messages": new,
            "history_rewritten": rewritten,
            "reply": None if output is None else {
                "content": output.content if output.content is not None else output.text,
                "reasoning": output.reasoning,
                "tool_calls": [call.model_dump(mode="json") for call in output.tool_calls],
                "finish_reason": output.finish_reason,
                "weight_version": output.weight_version,
                "tokens": output.completion_length,
            },
            "action": _plain(step.action),
            "observation": _plain(step.observation),
            "reward": step.reward,
            "done": step.done,
            "info": step.info,
        })  # fmt: skip
        seen = messages + [{"role": "assistant", "content": turns[-1]["reply"]["content"]}] if output else messages
    for turn, following in itertools.pairwise(turns):  # an observation the next prompt shows is shown there, once
        shown = (turn["observation"], [turn["observation"]])  # an image observation is a one-part message
        if any(message.get("content") in shown for message in following["messages"]):
            turn["observation"] = None
    return turns


def _plain(value: Any) -> Any:
    """A step's action or observation as JSON shows it: scalars as they are, image parts (`rllm.images`) as parts,
    for the page to show the image, anything else as its text."""
    if isinstance(value, (str, int, float, bool, type(None))) or _is_image_part(value):
        return value
    if isinstance(value, list) and value and all(isinstance(p, dict) and "type" in p for p in value):
        return value if any(map(_is_image_part, value)) else str(value)
    return str(value)


def _is_image_part(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "image_url"


def overlay(episode: Episode, index: int, trained: list[Any] | None, config: dict[str, Any], tokenizer: Any,
            note: str | None) -> dict[str, Any]:  # fmt: skip
    """The training rows of trajectory `index`, token by token (module docstring)."""
    trajectory = episode.trajectories[index]
    rollout = config.get("rollout") or {}
    try:
        rows, stats = build_rows(
            [(episode, trajectory)],
            step_advantages=[[0.0] * len(trajectory.steps)],
            max_prompt_length=int(rollout.get("max_prompt_length") or DEFAULT_LIMIT),
            max_response_length=int(rollout.get("max_response_length") or DEFAULT_LIMIT),
        )
    except RowBuildError as exc:
        return {"rows": [], "error": str(exc)}
    out_rows = [_row(row, trajectory, trained, tokenizer, split=i > 0) for i, row in enumerate(rows)]
    return {
        "rows": out_rows,
        "stats": stats,
        "note": note,
        "error": None,
    }


def _row(row: Any, trajectory: Any, trained: list[Any] | None, tokenizer: Any, *, split: bool) -> dict[str, Any]:
    n = len(row.input_ids)
    step_of, advantage, trainer_logprobs = [-1] * n, [None] * n, [None] * n
    for step_index, start in zip(row.step_indices, row.completion_starts, strict=True):
        output = trajectory.steps[step_index].model_output
        end = min(start + output.completion_length, n)
        entry = trained[step_index] if trained and step_index < len(trained) else None
        for t in range(start, end):
            step_of[t] = step_index
            if entry is not None:
                value = entry.get("advantage")
                advantage[t] = value[t - start] if isinstance(value, list) else value
                if entry.get("trainer_logprobs") is not None:
                    trainer_logprobs[t] = entry["trainer_logprobs"][t - start]
    return {
        "ids": row.input_ids,
        "text": _token_texts(tokenizer, row.input_ids),
        "mask": row.loss_mask,
        "logprob": [
            lp if m or s >= 0 else None for lp, m, s in zip(row.old_logprobs, row.loss_mask, step_of, strict=True)
        ],
        "trainer_logprob": trainer_logprobs if any(x is not None for x in trainer_logprobs) else None,
        "advantage": advantage,
        "step": step_of,
        "steps": row.step_indices,
        "weight_versions": row.weight_versions,
        "prompt_length": row.prompt_length,
        "trained_tokens": row.num_loss_tokens,
        "truncated": row.truncated,
        "masked": row.num_loss_tokens == 0 and any(s >= 0 for s in step_of),
        "split_before": split,
    }


def _token_texts(tokenizer: Any, ids: list[int]) -> list[str] | None:
    if tokenizer is None:
        return None
    return tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
