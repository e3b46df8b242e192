"""A training run's torch thread count: chosen once by a fresh run and recorded in its manifest, read back by
`--resume` whatever this machine would choose, held on every compute thread (rllm.training.numerics, rllm.cpus).
The kill -9 and resume of a real run with the count left to rllm: tests/reliability/test_kill_resume.py."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from rllm import runtime
from rllm.config import TrainConfig, override_config
from rllm.cpus import hold_threads, run_threads, set_torch_threads, usable_cores
from rllm.runs import read_manifest
from rllm.training.numerics import recorded_threads
from rllm.training.session import RunSession


def config(tmp_path, *overrides: str) -> TrainConfig:
    return override_config(TrainConfig(), [f"trainer.run_dir={tmp_path}", "trainer.name=a", *overrides], "test")


def open_run(cfg: TrainConfig) -> RunSession:
    session = RunSession(cfg, "train")
    with runtime.enabled(cfg.runtime.options()):  # as the training commands enable it, from the config
        session.open(("train", "test"))
    return session


def resume(tmp_path, *overrides: str) -> RunSession:
    return open_run(config(tmp_path, f"trainer.resume={tmp_path / 'a'}", *overrides))


def set_recorded(run_dir, threads) -> None:
    manifest = read_manifest(run_dir)
    manifest["numerics"] = {"torch_threads": threads}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def test_a_fresh_run_records_the_count_it_chose_and_the_resume_reads_it_back(tmp_path, monkeypatch):
    session = open_run(config(tmp_path))
    chosen = run_threads(None, torch.get_num_threads())
    assert session.torch_threads == chosen
    assert read_manifest(session.run_dir)["numerics"] == {"torch_threads": chosen}

    # what this process would choose now is something else: the run keeps its own count
    set_recorded(session.run_dir, 5)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with pytest.warns(RuntimeWarning) as warned:
        resumed = resume(tmp_path)
    assert resumed.torch_threads == 5
    said = [str(w.message) for w in warned if "torch threads" in str(w.message)]
    assert len(said) == 1 and "5 torch threads (its manifest.json)" in said[0]
    assert read_manifest(session.run_dir)["numerics"] == {"torch_threads": 5}  # started over: recorded again


def test_the_count_is_inference_num_threads_when_given(tmp_path):
    assert open_run(config(tmp_path, "inference.num_threads=3")).torch_threads == 3


def test_a_recorded_count_above_the_usable_cores_is_kept_and_said_in_one_line(tmp_path):
    session = open_run(config(tmp_path))
    set_recorded(session.run_dir, usable_cores() + 2)
    with pytest.warns(RuntimeWarning, match=f"more than the {usable_cores()} cores usable here"):
        assert resume(tmp_path).torch_threads == usable_cores() + 2


def test_a_run_without_a_record_gets_one_on_its_first_resume(tmp_path):
    session = open_run(config(tmp_path, "inference.num_threads=2"))
    manifest = read_manifest(session.run_dir)
    del manifest["numerics"]  # a run made before the record
    (session.run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(RuntimeWarning):  # "stopped before its first checkpoint; it starts over"
        resumed = resume(tmp_path, "inference.num_threads=2")  # the run's own config
    assert resumed.torch_threads == 2 and recorded_threads(read_manifest(session.run_dir)) == 2


def test_with_fixed_training_threads_off_nothing_is_recorded_or_held(tmp_path):
    session = open_run(config(tmp_path, "runtime.fixed_training_threads=false"))
    assert session.torch_threads is None
    assert "numerics" not in read_manifest(session.run_dir)


def test_a_held_count_is_what_every_compute_thread_sets_whatever_the_governor_says():
    before = torch.get_num_threads()
    seen = []
    try:
        with runtime.enabled():
            hold_threads(1)
            worker = threading.Thread(target=lambda: seen.append((set_torch_threads(), torch.get_num_threads())))
            worker.start()
            worker.join()
            assert torch.get_num_threads() == 1  # the holding thread at once
    finally:
        hold_threads(None)
        torch.set_num_threads(before)
    assert seen == [(1, 1)]


def test_recorded_threads_reads_only_a_sound_record():
    assert recorded_threads({"numerics": {"torch_threads": 4}}) == 4
    for manifest in (
        None,
        {},
        {"numerics": 4},
        {"numerics": {"torch_threads": 0}},
        {"numerics": {"torch_threads": True}},
    ):
        assert recorded_threads(manifest) is None


def test_the_opt_out_is_a_validated_config_key_that_help_config_lists():
    from rllm.config import ConfigError, config_help, load_config

    assert load_config(None, []).runtime.options().fixed_training_threads  # the commands' default
    assert not load_config(None, ["runtime.fixed_training_threads=false"]).runtime.options().fixed_training_threads
    with pytest.raises(ConfigError, match="runtime.fixed_training_threads"):
        load_config(None, ["runtime.fixed_training_threads=sometimes"])
    assert "runtime.fixed_training_threads (bool) = true" in config_help()
