"""SkyRL-Gym's text environments as rllm tasks: `data.task: skyrl_gym:gsm8k` (any environment registered with
`skyrl_gym` that runs on this machine; `python -m rllm.tasks.hubs.skyrl_gym` lists them), each played in the
agent/env loop through SkyRL-Gym's own `skyrl_gym.make(env_class, env_config=..., extras=row)`.

Parts: `SkyRLGymEnv` (a `BaseEnv` around one SkyRL-Gym env), `SkyRLGymAgent` (the chat side), `make_tasks`,
`hub_task`.

- Rows are SkyRL's own dataset rows (its data format: `prompt`, a list of chat messages; `env_class`; `reward_spec`,
  e.g. `{"method": "rule", "ground_truth": "72"}`; `extra_info`; any other field is handed to the env as SkyRL's
  trainer hands it: `extras` is the row without `prompt` and `env_class`). Where they come from:
  - `data.task_args.dataset`: a file in that format (`.parquet`, `.jsonl`, `.json`: what SkyRL's example
    preprocessors write), or a folder holding SkyRL's `train.*` and `validation.*` (or `test.*`) files, one per
    split. A single file serves both splits: a row goes to validation when a hash of its prompt says so (one in
    five), so the two splits never share a prompt.
  - without it, `gsm8k` and `gsm8k_multi_turn` read GSM8K from rllm's benchmark catalog (`rllm.tasks.catalog`: the
    hub's openai/gsm8k train/test splits, or a local copy under `data.data_dir`), and turn each problem into a row as
    SkyRL's `examples/gsm8k/gsm8k_dataset.py` does (the question, then "Let's think step by step and output the final
    answer after "####"."; the ground truth is the number after GSM8K's `####`).
  `n` rows are drawn without replacement by a shuffle seeded from `split_seed`, so the same seed gives the same rows;
  asking for more rows than the split has is refused, naming its size.
- `data.task_args.env_config` is the env's config (what SkyRL reads from `environment.skyrl_gym.<env_class>`; e.g.
  text2sql's `db_path`), given to the env as an OmegaConf `DictConfig` like SkyRL does.
- The first observation is the row's prompt (all its messages, a system message included); each later one is the
  messages the env returns from `step` (SkyRL's envs speak chat messages), appended as they are. The agent's reply
  text is the action: SkyRL's envs parse it themselves (`#### 72`, `<sql>...</sql>`). A `postprocessed_action` the
  env returns is kept in the step's info, and the reply in the conversation stays what the model sampled (token
  exactness).
- Rewards are the env's, per step (gsm8k_multi_turn rewards every turn); the episode ends when the env says done.
  `info["success"]` is a last reward of at least 1. Turn limits are the env's own (`max_turns`, in `reset`'s info):
  set `rollout.max_steps` to at least that. At the end, the env's `get_metrics()` are in the last step's info.
- Only environments that run here: `search` and `searchcode` call a retrieval server over HTTP, and `lcb` runs the
  model's code in this process outside rllm's sandbox; they are refused by name. `text2sql` runs when its databases
  are on disk (`env_config.db_path`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from pathlib import Path
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.envs.base import BaseEnv
from rllm.tasks import Task
from rllm.tasks.hubs import HubError, import_hub_package, split_seed, unknown_name

__all__ = ["SKYRL_GSM8K_INSTRUCTION", "SkyRLGymAgent", "SkyRLGymEnv", "hub_task", "make_tasks", "names"]

HUB = "skyrl_gym"
# SkyRL's examples/gsm8k/gsm8k_dataset.py: appended to each question
SKYRL_GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_REFUSED = {
    "search": "calls a retrieval server over HTTP; rllm plays only environments that run on this machine",
    "searchcode": "calls a retrieval server over HTTP; rllm plays only environments that run on this machine",
    "lcb": "runs the model's code in this process, outside rllm's sandbox; use rllm's own code task instead",
}
_GSM8K_ENVS = ("gsm8k", "gsm8k_multi_turn")
_SPLIT_FILES = {"train": ("train",), "val": ("validation", "val", "test")}
_FORMATS = (".parquet", ".jsonl", ".json")
_NO_NEW_MESSAGES = "(The environment has nothing new to say.) Continue."


def _package(task: str = f"{HUB}:NAME") -> Any:
    return import_hub_package("skyrl_gym", package="skyrl-gym", task=task)


def _registry() -> dict[str, Any]:
    return dict(_package().registry)


def names() -> list[str]:
    """The ids of SkyRL-Gym's registered environments that run here, sorted."""
    return sorted(name for name in _registry() if name not in _REFUSED)


