"""Shared fixtures. Real tokenizers come from the embedded models that `make test` fetches first; models used in
unit tests are tiny random-init ones built around those tokenizers, so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import atexit
import os
import shutil
from pathlib import Path

import pytest

from rllm.cpus import usable_cores
from tests.support.cli import remember_suite_environment
from tests.support.models import QWEN, SMOLLM2, saved_model_dir
from tests.support.processes import TEST_PROCESS_MARK

# One torch thread count for the whole suite and the CLIs it starts, whatever else the machine runs: by default rllm
# follows the machine's load (rllm.cpus; a training run holds one count, but evaluations and library calls do not),
# and tests that compare two runs bitwise need the same count in both. The reliability tier runs one `rllm train`
# without it (test_kill_resume.py).
os.environ.setdefault("OMP_NUM_THREADS", str(usable_cores()))
# Every process a test starts inherits this test process's mark (tests/support/processes.py says why).
os.environ[TEST_PROCESS_MARK] = str(os.getpid())
# A Ray temp dir of each test process's own: a local `ray.init()` connects to the cluster whose address the latest
# simulated cluster (ray.cluster_utils) wrote under it, which must not be another test process's. Short, since Ray
# puts Unix sockets there.
os.environ["RAY_TMPDIR"] = f"/tmp/rllm-ray-{os.getpid()}"
atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)

remember_suite_environment()  # the environment run_rllm's fork server starts in, as set above

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


@pytest.fixture(scope="module")
def module_fake_server():
    """One fake OpenAI-compatible server (rllm.testing) for a test module."""
    from rllm.testing import run_fake_server

    with run_fake_server() as fake:
        yield fake


@pytest.fixture
def server(module_fake_server):
    """The module's fake server, with no faults or replies left queued by an earlier test."""
    module_fake_server.reset()
    return module_fake_server


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer):
    """A saved tiny random-init model folder with the real SmolLM2 tokenizer (for CLI and loader tests)."""
    from rllm.models.registry import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-model")
    return saved_model_dir(path, build_tiny_model(smollm2_tokenizer, seed=0), smollm2_tokenizer)


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory, smollm2_tokenizer):
    """A saved tiny random-init Idefics3 (SmolVLM's architecture) with its processor and the SmolLM2 tokenizer; 64 px
    images cost 16 image tokens (for CLI tests of vision agents)."""
    from rllm.models.vlm import build_tiny_vlm

    path = tmp_path_factory.mktemp("tiny-vlm")
    model, processor = build_tiny_vlm(smollm2_tokenizer, seed=0, image_size=64, patch_size=16)
    return saved_model_dir(path, model, processor)
