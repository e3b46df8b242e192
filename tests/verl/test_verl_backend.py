"""The verl backend on CPU: verl 0.9.1's real FSDP2 actor/ref workers on Ray, against the torch backend.

Runs in the verl environment (`make test` runs `.venv-verl/bin/python -m pytest tests/verl`); skipped elsewhere.
Each test starts (and stops) its own local Ray, or a simulated 2-node cluster, on the tiny random-init model.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess

import pytest

pytest.importorskip("verl")

import torch

from rllm.config import ConfigError, TrainConfig, load_config
from rllm.runs import load_metrics
from rllm.training.backends.torch import TorchBackend
from rllm.training.backends.verl import VerlBackend
from rllm.training.batch import TrainingRow
from rllm.training.trainer import AgentTrainer, is_time_metric
from tests.support.processes import leftover_processes, own_processes
from tests.support.training import TINY_RUN

TINY = [*TINY_RUN, "trainer.backend=verl", "trainer.tensorboard=false"]


def synthetic_rows(seed: int = 0, n: int = 4) -> list[TrainingRow]:
    """Rows of several prompt/response lengths, one with an observation token masked inside its response."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        prompt, response = rng.randint(3, 7), rng.randint(3, 6)
        mask = [0] * prompt + [1] * response
        if i == 1:
            mask[prompt + 1] = 0  # an environment token between two sampled ones
        rows.append(
            TrainingRow(
                input_ids=[rng.randrange(100, 3000) for _ in mask],
                prompt_length=prompt,
                loss_mask=mask,
                old_logprobs=[0.0] * len(mask),
                advantages=[(1.0 if i % 2 else -0.7) * m for m in mask],
                group_key="g",
                episode_id=str(i),
                trajectory_name="t",
            )
        )
    return rows


def backend_config(model_dir, **sections) -> TrainConfig:
    base = {
        "model": {"name": str(model_dir), "lora": {"enabled": False}},
        "trainer": {"backend": "verl", "total_steps": 3, "workers_per_node": 1},
        "optim": {"lr": 1e-4, "micro_batch_size": 2, "warmup_steps": 1, "schedule": "cosine"},
        "algorithm": {"kl_coef": 0.05, "mini_batches": 2, "ppo_epochs": 2},
    }
    for name, values in sections.items():
        base[name] = {**base[name], **values}
    return TrainConfig.model_validate(base)


def run_updates(backend, rows, steps: int = 2) -> list[dict]:
    return [backend.update(rows, temperature=1.0) for _ in range(steps)]


def weights_of(backend) -> dict[str, torch.Tensor]:
    if isinstance(backend, VerlBackend):
        backend._pull_weights()  # the workers' weights, gathered from their shards
    return {k: v.detach().cpu().clone() for k, v in backend.model.state_dict().items()}


def assert_same_update(a: list[dict], b: list[dict], weights_a, weights_b, tolerance: float = 1e-5) -> None:
    for step_a, step_b in zip(a, b, strict=True):
        assert step_a.keys() == step_b.keys()
        for key in {
            "loss",
            "pg_loss",
            "kl",
            "entropy",
            "clip_fraction",
            "lr",
            "loss_tokens",
            "train_tokens",
            "mismatch/abs_diff_mean",
            "mismatch/abs_diff_max",
            "mismatch/kl_k3",
            "mismatch/tokens",
            "off_policy/nonfinite_tokens",
        } & step_a.keys():
            assert step_a[key] == pytest.approx(step_b[key], abs=tolerance), key
        # grad norms are O(10) on this sharp model: compare relative to their size
        assert step_a["grad_norm"] == pytest.approx(step_b["grad_norm"], rel=tolerance), "grad_norm"
    assert weights_a.keys() == weights_b.keys()
    assert max((weights_a[k] - weights_b[k]).abs().max().item() for k in weights_a) < tolerance