def _check_env_id(env_id: str) -> None:
    _package(f"{HUB}:{env_id}")
    if env_id in _REFUSED:
        raise HubError(
            f"{HUB}:{env_id} {_REFUSED[env_id]}; list those it can play with `python -m rllm.tasks.hubs.{HUB}`"
        )
    if env_id not in _registry():
        raise unknown_name(HUB, env_id, names(), what="environment")


def hub_task(name: str) -> Task:
    """The task `skyrl_gym:ENV_ID`: SkyRL-Gym's environment ENV_ID in the agent/env loop."""
    _check_env_id(name)
    return Task(
        name=f"{HUB}:{name}",
        description=f"SkyRL-Gym's {name} environment, rewarded by the environment itself (agent/env loop).",
        make_tasks=functools.partial(make_tasks, name),
        agent=SkyRLGymAgent,
        env=SkyRLGymEnv,
        default_workflow="agent_env",
    )


def make_tasks(
    env_id: str,
    n: int,
    *,
    seed: int = 0,
    split: str = "train",
    dataset: str | None = None,
    env_config: dict | None = None,
    data_dir: str | None = None,
) -> list[dict]:
    """`n` SkyRL rows for `env_id` from `dataset` (or GSM8K from the catalog), the same for the same seed and split;
    the two splits never share a row (module docstring)."""
    _check_env_id(env_id)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{HUB}:{env_id}: n must be a non-negative int, got {n!r}")
    if env_config is not None and not isinstance(env_config, dict):
        raise HubError(f"{HUB}:{env_id}: data.task_args.env_config must be a mapping, got {env_config!r}"[:300])
    if n == 0:
        return []
    if dataset is not None:
        source, rows = _read_dataset(env_id, dataset, split)
    elif env_id in _GSM8K_ENVS:
        source, rows = "the catalog's gsm8k", _gsm8k_rows(env_id, split, data_dir)
    else:
        raise HubError(
            f"{HUB}:{env_id} has no built-in data: give rows in SkyRL's dataset format with "
            "data.task_args.dataset=PATH (a .parquet/.jsonl file, or a folder with train and validation files)"
        )
    if n > len(rows):
        raise HubError(f"{HUB}:{env_id}: {n} {split} rows asked for, {source} has {len(rows)} for that split")
    picked = random.Random(split_seed(seed, split, n)).sample(range(len(rows)), n)
    out = []
    for number, index in enumerate(picked):
        row = rows[index]
        out.append(
            {
                **row,
                "id": f"{env_id}-{split}{seed}-{number}",
                "data_source": f"{HUB}:{env_id}",
                "env_class": env_id,
                "env_config": env_config or {},
                "source_index": index,
            }
        )
    return out


def _read_dataset(env_id: str, dataset: str, split: str) -> tuple[str, list[dict]]:
    """The rows of `split` in SkyRL's dataset at `dataset` (a file, or a folder of split files)."""
    path = Path(dataset).expanduser()
    if path.is_dir():
        files = [path / f"{stem}{suffix}" for stem in _SPLIT_FILES[split] for suffix in _FORMATS]
        found = next((file for file in files if file.is_file()), None)
        if found is None:
            wanted = " or ".join(f"{stem}.parquet/.jsonl" for stem in _SPLIT_FILES[split])
            raise HubError(f"{HUB}:{env_id}: no {split} file in {path} (looked for {wanted})")
        rows = _read_rows(env_id, found)
    elif path.is_file():
        rows = [row for row in _read_rows(env_id, path) if _is_val(row) == (split == "val")]
    else:
        raise HubError(f"{HUB}:{env_id}: data.task_args.dataset {dataset!r} is neither a file nor a folder")
    wrong = sorted({str(row.get("env_class")) for row in rows if row.get("env_class") not in (None, env_id)})
    if wrong:
        raise HubError(f"{HUB}:{env_id}: {path} holds rows for env_class {', '.join(wrong)}, not {env_id}")
    return str(path), rows


def _read_rows(env_id: str, file: Path) -> list[dict]:
    if file.suffix == ".parquet":
        import pandas

        records = json.loads(pandas.read_parquet(file).to_json(orient="records"))
    elif file.suffix == ".jsonl":
        with file.open(encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle if line.strip()]
    elif file.suffix == ".json":
        records = json.loads(file.read_text(encoding="utf-8"))
    else:
        raise HubError(f"{HUB}:{env_id}: {file} is not a .parquet, .jsonl or .json file")
    for number, record in enumerate(records):
        if not isinstance(record, dict) or not _is_messages(record.get("prompt")):
            raise HubError(
                f"{HUB}:{env_id}: row {number} of {file} has no 'prompt' list of chat messages (SkyRL's data format)"
            )
    return records


