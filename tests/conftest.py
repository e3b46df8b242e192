"""Shared fixtures. Real tokenizers come from the embedded models that `make test` fetches first; models used in
unit tests are tiny random-init ones built around those tokenizers, so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rllm.cpus import usable_cores

# One torch thread count for the whole suite and the CLIs it starts, whatever else the machine runs: by default rllm
# follows the machine's load (rllm.cpus), and tests that compare two runs bitwise need the same count in both.
os.environ.setdefault("OMP_NUM_THREADS", str(usable_cores()))
# Every process a test starts (a CLI run, Ray's daemons, a vLLM server) inherits this mark of the test process that
# started it (each xdist worker puts its own), so that a check for leftover processes counts only its own: the two
# xdist workers, or a verl test run beside the main suite, may each have Ray or vLLM running at the same time.
TEST_PROCESS_MARK = "RLLM_TEST_PROCESS"
os.environ[TEST_PROCESS_MARK] = str(os.getpid())
# A Ray temp dir of each test process's own: a local `ray.init()` connects to the cluster whose address the latest
# simulated cluster (ray.cluster_utils) wrote under it, which must not be another test process's. Short, since Ray
# puts Unix sockets there.
os.environ["RAY_TMPDIR"] = f"/tmp/rllm-ray-{os.getpid()}"
atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)

SMOLLM2 = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"

# The quick tier (`make check` runs `pytest -m "not slow"`) is decided here, so that nobody has to remember to mark a
# test: a test is slow when it lives in a folder of end-to-end tests, carries the marker of one that drives a browser
# or kills a run, or uses a fixture that drives a browser or saves a model folder for a command run in a subprocess.
# Tests that load a real model by hand keep their own `@pytest.mark.slow`.
SLOW_FOLDERS = {"smoke", "integration", "reliability", "browsergym", "gpu", "verl"}
SLOW_MARKERS = {"browser", "reliability"}
SLOW_FIXTURES = {"chromium", "tiny_model_dir", "tiny_vlm_dir"}
TESTS = Path(__file__).parent
COMPAT_TESTS = TESTS.parent / "compat" / "tests"  # the rllm-compat distribution's tests, run beside these


def _folder(item: pytest.Item) -> str:
    """The test's folder under tests/ ("unit", "smoke", ...), "compat" for compat/tests/."""
    path = Path(item.path)
    if path.is_relative_to(COMPAT_TESTS):
        return "compat"
    return path.relative_to(TESTS).parts[0] if path.is_relative_to(TESTS) else ""


def is_slow(item: pytest.Item) -> bool:
    folder = _folder(item)
    markers = {marker.name for marker in item.iter_markers()}
    return folder in SLOW_FOLDERS or bool(markers & SLOW_MARKERS) or bool(SLOW_FIXTURES & set(item.fixturenames))


# Under pytest-xdist (`make test`: a file to each worker at a time, in the order the workers collected them, with
# `--no-loadscope-reorder`: xdist would otherwise hand out the files with the most tests first, which left the
# five- and six-minute files of few tests, the kill-and-resume and vLLM ones, to run last, one worker alone) the
# folders of long files go first, so that the many short files of the others fill both workers at the end. Within
# a folder, and without xdist, the order is as collected.
FIRST_UNDER_XDIST = ("reliability", "integration", "smoke", "compat", "contract", "unit")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):  # an xdist worker (whose -n option xdist resets to None)
        items.sort(key=_xdist_rank)


def _xdist_rank(item: pytest.Item) -> int:
    folder = _folder(item)
    return FIRST_UNDER_XDIST.index(folder) if folder in FIRST_UNDER_XDIST else len(FIRST_UNDER_XDIST)


@pytest.fixture
def tuned_runtime():
    """rllm.runtime enabled with every tuning on, as the rllm commands run: for the tests of the tunings themselves
    (a library user's default is off)."""
    from rllm import runtime

    with runtime.enabled() as options:
        yield options


@pytest.fixture(autouse=True)
def _runtime_as_found():
    """A test that runs an rllm command in this process enables rllm.runtime for good: the next test starts off."""
    from rllm import runtime

    before = runtime.options()
    yield
    if before == runtime.OFF:
        runtime.disable()
    elif runtime.options() != before:
        runtime.enable(before)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from rllm.models.registry import load_tokenizer

    return load_tokenizer(SMOLLM2)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from rllm.models.registry import load_tokenizer

    return load_tokenizer(QWEN)