def test_verl_matches_the_torch_backend_and_two_workers_match_one(tiny_model_dir):
    """Same seed, same rows: GRPO-style update with KL to a reference, 2 epochs x 2 mini-batches, warm-up + cosine.
    torch vs verl (1 worker), then verl 2 workers vs 1: loss, grad norm and updated weights within 1e-5."""
    config = backend_config(tiny_model_dir)
    torch_backend = TorchBackend(config.model, config.algorithm, config.optim, total_steps=3, seed=0)
    rows = synthetic_rows()
    for row, logprobs in zip(rows, torch_backend.compute_logprobs(rows, temperature=1.0), strict=True):
        row.old_logprobs = logprobs  # on-policy: the ratio starts at 1
    torch_steps = run_updates(torch_backend, rows)
    torch_weights = weights_of(torch_backend)
    assert torch_steps[0]["grad_norm"] > 1e-2 and torch_steps[1]["kl"] > 0  # the update did something

    results = {}
    for workers in (1, 2):
        backend = VerlBackend(
            config.model_copy(update={"trainer": config.trainer.model_copy(update={"workers_per_node": workers})}),
            tiny_model_dir / f"run{workers}",
        )
        try:
            before = backend.compute_logprobs(rows, temperature=1.0)  # log-probs of -20 and less: relative
            for row, logprobs in zip(rows, before, strict=True):
                assert logprobs == pytest.approx(row.old_logprobs, rel=1e-5, abs=1e-5)
            results[workers] = run_updates(backend, rows), weights_of(backend)
        finally:
            backend.close()
    assert_same_update(torch_steps, results[1][0], torch_weights, results[1][1])
    assert_same_update(results[1][0], results[2][0], results[1][1], results[2][1])
    assert not leftover_processes()


def test_verl_knobs_offload_eager_attention_micro_batch_and_overrides(tiny_model_dir):
    """The verl section's knobs reach verl and leave the update unchanged: parameter/optimizer offload, eager
    attention, one row per micro-batch and a pass-through override, against the torch backend (LoRA off)."""
    config = backend_config(tiny_model_dir, algorithm={"kl_coef": 0.0, "mini_batches": 1, "ppo_epochs": 1})
    rows = synthetic_rows(seed=1)
    torch_backend = TorchBackend(config.model, config.algorithm, config.optim, total_steps=3, seed=0)
    for row, logprobs in zip(rows, torch_backend.compute_logprobs(rows, temperature=1.0), strict=True):
        row.old_logprobs = logprobs
    expected = run_updates(torch_backend, rows, steps=1)
    knobs = config.model_copy(
        update={
            "verl": config.verl.model_copy(
                update={
                    "param_offload": True,
                    "optimizer_offload": True,
                    "attn_implementation": "eager",
                    "micro_batch_size": 1,
                    "overrides": ["actor_rollout_ref.actor.fsdp_config.forward_prefetch=true"],
                }
            )
        }
    )
    backend = VerlBackend(knobs, tiny_model_dir / "knobs")
    try:
        assert "actor_rollout_ref.actor.fsdp_config.forward_prefetch=true" in backend._overrides()
        got = run_updates(backend, rows, steps=1)
        assert_same_update(expected, got, weights_of(torch_backend), weights_of(backend))
    finally:
        backend.close()


def test_a_cluster_smaller_than_requested_fails_fast_and_stops_ray(tiny_model_dir):
    import time

    config = backend_config(tiny_model_dir, trainer={"workers_per_node": (os.cpu_count() or 1) + 1})
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"needs 1 Ray node\(s\) with \d+ free CPU\(s\) each"):
        VerlBackend(config, tiny_model_dir / "small")
    assert time.monotonic() - started < 60
    assert not leftover_processes()


PARITY = """
from rllm import Step, Trajectory, Workflow


class Parity(Workflow):
    async def run(self, task, uid):
        messages = [{"role": "user", "content": task["question"]}]
        output = await self.generate(messages)
        step = Step(chat_completions=messages, model_output=output, reward=float(len(output.text) % 2))
        self.commit(Trajectory(steps=[step]))
"""


def _parity_run(tmp_path, model_dir, name: str, *extra: str) -> dict[str, torch.Tensor]:
    (tmp_path / "parity_workflow.py").write_text(PARITY)
    overrides = [
        *TINY,
        f"model.name={model_dir}",
        "trainer.total_steps=4",
        "optim.lr=1e-2",
        "model.lora.enabled=false",
        f"trainer.run_dir={tmp_path}",
        f"trainer.name={name}",
        "workflow=parity_workflow:Parity",
        "rollout.n_parallel=1",
        *extra,
    ]
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        trainer = AgentTrainer(config=load_config("configs/arithmetic_grpo.yaml", overrides), progress=False)
        trainer.train()
    finally:
        sys.path.remove(str(tmp_path))
    return {k: v.clone() for k, v in trainer.backend.model.state_dict().items()}


