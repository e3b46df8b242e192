"""rLLM v0.2's `SWEEnv` (DeepSWE's environment), over rllm's SWE environment (`rllm.tasks.swe.env.SWEEnv`): the
repository lives in rllm's bubblewrap sandbox, not in an R2E-Gym Docker/Kubernetes pod.

As in rLLM:
- `SWEEnv(entry=row)`, or `SWEEnv(dataset=rows, idx=i)` (a random row when `idx` is None); `from_dict(row)` uses the
  row as the entry and takes the constructor's arguments found among its keys. With neither entry nor dataset, rLLM
  draws from R2E-Gym-Lite on the Hub; here from rllm's shipped task set (its validation split).
- `reset()` gives the issue text (`SWEAgent` wraps it in its prompt). `step(action)` takes the reply's action in
  R2E-Gym's XML (`<function=file_editor><parameter=command>view</parameter>...</function>`) and gives the tool's
  output as text; an action with no function is a no-op (`"", 0, False, {}`). The finish call (`finish` in the
  "r2egym" scaffold, `submit` in "sweagent") ends the episode; `compute_final_reward()` grades the repository's diff
  against the hidden tests (1.0 when all pass).
- `scaffold`: "r2egym" (`file_editor`, `search`, `execute_bash(cmd)`, `finish`) or "sweagent"
  (`str_replace_editor`, `execute_bash(command)`, `submit`). `step_timeout` bounds one tool call, `reward_timeout`
  the grading.

Different here:
- The step that finishes already carries the reward (rLLM's is 0 until `compute_final_reward`), and its info says
  how it was graded (`grade`: resolved, tests_failed, ...).
- `backend`: rows made for rllm (`rllm swe build`, the shipped set: they have `sdist` or `repo_dir`) play in the
  sandbox; SWE-bench-format rows (SWE-bench, SWE-Gym, R2E-Gym/SWE-Bench-Verified) play in their Docker image
  (`backend="docker"`, the default for such rows). `backend="kubernetes"` (rLLM's default) does not exist here:
  it is an error naming these two. R2E-Gym's own rows (R2E-Gym-Lite, -Subset: graded by R2E-Gym's scripts) are
  refused, naming the sets that work.
- rllm's own options (`max_output_chars`, `episode_timeout`, `partial_credit`, `memory_mb`, `repo_size_mb`) may be
  given as keyword arguments or row keys. `verbose` is accepted and unused.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.errors import RllmError

__all__ = ["SCAFFOLDS", "SWEEnv", "parse_xml_action", "rllm_tool_schemas", "xml_action"]

SCAFFOLDS = ("r2egym", "sweagent")
_BACKENDS = ("sandbox", "docker")
_NATIVE_OPTIONS = ("max_output_chars", "episode_timeout", "partial_credit", "memory_mb", "repo_size_mb")
_INIT_KEYS = ("dataset", "idx", "step_timeout", "reward_timeout", "backend", "delete_image", "verbose", "scaffold")
# rLLM's name of a tool -> rllm's, per scaffold (R2E-Gym's SWE-agent tools call the shell tool execute_bash)
_RENAMED = {"sweagent": {"execute_bash": "bash"}}
# parameters rLLM's tools take that rllm's do not need (R2E-Gym's concise skeleton view): dropped
_DROPPED = {"concise"}
_FUNCTION = re.compile(r"<function=([^>]*)>(.*?)</function>", flags=re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>]*)>(.*?)</parameter>", flags=re.DOTALL)


class SWEBackendError(RllmError, ValueError):
    """A backend rllm does not have."""


# ---- R2E-Gym's XML actions ---------------------------------------------------------------------------------------


def parse_xml_action(text: str) -> tuple[str, dict[str, str]]:
    """(function name, parameters) of the first `<function=...>...</function>` block; ("", {}) when there is none.
    Values keep their text, less one leading and one trailing newline."""
    match = _FUNCTION.search(text or "")
    if not match:
        return "", {}
    parameters = {name.strip(): _unpad(value) for name, value in _PARAMETER.findall(match.group(2))}
    return match.group(1).strip(), parameters


def xml_action(name: str, parameters: dict[str, Any]) -> str:
    """The XML form of a call ("" for no call)."""
    if not name:
        return ""
    body = "".join(f"  <parameter={key}>{_as_text(value)}</parameter>\n" for key, value in parameters.items())
    return f"<function={name}>\n{body}</function>"


def _unpad(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def rllm_tool_schemas(scaffold: str) -> list[dict]:
    """The scaffold's tools as rLLM's agents name them (JSON-schema function tools)."""
    from rllm.tasks.swe.tools import tool_schemas

    _check_scaffold(scaffold)
    shown = {native: theirs for theirs, native in _RENAMED.get(scaffold, {}).items()}
    schemas = []
    for schema in tool_schemas(scaffold):
        name = schema["function"]["name"]
        schemas.append({**schema, "function": {**schema["function"], "name": shown.get(name, name)}})
    return schemas


def _check_scaffold(scaffold: str) -> None:
    if scaffold not in SCAFFOLDS:
        raise ValueError(f"Invalid scaffold: {scaffold!r}, must be one of {list(SCAFFOLDS)}")


def _typed(value: str, schema: dict) -> Any:
    """A parameter's text as its schema's type (XML carries only text: `insert_line`, `view_range`)."""
    kind = schema.get("type")
    try:
        if kind == "integer":
            return int(value.strip())
        if kind == "array":
            return json.loads(value)
        if kind == "boolean":
            return value.strip().lower() in ("true", "1", "yes")
    except ValueError:
        return value  # left as it is: rllm's tool answers with what it expected
    return value


# ---- the env -----------------------------------------------------------------------------------------------------


class SWEEnv(BaseEnv):
    """rLLM's SWE environment over rllm's (see the module docstring)."""

    def __init__(
        self,
        entry: dict | None = None,
        dataset: Any = None,
        idx: int | None = None,
        step_timeout: int = 90,
        reward_timeout: int = 300,
        backend: str | None = None,
        delete_image: bool = False,
        verbose: bool = False,
        scaffold: str = "r2egym",
        **rllm_options: Any,
    ) -> None:
        _check_scaffold(scaffold)
        if unknown := sorted(set(rllm_options) - set(_NATIVE_OPTIONS)):
            raise TypeError(f"SWEEnv got unknown argument(s) {unknown}; rllm's own options are {list(_NATIVE_OPTIONS)}")
        self.entry, self.dataset, self.idx = self._pick(entry, dataset, idx)
        self.step_timeout, self.reward_timeout = step_timeout, reward_timeout
        self.delete_image, self.verbose, self.scaffold = delete_image, verbose, scaffold
        self.total_steps = 0
        task = _playable_row(self.entry, backend)
        self.backend = task.get("backend", "sandbox")
        self.env = self._native(task, rllm_options)

    @staticmethod
    def _pick(entry: dict | None, dataset: Any, idx: int | None) -> tuple[dict, Any, int | None]:
        if entry is not None:
            return dict(entry), None, None
        if dataset is None:
            from rllm.tasks.swe.build import load_default_tasks

            dataset = load_default_tasks("validation")
        if idx is None:
            idx = random.randrange(len(dataset))
        if not 0 <= idx < len(dataset):
            raise IndexError(f"SWEEnv: idx {idx} is out of range for a dataset of {len(dataset)} rows")
        return dict(dataset[idx]), dataset, idx

    def _native(self, task: dict, options: dict) -> Any:
        from rllm.tasks.swe.env import SWEEnv as NativeSWEEnv

        row = {
            **task,
            "scaffold": self.scaffold,
            "step_timeout": self.step_timeout,
            "grade_timeout": self.reward_timeout,
            **options,
        }
        for key in _NATIVE_OPTIONS:  # the row's own rllm options
            if key in self.entry and key not in options:
                row[key] = self.entry[key]
        return NativeSWEEnv.from_dict(row)

    # ---- rLLM's env protocol ----------------------------------------------------------------------------------

    def reset(self) -> tuple[str, dict]:
        self.env.reset()
        self.total_steps = 0
        return str(self.entry["problem_statement"]), {}

    def step(self, action: Any) -> tuple[str, float, bool, dict]:
        name, parameters = parse_xml_action(action) if isinstance(action, str) else _call_of(action)
        if not name:
            return "", 0, False, {}
        self.total_steps += 1
        observation, reward, done, info = self.env.step(self._native_call(name, parameters))
        if done:
            return f"<<< Finished: {info.get('grade', '')} >>>", reward, True, info
        text = "\n".join(_shown(message) for message in observation)
        return f"Execution output of [{name}]:\n{text}", reward, False, info

    def compute_final_reward(self) -> float:
        return self.env.compute_final_reward()

    def close(self) -> None:
        self.env.close()
        if self.delete_image and self.backend == "docker":
            from rllm.tasks.swe.swebench import docker_image

            subprocess.run(["docker", "rmi", docker_image(self.env.task)], capture_output=True, check=False)

    @staticmethod
    def from_dict(extra_info: dict | str) -> SWEEnv:
        """The row is the entry; the constructor's arguments found among its keys are passed too."""
        row = json.loads(extra_info) if isinstance(extra_info, str) else dict(extra_info)
        arguments = {key: row[key] for key in (*_INIT_KEYS, *_NATIVE_OPTIONS) if key in row}
        return SWEEnv(entry=row, **arguments)

    # ---- helpers -----------------------------------------------------------------------------------------------

    def _native_call(self, name: str, parameters: dict[str, Any]) -> dict:
        """rllm's action for one call: the tool's rllm name, its parameters typed by the tool's schema."""
        from rllm.tasks.swe.tools import tool_schemas

        native = _RENAMED.get(self.scaffold, {}).get(name, name)
        schema = next(
            (s["function"]["parameters"] for s in tool_schemas(self.scaffold) if s["function"]["name"] == native),
            {"properties": {}},
        )
        arguments = {
            key: _typed(value, schema["properties"].get(key, {})) if isinstance(value, str) else value
            for key, value in parameters.items()
            if key not in _DROPPED
        }
        call = {"id": f"call_{self.total_steps}", "name": native, "arguments": arguments}
        return {"tool_calls": [call], "content": "", "errors": []}


