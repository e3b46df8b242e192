"""Step metrics the trainer adds on a GPU, checked without one: `gpu_peak_memory_gib` reads the allocator's peak
and resets it, so each step reports its own."""

from __future__ import annotations

import torch

from rllm.training.step import gpu_peak_memory


def test_gpu_peak_memory_reads_then_resets_the_peak(monkeypatch):
    peak = {"cuda:0": 3 * 2**30}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: peak[device])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: peak.__setitem__(device, 0))
    assert gpu_peak_memory("cuda:0") == {"gpu_peak_memory_gib": 3.0}
    assert gpu_peak_memory("cuda:0") == {"gpu_peak_memory_gib": 0.0}


def test_gpu_peak_memory_is_absent_on_a_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 1 / 0)  # never asked
    assert gpu_peak_memory("cpu") == {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_peak_memory("cuda") == {}
