"""reasoning-gym's procedural generators as rllm tasks: `data.task: reasoning_gym:NAME` for any of its registered
generators (`python -m rllm.tasks.hubs.reasoning_gym` lists them), played single-turn and scored by the generator's
own scorer.

- Rows come from reasoning-gym's own factory, `reasoning_gym.create_dataset(name, seed=..., size=n, **config)`;
  `data.task_args` is the generator's config (its dataclass's fields; `seed` and `size` are set by the data section).
  reasoning-gym draws entry `i` from `Random(seed + i)`, so the dataset seed comes from `split_seed`: training and
  validation rows are drawn from different seeds by construction (two draws can still pose the same question when a
  generator has few of them).
- The prompt is the entry's question and one line on the answer format: the final answer alone inside
  `<answer></answer>` tags, reasoning-gym's own convention (its `utils.SYSTEM_PROMPTS`). The LAST complete pair
  counts, stripped; a reply without one gets 0 without asking the scorer, and so does an answer the scorer raises on
  (the error is kept in the reward's info).
- The reward is `dataset.score_answer(answer=..., entry=...)` of the generator that made the row (same name, config,
  seed and size; built once per process and kept), so partial credit is the generator's own (e.g. 0.05 for a
  well-formed wrong ARC board). Correct means a score of 1.
- The entry is kept in the row as reasoning-gym made it, in JSON: its metadata holds tuples (and a few dicts with
  integer keys) that JSON would turn into lists and strings, and some scorers compare them (ARC's boards), so those
  are written tagged (`{"__tuple__": [...]}`, `{"__items__": [[key, value], ...]}`, `{"__set__": [...]}`) and read
  back into the same types before scoring. A value of another type cannot be stored and is refused when the rows are
  made, naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import numbers
import threading
from typing import Any

from rllm.arguments import check_keywords
from rllm.rewards.base import RewardOutput
from rllm.tasks import Task
from rllm.tasks.hubs import HubError, import_hub_package, split_seed, unknown_name

__all__ = [
    "ANSWER_INSTRUCTION",
    "extract_answer",
    "hub_task",
    "make_tasks",
    "names",
    "reasoning_gym_prompt",
    "reasoning_gym_reward",
]

HUB = "reasoning_gym"
ANSWER_INSTRUCTION = "Give your final answer, and nothing else, inside <answer></answer> tags."
_TAGS = ("__tuple__", "__set__", "__items__")
_SET_BY_DATA = {"seed": "data.seed / data.val_seed", "size": "data.train_size / data.val_size"}


def _package(name: str) -> Any:
    return import_hub_package("reasoning_gym", package="reasoning-gym", task=f"{HUB}:{name}")


def _registry(name: str = "NAME") -> dict[str, tuple[type, type]]:
    """reasoning-gym's registry: generator name -> (dataset class, config dataclass)."""
    _package(name)
    from reasoning_gym.factory import DATASETS

    return DATASETS


def names() -> list[str]:
    """The names of reasoning-gym's registered generators, sorted."""
    return sorted(_registry())


def hub_task(name: str) -> Task:
    """The task `reasoning_gym:NAME`: rows from the generator NAME, its question as the prompt, its scorer as the
    reward (single-turn)."""
    registry = _registry(name)
    if name not in registry:
        raise unknown_name(HUB, name, registry, what="generator")
    dataset_class = registry[name][0]
    doc = inspect.getdoc(dataset_class) or ""
    summary = doc.splitlines()[0].rstrip(".") if doc else name
    return Task(
        name=f"{HUB}:{name}",
        description=f"reasoning-gym's {name} generator ({summary}), scored by its own scorer (single-turn).",
        make_tasks=functools.partial(make_tasks, name),
        prompt_fn=reasoning_gym_prompt,
        reward_fn=reasoning_gym_reward,
        default_workflow="single_turn",
    )


