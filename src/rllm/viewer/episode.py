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

A record is data from disk, not trusted: a token id outside the tokenizer's vocabulary (negative, or 10**12)
marks the overlay damaged (`"damaged"`: what is wrong) instead of crashing the decoder, and an image in the
conversation is shown only from the run's own stored images or a `data:image/...` URL of a raster format; any other
URL (`javascript:`, `data:text/html`, `data:image/svg+xml`, another site) becomes a text part saying it was not
shown, so it never reaches a link or an image of the page.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from rllm.images import IMAGE_FILE, replace_image_refs
from rllm.training.batch import RowBuildError, build_rows
from rllm.types import Episode
from rllm.viewer.index import task_key

__all__ = ["conversation", "episode_view", "overlay"]

DEFAULT_LIMIT = 10**9  # eval runs have no length limits: every token is kept
# raster images only: an SVG is a document that can carry script (harmless in <img>, not when opened as a link)
_SHOWN_DATA_URL = re.compile(r"data:image/(png|jpeg|jpg|gif|webp|bmp|avif)[;,]", re.IGNORECASE)


def episode_view(
    record: dict[str, Any], config: dict[str, Any], tokenizer: Any, note: str | None, *, image_base: str = ""
) -> dict[str, Any]:
    """The episode, its conversation per trajectory and its overlay per trajectory. In the conversation a stored
    image (`rllm-image:<name>`, `rllm.images`) becomes the URL `image_base + name` the page shows it from."""
    episode = Episode.model_validate(record["episode"])
    split = record.get("split")
    recorded = record.get("trained")  # a list (one entry per trajectory) when the trainer recorded the update
    trained = recorded or [None] * len(episode.trajectories)
    source = record.get("trained_source", "recorded") if recorded else None
    trajectories = []
    for i, t in enumerate(episode.trajectories):
        used = trained[i] if i < len(trained) else None
        # in an update: known for a recorded training episode; unknown (None) for one of a run before that
        in_update = None if split == "train" and not recorded else split == "train" and used is not None
        trajectories.append(
            {
                "name": t.name,
                "reward": t.final_reward(),
                "is_correct": t.succeeded(),
                "turns": shown_images(replace_image_refs(conversation(t), lambda name: image_base + name), image_base),
                "overlay": {
                    **overlay(episode, i, used, config, tokenizer, note, in_update=in_update),
                    "advantages": source if used is not None else None,
                    "split": split,
                },
            }
        )
    damaged = [t["overlay"]["damaged"] for t in trajectories if t["overlay"].get("damaged")]
    return {
        "step": record.get("step"),
        "split": split,
        "damaged": damaged[0] if damaged else None,
        "episode": record["episode"],
        "task_key": task_key(episode.task, episode.task_id),
        "trajectories": trajectories,
    }


def conversation(trajectory: Any) -> list[dict[str, Any]]:
    """Per step: the messages new since the step before (system, user, tool results, observations), the model's
    reply (text, reasoning, tool calls), the observation the env returned, reward, done and info.

    The observation is data as the env returned it (text, image parts, a chat list such as SWE's tool messages, a
    dict such as the web env's goal and accessibility tree), for the page to show as what it is. The next prompt is
    the truth of what the model read (its tokens are what was sampled from and trained on), so where the next step
    shows the observation verbatim, it is shown there only (`observation` None); where the next step's new
    messages render it some other way (an agent formats a dict into text), the raw observation is kept one click
    away (`observation_in_prompt`: the page folds it); where no next prompt shows it (the last step), it is shown."""
    turns, seen = [], []
    for step in trajectory.steps:
        messages = list(step.chat_completions)
        rewritten = bool(seen) and messages[: len(seen)] != seen
        new = messages if rewritten or not seen else messages[len(seen) :]
        if not rewritten and seen and new and new[0].get("role") == "assistant":
            new = new[1:]  # the previous reply, shown with the previous step
        output = step.model_output
        turns.append(
            {
                "messages": new,
                "history_rewritten": rewritten,
                "reply": None
                if output is None
                else {
                    "content": output.content if output.content is not None else output.text,
                    "reasoning": output.reasoning,
                    "tool_calls": [call.model_dump(mode="json") for call in output.tool_calls],
                    "finish_reason": output.finish_reason,
                    "weight_version": output.weight_version,
                    "tokens": output.completion_length,
                },
                "action": _plain(step.action),
                "observation": _jsonable(step.observation),
                "observation_in_prompt": False,
                "reward": step.reward,
                "done": step.done,
                "info": step.info,
            }
        )
        seen = messages + [{"role": "assistant", "content": turns[-1]["reply"]["content"]}] if output else messages
    for turn, following in itertools.pairwise(turns):
        observation, shown = turn["observation"], following["messages"]
        if observation in (None, "", []):
            continue
        if _shown_verbatim(observation, shown):
            turn["observation"] = None
        elif any(message.get("role") in ("user", "tool") for message in shown):
            turn["observation_in_prompt"] = True
    return turns