def test_resume_after_stop_after_equals_an_uninterrupted_run(tmp_path, tiny_model_dir):
    straight = _parity_run(tmp_path, tiny_model_dir, "straight")
    _parity_run(tmp_path, tiny_model_dir, "resumed", "trainer.stop_after=2")
    resumed = _parity_run(tmp_path, tiny_model_dir, "ignored", f"trainer.resume={tmp_path / 'resumed'}")
    assert max((straight[k] - resumed[k]).abs().max().item() for k in straight) < 1e-6

    def comparable(run):
        return [{k: v for k, v in m.items() if not is_time_metric(k)} for m in load_metrics(tmp_path / run)]

    steps = comparable("straight")
    assert any(m.get("grad_norm", 0) > 0 for m in steps)  # the weights moved
    assert [m["step"] for m in steps if "reward_mean" in m] == [1, 2, 3, 4]
    for a, b in zip(steps, comparable("resumed"), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
    assert not leftover_processes()


def test_a_multi_turn_frozenlake_step_trains_on_policy_with_observations_masked(tmp_path, tiny_model_dir):
    """Two-turn FrozenLake episodes (the board comes back as an observation inside the row): verl's recomputed
    log-probs of the sampled tokens equal the sampling ones (ratio 1, approx_kl ~ 0), and the observation tokens
    are outside the loss."""
    overrides = [
        *TINY,
        f"model.name={tiny_model_dir}",
        "trainer.total_steps=1",
        "model.lora.enabled=false",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=lake",
        "rollout.max_steps=2",
        "rollout.max_tokens=4",
        "data.val_size=0",
    ]
    AgentTrainer(config=load_config("configs/frozenlake_grpo.yaml", overrides), progress=False).train()
    step = next(m for m in load_metrics(tmp_path / "lake") if "reward_mean" in m)
    assert step["turns_mean"] > 1 and step["skipped_update"] == 0
    assert step["batch/rows"] == 4 and step["batch/rows_split"] == 0  # one row per two-turn episode
    assert step["loss_tokens"] < step["train_tokens"]  # prompts and observations are not trained on
    assert step["approx_kl"] < 1e-6 and step["clip_fraction"] == 0  # same tokens, same positions as sampled
    assert not leftover_processes()


def test_two_steps_on_a_simulated_two_node_cluster(tmp_path, tiny_model_dir):
    """Ray's own `Cluster`: two nodes of one CPU each, one worker per node (FSDP over gloo between them)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        overrides = [
            *TINY,
            f"model.name={tiny_model_dir}",
            "trainer.total_steps=2",
            "trainer.nodes=2",
            "trainer.workers_per_node=1",
            f"verl.ray_address={cluster.address}",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=two-nodes",
            "data.val_size=0",
        ]
        result = AgentTrainer(config=load_config("configs/arithmetic_grpo.yaml", overrides), progress=False).train()
        assert result["steps"] == 2
        steps = [m for m in load_metrics(tmp_path / "two-nodes") if "reward_mean" in m]
        assert [m["weight_version"] for m in steps] == [1, 2]
        assert (
            tmp_path / "two-nodes" / "checkpoints" / "step_000002" / "verl" / "model_world_size_2_rank_1.pt"
        ).exists()
        import ray

        assert not ray.is_initialized()  # the driver left the cluster; the cluster itself is the caller's
    finally:
        cluster.shutdown()
    assert not leftover_processes()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_verl_on_a_gpu_matches_the_torch_backend(tiny_model_dir):
    """On a GPU verl runs as it ships (CUDA platform, NCCL between ranks, flash or sdpa attention)."""
    config = backend_config(tiny_model_dir, algorithm={"kl_coef": 0.0, "mini_batches": 1, "ppo_epochs": 1})
    config = config.model_copy(update={"verl": config.verl.model_copy(update={"attn_implementation": "sdpa"})})
    rows = synthetic_rows()
    torch_backend = TorchBackend(config.model, config.algorithm, config.optim, total_steps=3, seed=0, device="cuda")
    for row, logprobs in zip(rows, torch_backend.compute_logprobs(rows, temperature=1.0), strict=True):
        row.old_logprobs = logprobs
    expected = run_updates(torch_backend, rows, steps=1)
    backend = VerlBackend(config, tiny_model_dir / "gpu")
    try:
        got = run_updates(backend, rows, steps=1)
        assert_same_update(expected, got, weights_of(torch_backend), weights_of(backend), tolerance=1e-4)
    finally:
        backend.close()


def _start_cli_run(tmp_path, model_dir, name: str, *extra: str) -> subprocess.Popen:
    import sys

    args = [
        "configs/arithmetic_grpo.yaml",
        *TINY,
        f"model.name={model_dir}",
        "trainer.total_steps=30",
        "trainer.save_every=1",
        "data.val_size=0",
        f"trainer.run_dir={tmp_path}",
        f"trainer.name={name}",
        *extra,
        "--no-progress",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "rllm.cli.main", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_checkpoint(run_dir, process: subprocess.Popen, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not (run_dir / "checkpoints" / "step_000001").exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.2)


def test_a_worker_killed_mid_run_stops_it_with_the_error_and_it_resumes(tmp_path, tiny_model_dir):
    """kill -9 of the verl worker processes: the run exits naming the failure, Ray is shut down, and the run
    resumes from its last complete checkpoint to the end."""
    from rllm.training.checkpoint import latest_checkpoint

    process = _start_cli_run(tmp_path, tiny_model_dir, "killed")
    _wait_for_checkpoint(tmp_path / "killed", process)
    for pid in own_processes(["ray::WorkerDict"]):  # this run's workers only: the main suite may run Ray too
        os.kill(pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr[-3000:]
    assert "a verl worker failed to" in stderr and "--resume" in stderr
    assert not leftover_processes()
    last = latest_checkpoint(tmp_path / "killed")
    assert last is not None and int(last.name.removeprefix("step_")) < 30

    resumed = _start_cli_run(
        tmp_path, tiny_model_dir, "killed", f"trainer.resume={tmp_path / 'killed'}", "trainer.stop_after=2"
    )
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr[-3000:]
    steps = [m["step"] for m in load_metrics(tmp_path / "killed") if "reward_mean" in m]
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] > int(last.name[5:])  # continued, no gap
    assert not leftover_processes()


def test_ctrl_c_stops_the_run_and_every_ray_process(tmp_path, tiny_model_dir):
    process = _start_cli_run(tmp_path, tiny_model_dir, "interrupted")
    _wait_for_checkpoint(tmp_path / "interrupted", process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    # one line and 128 + SIGINT, no traceback (rllm.training.interrupt); the workers are gone all the same
    assert process.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("interrupted (SIGINT) ") and line.endswith(f"--resume {tmp_path / 'interrupted'}"), line
    assert not leftover_processes()


def test_busy_resources_fail_after_the_placement_timeout_and_leave_the_callers_ray_up(tiny_model_dir):
    """The CPUs exist but are taken: Ray would wait forever; the backend gives up after verl.placement_timeout."""
    import time

    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    ray.init(num_cpus=1, include_dashboard=False)
    try:
        taken = placement_group([{"CPU": 1}])
        ray.get(taken.ready())
        config = backend_config(tiny_model_dir)
        config = config.model_copy(update={"verl": config.verl.model_copy(update={"placement_timeout": 3})})
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"could not place 1 x 1 worker\(s\) .* within verl.placement_timeout=3s"):
            VerlBackend(config, tiny_model_dir / "busy")
        assert time.monotonic() - started < 30
        assert ray.is_initialized()  # the caller's Ray is the caller's to stop
        remove_placement_group(taken)  # freed: the workers start on the caller's Ray (and get the CPU platform)
        backend = VerlBackend(config, tiny_model_dir / "freed")
        try:
            rows = synthetic_rows()
            assert len(backend.compute_logprobs(rows, temperature=1.0)) == len(rows)
        finally:
            backend.close()
        assert ray.is_initialized()
    finally:
        ray.shutdown()
    assert not leftover_processes()


@pytest.mark.skipif(not __import__("pathlib").Path(".venv-vllm/bin/python").exists(), reason="needs make vllm")
def test_vllm_rollouts_sample_from_the_verl_workers_weights(tmp_path, smollm2_tokenizer):
    """rollout.server=vllm with the verl backend: the server starts from the driver's copy and is re-synced from the
    workers' exported weights (LoRA merged) after every update; each sync is checked against the trainer's log-probs
    (full fine-tuning of a tied-embedding model is refused by that check: vLLM's reload misses the tied layer)."""
    from rllm.models.registry import build_tiny_model

    model_dir = tmp_path / "model"  # head_dim 64: the vLLM CPU build's attention does not take every head size
    build_tiny_model(
        smollm2_tokenizer, hidden_size=128, num_heads=2, num_kv_heads=1, intermediate_size=256
    ).save_pretrained(model_dir)
    smollm2_tokenizer.save_pretrained(model_dir)
    _parity_run(
        tmp_path,
        model_dir,
        "vllm",
        "trainer.total_steps=2",
        "rollout.server=vllm",
        "rollout.n=4",
        "rollout.vllm.python=.venv-vllm/bin/python",
        "data.val_size=0",
        "model.lora.enabled=true",
    )
    steps = [m for m in load_metrics(tmp_path / "vllm") if "reward_mean" in m]
    assert [m["weight_version"] for m in steps] == [1, 2] and any(m["grad_norm"] > 0 for m in steps)
    assert all(m["weight_sync_logprob_max_diff"] < 0.02 for m in steps)
    assert not leftover_processes()
