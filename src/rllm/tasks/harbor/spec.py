"""A Harbor task folder read into a `HarborTask`, and a folder of them found (`find_tasks`).

The format is Harbor's (the `harbor` package, 0.26; Terminal-Bench 2.0's tasks): a folder holding

    task.toml          metadata; [verifier] / [agent] timeouts and env; [environment] image, resources, workdir...
    instruction.md     what the agent is told (leading canary comment lines are dropped, as Harbor does)
    environment/       a Dockerfile (or a prebuilt image named in task.toml) and the files it copies
    tests/test.sh      the verifier: run after the agent, it writes the reward to /logs/verifier/reward.txt (a
                       number) or reward.json (an object of numbers: its "reward" key, or its only key)
    solution/solve.sh  a reference solution (what `--agent oracle` runs)

and in the task's container Harbor puts the tests at /tests, the solution at /solution and its logs under /logs
(`agent/`, `verifier/`, `artifacts/`): the paths below are those of `harbor.models.trial.paths.EnvironmentPaths`.

A folder that cannot be played is one line (`HarborTaskError`) naming it and the fix: no tests/test.sh, a task.toml
that is not TOML (the file and the parser's error), a field of the wrong type, or what rllm does not play: several
steps ([[steps]]), a verifier in a container of its own ([verifier].environment_mode = "separate"), Docker Compose
services, MCP servers, GPUs, Windows.
"""

from __future__ import annotations

import logging
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.errors import RllmError

__all__ = [
    "LOGS_DIR",
    "SOLUTION_DIR",
    "TESTS_DIR",
    "HarborTask",
    "HarborTaskError",
    "find_tasks",
    "is_task_folder",
    "load_task",
]

logger = logging.getLogger(__name__)

# Harbor's paths inside the task's environment (harbor.models.trial.paths.EnvironmentPaths, Linux)
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
LOGS_DIR = "/logs"
AGENT_LOGS = f"{LOGS_DIR}/agent"
VERIFIER_LOGS = f"{LOGS_DIR}/verifier"
REWARD_TXT = f"{VERIFIER_LOGS}/reward.txt"
REWARD_JSON = f"{VERIFIER_LOGS}/reward.json"

CONFIG = "task.toml"
DEFAULT_AGENT_TIMEOUT_S = 600.0  # what `harbor tasks init` writes; Harbor's [agent].timeout_sec has no default
DEFAULT_VERIFIER_TIMEOUT_S = 600.0  # Harbor's VerifierConfig.timeout_sec default
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}")


class HarborTaskError(RllmError, ValueError):
    """A task folder that cannot be played: one line naming the folder (or file) and the fix."""


@dataclass(frozen=True)
class HarborTask:
    """One task folder, read. `config` is task.toml as parsed; the other fields are what rllm uses of it."""

    name: str  # the folder's name: the task's id in rllm
    path: Path
    instruction: str
    config: dict[str, Any]
    agent_timeout_s: float
    verifier_timeout_s: float
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    environment_env: dict[str, str] = field(default_factory=dict)
    memory_mb: int | None = None
    storage_mb: int | None = None
    workdir: str | None = None  # [environment].workdir: overrides the Dockerfile's WORKDIR
    docker_image: str | None = None  # [environment].docker_image: a prebuilt image
    network: str = "public"  # [environment].network_mode (allow_internet, the old field, mapped onto it)

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def environment(self) -> dict[str, Any]:
        return self.config.get("environment") or {}

    @property
    def verifier(self) -> dict[str, Any]:
        return self.config.get("verifier") or {}


def is_task_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / CONFIG).is_file()


def load_task(path: str | os.PathLike) -> HarborTask:
    """The task in folder `path`; `HarborTaskError` (one line) when it cannot be played."""
    folder = Path(path).resolve()
    config_path = folder / CONFIG
    try:
        config = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarborTaskError(f"{folder}: no {CONFIG}; a Harbor task folder holds task.toml") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise HarborTaskError(f"{config_path}: not valid TOML: {e}") from None
    if config.get("steps"):
        raise HarborTaskError(
            f"{config_path}: a multi-step task ([[steps]]); rllm plays single-step Harbor tasks only: "
            "split it into one folder per step"
        )
    if why := _unsupported(folder, config):
        raise HarborTaskError(f"{config_path}: {why}, which rllm does not play")
    for name, fix in (
        ("instruction.md", "write what the agent is told there"),
        ("tests/test.sh", "add the verifier script, which writes the reward to /logs/verifier/reward.txt"),
    ):
        if not (folder / name).is_file():
            raise HarborTaskError(f"{folder}: no {name}; {fix}")
    read = _Reader(config_path, config)
    agent_timeout = read.number("agent", "timeout_sec")
    verifier_timeout = read.number("verifier", "timeout_sec")
    environment = read.table("environment")
    network = read.string("environment", "network_mode")
    if network is None and environment.get("allow_internet") is not None:  # the deprecated field
        network = "public" if environment["allow_internet"] else "no-network"
    memory = read.number("environment", "memory_mb")
    if memory is None and isinstance(environment.get("memory"), str):  # the deprecated "2G" form
        memory = _size_mb(environment["memory"], config_path, "memory")
    storage = read.number("environment", "storage_mb")
    if storage is None and isinstance(environment.get("storage"), str):
        storage = _size_mb(environment["storage"], config_path, "storage")
    instruction = (folder / "instruction.md").read_text(encoding="utf-8", errors="replace")
    return HarborTask(
        name=folder.name,
        path=folder,
        instruction=strip_canary(instruction),
        config=config,
        agent_timeout_s=agent_timeout if agent_timeout else DEFAULT_AGENT_TIMEOUT_S,
        verifier_timeout_s=verifier_timeout if verifier_timeout else DEFAULT_VERIFIER_TIMEOUT_S,
        verifier_env=read.env("verifier", "env"),
        solution_env=read.env("solution", "env"),
        environment_env=read.env("environment", "env"),
        memory_mb=int(memory) if memory else None,
        storage_mb=int(storage) if storage else None,
        workdir=read.string("environment", "workdir"),
        docker_image=read.string("environment", "docker_image"),
        network=network or "public",
    )


