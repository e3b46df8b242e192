"""Every benchmark in benchmarks/ still runs: its `--smoke` mode (tiny sizes, the tiny model, seconds) through
benchmarks/smoke.py, in two processes that run side by side (imports and the tiny model shared within each), and
its output still carries its figures (the line `make bench` quotes, with a number) and a `device:` line. So a
refactor cannot silently break a benchmark; `make bench` still measures the full figures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
# script -> the figure line its output must carry (a number in it)
FIGURES = {
    "sandbox_throughput.py": r"^sandboxed print\(1\), serial\s*:\s*[\d.]+ runs/s",
    "swe_oracle.py": r"^seconds per check \(median / max\): oracle [\d.]+",
    "swe_env.py": r"^episodes/s: [\d.]+",
    "web_oracle.py": r"^oracle coverage: \d+/\d+ tasks",
    "web_env.py": r"^episodes/s: [\d.]+",
    "viewer_scale.py": r"^first page: [\d.]+",
    "engine_concurrency.py": r"^framework overhead per step .*: [\d.]+ ms",
    "gateway_flavours.py": r"^worst flavour vs chat completions: [\d.]+x",
    "calibrate_code.py": r"^families with a pass rate in .*: \d+ of \d+",
    "learning.py": r"^configs learning: \d+/\d+",
    "busy_machine.py": r"^verdict: loaded default/best [\d.]+",
    "local_generation.py": r"^sampled .*ratio [\d.]+x",
    "vlm_step.py": r"^ratio update: VLM [\d.]+ s / text [\d.]+ s",
    "async_vs_sync.py": r"^ratio: async/sync [\d.]+",
    "gpu_step.py": r"^summary fp32 rollouts .*rollout [\d.]+ s",
    "sft_vs_trl.py": r"^ratio [\d.]+",
    "grpo_vs_trl.py": r"^ratio ours/TRL = [\d.]+",
    "memory_floor.py": r"^floor growth: [-+\d.]+ MB per 100 steps",
    "alarms.py": r"^runs raising what they should: \d+/\d+",
}
NOT_SMOKED = {
    "local_vs_vllm.py": "needs vLLM's own venv (make vllm) and minutes to start its server",
    "verl_backend.py": "runs in verl's own venv (make verl); tests/verl covers the backend",
    "write_results.py": "the driver of `make bench`: its headline patterns are checked below against the smoke outputs",
    "smoke.py": "the smoke runner itself",
}
# Two processes side by side: sandboxes, browsers, servers and children (mostly waiting) beside in-process torch work.
# swe_env comes before the web scripts: it checks that no process from an earlier session is left under it.
GROUPS = (
    [
        "sandbox_throughput.py",
        "swe_oracle.py",
        "swe_env.py",
        "web_oracle.py",
        "web_env.py",
        "viewer_scale.py",
        "engine_concurrency.py",
        "gateway_flavours.py",
        "calibrate_code.py",
        "learning.py",
        "busy_machine.py",
    ],
    [
        "local_generation.py",
        "vlm_step.py",
        "async_vs_sync.py",
        "gpu_step.py",
        "sft_vs_trl.py",
        "grpo_vs_trl.py",
        "memory_floor.py",
        "alarms.py",
    ],
)
END = re.compile(r"^== (\S+): (ok|FAILED), [\d.]+ s$")


def test_every_benchmark_script_is_smoked_or_says_why_not():
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts == set(FIGURES) | set(NOT_SMOKED), "a new benchmark needs a --smoke mode and a line in FIGURES"
    assert sorted(name for group in GROUPS for name in group) == sorted(FIGURES)


@pytest.fixture(scope="module")
def smoke_outputs() -> dict[str, tuple[str, str]]:
    """script -> (ok|FAILED, its output), from both groups run at once."""
    runs = [
        subprocess.Popen(
            [sys.executable, str(BENCHMARKS / "smoke.py"), *(str(BENCHMARKS / s) for s in group)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for group in GROUPS
    ]
    outputs = {}
    try:
        for run in runs:
            text, _ = run.communicate(timeout=400)
            outputs.update(sections(text))
    finally:  # a hung benchmark: neither runner outlives the test
        for run in runs:
            run.kill()
            run.wait()
    return outputs


def sections(text: str) -> dict[str, tuple[str, str]]:
    """The runner's output cut at its `== <script>: ok|FAILED, N s` lines."""
    found, lines = {}, []
    for line in text.splitlines():
        end = END.match(line)
        if end:
            found[end[1]] = (end[2], "\n".join(lines))
            lines = []
        else:
            lines.append(line)
    return found


@pytest.mark.parametrize("script", sorted(FIGURES))
def test_a_smoke_run_prints_its_figures_and_its_device(smoke_outputs, script):
    status, output = smoke_outputs.get(script, ("missing", ""))
    assert status == "ok", output[-3000:]
    assert re.search(r"^device: \S", output, re.MULTILINE), output[-3000:]
    assert re.search(FIGURES[script], output, re.MULTILINE), output[-3000:]


def test_the_headlines_make_bench_quotes_are_in_the_smoke_outputs(smoke_outputs):
    """benchmarks/write_results.py picks each benchmark's headline by a pattern over its output: the pattern must
    still find it (the GPU-only runs are left out: the CPU smoke runs a different mode of their scripts)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from write_results import NEEDS_GPU, RUNS
    finally:
        sys.path.remove(str(BENCHMARKS))
    for key, _, command, headline in RUNS:
        if key not in NEEDS_GPU:
            _, output = smoke_outputs[Path(command[0]).name]
            assert re.search(headline, output, re.MULTILINE), f"{key}: no line matches {headline!r}"
