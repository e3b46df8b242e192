"""Meta's OpenEnv environments as rllm tasks: `data.task: openenv:ENV` for an OpenEnv environment package (`ENV` is
its import name, e.g. `echo_env`; `python -m rllm.tasks.hubs.openenv` lists the installed `openenv-*` ones), played
multi-turn in the agent/env loop through the environment's own HTTP server and its own client.

Parts: `OpenEnvEnv` (a `BaseEnv` around the package's `EnvClient`), `OpenEnvAgent`, `make_tasks`, `hub_task`, and
`shutdown_servers`.

- An OpenEnv environment is a FastAPI server (`server/app.py`, made by `openenv.core.env_server.create_app`) and a
  client (an `openenv.core.EnvClient` subclass, typed by the env's Action and Observation models) that talks to it
  over a websocket, one session per client. rllm starts the server itself, on this machine, as OpenEnv's own
  Dockerfile does but without Docker: `python -m uvicorn server.app:app` (the app of the package's `openenv.yaml`
  when it names one) in the package's folder with that folder on PYTHONPATH, bound to 127.0.0.1 on a free port,
  ready when `/health` answers. Servers are pooled per environment: an episode takes an idle one or starts one,
  and gives it back when it closes, so each server holds one session at a time (OpenEnv's template allows one per
  server) and a run starts at most as many as it plays at once. `shutdown_servers()`, and the interpreter's exit,
  stop them all.
- Rows are `{"id", "data_source", "env", "seed"}`; the seed goes to `reset(seed=...)` (an environment whose `reset`
  takes none ignores it: OpenEnv's server passes only the keywords it accepts). `split_seed` keeps training and
  validation seeds apart.
- Observations: the Observation model's fields other than `done`, `reward` and `metadata`; when exactly one of them
  is a string, that string is the text the model reads, else the fields as JSON. Actions: when the Action model has
  one required field and it takes a string (echo's `message`, TextArena's `message`), the reply's text is that
  field; otherwise the reply must hold a JSON object of the action's fields (the first observation then says so,
  with the action's JSON schema). A reply that does not make a valid action is not sent: the model reads why, with
  reward 0, and the episode goes on (`info["invalid_action"]`).
- Rewards and termination are the environment's (`StepResult.reward`, `.done`; a missing reward is 0).
  `info["success"]` is a last reward of at least 1. An environment that never says done (the echo environment)
  ends at `rollout.max_steps`.
- Not used: Docker (`from_docker_image`), the Hugging Face hub (`from_hub`) and `uv`; nothing is downloaded.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import typing
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.envs.base import BaseEnv
from rllm.tasks import Task
from rllm.tasks.hubs import HubError, import_hub_package, split_seed, unknown_name

__all__ = ["OpenEnvAgent", "OpenEnvEnv", "hub_task", "make_tasks", "names", "shutdown_servers"]

HUB = "openenv"
START_TIMEOUT_S = 60.0
_OBSERVATION_FIELDS_LEFT_OUT = {"done", "reward", "metadata"}


def _package(task: str = f"{HUB}:NAME") -> Any:
    return import_hub_package("openenv.core", package="openenv-core", task=task)


def names() -> list[str]:
    """The import names of OpenEnv environment packages, sorted: installed distributions named `openenv-*` whose
    package has a `server/app.py`, and folders on `sys.path` holding an `openenv.yaml` and a `server/app.py`."""
    _package()
    found = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not name.startswith("openenv-") or name == "openenv-core":
            continue
        candidates = (dist.read_text("top_level.txt") or "").split() or [
            name.removeprefix("openenv-").replace("-", "_")
        ]
        for module in candidates:
            if module.isidentifier() and _env_dir(module) is not None:
                found.add(module)
    for entry in sys.path:  # environment folders on the path (an `openenv init` folder's parent on PYTHONPATH)
        with contextlib.suppress(OSError):
            for child in Path(entry or ".").iterdir():
                if child.name.isidentifier() and (child / "openenv.yaml").is_file() and _env_dir(child.name):
                    found.add(child.name)
    return sorted(found)


def _env_dir(module: str) -> Path | None:
    """The folder of the environment package `module` (holding server/app.py), without importing it; None if it is
    not one."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(getattr(spec, "submodule_search_locations", None) or [])
    for location in locations:
        if (Path(location) / "server" / "app.py").is_file():
            return Path(location)
    return None