def _unsupported(folder: Path, config: dict[str, Any]) -> str | None:
    """What of the task no backend of rllm plays (in the sandbox or in Docker), or None."""
    environment, verifier = config.get("environment") or {}, config.get("verifier") or {}
    if not isinstance(environment, dict) or not isinstance(verifier, dict):
        return None  # the typed reads below say what is wrong
    if verifier.get("environment_mode") == "separate" or verifier.get("environment") is not None:
        return (
            "its verifier runs in a container of its own ([verifier].environment_mode = 'separate'; set it to "
            "'shared' to run tests/test.sh where the agent worked)"
        )
    for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml"):
        if (folder / "environment" / name).is_file():
            return f"it runs services (environment/{name}: Docker Compose)"
    if environment.get("mcp_servers"):
        return "it gives the agent MCP servers ([environment].mcp_servers)"
    if str(environment.get("os", "linux")).lower() != "linux":
        return f"it runs on {environment['os']!r} ([environment].os)"
    if environment.get("gpus") or environment.get("tpu"):
        return "it asks for GPUs or TPUs ([environment].gpus / tpu)"
    return None


def find_tasks(path: str | os.PathLike) -> tuple[list[HarborTask], list[str]]:
    """The tasks of `path`: the folder itself when it holds task.toml, else its sub-folders that do (sorted by name).
    Returns (the tasks, one line for each folder that cannot be played); the caller reports the lines."""
    root = Path(path)
    folders = [root] if is_task_folder(root) else sorted(d for d in root.iterdir() if d.is_dir() and is_task_folder(d))
    tasks, problems = [], []
    for folder in folders:
        try:
            tasks.append(load_task(folder))
        except HarborTaskError as e:
            problems.append(str(e))
    return tasks, problems


def strip_canary(text: str) -> str:
    """Harbor's rule: leading canary comment lines (and the blank lines after them) are not shown to the agent."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def resolve_env(env: dict[str, str], where: str) -> dict[str, str]:
    """Harbor's templates: a value "${VAR}" or "${VAR:-default}" is read from this machine's environment."""
    out = {}
    for key, value in env.items():
        match = _TEMPLATE.fullmatch(value)
        if not match:
            out[key] = value
        elif match.group(1) in os.environ:
            out[key] = os.environ[match.group(1)]
        elif match.group(2) is not None:
            out[key] = match.group(2)
        else:
            raise HarborTaskError(f"{where}: {key} = {value!r} needs ${match.group(1)} set in this environment")
    return out


def _size_mb(text: str, config_path: Path, key: str) -> int:
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    text = text.strip().upper()
    try:
        return int(float(text[:-1]) * units[text[-1]])
    except (KeyError, ValueError, IndexError):
        raise HarborTaskError(f"{config_path}: [environment].{key} = {text!r} is not a size such as '2G'") from None


class _Reader:
    """Typed reads of task.toml's fields; a wrong type is one line naming the file and the field."""

    def __init__(self, path: Path, config: dict[str, Any]) -> None:
        self.path, self.config = path, config

    def table(self, section: str) -> dict[str, Any]:
        value = self.config.get(section, {})
        if not isinstance(value, dict):
            raise HarborTaskError(f"{self.path}: [{section}] must be a table, got {value!r}")
        return value

    def _get(self, section: str, key: str) -> Any:
        return self.table(section).get(key)

    def number(self, section: str, key: str) -> float | None:
        value = self._get(section, key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise HarborTaskError(f"{self.path}: [{section}].{key} must be a number >= 0, got {value!r}")
        return float(value)

    def string(self, section: str, key: str) -> str | None:
        value = self._get(section, key)
        if value is not None and not isinstance(value, str):
            raise HarborTaskError(f"{self.path}: [{section}].{key} must be a string, got {value!r}")
        return value

    def env(self, section: str, key: str) -> dict[str, str]:
        value = self._get(section, key) or {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise HarborTaskError(f"{self.path}: [{section}.{key}] must map names to strings, got {value!r}")
        return dict(value)
