"""The cores this process may use (affinity, cgroup v1/v2 quotas from fake cgroup files) and the thread choice on a
busy machine (`rllm.cpus`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rllm import cpus
from rllm.cpus import OthersLoad, ThreadGovernor, cgroup_quota_cores, threads_for, usable_cores

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no sched_getaffinity here")


def _v2(tmp_path: Path, cpu_max: dict[str, str], own: str = "/user.slice/job") -> tuple[Path, Path]:
    """A fake unified (v2) hierarchy: `cpu_max` maps a cgroup path to its cpu.max; /proc/self/cgroup names `own`."""
    root = tmp_path / "cgroup"
    (root / own.strip("/")).mkdir(parents=True)
    for path, text in cpu_max.items():
        (root / path.strip("/")).mkdir(parents=True, exist_ok=True)
        (root / path.strip("/") / "cpu.max").write_text(text + "\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(f"0::{own}\n")
    return proc, root


def _v1(tmp_path: Path, quota: str, period: str = "100000", mount: str = "cpu,cpuacct") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    own = root / mount / "docker" / "abc"
    own.mkdir(parents=True)
    (own / "cpu.cfs_quota_us").write_text(quota + "\n")
    (own / "cpu.cfs_period_us").write_text(period + "\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(f"12:memory:/docker/abc\n4:{mount}:/docker/abc\n0::/\n")
    return proc, root


def test_cgroup_v2_quota_in_cores(tmp_path: Path) -> None:
    proc, root = _v2(tmp_path, {"/user.slice/job": "150000 100000"})
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) == 1.5


def test_cgroup_v2_max_means_no_quota_and_the_tightest_ancestor_wins(tmp_path: Path) -> None:
    proc, root = _v2(tmp_path, {"/user.slice/job": "max 100000"})
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) is None
    proc, root = _v2(tmp_path / "b", {"/user.slice/job": "max 100000", "/user.slice": "100000 50000", "/": "max"})
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) == 2.0


def test_cgroup_v2_container_sees_its_own_cgroup_at_the_mount_root(tmp_path: Path) -> None:
    """Inside a container /proc/self/cgroup may name the host's path, which the container's mount lacks."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cpu.max").write_text("300000 100000\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/kubepods/pod1/container2\n")
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) == 3.0


def test_cgroup_v1_cfs_quota(tmp_path: Path) -> None:
    proc, root = _v1(tmp_path, quota="250000", period="100000")
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) == 2.5
    proc, root = _v1(tmp_path / "none", quota="-1")
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) is None
    proc, root = _v1(tmp_path / "alias", quota="50000", mount="cpu")
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) == 0.5


def test_unreadable_or_garbled_cgroup_files_mean_no_quota(tmp_path: Path) -> None:
    assert cgroup_quota_cores(proc_cgroup=tmp_path / "missing", cgroup_root=tmp_path) is None
    proc, root = _v2(tmp_path, {"/user.slice/job": "lots 100000"})
    assert cgroup_quota_cores(proc_cgroup=proc, cgroup_root=root) is None


@needs_affinity
def test_usable_cores_is_affinity_capped_by_the_quota_rounded_up(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
    proc, root = _v2(tmp_path, {"/user.slice/job": "max 100000"})
    assert usable_cores(proc_cgroup=proc, cgroup_root=root) == 8  # no quota: the affinity
    proc, root = _v2(tmp_path / "q", {"/user.slice/job": "250000 100000"})
    assert usable_cores(proc_cgroup=proc, cgroup_root=root) == 3  # 2.5 cores of quota on 8 CPUs
    proc, root = _v2(tmp_path / "small", {"/user.slice/job": "20000 100000"})
    assert usable_cores(proc_cgroup=proc, cgroup_root=root) == 1  # a fifth of a core: still one thread
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})  # taskset -c 3 under the 2.5-core quota
    proc, root = _v2(tmp_path / "q2", {"/user.slice/job": "250000 100000"})
    assert usable_cores(proc_cgroup=proc, cgroup_root=root) == 1


@needs_affinity
def test_usable_cores_follows_the_real_affinity() -> None:
    assert usable_cores(proc_cgroup=Path("/nonexistent"), cgroup_root=Path("/nonexistent")) == len(
        os.sched_getaffinity(0)
    )