@functools.cache
def _environment(name: str) -> tuple[Path, str, type, type]:
    """(the package's folder, its server app, its EnvClient class, its Action class), checked once per process."""
    _package(f"{HUB}:{name}")
    folder = _env_dir(name) if name.isidentifier() else None
    if folder is None:
        raise unknown_name(HUB, name, names(), what="environment package")
    from openenv.core.env_client import EnvClient

    client_class = None
    for module_name in (name, f"{name}.client"):
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise HubError(f"{HUB}:{name}: its client does not import here: {error}"[:500]) from None
        client_class = next(
            (
                value
                for value in vars(module).values()
                if isinstance(value, type) and issubclass(value, EnvClient) and value is not EnvClient
            ),
            None,
        )
        if client_class is not None:
            break
    if client_class is None:
        raise HubError(f"{HUB}:{name}: the package defines no EnvClient subclass (its client.py); not an environment")
    action_class = _action_class(client_class, EnvClient)
    if action_class is None:
        raise HubError(f"{HUB}:{name}: {client_class.__name__} does not say its Action type (EnvClient[Action, ...])")
    return folder, _app(folder), client_class, action_class


def _action_class(client_class: type, env_client: type) -> type | None:
    for klass in client_class.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is env_client and typing.get_args(base):
                action = typing.get_args(base)[0]
                return action if isinstance(action, type) else None
    return None


def _app(folder: Path) -> str:
    """The server app: `app:` of the package's openenv.yaml, else OpenEnv's default `server.app:app`."""
    manifest = folder / "openenv.yaml"
    if manifest.is_file():
        import yaml

        try:
            app = (yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}).get("app")
        except yaml.YAMLError:
            app = None
        if isinstance(app, str) and ":" in app:
            return app
    return "server.app:app"


def hub_task(name: str) -> Task:
    """The task `openenv:ENV`: the environment package ENV, its server started here, in the agent/env loop."""
    _environment(name)
    return Task(
        name=f"{HUB}:{name}",
        description=f"OpenEnv's {name} environment over its own HTTP server and client, rewarded by it (multi-turn).",
        make_tasks=functools.partial(make_tasks, name),
        agent=OpenEnvAgent,
        env=OpenEnvEnv,
        default_workflow="agent_env",
    )


def make_tasks(env: str, n: int, *, seed: int = 0, split: str = "train") -> list[dict]:
    """`n` rows `{"id", "data_source", "env", "seed"}`, the same for the same seed and split; training and validation
    seeds never overlap (`split_seed`)."""
    _environment(env)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{HUB}:{env}: n must be a non-negative int, got {n!r}")
    first = split_seed(seed, split, n)
    return [
        {"id": f"{env}-{split}{seed}-{i}", "data_source": f"{HUB}:{env}", "env": env, "seed": first + i}
        for i in range(n)
    ]


# ------------------------------------------------------------------------------------------------------ servers


class _Server:
    """One environment server: a uvicorn subprocess on 127.0.0.1:port."""

    def __init__(self, name: str, folder: Path, app: str) -> None:
        self.name = name
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile(mode="w+b")
        python_path = os.pathsep.join([str(folder), str(folder.parent), os.environ.get("PYTHONPATH", "")])
        command = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--log-level", "warning"],
            cwd=folder,
            env={**os.environ, "PYTHONPATH": python_path.rstrip(os.pathsep)},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.output()[-1:] or [f"exit code {self.process.returncode}"]
                self.stop()
                raise HubError(f"{HUB}:{self.name}: its server exited while starting: {tail[0]}"[:500])
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise HubError(f"{HUB}:{self.name}: its server did not answer /health within {START_TIMEOUT_S:.0f} s")

    def output(self) -> list[str]:
        """What the server printed, as lines (the last ones say why it failed)."""
        self._log.seek(0)
        return [line for line in self._log.read().decode(errors="replace").splitlines() if line.strip()]

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_LOCK = threading.Lock()
_IDLE: dict[str, list[_Server]] = {}
_ALL: list[_Server] = []


def _acquire(name: str) -> _Server:
    folder, app, _, _ = _environment(name)
    with _LOCK:
        idle = _IDLE.setdefault(name, [])
        while idle:
            server = idle.pop()
            if server.alive():
                return server
            _ALL.remove(server)
            server.stop()
    server = _Server(name, folder, app)  # outside the lock: starting takes a second or two
    with _LOCK:
        _ALL.append(server)
    return server


def _release(server: _Server) -> None:
    with _LOCK:
        if server in _ALL and server.alive():
            _IDLE.setdefault(server.name, []).append(server)


def shutdown_servers() -> None:
    """Stop every environment server this process started (also run at exit)."""
    with _LOCK:
        servers = list(_ALL)
        _ALL.clear()
        _IDLE.clear()
    for server in servers:
        server.stop()


