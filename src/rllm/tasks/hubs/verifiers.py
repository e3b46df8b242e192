"""Prime Intellect's verifiers environments as rllm tasks: `data.task: verifiers:ENV_ID` loads the environment with
verifiers' own `vf.load_environment(ENV_ID, **data.task_args)` (an environment is a Python package whose module
defines `load_environment(...) -> vf.Environment`; `python -m rllm.tasks.hubs.verifiers` lists the installed ones),
plays its dataset rows with verifiers' own rollout loop and rewards them with its rubric.

How rllm drives it, and why: the gateway. A verifiers environment is its own agent loop: `env.rollout(...)` calls
an OpenAI client, and between calls its code decides what happens (a `SingleTurnEnv` stops after one reply, a
`MultiTurnEnv` answers with `env_response` until a stop condition fires, a `ToolEnv` runs the tool calls of the
reply and sends their results back); then `env.rubric` scores the whole rollout state. Adapting the dataset and the
rubric into rllm's agent/env loop would mean re-implementing that loop for every env class (stop conditions, tool
calling, states that reward functions read), and a subclass's own logic would be lost. Through rllm's gateway
(`rllm.gateway`) verifiers runs unchanged: `VerifiersWorkflow` (`rllm.harnesses.verifiers`, a gateway rollout
like every harness) calls `env.run_rollout(row, client, ...)` with an OpenAI client on the episode's gateway
session, which records every call token-exactly (tool calls included), and the rubric's score is the reward. This
module is the task side (names, rows); the workflow lives in the harnesses layer, above the gateway, which tasks may
not import: the task names it by its import path (`default_workflow`), as a config names a workflow.

- Rows are the environment's dataset rows as verifiers formats them (`prompt`: chat messages, the system prompt and
  few-shot examples included; `answer`; `info`; `task`; `example_id`), with the env id and its arguments, so the
  workflow can load the same environment. Training rows come from `env.dataset`, validation rows from
  `env.eval_dataset`; an environment with only one of them serves both splits from it, a row going to validation
  when a hash of its prompt says so (one in five), so the splits never share a prompt. `n` rows are drawn without
  replacement by a shuffle seeded from `split_seed` (the same seed, the same rows); more than the split holds is
  refused, naming its size.
- `data.task_args` are `load_environment`'s keyword arguments, checked against its signature (a typo is one line).
- Reward: the rubric's weighted sum (`state["reward"]`); correct means at least the environment's own
  `pass_threshold`. The rubric's metrics, the stop condition and any error verifiers recorded are in the episode's
  last step. Turn limits are the environment's own (`max_turns`); `rollout.max_tokens` bounds each reply and the
  gateway ends an episode whose prompt outgrows the budget.
- verifiers is not in the `hubs` extra: every release pins what rllm's venv pins differently (0.4.x: mcp 2.0.0 and
  openai < 3; 0.2.1 to 0.3.x: mcp < 2; earlier: datasets < 4.7), and rllm[tasks] pins mcp 2.3.0. It goes into a venv
  of its own: `pip install -e '.[verifiers]'` (its extra pins verifiers 0.3.1, whose classic API this adapter
  speaks), which is what a missing package's one line says.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import random
import signal
import threading
from collections.abc import Iterator
from typing import Any

from rllm.arguments import accepted_keywords, check_keywords
from rllm.tasks import Task
from rllm.tasks.hubs import HubError, split_seed, unknown_name

__all__ = ["VERIFIERS_EXTRA", "VERIFIERS_WORKFLOW", "hub_task", "load_env", "make_tasks", "names"]

HUB = "verifiers"
VERIFIERS_EXTRA = "pip install -e '.[verifiers]' into a venv of its own (it cannot share rllm[tasks]'s mcp pin)"
VERIFIERS_WORKFLOW = "rllm.harnesses.verifiers:VerifiersWorkflow"
_ROW_FIELDS = ("prompt", "answer", "info", "task", "example_id")


def package(task: str = f"{HUB}:NAME") -> Any:
    """`import verifiers`, or one line saying that `task` needs it and where it installs."""
    try:
        return importlib.import_module("verifiers")
    except ImportError:
        raise HubError(f"{task} needs the verifiers package: {VERIFIERS_EXTRA}") from None


def names() -> list[str]:
    """The installed verifiers environments: modules of installed distributions that depend on verifiers and define
    `load_environment` (found without importing them), sorted."""
    package()
    found = set()
    for dist in importlib.metadata.distributions():
        requires = " ".join(dist.requires or []).lower()
        name = (dist.metadata["Name"] or "").lower()
        if name == "verifiers" or "verifiers" not in requires:
            continue
        for module in (dist.read_text("top_level.txt") or "").split():
            spec = importlib.util.find_spec(module) if module.isidentifier() else None
            origin = getattr(spec, "origin", None)
            if origin and origin.endswith(".py") and _defines_load_environment(origin):
                found.add(module)
    return sorted(found)


def _defines_load_environment(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as file:
            return "def load_environment" in file.read()
    except OSError:
        return False


def _module(env_id: str) -> Any:
    """The environment's module, as verifiers finds it (`env_id` with '-' as '_')."""
    package(f"{HUB}:{env_id}")
    module_name = env_id.replace("-", "_").split("/")[-1]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise unknown_name(HUB, env_id, names(), what="environment") from None
        raise HubError(f"{HUB}:{env_id}: its module needs the {error.name!r} package, which is not installed") from None
    if not callable(getattr(module, "load_environment", None)):
        raise HubError(f"{HUB}:{env_id}: module {module_name} defines no load_environment(); it is not an environment")
    return module