def test_threads_for_leaves_the_cores_others_use() -> None:
    assert threads_for(2, others_busy=0.0) == 2  # idle
    assert threads_for(2, others_busy=0.4) == 2  # a little background
    assert threads_for(2, others_busy=1.0) == 1  # one busy neighbour
    assert threads_for(2, others_busy=1.4) == 1  # two, as seen while we run 1 thread (they got 4/3 cores)
    assert threads_for(2, others_busy=3.0) == 1  # never fewer than one
    assert threads_for(16, others_busy=4.2) == 12
    assert threads_for(16, others_busy=0.0, busy_compute_threads=2) == 8  # generation beside training: shared
    assert threads_for(2, others_busy=0.0, busy_compute_threads=0) == 2
    assert threads_for(4, others_busy=30.0, cpus=64) == 4  # a 4-core quota on a busy 64-CPU host
    assert threads_for(4, others_busy=62.0, cpus=64) == 2


class _FakeLoad:
    def __init__(self, others: list[float | None]) -> None:
        self.others, self.readings = list(others), 0

    def reading(self) -> tuple[float, float | None]:
        self.readings += 1
        return 0.5, self.others.pop(0)


def test_governor_rereads_the_load_at_most_every_interval() -> None:
    load = _FakeLoad([1.5, 0.0])
    governor = ThreadGovernor(cores=2, load=load, interval=3600, fixed=0)
    assert governor.threads() == 1  # the first call reads (after a short first window)
    assert governor.threads() == 1 and load.readings == 1  # within the interval: no new reading
    governor.interval = 0.0
    assert governor.threads() == 2 and load.readings == 2  # the neighbours left


def test_governor_keeps_its_last_choice_when_the_load_cannot_be_read() -> None:
    governor = ThreadGovernor(cores=4, load=_FakeLoad([None]), interval=0.0, fixed=0)
    assert governor.threads() == 4


def test_governor_shares_the_cores_between_busy_compute_threads() -> None:
    governor = ThreadGovernor(cores=4, load=_FakeLoad([0.0] * 10), interval=0.0, fixed=0)
    chosen: list[int] = []
    inside, release = threading.Event(), threading.Event()

    def trainer() -> None:
        with governor.computing():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=trainer)
    thread.start()
    inside.wait(10)
    governor.set_busy(True)  # the generation worker steps while the trainer computes
    chosen.append(governor.threads())
    release.set()
    thread.join(10)
    chosen.append(governor.threads())  # the trainer left its section
    governor.set_busy(False)
    assert chosen == [2, 4]


