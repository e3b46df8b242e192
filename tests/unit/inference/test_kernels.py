"""The kernel choice of the packed linears (`rllm.inference.kernels`): each shape runs the path a timer found faster
(packed oneDNN only where it saves 10 %), the choice is cached per machine and reused without timing, a changed
machine key measures again, and each path computes exactly what it computes without the choice. Fake timers pick
the winner, so the test reads the same on an AMD EPYC (packing wins) and an Intel Xeon (MKL is as fast)."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from rllm import cpus
from rllm.inference import kernels, packed_linears
from rllm.inference.kernels import DEFAULT, PACKED, KernelChoice, LinearShape
from rllm.inference.lm_head import output_logits
from rllm.inference.packed_linears import PackedLinears

ONEDNN = torch.backends.mkldnn.is_available() and packed_linears._onednn_packs()
pytestmark = [
    pytest.mark.skipif(not ONEDNN, reason="this torch build cannot pack with oneDNN"),
    pytest.mark.usefixtures("tuned_runtime"),
]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    path = tmp_path / "kernels.json"
    monkeypatch.setattr(kernels, "cache_file", lambda: path)
    return path


class FakeTimer:
    """Times a path as `packed` or `default` seconds per row count (any other row count: the last entry's)."""

    def __init__(self, packed: dict[int, float], default: float = 1.0) -> None:
        self.packed, self.default, self.calls = packed, default, []

    def __call__(self, shape: LinearShape, rows: int) -> dict[str, float]:
        self.calls.append((shape.key, rows))
        return {PACKED: self.packed.get(rows, list(self.packed.values())[-1]), DEFAULT: self.default}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(48, 80), torch.nn.ReLU(), torch.nn.Linear(80, 48, bias=False))


def _run(model: torch.nn.Module, choice: KernelChoice, rows: int) -> tuple[torch.Tensor, PackedLinears]:
    packer = PackedLinears(choice)
    packer.install(model)
    with torch.inference_mode(), packer:
        return model(torch.randn(rows, 48, generator=torch.Generator().manual_seed(1))), packer


