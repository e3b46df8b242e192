"""Reliability tier: `rllm train` killed with a real SIGKILL, then `--resume`d to the end, must leave exactly what a
run never killed leaves: the same checkpoint files byte for byte (weights, optimizer, RNG and sampler state, the
manifests), the same metrics.jsonl lines and episodes.jsonl records (time measurements aside) and result.json.

The kills (`kill_harness.py` runs the real CLI in forked children and kills them from inside, no test hook in rllm):
- at every write point of a run (2 steps, each saved, with a validation before and after): each file opened and
  each write, torn in half (log appends, manifests, checkpoint files, `latest`), each fsync, rename and folder
  creation of both checkpoint saves, the final one included; and after the last write;
- at seeded random moments (the Nth module call: inside generation, an update, a validation);
- a resume killed in turn at every write point a fresh run never has (log truncation, repairs, replacing a
  checkpoint folder), after kills that leave it each kind of repair to do.
`rllm sft` and `rllm dpo` are killed the same way at seeded write points and module calls (a kill before the first
checkpoint once left a run that `--resume` refused: their data counts file was not known as a first file).
One reference run is shared; every run is tiny (`rollout.n_parallel=1`, 2 tasks × 2 samples, 2 turns, 6 tokens).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rllm.cpus import ThreadGovernor, usable_cores
from rllm.training.trainer import is_time_metric
from tests.support.training import TINY_BATCH

pytestmark = pytest.mark.reliability

HARNESS = Path(__file__).with_name("kill_harness.py")
REPO = Path(__file__).resolve().parents[2]
OVERRIDES = [
    *TINY_BATCH,
    "optim.lr=1e-2",
    "trainer.total_steps=2",
    "trainer.save_every=1",
    "rollout.n_parallel=1",
    "trainer.tensorboard=false",
    f"workflow={HARNESS}:TwoTurnParity",
]
RANDOM_KILLS = 6


class Harness:
    """A fork server (`kill_harness.py`) for the module's runs, all under one folder. `hash_seed`: its Python's string
    hash seed, which its forked runs share; the reference runs in another interpreter with another seed, so a
    dependence on set or hash order would show as a difference instead of repeating in every run. `threads`: torch's
    thread count in every run; None leaves it to rllm, with no `OMP_NUM_THREADS` (which the suite sets) either."""

    def __init__(
        self, root: Path, model_dir: Path, hash_seed: int, argv: list[str] | None = None, threads: int | None = 1
    ) -> None:
        self.root, self.model_dir, self.threads = root, model_dir, threads
        self.argv = argv or ["train", "configs/arithmetic_grpo.yaml", *OVERRIDES]
        env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
        if threads is None:
            env.pop("OMP_NUM_THREADS", None)
        self.process = subprocess.Popen(
            [sys.executable, str(HARNESS)], cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, runs: list[dict]) -> dict[str, list[dict]]:
        plan = {
            "argv": [*self.argv, f"model.name={self.model_dir}"],
            "runs_root": str(self.root / "runs"),
            "logs": str(self.root / "logs"),
            "jobs": 2,
            "threads": self.threads,
            "runs": runs,
        }
        self.process.stdin.write(json.dumps(plan) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the kill harness died (exit {self.process.poll()})"
        return json.loads(line)["runs"]

    def run_dir(self, name: str) -> Path:
        return self.root / "runs" / name

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def harness(tmp_path_factory, tiny_model_dir):
    harness = Harness(tmp_path_factory.mktemp("reliability"), tiny_model_dir, hash_seed=2)
    yield harness
    harness.close()


@pytest.fixture(scope="module")
def reference(harness):
    """The run never killed, and what its process did: its write points and module calls. Run by a harness of its
    own (started while the other one imports)."""
    own = Harness(harness.root, harness.model_dir, hash_seed=1)
    try:
        (process,) = own.run([{"name": "reference", "kills": []}])["reference"]
    finally:
        own.close()
    assert process["exit"] == "exit 0", _tail(process)
    metrics = [json.loads(line) for line in (harness.run_dir("reference") / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("grad_norm", 0) > 0 for m in metrics)  # the weights move: equal runs mean something
    return process


def test_a_run_killed_at_any_write_point_resumes_bitwise(harness, reference):
    points = [{"op": n} for n in range(1, len(reference["ops"]) + 1)] + [{"at_exit": True}]
    assert len(points) >= 50  # two saves, four validations/steps of log appends, manifests, result
    runs = {f"op{n:02d}": {"kills": [kill]} for n, kill in enumerate(points, start=1)}
    failures = _kill_and_compare(harness, runs)
    _report("write points", len(runs), failures)
    assert not failures, _describe(failures, {f"op{n:02d}": op for n, op in enumerate(reference["ops"], start=1)})


def test_a_run_killed_at_random_moments_resumes_bitwise(harness, reference):
    rng = random.Random(15)  # seeded: the same moments every time
    calls = sorted(rng.sample(range(1, reference["calls"] + 1), RANDOM_KILLS))
    runs = {f"call{n}": {"kills": [{"call": n}]} for n in calls}
    failures = _kill_and_compare(harness, runs)
    _report(f"random moments (module calls {calls} of {reference['calls']})", len(runs), failures)
    assert not failures, _describe(failures, {})


def test_a_resume_killed_at_its_own_write_points_resumes_bitwise(harness, reference):
    """First kills that leave the resume repairs to do: `latest` not yet replaced after the last step's folder was
    renamed in (the resume trains step 2 again and replaces that folder), a torn episodes append, a staging folder
    left mid-save. Each resume is then killed at every write point a fresh run never has."""
    ops = reference["ops"]
    last = len(ops) - ops[::-1].index("replace checkpoints/.latest.tmp-PID")  # the final save's
    torn = len(ops) - ops[::-1].index("write-a episodes.jsonl")
    staging = len(ops) - ops[::-1].index("fsync checkpoints/.step_000002.tmp-PID/trainer.pt")
    first_kills = {"latest": {"op": last}, "torn": {"op": torn}, "staging": {"op": staging}}
    probes = harness.run([{"name": name, "kills": [kill], "snapshot": True} for name, kill in first_kills.items()])
    runs, described = {}, {}
    for name in first_kills:
        resumed = probes[name][-1]
        assert resumed["exit"] == "exit 0", _tail(resumed)
        assert not _differences(harness.run_dir("reference"), harness.run_dir(name)), name
        new = [n for n, op in enumerate(resumed["ops"], start=1) if op not in ops]
        assert new, f"the resume after {name} did nothing a fresh run does not do"
        # just before each, and just after (before the next point): e.g. between the two renames of a replacement
        points = sorted({m for n in new for m in (n, n + 1) if m <= len(resumed["ops"])})
        runs.update({f"{name}-op{n:02d}": {"kills": [{"op": n}], "from": name} for n in points})
        described.update({f"{name}-op{n:02d}": resumed["ops"][n - 1] for n in points})
    failures = _kill_and_compare(harness, runs)
    _report("write points of resumes", len(runs), failures)
    print("\n".join(f"  {name}: before {op}" for name, op in described.items()))
    assert not failures, _describe(failures, described)
    replaced = [op for op in probes["latest"][-1]["ops"] if op not in ops]
    assert "replace checkpoints/step_000002" in replaced  # the folder set aside: item 8's two renames, each killed


def test_an_async_run_killed_in_flight_in_an_update_or_in_a_save_resumes_bitwise(tmp_path, tiny_model_dir):
    """`rollout.max_staleness=1`: step k+1's rollouts run while step k's update does. Killed at seeded module calls
    (inside a rollout in flight or an update, whichever runs then) and at seeded write points of its checkpoints
    (inside a save), then resumed: the rollout buffer (pending steps saved with the checkpoint, lost ones sampled
    again from the same weights and seeds), the staleness accounting, the data order and every RNG continue, and
    the weights, metrics and episodes equal those of a run never killed, bitwise."""
    argv = ["train", "configs/arithmetic_grpo.yaml", *OVERRIDES, "trainer.total_steps=3", "rollout.max_staleness=1"]
    in_saves = (4, lambda op: " checkpoints/" in op)  # 4 of the write points of its checkpoints
    reference, ops, failures = _seeded_kills(tmp_path / "h", tiny_model_dir, argv, 54, in_saves, 4)
    metrics = [json.loads(line) for line in (tmp_path / "h" / "runs" / "reference" / "metrics.jsonl").open()]
    assert [m["off_policy/staleness_max"] for m in metrics if "off_policy/staleness_max" in m] == [0, 1, 1]
    assert not failures, _describe(failures, {f"op{n}": reference["ops"][n - 1] for n in ops})


def test_a_run_with_the_thread_count_left_to_rllm_resumes_bitwise_on_a_busier_machine(tmp_path, tiny_model_dir):
    """No `OMP_NUM_THREADS` and no count set by the harness: rllm picks torch's threads, as for a user. The run never
    killed trains on the machine as it is; another is killed just after its first save and resumed (step 2, the
    final validation and save) beside a process that keeps a core busy, where the thread governor would give it
    fewer threads. It holds the count its manifest records and ends bitwise equal to the first run. (One kill: the
    resume that starts over, inside the first save, reads the record the same way, tests/unit/training/test_numerics.py;
    on 2 busy cores each run here costs 20-60 s.)"""
    harness = Harness(tmp_path, tiny_model_dir, hash_seed=2, threads=None)
    try:
        (reference,) = harness.run([{"name": "reference", "kills": []}])["reference"]
        assert reference["exit"] == "exit 0", _tail(reference)
        after_first_save = reference["ops"].index("replace checkpoints/.latest.tmp-PID") + 2
        runs = {"resumed": {"kills": [{"op": after_first_save}]}}
        with busy_core():
            governed = governed_threads()
            failures = _kill_and_compare(harness, runs)
    finally:
        harness.close()
    _report("the write point after the first save, the thread count left to rllm, beside a busy process", 1, failures)
    assert not failures, _describe(failures, {})
    recorded, reference_record = (
        json.loads((harness.run_dir(name) / "manifest.json").read_text())["numerics"]
        for name in ("resumed", "reference")
    )
    assert recorded == reference_record and 1 <= recorded["torch_threads"] <= usable_cores()
    # the resume ran another count than the governor would have given it beside the busy process (where there is a
    # core to spare); a run at 2 threads and one at 1 differ from the first checkpoint on (measured)
    assert governed < recorded["torch_threads"] or usable_cores() == 1


@contextlib.contextmanager
def busy_core() -> Iterator[None]:
    """A process that keeps one core busy for the block, in a session of its own (another user's job)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield
    finally:
        process.kill()
        process.wait()


def governed_threads() -> int:
    """What the thread governor would choose now, from a fresh reading of the load."""
    governor = ThreadGovernor(interval=0.0, fixed=0)  # 0: not the OMP_NUM_THREADS the suite sets
    time.sleep(0.5)
    return governor.threads()


OFFLINE_OVERRIDES = [
    "data.task=arithmetic",
    "data.val_size=2",
    "rollout.max_tokens=6",
    "rollout.n_parallel=1",
    "trainer.save_every=1",
    "trainer.tensorboard=false",
    "optim.micro_batch_size=2",
    "optim.lr=1e-2",
]


@pytest.mark.parametrize("command", ["sft", "dpo"])
def test_an_sft_or_dpo_run_killed_resumes_bitwise(tmp_path, tiny_model_dir, command):
    """`rllm sft` / `rllm dpo` (3 steps, each saved, validation before and after) killed at seeded write points and
    module calls, then resumed: the same files as a run never killed."""
    chat = [{"role": "user", "content": "2+2?"}]
    records = [
        {
            "prompt": chat,
            "chosen": [{"role": "assistant", "content": f"{4 + i}"}],
            "rejected": [{"role": "assistant", "content": "five" * (i + 1)}],
        }
        for i in range(3)
    ]
    if command == "sft":
        records = [{"prompt": r["prompt"], "completion": r["chosen"]} for r in records]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    key = "messages" if command == "sft" else "preferences"
    argv = [
        command,
        f"configs/arithmetic_{command}.yaml",
        f"{command}.episodes=null",
        f"{command}.{key}={data}",
        f"{command}.batch_size=1",
        f"{command}.epochs=1",
        *OFFLINE_OVERRIDES,
    ]
    reference, ops, failures = _seeded_kills(tmp_path / "h", tiny_model_dir, argv, 21, (8, lambda op: True), 3)
    assert not failures, _describe(failures, {f"op{n}": reference["ops"][n - 1] for n in ops})


# ---- running and comparing -----------------------------------------------------------------------------------


def _seeded_kills(root: Path, model_dir: Path, argv: list[str], seed: int, ops: tuple, calls: int) -> tuple:
    """A run of `argv` never killed (by a harness of its own), then one run per kill, resumed to the end, compared
    with it: `ops` = (how many, which) seeded write points among those `which(op)` accepts, and `calls` seeded
    module calls. (the reference's process, the write points killed at, the failures)."""
    reference_harness = Harness(root, model_dir, hash_seed=1, argv=argv)
    try:
        (reference,) = reference_harness.run([{"name": "reference", "kills": []}])["reference"]
    finally:
        reference_harness.close()
    assert reference["exit"] == "exit 0", _tail(reference)
    rng = random.Random(seed)
    count, which = ops
    chosen = sorted(rng.sample([n for n, op in enumerate(reference["ops"], start=1) if which(op)], count))
    moments = sorted(rng.sample(range(1, reference["calls"] + 1), calls))
    runs = {
        **{f"op{n}": {"kills": [{"op": n}]} for n in chosen},
        **{f"call{n}": {"kills": [{"call": n}]} for n in moments},
    }
    harness = Harness(root, model_dir, hash_seed=2, argv=argv)
    try:
        failures = _kill_and_compare(harness, runs)
    finally:
        harness.close()
    what = f"{argv[0]} {' '.join(a for a in argv if 'staleness' in a)}".strip()
    _report(f"{what}: write points {chosen} of {len(reference['ops'])}, module calls {moments}", len(runs), failures)
    return reference, chosen, failures


def _kill_and_compare(harness: Harness, runs: dict[str, dict]) -> dict[str, str]:
    """Runs each of `runs` (name -> its plan: kills, ...) and returns name -> what went wrong, for those that did."""
    results = harness.run([{"name": name, **run} for name, run in runs.items()])
    failures = {}
    for name, run in runs.items():
        processes = results[name]
        exits = [p["exit"] for p in processes]
        if exits != ["killed"] * len(run["kills"]) + ["exit 0"]:
            failures[name] = f"processes ended {exits}: {_tail(processes[-1])}"
            continue
        differences = _differences(harness.run_dir("reference"), harness.run_dir(name))
        if differences:
            failures[name] = "; ".join(differences[:5])
    return failures


def _differences(expected: Path, actual: Path) -> list[str]:
    found = []
    listing = {p.relative_to(expected).as_posix() for p in expected.rglob("*")}
    if listing != {p.relative_to(actual).as_posix() for p in actual.rglob("*")}:
        theirs = {p.relative_to(actual).as_posix() for p in actual.rglob("*")}
        found.append(f"files: missing {sorted(listing - theirs)}, extra {sorted(theirs - listing)}")
    timed = set()  # checkpoint files equal but for wall times (an async run's pending episodes hold theirs)
    for path in sorted((expected / "checkpoints").rglob("*"), key=lambda p: p.name == "manifest.json"):
        other = actual / path.relative_to(expected)
        if not (path.is_file() and other.is_file()) or path.read_bytes() == other.read_bytes():
            continue
        if path.name == "manifest.json" and _same_manifest(path, other, timed):
            continue
        difference = _state_difference(path, other)
        if difference is None:
            timed.add(path.relative_to(path.parent).as_posix())
            continue
        found.append(f"{path.relative_to(expected)} differs{difference}")
    for name in ("metrics.jsonl", "episodes.jsonl"):
        mine, theirs = _records(expected / name), _records(actual / name)
        if mine != theirs:
            pairs = enumerate(zip(mine, theirs, strict=False))
            first = next((i for i, (a, b) in pairs if a != b), min(len(mine), len(theirs)))
            found.append(f"{name}: {len(theirs)} records for {len(mine)}, first difference at record {first + 1}")
    mine, theirs = _result(expected), _result(actual)
    if mine != theirs:
        keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        found.append(f"result.json differs in {keys}")
    return found


def _records(path: Path) -> list:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [_timeless(json.loads(line)) for line in lines]


def _result(run_dir: Path) -> dict:
    path = run_dir / "result.json"
    result = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    result.pop("run_dir", None)
    return _timeless(result)


def _timeless(data):
    """`data` without the wall-time measurements (`is_time_metric` keys, at any depth): they differ run to run."""
    if isinstance(data, dict):
        return {k: _timeless(v) for k, v in data.items() if not is_time_metric(k)}
    if isinstance(data, list):
        return [_timeless(v) for v in data]
    return data


def _same_manifest(expected: Path, actual: Path, timed: set[str]) -> bool:
    """Whether two checkpoint manifests differ only in the checksums of files equal but for wall times (`timed`)."""

    def comparable(path):
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest.pop("manifest_sha256", None)
        manifest["files"] = {name: digest for name, digest in manifest["files"].items() if name not in timed}
        return manifest

    return comparable(expected) == comparable(actual)


def _state_difference(expected: Path, actual: Path) -> str | None:
    """Where two checkpoint files differ, for the failure message: the first differing key of their states; None
    when their states are equal but for wall-time measurements (`is_time_metric` keys, and the `seconds` a pending
    step's rollouts took)."""
    if expected.suffix != ".pt":
        return ""
    import torch

    def first(a, b, where):
        if isinstance(a, dict) and isinstance(b, dict):
            a, b = ({k: v for k, v in _timeless(d).items() if k != "seconds"} for d in (a, b))  # a rollout's time
            if a.keys() != b.keys():
                return f"{where}: keys {sorted(map(str, a.keys() ^ b.keys()))}"
            return next((d for k in a if (d := first(a[k], b[k], f"{where}.{k}"))), None)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
            return next(
                (d for i, (x, y) in enumerate(zip(a, b, strict=True)) if (d := first(x, y, f"{where}[{i}]"))), None
            )
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return None if a.shape == b.shape and torch.equal(a, b) else where
        try:
            return None if bool(a == b) else where
        except (ValueError, RuntimeError):  # numpy arrays
            import numpy as np

            return None if np.array_equal(a, b) else where

    a, b = (torch.load(p, map_location="cpu", weights_only=False) for p in (expected, actual))
    where = first(a, b, expected.stem)
    return None if where is None else f" (first at {where})"


def _tail(process: dict) -> str:
    lines = Path(process["out"]).read_text(errors="replace").splitlines()
    return "\n".join(lines[-12:])


def _describe(failures: dict[str, str], points: dict[str, str]) -> str:
    """The failures, each with the write point its kill came before (`points`: run name -> it)."""
    lines = [
        f"{name} [before {points[name]}]: {failure}" if name in points else f"{name}: {failure}"
        for name, failure in failures.items()
    ]
    return f"{len(failures)} resumed runs differ:\n" + "\n".join(lines)


def _report(what: str, runs: int, failures: dict[str, str]) -> None:
    print(f"\nkill -9 at {what}: {runs} runs, {runs - len(failures)} resumed bitwise equal")