def test_omp_num_threads_fixes_the_count(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    load = _FakeLoad([])
    assert ThreadGovernor(cores=2, load=load).threads() == 3
    assert load.readings == 0


def test_others_load_subtracts_this_process_cpu_time(tmp_path: Path, monkeypatch) -> None:
    """Two CPUs of /proc/stat: 150 busy ticks (1.5 s at 100 Hz) in 1 s, 0.5 s of them this process's own."""
    stat = tmp_path / "stat"
    clock = {"wall": 100.0, "cpu": 7.0}
    monkeypatch.setattr(cpus.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(cpus.time, "process_time", lambda: clock["cpu"])

    def write(user0: int, user1: int, idle: int) -> None:
        stat.write_text(
            f"cpu  {user0 + user1} 0 0 {2 * idle} 0 0 0 0 0 0\n"
            f"cpu0 {user0} 0 0 {idle} 0 0 0 0 0 0\ncpu1 {user1} 0 0 {idle} 0 0 0 0 0 0\n"
            "cpu2 999999 0 0 0 0 0 0 0 0 0\nintr 1 2 3\n"
        )

    write(1000, 2000, 500)
    load = OthersLoad(stat_path=stat)
    load.cpus, load.ticks_per_second = {"cpu0", "cpu1"}, 100  # cpu2 is not ours: its ticks never count
    load._last = load._snapshot()
    write(1100, 2050, 525)
    clock["wall"], clock["cpu"] = 101.0, 7.5
    seconds, others = load.reading()
    assert seconds == 1.0 and others == pytest.approx(1.0)


def test_generation_and_training_run_with_the_threads_the_governor_chooses(
    smollm2_tokenizer, monkeypatch, tuned_runtime
) -> None:
    """The local model's worker and the trainer's forward/backward ask the process's governor before each unit of
    work, so a neighbour arriving or leaving changes the thread count of the next decode step or micro-batch (where
    rllm.runtime enables the governor, as the CLI does)."""
    import asyncio

    import torch

    from rllm.inference.model import LocalModel
    from rllm.models.base import SamplingParams
    from rllm.training.backends.torch import score_rows
    from rllm.training.batch import TrainingRow
    from tests.support.models import sharp_tiny_model

    governor = ThreadGovernor(cores=2, load=_FakeLoad([1.5] * 1000), interval=0.0, fixed=0)
    monkeypatch.setattr(cpus, "_GOVERNOR", governor)
    monkeypatch.setattr(cpus, "_TORCH_DEFAULT", None)  # whatever earlier tests set on this thread is not the user's
    model = sharp_tiny_model(smollm2_tokenizer, 0)
    local = LocalModel(model, smollm2_tokenizer)
    seen: list[int] = []
    step = local._scheduler.step
    local._scheduler.step = lambda: (seen.append(torch.get_num_threads()), step())[1]

    def generate() -> list[int]:
        seen.clear()
        prompts = [smollm2_tokenizer.encode(text) for text in ("Hi", "Paris is", "1 2 3")]
        sampling = SamplingParams(temperature=0.0, max_tokens=4)

        async def all_of_them() -> None:
            await asyncio.wait_for(asyncio.gather(*[local.generate(p, sampling) for p in prompts]), 60)

        asyncio.run(all_of_them())
        return sorted(set(seen))

    before = torch.get_num_threads()
    try:
        assert generate() == [1]  # a busy neighbour: one thread
        governor._load = _FakeLoad([0.0] * 1000)
        assert generate() == [2]  # it left: both cores
        governor._load = _FakeLoad([1.2] * 1000)
        ids, mask, zeros = [1, 2, 3, 4], [0, 0, 1, 1], [0.0] * 4
        row = TrainingRow(ids, 2, mask, zeros, zeros, group_key="t:a", episode_id="t:0", trajectory_name="a")
        score_rows(model, [row], pad_id=0, micro_batch_size=1)
        assert torch.get_num_threads() == 1  # the trainer's thread too
    finally:
        local.close()
        torch.set_num_threads(before)


def test_without_the_runtime_enabled_torch_keeps_its_thread_count(smollm2_tokenizer, monkeypatch) -> None:
    """A library user who did not opt in (rllm.runtime.enable) keeps torch's count: the worker is not governed and
    the trainer's per-micro-batch call changes nothing, even with a governor that would choose otherwise."""
    import torch

    from rllm.inference.model import LocalModel
    from tests.support.models import sharp_tiny_model

    monkeypatch.setattr(cpus, "_TORCH_DEFAULT", None)
    monkeypatch.setattr(cpus, "_GOVERNOR", ThreadGovernor(cores=2, load=_FakeLoad([1.5] * 10), interval=0.0, fixed=0))
    before = torch.get_num_threads()
    assert cpus.set_torch_threads() == before and torch.get_num_threads() == before  # the governor would say 1
    local = LocalModel(sharp_tiny_model(smollm2_tokenizer, 0), smollm2_tokenizer)
    assert local._threads is None
    local.close()


def test_a_count_the_program_set_itself_is_kept(smollm2_tokenizer, monkeypatch, tuned_runtime) -> None:
    """A program that calls torch.set_num_threads after loading rllm (the kill-resume harness does, so that float
    reductions happen in one order in every run) keeps its count, in the trainer's thread and the local model's."""
    import torch

    from rllm.inference.model import LocalModel
    from tests.support.models import sharp_tiny_model

    monkeypatch.setattr(cpus, "_TORCH_DEFAULT", 2)
    monkeypatch.setattr(cpus, "_CHOSEN", threading.local())  # nothing chosen by rllm on this thread yet
    monkeypatch.setattr(cpus, "_GOVERNOR", ThreadGovernor(cores=2, load=_FakeLoad([0.0] * 10), interval=0.0, fixed=0))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert cpus.set_torch_threads() == 1 and torch.get_num_threads() == 1  # the governor would say 2
        local = LocalModel(sharp_tiny_model(smollm2_tokenizer, 0), smollm2_tokenizer)
        assert local._num_threads == 1 and local._threads is None
        local.close()
        assert cpus.set_torch_threads(2) == 2  # rllm's own choice...
        assert cpus.set_torch_threads() == 2  # ...is not mistaken for the program's
    finally:
        torch.set_num_threads(before)


def test_in_passing_thread_runs_on_a_thread_that_exits_and_hands_back_its_result_or_error():
    seen = []

    def work(x, *, y):
        seen.append(threading.current_thread())
        return x + y

    assert cpus.in_passing_thread(work, 1, y=2) == 3
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()  # its OpenMP team went with it

    def broken():
        raise KeyError("the loader's own error")

    with pytest.raises(KeyError, match="the loader's own error"):
        cpus.in_passing_thread(broken)