def make_tasks(name: str, n: int, *, seed: int = 0, split: str = "train", **config: Any) -> list[dict]:
    """`n` rows of the generator `name` with `config` (its config dataclass's fields), the same for the same seed and
    split; the two splits draw from different seeds (module docstring)."""
    registry = _registry(name)
    if name not in registry:
        raise unknown_name(HUB, name, registry, what="generator")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{HUB}:{name}: n must be a non-negative int, got {n!r}")
    config_class = registry[name][1]
    fields = {field.name for field in dataclasses.fields(config_class)}
    goes_to = f"{HUB}:{name}'s config ({config_class.__name__})"
    check_keywords(config, fields, setting="data.task_args", goes_to=goes_to, reserved=_SET_BY_DATA)
    if n == 0:
        return []
    dataset_seed = split_seed(seed, split, n)
    dataset = _dataset(name, _to_json(config), dataset_seed, n)
    rows = []
    for index in range(n):
        entry = dataset[index]
        try:
            stored = _to_json(entry)
        except TypeError as error:
            raise HubError(f"{HUB}:{name}: entry {index} cannot be stored in a JSON row: {error}") from None
        rows.append(
            {
                "id": f"{name}-{split}{seed}-{index}",
                "data_source": f"{HUB}:{name}",
                "question": entry["question"],
                "answer": _to_json(entry.get("answer")),
                "entry": stored,
                "generator": name,
                "config": _to_json(config),
                "dataset_seed": dataset_seed,
                "dataset_size": n,
                "index": index,
            }
        )
    return rows


def reasoning_gym_prompt(task: dict) -> str:
    """The user message: the entry's question, then the answer format."""
    return f"{task['question']}\n\n{ANSWER_INSTRUCTION}"


def extract_answer(text: Any) -> str | None:
    """The stripped content of the last complete `<answer>...</answer>` pair, or None. Linear time on any input."""
    if not isinstance(text, str):
        return None
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    return text[start + len("<answer>") : end].strip() if start >= 0 else None


def reasoning_gym_reward(task: dict, response: Any) -> RewardOutput:
    """The generator's own score of the answer in `response`, against the row's entry (read back from its JSON)."""
    answer = extract_answer(response)
    if answer is None:
        return RewardOutput(0.0, is_correct=False, info={"answer": None})
    dataset = _dataset(task["generator"], task["config"], task["dataset_seed"], task["dataset_size"])
    entry = _from_json(task["entry"])
    try:
        score = float(dataset.score_answer(answer=answer, entry=entry))
    except Exception as error:  # a scorer that chokes on a strange answer: that answer is wrong, not the episode
        info = {"answer": answer, "scorer_error": f"{type(error).__name__}: {error}"[:500]}
        return RewardOutput(0.0, is_correct=False, info=info)
    return RewardOutput(score, is_correct=score >= 1.0, info={"answer": answer})


_DATASETS: dict[str, Any] = {}
_DATASETS_LOCK = threading.Lock()


def _dataset(name: str, config: Any, seed: int, size: int) -> Any:
    """reasoning-gym's dataset object for these settings, built once per process (building one can take a while: ARC
    reads its tasks) and shared by the rows and the rewards of a split. `config` is the JSON form."""
    key = json.dumps([name, config, seed, size], sort_keys=True)
    with _DATASETS_LOCK:
        if key not in _DATASETS:
            rg = _package(name)
            try:
                _DATASETS[key] = rg.create_dataset(name, seed=seed, size=size, **_from_json(config))
            except (AssertionError, TypeError, ValueError) as error:
                detail = str(error).splitlines()[0] if str(error).strip() else type(error).__name__
                raise HubError(
                    f"{HUB}:{name}: its config refused data.task_args {_from_json(config)}: {detail}"
                ) from None
        return _DATASETS[key]


def _to_json(value: Any) -> Any:
    """`value` as JSON, with tuples, sets and dicts whose keys are not all strings tagged so `_from_json` gives them
    back as they were. Other non-JSON types: TypeError, naming the type."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list):
        return [_to_json(item) for item in value]
    if isinstance(value, tuple):
        return {"__tuple__": [_to_json(item) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {"__set__": [_to_json(item) for item in value]}
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value) and not (len(value) == 1 and next(iter(value)) in _TAGS):
            return {key: _to_json(item) for key, item in value.items()}
        return {"__items__": [[_to_json(key), _to_json(item)] for key, item in value.items()]}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return _to_json(value.tolist())
    raise TypeError(f"a value of type {type(value).__module__}.{type(value).__qualname__}")


def _from_json(value: Any) -> Any:
    """The inverse of `_to_json`."""
    if isinstance(value, list):
        return [_from_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, items), *_ = value.items()
        if tag == "__tuple__":
            return tuple(_from_json(item) for item in items)
        if tag == "__set__":
            return {_from_json(item) for item in items}
        if tag == "__items__":
            return {_from_json(key): _from_json(item) for key, item in items}
    return {key: _from_json(item) for key, item in value.items()}


if __name__ == "__main__":
    print("\n".join(names()))