atexit.register(shutdown_servers)


def running_servers() -> int:
    """How many environment servers this process has running."""
    with _LOCK:
        return sum(server.alive() for server in _ALL)


# ---------------------------------------------------------------------------------------------------------- env


class OpenEnvEnv(BaseEnv):
    """One episode of OpenEnv's `env` over its own client, on a pooled server of this process (module docstring)."""

    def __init__(self, env: str, seed: int = 0) -> None:
        _package(f"{HUB}:{env}")
        self.env, self.seed = env, int(seed)
        _, _, self._client_class, self._action_class = _environment(env)
        self._server: _Server | None = None
        self._client: Any = None
        self._done = False

    @classmethod
    def from_dict(cls, task: dict) -> OpenEnvEnv:
        """Build from a row; keys other than env and seed are ignored."""
        if not isinstance(task, dict) or "env" not in task:
            raise TypeError(f"OpenEnvEnv.from_dict expects a row with an 'env', got {task!r}"[:300])
        return cls(env=task["env"], seed=task.get("seed", 0))

    def reset(self) -> tuple[str, dict]:
        self.close()
        self._server = _acquire(self.env)
        self._client = self._client_class(base_url=self._server.url)
        try:
            self._client.connect()
            result = self._client.reset(seed=self.seed)
        except Exception:
            self.close()
            raise
        self._done = bool(result.done)
        text = _observation_text(result.observation)
        field = _text_field(self._action_class)
        if field is None:
            schema = json.dumps(self._action_class.model_json_schema())
            text += f"\n\nReply with one JSON object, the action (its JSON schema: {schema})."
        return text, {"env": self.env, "seed": self.seed, "action_field": field}

    def step(self, action: Any) -> tuple[str, float, bool, dict]:
        if self._client is None:
            raise RuntimeError("OpenEnvEnv.step() called before reset()")
        if self._done:
            raise RuntimeError("OpenEnvEnv.step() called after the episode ended; call reset() first")
        try:
            typed = _make_action(self._action_class, "" if action is None else str(action))
        except ValueError as error:
            message = f"That reply is not a valid action: {error}"[:1000]
            return message, 0.0, False, {"invalid_action": True, "success": False}
        result = self._client.step(typed)
        reward = float(result.reward or 0.0)
        self._done = bool(result.done)
        metadata = getattr(result.observation, "metadata", None) or {}
        info = {"invalid_action": False, "metadata": _json(metadata), "success": self._done and reward >= 1.0}
        return _observation_text(result.observation), reward, self._done, info

    def close(self) -> None:
        client, self._client = self._client, None
        server, self._server = self._server, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        if server is not None:
            _release(server)

    @staticmethod
    def is_multithread_safe() -> bool:
        return True  # each env has its own client and a server of its own while it runs


class OpenEnvAgent(BaseAgent):
    """The chat side: each observation as a user message, the reply's text as the action."""


def _text_field(action_class: type) -> str | None:
    """The Action's one required field when it takes a string, else None (the reply is then JSON)."""
    fields = {name: info for name, info in action_class.model_fields.items() if name != "metadata"}
    required = [name for name, info in fields.items() if info.is_required()]
    if len(required) == 1 and fields[required[0]].annotation is str:
        return required[0]
    return None


def _make_action(action_class: type, text: str) -> Any:
    from pydantic import ValidationError

    field = _text_field(action_class)
    if field is not None:
        payload: Any = {field: text}
    else:
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end < start:
            raise ValueError("no JSON object in it")
        try:
            payload = json.loads(text[start : end + 1])
        except json.JSONDecodeError as error:
            raise ValueError(f"its JSON does not parse ({error})") from None
        if not isinstance(payload, dict):
            raise ValueError("its JSON is not an object")
    try:
        return action_class.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        raise ValueError(f"{'.'.join(map(str, first['loc'])) or 'action'}: {first['msg']}") from None


def _observation_text(observation: Any) -> str:
    if hasattr(observation, "model_dump"):
        fields = observation.model_dump(mode="json", exclude=_OBSERVATION_FIELDS_LEFT_OUT)
    elif isinstance(observation, dict):
        fields = {k: v for k, v in observation.items() if k not in _OBSERVATION_FIELDS_LEFT_OUT}
    else:
        return str(observation)
    texts = [value for value in fields.values() if isinstance(value, str)]
    return texts[0] if len(texts) == 1 else json.dumps(_json(fields))


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


if __name__ == "__main__":
    print("\n".join(names()))
