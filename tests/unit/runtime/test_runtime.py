"""rllm.runtime: the process-wide tuning is off unless the program opts in, the config's `runtime:` section and the
CLI switch it, and the retired environment variables are refused by name. The end-to-end checks run a real
LocalModel (SmolLM2-135M) under an engine in a fresh process: without `enable()` nothing process-wide changes,
during the call or after it; with it, each tuning is on. And the private torch op the packed linears rely on behaves
as relied on (the transformers and aiohttp ones: test_chat.py, test_eager_writes.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest

from rllm import runtime
from rllm.config import ConfigError, RuntimeConfig, config_help, load_config
from rllm.errors import RllmError
from rllm.runtime import OFF, RuntimeOptions


def test_off_until_enabled_and_back_off_after_disable():
    assert runtime.options() == OFF
    before = runtime.enable()
    assert before == OFF and runtime.options() == RuntimeOptions()
    assert all(dataclasses.astuple(runtime.options()))  # enable() with no options: every tuning
    runtime.disable()
    assert runtime.options() == OFF


def test_off_changes_nothing_process_wide():
    assert not (OFF.gc_tuning or OFF.eager_request_writes or OFF.packed_linears or OFF.thread_governor)
    assert not OFF.fast_chat_templates  # private transformers helpers: opt-in too
    assert not any(dataclasses.astuple(OFF))


def test_enabled_puts_back_what_was_in_force():
    chosen = RuntimeOptions(packed_linears=False)
    with runtime.enabled(chosen) as active:
        assert active is chosen and runtime.options() is chosen
        with runtime.enabled():
            assert runtime.options() == RuntimeOptions()
        assert runtime.options() is chosen
    assert runtime.options() == OFF


def test_bad_options_are_refused_in_one_line():
    with pytest.raises(TypeError, match=r"RuntimeOptions.gc_tuning must be True or False, got 'no'"):
        RuntimeOptions(gc_tuning="no")
    with pytest.raises(TypeError, match="takes a RuntimeOptions, got dict"):
        runtime.enable({"gc_tuning": False})
    assert runtime.options() == OFF


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("RLLM_PACKED_LINEARS", "runtime.packed_linears=false"),
        ("RLLM_CUDA_GRAPHS", "inference.cuda_graphs=false"),
        ("RLLM_PREFIX_CACHE", "inference.prefix_cache_tokens=0"),
    ],
)
def test_a_retired_environment_variable_is_refused_naming_its_config_key(monkeypatch, name, key):
    monkeypatch.setenv(name, "0")
    with pytest.raises(RllmError, match=rf"^{name} is no longer read: unset it and set {key} in the config"):
        runtime.enable()
    assert runtime.options() == OFF


def test_the_config_section_has_the_options_fields_and_validates_them():
    assert list(RuntimeConfig.model_fields) == [field.name for field in dataclasses.fields(RuntimeOptions)]
    assert load_config(None, []).runtime.options() == RuntimeOptions()  # the commands' default: every tuning on
    config = load_config(None, ["runtime.packed_linears=false", "runtime.gc_tuning=false"])
    assert config.runtime.options() == RuntimeOptions(packed_linears=False, gc_tuning=False)
    with pytest.raises(ConfigError, match="runtime.thread_governor"):
        load_config(None, ["runtime.thread_governor=sometimes"])
    with pytest.raises(ConfigError, match="runtime.packed_linear"):
        load_config(None, ["runtime.packed_linear=false"])
    help_text = config_help()
    assert all(f"runtime.{field.name}" in help_text for field in dataclasses.fields(RuntimeOptions))


class _Stop(Exception):
    """Raised where a command would start its work: by then it must have enabled the runtime."""


def _stop_at(monkeypatch, target: str, seen: list) -> None:
    def record(*args, **kwargs):
        seen.append(runtime.options())
        raise _Stop

    monkeypatch.setattr(target, record)


@pytest.mark.parametrize(
    ("command", "work"), [("eval", "rllm.evaluation.evaluate"), ("train", "rllm.training.trainer.AgentTrainer")]
)
def test_the_rllm_commands_enable_it_from_the_config(monkeypatch, command, work):
    """`rllm eval` and `rllm train` (sft, rft and serve alike) enable the config's `runtime:` before they build
    anything; a retired environment variable stops them with one line."""
    from rllm.cli.main import main

    seen: list = []
    _stop_at(monkeypatch, work, seen)
    with pytest.raises(_Stop):
        main([command, "arithmetic", "runtime.packed_linears=false", "--no-progress"])
    assert seen == [RuntimeOptions(packed_linears=False)]
    runtime.disable()
    monkeypatch.setenv("RLLM_PACKED_LINEARS", "0")
    assert main([command, "arithmetic", "--no-progress"]) == 2 and seen == [RuntimeOptions(packed_linears=False)]


@pytest.mark.skipif(not __import__("torch").backends.mkldnn.is_available(), reason="no oneDNN in this torch build")
def test_the_private_onednn_ops_behave_as_relied_on():
    """`torch.ops.mkldnn._reorder_linear_weight` and `_linear_pointwise` (private; `rllm.inference.packed_linears` calls
    each in one function) take the arguments passed and give `F.linear`'s result, bias and batch dimensions
    included. A torch upgrade that changes them fails here (packing would otherwise quietly turn itself off)."""
    import torch
    import torch.nn.functional as F

    from rllm.inference import packed_linears

    torch.manual_seed(0)
    x, weight, bias = torch.randn(3, 7, 48), torch.randn(20, 48), torch.randn(20)
    packed = packed_linears._onednn_pack(weight)
    assert torch.allclose(packed_linears._onednn_linear(x, packed, bias), F.linear(x, weight, bias), atol=1e-5)
    assert torch.allclose(packed_linears._onednn_linear(x, packed), F.linear(x, weight), atol=1e-5)
    assert packed_linears._onednn_packs()


# ---- a real model under an engine, in a fresh process --------------------------------------------------------

# Runs `import rllm`, builds SmolLM2-135M as a LocalModel and rolls out two tasks, sampling the process-wide state
# before, from inside each rollout (the event loop's thread), before each decode step (the model's worker thread)
# and after. argv[1]: "on" calls rllm.runtime.enable() first. Prints the samples as JSON.
_PROBE = textwrap.dedent(
    """
    import asyncio, gc, json, sys, threading
    import torch
    from torch import nn

    def fresh_thread_count():
        out = []
        thread = threading.Thread(target=lambda: out.append(torch.get_num_threads()))
        thread.start(); thread.join()
        return out[0]

    finders_before, linear_forward = list(sys.meta_path), nn.Linear.forward
    before = {"gc": [list(gc.get_threshold()), gc.get_freeze_count()], "threads": torch.get_num_threads(),
              "fresh_thread": fresh_thread_count()}

    import rllm
    from rllm import cpus, runtime
    if sys.argv[1] == "on":
        runtime.enable()
    from rllm.engine.workflow_engine import AgentWorkflowEngine
    from rllm.models import chat, eager_writes
    from rllm.inference import InferenceOptions
    from rllm.inference.model import LocalModel
    from rllm.types import Step, Trajectory
    from rllm.workflows import Workflow

    def state():
        new = [finder for finder in sys.meta_path if finder not in finders_before]
        return {"gc": [list(gc.get_threshold()), gc.get_freeze_count()], "threads": torch.get_num_threads(),
                "linear_forward": nn.Linear.forward is linear_forward,
                "new_finders": sorted(type(finder).__module__ for finder in new)}  # libraries' own (six) too

    model = LocalModel.from_pretrained("smollm2-135m-instruct", InferenceOptions(max_batch_size=4))
    during = {"rollout": [], "worker": []}
    step = model._scheduler.step

    def sampled_step(*args, **kwargs):
        during["worker"].append(state())
        return step(*args, **kwargs)

    model._scheduler.step = sampled_step

    class Probe(Workflow):
        async def run(self, task, uid):
            loop = asyncio.get_running_loop()
            eager_writes.install(loop)  # what OpenAIClient does on the loop it posts from
            trajectory = Trajectory(name="agent")
            self.commit(trajectory)
            messages = [{"role": "user", "content": task["question"]}]
            output = await self.generate(messages, max_tokens=4, temperature=0.0)
            trajectory.steps.append(Step(chat_completions=messages, model_output=output, reward=0.0))
            during["rollout"].append({**state(), "task_factory": type(loop.get_task_factory()).__name__})

    engine = AgentWorkflowEngine(workflow_class=Probe, model=model, n_parallel=2)
    episodes = engine.execute_tasks([{"id": 1, "question": "2+2?"}, {"id": 2, "question": "Capital of France?"}])
    linears = [module for module in model.model.modules() if isinstance(module, nn.Linear)]
    print(json.dumps({
        "before": before, "during": during, "after": state(), "episodes": len(episodes),
        "tokens": sum(len(episode.trajectories[0].steps[0].model_output.completion_ids) for episode in episodes),
        "routed_linears": sum("forward" in vars(module) for module in linears),
        "packed_calls": model._linears.calls if model._linears is not None else 0,
        "chosen_shapes": len(model.kernels.paths) if model.kernels is not None else 0,
        "governed": model._threads is not None and model._threads is cpus.governor(),
        "fast_templates": chat._flat_template.cache_info().currsize,
    }))
    model.close()
    """
)
# the one finder `import rllm` installs: rLLM's paths (rllm.compat) where the rllm-compat distribution is installed,
# else, last, the one that names it (rllm.compat_hint). Finders of the libraries rllm loads (transformers', six's)
# are theirs.
_RLLM_FINDERS = {"rllm.compat", "rllm.compat_hint"}


def _rllm_finders(sample: dict) -> set[str]:
    return {module for module in sample["new_finders"] if module.split(".")[0] == "rllm"}


def _probe(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLLM_") or k == "RLLM_TEST_PROCESS"}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_without_opting_in_an_engine_on_a_local_model_changes_nothing_process_wide():
    found = _probe("off")
    assert found["episodes"] == 2 and found["tokens"] > 0
    before, during = found["before"], found["during"]
    assert len(during["rollout"]) == 2 and during["worker"]
    for sample in [*during["rollout"], *during["worker"], found["after"]]:
        assert sample["gc"] == before["gc"]  # thresholds and nothing frozen
        assert sample["linear_forward"]
        assert _rllm_finders(sample) <= _RLLM_FINDERS
    assert all(sample["threads"] == before["threads"] for sample in [*during["rollout"], found["after"]])
    assert all(sample["threads"] == before["fresh_thread"] for sample in during["worker"])  # torch's default
    assert all(sample["task_factory"] == "NoneType" for sample in during["rollout"])
    assert found["routed_linears"] == 0 and found["packed_calls"] == 0 and not found["governed"]
    assert found["fast_templates"] == 0  # transformers' public apply_chat_template only


@pytest.mark.slow
def test_opting_in_turns_each_tuning_on_for_the_call_and_puts_the_collector_back():
    found = _probe("on")
    before, during = found["before"], found["during"]
    assert found["episodes"] == 2 and found["tokens"] > 0
    young = max(before["gc"][0][0], 10_000)
    assert all(s["gc"][1] > 0 and s["gc"][0][0] == young for s in during["rollout"])  # frozen, fewer collections
    assert found["after"]["gc"] == before["gc"]
    assert found["governed"]  # the worker asks the thread governor before each decode step
    if _onednn_here():  # this torch build packs: the linear layers are routed, each shape's path measured or cached
        assert found["routed_linears"] > 0 and found["chosen_shapes"] > 0
    if sys.version_info < (3, 12):
        assert all(s["task_factory"] == "EagerTaskFactory" for s in during["rollout"])
    assert found["fast_templates"] > 0


def _onednn_here() -> bool:
    from rllm.inference import packed_linears

    return packed_linears._onednn_packs()


def _resident_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(runtime._malloc_trim() is None, reason="not glibc: trim_freed_memory is a no-op")
def test_trim_freed_memory_returns_what_a_step_freed_and_only_when_enabled():
    """300 MB in 100 KB blocks (glibc serves those from its heap, not mmap), freed below a block still in use:
    glibc keeps the pages; the trim hands them back."""
    assert not runtime.trim_freed_memory()  # off: nothing happens
    blocks = [bytearray(100_000) for _ in range(3_000)]
    pinned = bytearray(100_000)  # above the freed blocks: the heap's top cannot shrink on its own
    del blocks
    kept = _resident_mb()
    with runtime.enabled(RuntimeOptions(trim_freed_memory=True)):
        assert runtime.trim_freed_memory()
    assert kept - _resident_mb() > 200, (kept, _resident_mb())
    del pinned