@pytest.fixture(scope="session", params=[SMOLLM2, QWEN])
def shipped_tokenizer(request):
    """Each chat template the project ships (both embedded models)."""
    from rllm.models.registry import load_tokenizer

    return load_tokenizer(request.param)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The system Chromium the web tests drive (rllm.tasks.web); they skip, naming the install command, without one."""
    from rllm.tasks.web.browser import BrowserUnavailableError, find_chromium

    try:
        return find_chromium()
    except BrowserUnavailableError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer):
    """A saved tiny random-init model folder with the real SmolLM2 tokenizer (for CLI and loader tests)."""
    from rllm.models.registry import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-model")
    build_tiny_model(smollm2_tokenizer, seed=0).save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory, smollm2_tokenizer):
    """A saved tiny random-init Idefics3 (SmolVLM's architecture) with its processor and the SmolLM2 tokenizer; 64 px
    images cost 16 image tokens (for CLI tests of vision agents)."""
    from rllm.models.vlm import build_tiny_vlm

    path = tmp_path_factory.mktemp("tiny-vlm")
    model, processor = build_tiny_vlm(smollm2_tokenizer, seed=0, image_size=64, patch_size=16)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def sharp_tiny_model(tokenizer, seed: int = 0, **shape):
    """A tiny model with wider random weights. build_tiny_model's init gives near-uniform logits and a degenerate
    greedy output (one token repeated); these give peaked, prompt-dependent ones, so comparisons between batch
    compositions, log-prob checks and update directions mean something."""

    from rllm.models.registry import build_tiny_model

    return sharpen(build_tiny_model(tokenizer, seed=seed, **shape), seed)


def sharpen(model, seed: int = 0):
    """`model` with its matrices redrawn wider (seeded): peaked, input-dependent logits (see sharp_tiny_model)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 2:
                scale = 2.0 / param.shape[1] ** 0.5 * (8 if "embed" in name else 1)
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    return model


def own_processes(keywords=("raylet", "gcs_server", "vllm serve")) -> dict[int, str]:
    """pid -> command line of the running processes that this test process started (directly or not: they carry its
    mark, see TEST_PROCESS_MARK) and whose command line names one of `keywords`: by default Ray's daemons and vLLM
    servers."""
    mark = f"{TEST_PROCESS_MARK}={os.environ[TEST_PROCESS_MARK]}".encode()
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if not any(k in args for k in keywords):
            continue
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # ended since the listing
            continue
        if mark in environment:
            found[int(pid)] = args
    return found


def leftover_processes() -> list[str]:
    """Ray daemons and vLLM servers this test process started that are still running."""
    return list(own_processes().values())


def run_rllm(*args: str, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """The `rllm` command line in a process of its own, as a user types it; the caller checks `returncode`. Forked
    from this test process's CLI fork server (tests/cli_forkserver.py: torch and rllm imported once) while the
    environment is the suite's own, else `python -m rllm.cli.main` in a subprocess (a test that set a variable)."""
    command = [sys.executable, "-m", "rllm.cli.main", *args]
    if _environment() != SUITE_ENVIRONMENT:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    return _cli_server().run(command, list(args), cwd or os.getcwd(), timeout)


# Variables set in the test process that no module reads at import, which the forked child is given as they are:
# pytest's name of the running test, and the cache folder torch's compiler sets for itself at its first use.
CALL_TIME_VARIABLES = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CALL_TIME_VARIABLES}


SUITE_ENVIRONMENT = _environment()  # as set above, before any test changed it


class CliForkServer:
    """This test process's tests/cli_forkserver.py (started at its first use, stopped at exit)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(TESTS / "cli_forkserver.py")],
            cwd=TESTS.parent,
            env=SUITE_ENVIRONMENT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reply()  # ready: everything imported
        self.outputs = Path(tempfile.mkdtemp(prefix="rllm-cli-"))
        self.runs = 0
        atexit.register(self.close)

    def run(self, command: list[str], argv: list[str], cwd, timeout: float) -> subprocess.CompletedProcess:
        self.runs += 1
        stdout, stderr = self.outputs / f"{self.runs}.out", self.outputs / f"{self.runs}.err"
        request = {"argv": argv, "cwd": str(cwd), "env": dict(os.environ), "timeout_s": timeout}
        request |= {"stdout": str(stdout), "stderr": str(stderr)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self._reply()
        out, err = (path.read_text(encoding="utf-8", errors="replace") for path in (stdout, stderr))
        stdout.unlink()
        stderr.unlink()
        if reply.get("timed_out"):
            raise subprocess.TimeoutExpired(command, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(command, reply["returncode"], out, err)

    def _reply(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"tests/cli_forkserver.py died (exit {self.process.poll()}); its stderr is above")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        shutil.rmtree(self.outputs, ignore_errors=True)


_CLI_SERVER: CliForkServer | None = None


def _cli_server() -> CliForkServer:
    global _CLI_SERVER
    if _CLI_SERVER is None or _CLI_SERVER.process.poll() is not None:
        _CLI_SERVER = CliForkServer()
    return _CLI_SERVER