def _is_val(row: dict) -> bool:
    digest = hashlib.sha256(json.dumps(row["prompt"], sort_keys=True).encode()).digest()
    return digest[0] % 5 == 0


def _gsm8k_rows(env_id: str, split: str, data_dir: str | None) -> list[dict]:
    """GSM8K from the catalog, as SkyRL's gsm8k preprocessing writes it."""
    from rllm.tasks.catalog import CATALOG
    from rllm.tasks.catalog.loading import load_source_rows

    rows = []
    for index, source in enumerate(load_source_rows(CATALOG["gsm8k"], split, data_dir)):
        question, answer = str(source["question"]), str(source["answer"])
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"{question} {SKYRL_GSM8K_INSTRUCTION}"}],
                "reward_spec": {
                    "method": "rule",
                    "ground_truth": answer.rpartition("####")[2].strip().replace(",", ""),
                },
                "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
            }
        )
    return rows


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)


class SkyRLGymEnv(BaseEnv):
    """One SkyRL-Gym environment for one SkyRL row (module docstring)."""

    def __init__(self, env_class: str, prompt: list[dict], extras: dict | None = None, env_config: dict | None = None):
        _check_env_id(env_class)
        if not _is_messages(prompt):
            raise HubError(f"{HUB}:{env_class}: a row's prompt must be a list of chat messages, got {prompt!r}"[:300])
        self.env_class, self.prompt = env_class, prompt
        self.extras, self.env_config = dict(extras or {}), dict(env_config or {})
        self._env: Any = None
        self._done = False

    @classmethod
    def from_dict(cls, task: dict) -> SkyRLGymEnv:
        """Build from a SkyRL row: `extras` is the row without `prompt`, `env_class` and `env_config` (and rllm's own
        `id`, `data_source`, `source_index`), as SkyRL's trainer hands it to `skyrl_gym.make`."""
        if not isinstance(task, dict) or "env_class" not in task or "prompt" not in task:
            raise TypeError(
                f"SkyRLGymEnv.from_dict expects a SkyRL row with 'env_class' and 'prompt', got {task!r}"[:300]
            )
        ours = {"prompt", "env_class", "env_config", "id", "data_source", "source_index"}
        extras = {key: value for key, value in task.items() if key not in ours}
        return cls(task["env_class"], task["prompt"], extras, task.get("env_config"))

    def reset(self) -> tuple[list[dict], dict]:
        self.close()
        skyrl_gym = _package(f"{HUB}:{self.env_class}")
        from omegaconf import OmegaConf

        try:
            self._env = skyrl_gym.make(
                self.env_class, env_config=OmegaConf.create(self.env_config), extras=json.loads(json.dumps(self.extras))
            )
        except (AssertionError, KeyError) as error:
            detail = str(error).strip() or type(error).__name__
            raise HubError(f"{HUB}:{self.env_class}: the env refused this row: {detail}"[:500]) from None
        observation, info = self._env.init([dict(message) for message in self.prompt])
        self._done = False
        return list(observation), {**_json(info), "max_turns": getattr(self._env, "max_turns", None)}

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        if self._env is None:
            raise RuntimeError("SkyRLGymEnv.step() called before reset()")
        if self._done:
            raise RuntimeError("SkyRLGymEnv.step() called after the episode ended; call reset() first")
        output = self._env.step("" if action is None else str(action))
        reward, done = float(output["reward"]), bool(output["done"])
        info = {"metadata": _json(output.get("metadata") or {})}
        if output.get("postprocessed_action") is not None:
            info["postprocessed_action"] = str(output["postprocessed_action"])
        if done:
            info["metrics"] = _json(self._env.get_metrics())
        info["success"] = done and reward >= 1.0
        self._done = done
        observation = list(output.get("observations") or [])
        if not observation and not done:
            observation = [{"role": "user", "content": _NO_NEW_MESSAGES}]
        return observation, reward, done, info

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            env.close()


class SkyRLGymAgent(BaseAgent):
    """The chat side: SkyRL's observations are chat messages, appended as they are (the first one is the row's
    prompt, a system message included); the reply's text is the action."""

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict) -> None:
        if not isinstance(observation, list):
            super().update_from_env(observation, reward, done, info)
            return
        if self.trajectory.steps:
            step = self.trajectory.steps[-1]
            step.observation, step.reward, step.done, step.info = observation, float(reward), done, dict(info)
        if not done:
            self.messages.extend({"role": m["role"], "content": m["content"]} for m in observation)


def _json(value: Any) -> Any:
    """`value` as JSON (an env's metadata may hold numpy numbers or tuples)."""
    return json.loads(json.dumps(value, default=lambda item: item.item() if hasattr(item, "item") else str(item)))


if __name__ == "__main__":
    print("\n".join(names()))