def _plain(model: torch.nn.Module, rows: int) -> torch.Tensor:
    x = torch.randn(rows, 48, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        return F.linear(torch.relu(F.linear(x, model[0].weight, model[0].bias)), model[2].weight)


def _onednn(model: torch.nn.Module, rows: int) -> torch.Tensor:
    """What the packed path computed before the choice existed: `_onednn_linear` on the packed weights."""
    pack, run = packed_linears._onednn_pack, packed_linears._onednn_linear
    x = torch.randn(rows, 48, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        hidden = torch.relu(run(x, pack(model[0].weight), model[0].bias))
        return run(hidden, pack(model[2].weight))


def test_a_timer_that_prefers_packing_packs_and_the_output_is_onednn_s(cache):
    model, timer = _model(), FakeTimer({32: 0.5, 256: 0.5})
    out, packer = _run(model, KernelChoice(timer=timer), rows=8)
    assert packer.calls == 2 and packer.packs == 2
    assert torch.equal(out, _onednn(model, 8))  # the packed path's numerics, unchanged
    assert {key for key, _ in timer.calls} == {"80x48", "48x80"} and {rows for _, rows in timer.calls} == {32, 256}
    assert json.loads(cache.read_text())["version"] == kernels.CACHE_VERSION


def test_a_timer_that_prefers_the_default_packs_nothing_and_the_output_is_f_linear_s():
    model = _model()
    out, packer = _run(model, KernelChoice(timer=FakeTimer({32: 0.95, 256: 0.95})), rows=8)  # 5 %: not enough
    assert packer.calls == 0 and packer.packs == 0 and not packer._packed  # no packed copy: no memory spent
    assert torch.equal(out, _plain(model, 8))


def test_decode_and_prefill_row_counts_follow_their_own_choice():
    model = _model()
    choice = KernelChoice(timer=FakeTimer({32: 0.5, 256: 2.0}))  # packing wins a decode step, loses a prefill
    prefill, packer = _run(model, choice, rows=kernels.DECODE_UP_TO + 1)
    assert packer.calls == 0 and torch.equal(prefill, _plain(model, kernels.DECODE_UP_TO + 1))
    decode, packer = _run(model, choice, rows=kernels.DECODE_UP_TO)
    assert packer.calls == 2 and torch.equal(decode, _onednn(model, kernels.DECODE_UP_TO))
    assert choice.record()["shapes"]["80x48"] == {"decode": PACKED, "prefill": DEFAULT}


def test_the_cache_is_reused_without_timing_and_a_changed_machine_measures_again(cache, monkeypatch):
    shapes = [LinearShape(80, 48), LinearShape(48, 80, transposed=True)]
    first = KernelChoice(timer=FakeTimer({32: 0.5, 256: 2.0}))
    first.add(shapes)
    assert first.measured == 2 and first.record()["choice"] == "measured"

    def no_timing(shape, rows):
        raise AssertionError("a cached shape was timed again")

    again = KernelChoice(timer=no_timing)
    again.add(shapes)
    assert again.paths == first.paths and again.measured == 0 and again.record()["choice"] == "cached"
    assert "cached" in again.describe()

    machine = kernels.machine_key()
    for changed in ({**machine, "torch": "9.9.9"}, {**machine, "cpu": "another CPU"}):
        monkeypatch.setattr(kernels, "machine_key", lambda changed=changed: changed)
        timer = FakeTimer({32: 2.0, 256: 0.5})
        remeasured = KernelChoice(timer=timer)
        remeasured.add(shapes)
        # the weight at both row counts, its input gradient at a training batch's only
        assert sorted(timer.calls) == [("48x80^T", 256), ("80x48", 32), ("80x48", 256)]
        assert remeasured.paths["80x48"] == {"decode": DEFAULT, "prefill": PACKED}
        assert remeasured.paths["48x80^T"] == {"decode": PACKED, "prefill": PACKED}
    assert len(json.loads(cache.read_text())["machines"]) == 3  # each machine keeps its own entry


def test_a_new_shape_is_timed_alone_and_added_to_the_cache(cache):
    KernelChoice(timer=FakeTimer({32: 0.5})).add([LinearShape(80, 48)])
    timer = FakeTimer({32: 2.0})
    choice = KernelChoice(timer=timer)
    assert choice.path(LinearShape(80, 48), 8) == PACKED  # cached
    assert choice.path(LinearShape(7, 48), 8) == DEFAULT  # never seen: timed now
    assert {key for key, _ in timer.calls} == {"7x48"}
    shapes = next(iter(json.loads(cache.read_text())["machines"].values()))["shapes"]
    assert set(shapes) == {"80x48", "7x48"}


def test_an_unreadable_cache_measures_again(cache):
    cache.write_text("{torn")
    timer = FakeTimer({32: 0.5})
    KernelChoice(timer=timer).add([LinearShape(80, 48)])
    assert timer.calls and json.loads(cache.read_text())["version"] == kernels.CACHE_VERSION


def test_a_frozen_weight_on_the_default_path_is_torch_s_autograd_exactly():
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40).requires_grad_(False)
    x = torch.randn(70, 24, requires_grad=True)
    F.linear(x, layer.weight, layer.bias).square().sum().backward()
    want = x.grad.clone()
    x.grad = None
    packer = PackedLinears(KernelChoice(timer=FakeTimer({32: 0.99, 256: 0.99})))
    packer.install(layer)
    assert set(packer.kernels.paths) == {"40x24", "40x24^T"}  # the input gradient's shape is chosen too
    with packer:
        layer(x).square().sum().backward()
    assert packer.calls == 0 and torch.equal(x.grad, want)


def test_the_output_layer_keeps_torch_s_sliced_path_where_the_default_was_chosen():
    torch.manual_seed(0)
    head, hidden = torch.nn.Linear(24, 3000, bias=False), torch.randn(5, 24)
    packer = PackedLinears(KernelChoice(timer=FakeTimer({32: 2.0})))
    packer.install(head)
    with torch.inference_mode():
        plain = output_logits(head, hidden)
        with packer:
            assert torch.equal(output_logits(head, hidden), plain) and packer.calls == 0


def test_the_real_timer_times_both_paths_on_one_thread_and_leaves_the_count():
    threads = torch.get_num_threads()
    for shape in (LinearShape(16, 8), LinearShape(16, 8, transposed=True)):
        times = packed_linears.time_paths(shape, 4)
        assert set(times) == {PACKED, DEFAULT} and all(0 < t < 1 for t in times.values())
    assert torch.get_num_threads() == threads


def test_a_fixed_path_is_used_everywhere_and_a_misspelled_one_is_refused():
    assert KernelChoice.fixed(PACKED).path(LinearShape(3, 4), 1000) == PACKED
    assert KernelChoice.fixed(DEFAULT).record() == {"choice": "fixed: default"}
    with pytest.raises(ValueError, match="'fast' is not a path; use one of packed, default"):
        KernelChoice.fixed("fast")


def test_the_cpu_s_model_and_kernel_extensions_come_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f amx_tile\n")
    assert cpus.cpu_extensions(cpuinfo=info) == ("avx2", "avx512f", "amx_tile")
    assert cpus.describe_cpu(cpuinfo=info) == "Intel(R) Xeon(R) Processor (avx2, avx512f, amx_tile)"
    assert cpus.cpu_extensions(cpuinfo=tmp_path / "missing") == ()


def test_a_training_run_records_the_choice_in_its_manifest_and_on_stderr(tmp_path, capsys):
    from rllm.runs import read_manifest, write_json
    from rllm.training.trainer import AgentTrainer

    write_json(tmp_path / "manifest.json", {"kind": "train"})
    choice = KernelChoice(timer=FakeTimer({32: 0.5, 256: 2.0}))
    choice.add([LinearShape(80, 48)])
    trainer = SimpleNamespace(backend=SimpleNamespace(kernels=choice), rollout_model=None, run_dir=tmp_path)
    AgentTrainer._record_kernels(trainer)
    record = read_manifest(tmp_path)["kernels"]
    assert record["choice"] == "measured" and record["machine"] == kernels.machine_key()
    assert record["shapes"] == {"80x48": {"decode": PACKED, "prefill": DEFAULT}}
    assert "kernels: packed oneDNN for 1/1 linear shapes at decode, 0/1 at prefill (measured 1 in" in (
        capsys.readouterr().err
    )


def test_a_record_makes_the_same_choice_again_and_a_torn_one_is_chosen_anew():
    measured = KernelChoice(timer=FakeTimer({32: 0.5, 256: 2.0}))
    measured.add([LinearShape(80, 48)])
    again = KernelChoice.from_record(measured.record())
    assert again.paths == measured.paths and again.record()["choice"] == "recorded"
    assert again.describe().endswith("(the run's recorded choice)")
    assert KernelChoice.from_record({"choice": "fixed: default"}).path(LinearShape(80, 48), 8) == DEFAULT
    torn = KernelChoice.from_record({"choice": "measured", "shapes": {"80x48": {"decode": "fast"}}})
    assert torn.paths == {} and not torn.recorded  # nothing usable: measured (or cached) as a fresh run is
    assert not KernelChoice.from_record(None).recorded


def test_processes_that_measure_at_once_keep_one_choice(cache):
    """Two choosers measuring the same shapes at once, whose timings disagree, end with the first writer's choice:
    the lock makes the second wait and read it. (flock excludes separate opens within one process too.)"""
    started = threading.Barrier(2)

    def slow(packed: float):
        timer = FakeTimer({32: packed, 256: packed})

        def time_shape(shape, rows):
            time.sleep(0.05)  # both are inside add() at once
            return timer(shape, rows)

        return time_shape

    choices = [KernelChoice(timer=slow(0.5)), KernelChoice(timer=slow(2.0))]

    def choose(choice):
        started.wait()
        choice.add([LinearShape(80, 48), LinearShape(48, 80)])

    threads = [threading.Thread(target=choose, args=(choice,)) for choice in choices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert choices[0].paths == choices[1].paths
    assert sorted(choice.measured for choice in choices) == [0, 2]  # one measured, the other read its choice
    assert next(iter(json.loads(cache.read_text())["machines"].values()))["shapes"] == choices[0].paths


def test_a_resumed_run_keeps_its_recorded_kernel_choice_whatever_the_cache_says_now(tmp_path, tiny_model_dir, cache):
    from rllm.config import load_config
    from rllm.runs import read_manifest
    from rllm.training.trainer import AgentTrainer

    def train(steps: int, *extra: str) -> AgentTrainer:
        overrides = [f"model.name={tiny_model_dir}", "data.task=arithmetic", "data.train_size=4", "data.val_size=0"]
        overrides += ["rollout.n=2", "rollout.max_tokens=2", "trainer.tasks_per_step=2", "optim.micro_batch_size=4"]
        overrides += ["trainer.tensorboard=false", "trainer.save_every=1", f"trainer.run_dir={tmp_path}"]
        trainer = AgentTrainer(config=load_config(None, [*overrides, f"trainer.total_steps={steps}", *extra]))
        trainer.train()
        return trainer

    first = train(1, "trainer.name=run")
    recorded = read_manifest(tmp_path / "run")["kernels"]
    assert recorded["choice"] in ("measured", "cached") and recorded["shapes"] == first.backend.kernels.paths
    data = json.loads(cache.read_text())  # the machine's cache now says the opposite for every shape
    for entry in data["machines"].values():
        flip = {PACKED: DEFAULT, DEFAULT: PACKED}
        entry["shapes"] = {key: {row: flip[p] for row, p in paths.items()} for key, paths in entry["shapes"].items()}
    cache.write_text(json.dumps(data))

    resumed = train(2, "trainer.name=run", f"trainer.resume={tmp_path / 'run'}")
    assert resumed.step == 2 and resumed.backend.kernels.paths == recorded["shapes"]
    again = read_manifest(tmp_path / "run")["kernels"]
    assert again["choice"] == "recorded" and again["shapes"] == recorded["shapes"]
    fresh = train(1, "trainer.name=fresh")  # a new run follows the machine's cache
    assert fresh.backend.kernels.paths != recorded["shapes"]