def hub_task(name: str) -> Task:
    """The task `verifiers:ENV_ID`: the environment's rows, played by its own rollout loop through the gateway and
    rewarded by its rubric."""
    module = _module(name)
    doc = (inspect.getdoc(module) or "").strip()
    summary = doc.splitlines()[0].rstrip(".") if doc else name
    return Task(
        name=f"{HUB}:{name}",
        description=f"verifiers' {name} environment ({summary}): its own rollout loop, rewarded by its rubric.",
        make_tasks=functools.partial(make_tasks, name),
        default_workflow=VERIFIERS_WORKFLOW,
    )


_ENVS: dict[str, Any] = {}
_ENVS_LOCK = threading.Lock()


def load_env(env_id: str, env_args: dict[str, Any]) -> Any:
    """`vf.load_environment(env_id, **env_args)`, built once per process for these arguments and shared by the rows
    and the rollouts (refusals: one line)."""
    key = json.dumps([env_id, env_args], sort_keys=True)
    with _ENVS_LOCK:
        if key not in _ENVS:
            _ENVS[key] = build_env(env_id, env_args)
        return _ENVS[key]


def build_env(env_id: str, env_args: dict[str, Any]) -> Any:
    """A new environment (module docstring); its arguments are checked against `load_environment`'s signature, and
    the process's signal handlers are kept (`_signal_handlers_kept`)."""
    module = _module(env_id)
    check_keywords(
        env_args,
        accepted_keywords(module.load_environment),
        setting="data.task_args",
        goes_to=f"{HUB}:{env_id}'s load_environment",
    )
    vf = package(f"{HUB}:{env_id}")
    try:
        with _signal_handlers_kept():
            env = vf.load_environment(env_id, **env_args)
    except Exception as error:
        cause = error.__cause__ or error
        detail = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise HubError(f"{HUB}:{env_id}: load_environment failed: {type(cause).__name__}: {detail}"[:500]) from None
    if not isinstance(env, vf.Environment):
        raise HubError(f"{HUB}:{env_id}: load_environment returned {type(env).__name__}, not a vf.Environment")
    return env


_SIGNAL_LOCK = threading.Lock()


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Build an environment without letting it replace the process's SIGINT/SIGTERM handlers: verifiers' Environment
    installs its own (run its teardown, then exit), which would take over rllm's (the trainer checkpoints on SIGTERM),
    and `signal.signal` raises outside the main thread. Its teardown still runs at exit (it registers that with
    atexit too)."""
    with _SIGNAL_LOCK:
        install = signal.signal
        signal.signal = lambda signum, handler: signal.getsignal(signum)
        try:
            yield
        finally:
            signal.signal = install


def make_tasks(env_id: str, n: int, *, seed: int = 0, split: str = "train", **env_args: Any) -> list[dict]:
    """`n` rows of the environment's dataset for `split` (module docstring), the same for the same seed."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{HUB}:{env_id}: n must be a non-negative int, got {n!r}")
    env = load_env(env_id, env_args)
    if n == 0:
        return []
    rows = _split_rows(env, split)
    if n > len(rows):
        raise HubError(f"{HUB}:{env_id}: {n} {split} rows asked for, the environment has {len(rows)} for that split")
    picked = random.Random(split_seed(seed, split, n)).sample(range(len(rows)), n)
    out = []
    for number, index in enumerate(picked):
        row = {key: rows[index][key] for key in _ROW_FIELDS if key in rows[index]}
        try:
            row = json.loads(json.dumps(row))
        except (TypeError, ValueError) as error:
            raise HubError(f"{HUB}:{env_id}: dataset row {index} cannot be stored in a JSON row: {error}") from None
        out.append(
            {
                "id": f"{env_id}-{split}{seed}-{number}",
                "data_source": f"{HUB}:{env_id}",
                "env_id": env_id,
                "env_args": json.loads(json.dumps(env_args)),
                **row,
            }
        )
    return out


def _split_rows(env: Any, split: str) -> list[dict]:
    """The formatted dataset rows serving `split` (module docstring)."""
    train, evaluation = env.build_dataset(), env.build_eval_dataset()
    if train is not None and evaluation is not None:
        return [dict(row) for row in (train if split == "train" else evaluation)]
    rows = [dict(row) for row in (train if train is not None else evaluation)]
    return [row for row in rows if _is_val(row) == (split == "val")]


def _is_val(row: dict) -> bool:
    digest = hashlib.sha256(json.dumps(row.get("prompt"), sort_keys=True, default=str).encode()).digest()
    return digest[0] % 5 == 0


if __name__ == "__main__":
    print("\n".join(names()))