def _call_of(action: Any) -> tuple[str, dict]:
    """A call given as an object (R2E-Gym's `Action`: `function_name`, `parameters`) or a dict."""
    if isinstance(action, dict):
        return str(action.get("function_name") or action.get("name") or ""), dict(action.get("parameters") or {})
    return str(getattr(action, "function_name", "") or ""), dict(getattr(action, "parameters", {}) or {})


def _shown(message: Any) -> str:
    return str(message.get("content", "")) if isinstance(message, dict) else str(message)


def _playable_row(entry: dict, backend: str | None) -> dict:
    """The row as rllm's SWEEnv plays it: rllm's own rows in the sandbox, SWE-bench-format rows in Docker."""
    if backend is not None and backend not in _BACKENDS:
        raise SWEBackendError(
            f"SWEEnv(backend={backend!r}): rllm plays SWE tasks with backend='sandbox' (rows from "
            "`rllm swe build` and the shipped set, no Docker) or backend='docker' (SWE-bench-format "
            "rows, each in its own image); there is no Kubernetes backend"
        )
    own = "sdist" in entry or "repo_dir" in entry
    if own and backend != "docker":
        return {**entry, "backend": "sandbox"}
    if entry.get("backend") == "docker" and "image" in entry:
        return dict(entry)
    if backend == "sandbox":
        raise SWEBackendError(
            "SWEEnv(backend='sandbox'): this row has no sandbox tree (no 'sdist' or 'repo_dir'); "
            "SWE-bench-format rows play with backend='docker'"
        )
    # SWE-bench's normaliser: image, test lists; refuses R2E-Gym's own rows naming the sets that work
    from rllm.tasks.swe.swebench import normalize_swe_row

    return normalize_swe_row(entry, f"SWEEnv entry ({entry.get('instance_id', '?')})", "swebench")
