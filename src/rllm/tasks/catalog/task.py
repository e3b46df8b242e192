"""A catalog entry as an rllm `Task`: its rows read and converted, its prompt, its verifier.

Choices:
- `make_tasks(n, seed=, split=)` is a seeded shuffle of the split's rows, the first `n` of it (all rows when `n` is
  at least their number), so `val_size` smaller than the benchmark is a representative subset and the same seed
  gives the same subset. Training rows repeat, reshuffled, when `train_size` exceeds the split; validation rows
  never repeat.
- A benchmark without a training split trains on its evaluation split (overlapping the validation rows); `rllm
  datasets show NAME` says which split serves which.
- A row that cannot become a task (a mapped field missing, a value of the wrong type) is kept as a task that
  fails before the model is called, with one line naming the row, the field and the fix: its episode ends as an
  error, counted, never scored 0, and the other rows run. Only a split where every row is bad stops the run.
- A split is opened once per process (`datasets` keeps its own on-disk cache as well) and only the rows a run
  samples are decoded and converted: a benchmark of 28K images does not decode them all.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from typing import Any

from rllm.errors import RllmError
from rllm.images import image_part
from rllm.rewards.base import refuse_reward
from rllm.tasks import Task
from rllm.tasks.catalog import rows as converters
from rllm.tasks.catalog.entry import Benchmark
from rllm.tasks.catalog.loading import BenchmarkDataError, SourceRows, open_source
from rllm.tasks.catalog.verify import REQUIRED_FIELDS, verifier_fn

__all__ = ["benchmark_task", "convert_row", "load_tasks"]

logger = logging.getLogger(__name__)

VERIFIER_TIMEOUT_S = 120.0
MAX_ROW_CHARS = 2_000_000  # characters of one prompt; ~500K tokens, beyond every context window


def benchmark_task(bench: Benchmark) -> Task:
    """The `Task` that plays `bench`: prompt and verifier for the single-turn workflow or a harness, or, for a SWE
    benchmark, the SWE agent and environment (its rows are Docker-mode SWE tasks)."""
    common = {"name": bench.name, "description": bench.description, "make_tasks": functools.partial(_make_tasks, bench)}
    if bench.agent == "swe":
        from rllm.tasks.swe import SWEAgent, SWEEnv

        return Task(**common, agent=SWEAgent, env=SWEEnv, default_workflow="agent_env")
    reward_fn = functools.partial(_score, bench.name, bench.verifier)
    return Task(**common, prompt_fn=catalog_prompt, reward_fn=reward_fn, default_workflow=bench.agent)


def _make_tasks(
    bench: Benchmark, n: int, *, seed: int = 0, split: str = "train", data_dir: str | None = None
) -> list[dict]:
    source = _source(bench, "train" if split == "train" else "val", data_dir)
    order = list(range(len(source)))
    random.Random(seed).shuffle(order)
    if n <= len(order) or split != "train":  # evaluation never repeats a row
        picked = order[:n]
    else:
        picked, rng = [], random.Random(seed)
        while len(picked) < n:  # more training rows than the split has: epochs, each reshuffled
            picked += order
            rng.shuffle(order)
        picked = picked[:n]
    converted = {i: convert_row(bench, source[i], i) for i in dict.fromkeys(picked)}
    _report_bad(bench, list(converted.values()))
    return [dict(converted[i]) for i in picked]


def load_tasks(bench: Benchmark, split: str, data_dir: str | None = None) -> list[dict]:
    """Every row of `bench`'s split as a task (bad rows kept as failing tasks, see the module docstring)."""
    source = _source(bench, "train" if split == "train" else "val", data_dir)
    tasks = [convert_row(bench, source[i], i) for i in range(len(source))]
    _report_bad(bench, tasks)
    return tasks


@functools.lru_cache(maxsize=16)
def _source(bench: Benchmark, split: str, data_dir: str | None) -> SourceRows:
    source = open_source(bench, split, data_dir)
    if not len(source):
        raise BenchmarkDataError(f"{bench.name}: split {bench.hub_split(split)!r} of {bench.source} has no rows")
    return source


def _report_bad(bench: Benchmark, tasks: list[dict]) -> None:
    """One line per bad row (the first five), a count, and an error when no row is usable."""
    bad = [t for t in tasks if "invalid" in t]
    for task in bad[:5]:
        logger.warning("%s", task["invalid"])
    if tasks and len(bad) == len(tasks):
        raise BenchmarkDataError(f"every row of {bench.name} is unusable; the first: {bad[0]['invalid']}")
    if bad:
        logger.warning("%s: %d of %d rows are unusable; they end as errors, not as 0", bench.name, len(bad), len(tasks))