def _shown_verbatim(observation: Any, messages: list[dict[str, Any]]) -> bool:
    """Whether `messages` show `observation` as it is: its text or image parts as a message's content, or its chat
    messages (role and content) among them."""
    contents = [message.get("content") for message in messages]
    if _is_chat(observation):
        shown = [(message.get("role"), message.get("content")) for message in messages]
        return all((part.get("role"), part.get("content")) in shown for part in observation)
    return observation in contents or [observation] in contents  # an image observation is a one-part message


def _is_chat(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def _jsonable(value: Any) -> Any:
    """`value` as JSON holds it, structure kept (dicts, lists, scalars; a pydantic model as its dump; anything else
    as its text), for the page to show a structured observation as fields and messages, never as Python's repr."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def _plain(value: Any) -> Any:
    """A step's action as JSON shows it: scalars as they are, image parts (`rllm.images`) as parts, anything else
    as its text."""
    if isinstance(value, (str, int, float, bool, type(None))) or _is_image_part(value):
        return value
    if isinstance(value, list) and value and all(isinstance(p, dict) and "type" in p for p in value):
        return value if any(map(_is_image_part, value)) else str(value)
    return str(value)


def _is_image_part(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "image_url"


def overlay(
    episode: Episode,
    index: int,
    trained: list[Any] | None,
    config: dict[str, Any],
    tokenizer: Any,
    note: str | None,
    *,
    in_update: bool | None = None,
) -> dict[str, Any]:
    """The training rows of trajectory `index`, token by token (module docstring). `in_update`: whether the
    trajectory was in its step's update (False for validation and eval episodes, which never are; None: unknown,
    a training episode of a run that recorded no advantages)."""
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
    damaged = _bad_token_id(rows, tokenizer)
    if damaged is not None:
        return {"rows": [], "error": f"damaged record: {damaged}", "damaged": damaged}
    out_rows = [_row(row, trajectory, trained, tokenizer, in_update, split=i > 0) for i, row in enumerate(rows)]
    return {
        "rows": out_rows,
        "stats": stats,
        "note": note,
        "error": None,
        "in_update": in_update,
    }


def _row(row: Any, trajectory: Any, trained: Any, tokenizer: Any, in_update: Any, *, split: bool) -> dict[str, Any]:
    n = len(row.input_ids)
    step_of, advantage, trainer_logprobs = [-1] * n, [None] * n, [None] * n
    stepped = [False] * n  # the token's step was in the update (an entry in `trained`)
    for step_index, start in zip(row.step_indices, row.completion_starts, strict=True):
        output = trajectory.steps[step_index].model_output
        end = min(start + output.completion_length, n)
        entry = trained[step_index] if trained and step_index < len(trained) else None
        for t in range(start, end):
            step_of[t] = step_index
            if entry is not None:
                stepped[t] = True
                value = entry.get("advantage")
                advantage[t] = value[t - start] if isinstance(value, list) else value
                if entry.get("trainer_logprobs") is not None:
                    trainer_logprobs[t] = entry["trainer_logprobs"][t - start]
    columns = zip(row.loss_mask, step_of, stepped, advantage, strict=True)
    state = [_token_state(mask, step, in_update, used, value) for mask, step, used, value in columns]
    return {
        "ids": row.input_ids,
        "text": _token_texts(tokenizer, row.input_ids),
        "mask": row.loss_mask,
        "state": state,
        "logprob": [
            lp if m or s >= 0 else None for lp, m, s in zip(row.old_logprobs, row.loss_mask, step_of, strict=True)
        ],
        "trainer_logprob": trainer_logprobs if any(x is not None for x in trainer_logprobs) else None,
        "advantage": advantage,
        "step": step_of,
        "steps": row.step_indices,
        "weight_versions": row.weight_versions,
        "prompt_length": row.prompt_length,
        "loss_tokens": row.num_loss_tokens,
        "trained_tokens": sum(x in TRAINED_STATES for x in state),
        "truncated": row.truncated,
        "masked": row.num_loss_tokens == 0 and any(s >= 0 for s in step_of),
        "split_before": split,
    }


# what a token of the overlay was, for its colour: context (prompt, observations, template), sampled but not
# trained, trained with a positive / negative / zero advantage, or trained? (loss mask 1 in a training episode
# whose run recorded no advantages: whether the update used it is not known)
TRAINED_STATES = ("positive", "negative", "zero")


def _token_state(mask: int, step: int, in_update: bool | None, stepped: bool, advantage: Any) -> str:
    if step < 0:
        return "context"
    if not mask or in_update is False:
        return "sampled"
    if in_update is None:
        return "unknown"
    if not stepped:
        return "sampled"  # its step was in no row of the update
    if advantage is None:
        return "unknown"
    return "positive" if advantage > 0 else "negative" if advantage < 0 else "zero"


def _bad_token_id(rows: list[Any], tokenizer: Any) -> str | None:
    """What is wrong with the first token id no tokenizer could have produced (the decoder overflows on them)."""
    vocab = len(tokenizer) if hasattr(tokenizer, "__len__") else None  # no tokenizer: only negative ids are known bad
    for row in rows:
        for position, token in enumerate(row.input_ids):
            if token < 0 or (vocab is not None and token >= vocab):
                bound = f"0..{vocab - 1}" if vocab is not None else ">= 0"
                return f"token id {token} at position {position} is outside the tokenizer's vocabulary ({bound})"
    return None


def shown_images(turns: Any, image_base: str) -> Any:
    """`turns` with every image part whose URL the page may not show replaced by a text part (module docstring)."""
    if isinstance(turns, list):
        return [shown_images(item, image_base) for item in turns]
    if not isinstance(turns, dict):
        return turns
    if turns.get("type") == "image_url":
        image = turns.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not _image_url_allowed(url, image_base):
            return {"type": "text", "text": f"[image not shown: {_scheme(url)} URLs from a record are not displayed]"}
        return turns
    return {key: shown_images(value, image_base) for key, value in turns.items()}


def _image_url_allowed(url: Any, image_base: str) -> bool:
    if not isinstance(url, str):
        return False
    if _SHOWN_DATA_URL.match(url):
        return True
    return url.startswith(image_base) and IMAGE_FILE.fullmatch(url[len(image_base) :]) is not None


def _scheme(url: Any) -> str:
    if not isinstance(url, str):
        return "non-text"
    if url[:5].lower() == "data:":
        return repr(url.split(",", 1)[0].split(";", 1)[0][:40])
    return repr(url.split(":", 1)[0][:20] + ":") if ":" in url else "relative"


def _token_texts(tokenizer: Any, ids: list[int]) -> list[str] | None:
    if tokenizer is None:
        return None
    return tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