def convert_row(bench: Benchmark, row: dict, index: int) -> dict:
    """`row` (the source's schema) as a task: the mapped and converted canonical fields, checked, and `prompt`."""
    where = f"{bench.name} row {index}" + (f" (config {row['_config']})" if row.get("_config") else "")
    if "_invalid" in row:
        return _invalid(bench, index, f"{bench.name}: {row['_invalid']}")
    try:
        task = {"id": f"{bench.name}-{index}"}
        for canonical, column in bench.fields.items():
            task[canonical] = _column(row, column, where)
        if bench.convert:
            task = getattr(converters, bench.convert)(task, row)
        _check_fields(bench, task, where)
        task["prompt"] = bench.template.format(**task)
        _check_size(task, where)
    except BenchmarkDataError as error:
        return _invalid(bench, index, str(error))
    except converters.RowError as error:
        return _invalid(bench, index, f"{where}: {error}")
    task["data_source"] = bench.name
    return task


def _invalid(bench: Benchmark, index: int, why: str) -> dict:
    return {"id": f"{bench.name}-{index}", "question": "", "invalid": why, "data_source": bench.name}


def _column(row: dict, column: str, where: str) -> Any:
    value: Any = row
    for key in column.split("."):
        if not isinstance(value, dict) or key not in value:
            raise BenchmarkDataError(
                f"{where} has no field {column!r} (its fields: {', '.join(sorted(k for k in row if k[0] != '_'))}); "
                "the data is not in the source's schema: pull it again with `rllm datasets pull`"
            )
        value = value[key]
    return value


def _check_fields(bench: Benchmark, task: dict, where: str) -> None:
    for name, kind in {"question": str, **REQUIRED_FIELDS[bench.verifier]}.items():
        value = task.get(name)
        if value is None or not isinstance(value, kind) or isinstance(value, bool):
            got = "missing" if value is None else f"a {type(value).__name__}"
            raise BenchmarkDataError(
                f"{where}: field {name!r} is {got}, the {bench.verifier} verifier needs {_type_names(kind)}; "
                "fix the row or the data file"
            )


def _check_size(task: dict, where: str) -> None:
    """A row whose text is larger than any context window would only fail later, inside the model call."""
    chars = len(task["prompt"])
    if chars > MAX_ROW_CHARS:
        raise BenchmarkDataError(
            f"{where} makes a prompt of {chars / 1e6:.1f}M characters, over the {MAX_ROW_CHARS // 1_000_000}M a "
            "task may hold (no model's context fits it): drop the row from the data file"
        )


def _type_names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def catalog_prompt(task: dict) -> str | list[dict]:
    """The user message: the rendered template, with the row's images before it when it has any."""
    if "invalid" in task:
        raise BenchmarkDataError(task["invalid"])
    images = task.get("images") or []
    if not images:
        return task["prompt"]
    return [
        {
            "role": "user",
            "content": [*(image_part(image) for image in images), {"type": "text", "text": task["prompt"]}],
        }
    ]


def _score(name: str, verifier: str, task: dict, response: Any, **reward_args: Any) -> Any:
    """The verifier's reward; `reward_args` (data.reward_args) go to it, e.g. the judge's endpoint. A verifier that
    raises or does not return within `verifier_timeout_s` (default 120) ends the episode as a reward error naming
    it and the row (counted, left out of training), never as a 0."""
    if "invalid" in task:
        raise BenchmarkDataError(task["invalid"])
    timeout_s = float(reward_args.pop("verifier_timeout_s", VERIFIER_TIMEOUT_S))
    fn = verifier_fn(verifier)
    box: dict[str, Any] = {}
    done = threading.Event()

    def call() -> None:
        try:
            box["result"] = fn(task, response, **reward_args)
        except BaseException as error:  # handed to the caller below
            box["error"] = error
        finally:
            done.set()

    # a thread of its own, so that a verifier stuck in C code (a regex, sympy) cannot hold the episode forever
    threading.Thread(target=call, name=f"verifier-{verifier}", daemon=True).start()
    if not done.wait(timeout_s):
        raise refuse_reward(
            f"the {verifier} verifier of {name} did not return within {timeout_s:g} s on row {task.get('id')}"
        )
    error = box.get("error")
    if error is None:
        return box["result"]
    if isinstance(error, (RllmError, KeyboardInterrupt, SystemExit)):
        raise error
    raise refuse_reward(
        f"the {verifier} verifier of {name} raised {type(error).__name__} on row {task.get('id')}: {error}"
    ) from error
