"""Weight sync against the fake vLLM server (a real tiny model behind the vLLM admin endpoints): the pause → swap →
version → resume order, the post-sync logprob check (passing and catching wrong weights), LoRA hot-load and unload,
failures that must not leave the server paused, the clear errors, and the trainer's vllm rollout backend end to end
on an attached server. The same flows run against a real vLLM server in tests/integration/test_vllm_server.py."""

from __future__ import annotations

import asyncio
import json
import stat

import pytest
import torch

from rllm.config import AlgorithmConfig, ModelConfig, OptimConfig, load_config
from rllm.errors import InfraError
from rllm.models.vllm_rollout import VLLMRolloutClient
from rllm.models.vllm_server import VLLMServer, VLLMUnavailableError, find_vllm_python
from rllm.models.weight_sync import WeightSyncError, make_sync
from rllm.testing.fake_openai_server import run_fake_server
from rllm.testing.fake_vllm_server import FakeVLLMServer
from rllm.training.backends.serving import TorchWeightSource
from rllm.training.backends.torch import TorchBackend
from tests.support.models import sharp_tiny_model


def _backend(tokenizer, *, lora: bool = True) -> TorchBackend:
    settings = ModelConfig(name="tiny").lora.model_copy(
        update={"enabled": lora, "rank": 4, "target_modules": ["q_proj", "v_proj"]}
    )
    return TorchBackend(
        ModelConfig(name="tiny", lora=settings),
        AlgorithmConfig(),
        OptimConfig(),
        total_steps=1,
        model=sharp_tiny_model(tokenizer, 0),
        tokenizer=tokenizer,
    )


def _train(backend: TorchBackend, seed: int) -> None:
    """Stand-in for an update: move every trainable weight."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in backend.model.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * 0.3)


@pytest.fixture
def fake(smollm2_tokenizer, tmp_path):
    backend = _backend(smollm2_tokenizer)
    folder = TorchWeightSource(backend).save_model(tmp_path / "served", merge_lora=False)
    with run_fake_server(FakeVLLMServer(folder)) as server:
        yield server, backend


def _client(server, tokenizer, workdir, sync="reload") -> VLLMRolloutClient:
    return VLLMRolloutClient(
        VLLMServer.attach(server.base_url), tokenizer, sync=sync, workdir=workdir, owns_server=False
    )


def test_reload_pauses_swaps_stamps_resumes_and_checks_logprobs(fake, smollm2_tokenizer, tmp_path):
    server, backend = fake
    client = _client(server, smollm2_tokenizer, tmp_path)
    assert client.model == "policy"  # attach() picked the served name from /v1/models
    _train(backend, 1)
    assert client.sync_weights(TorchWeightSource(backend), 1) == 1
    first = tmp_path / "weights-v1"
    assert server.events == [("pause", "wait"), ("reload", str(first)), ("version", "1"), ("resume",)]
    assert client.sync_metrics["weight_sync_logprob_max_diff"] < 1e-3 and not server.paused
    _train(backend, 2)
    client.sync_weights(TorchWeightSource(backend))  # default: the next version
    assert client.weight_version == 2 and server.version == "2"
    assert not first.exists() and (tmp_path / "weights-v2").exists()  # one model's worth of disk, not one per step

    async def sample():
        try:
            return await client.generate([1, 2, 3])
        finally:
            await client.aclose()

    assert asyncio.run(sample()).weight_version == 2


def test_wrong_weights_on_the_server_fail_the_check(fake, smollm2_tokenizer, tmp_path):
    server, backend = fake
    server.corrupt_reloads = True
    client = _client(server, smollm2_tokenizer, tmp_path)
    with pytest.raises(WeightSyncError, match="differ from the trainer's"):
        client.sync_weights(TorchWeightSource(backend), 1)
    assert client.weight_version == 0  # the failed version is not recorded as served


def test_a_failed_swap_still_resumes_the_server(fake, smollm2_tokenizer, tmp_path):
    server, backend = fake
    server.fail_next = "collective_rpc"
    client = _client(server, smollm2_tokenizer, tmp_path)
    with pytest.raises(InfraError, match="HTTP 500"):
        client.sync_weights(TorchWeightSource(backend), 1)
    assert server.events[-1] == ("resume",) and not server.paused


def test_lora_hot_loads_the_adapter_and_unloads_the_previous_one(fake, smollm2_tokenizer, tmp_path):
    server, backend = fake
    client = _client(server, smollm2_tokenizer, tmp_path, sync="lora")
    _train(backend, 1)
    client.sync_weights(TorchWeightSource(backend), 1)
    assert client.model == "policy-lora-v1" and "policy-lora-v1" in server.adapters
    assert (tmp_path / "adapter-v1" / "adapter_config.json").exists()
    assert client.sync_metrics["weight_sync_logprob_max_diff"] < 1e-3
    _train(backend, 2)
    client.sync_weights(TorchWeightSource(backend), 2)
    assert list(server.adapters) == ["policy-lora-v2"]
    assert ("unload_lora", "policy-lora-v1") in server.events and not (tmp_path / "adapter-v1").exists()


def test_strategy_errors_name_the_fix(smollm2_tokenizer, tmp_path):
    full = _backend(smollm2_tokenizer, lora=False)
    with pytest.raises(WeightSyncError, match="model.lora.enabled=true"):
        make_sync("lora", tmp_path).push(None, TorchWeightSource(full), 1)
    with pytest.raises(WeightSyncError, match="sync=reload"):
        make_sync("nccl", tmp_path).push(None, TorchWeightSource(full), 1)
    with pytest.raises(ValueError, match="reload, lora, nccl"):
        make_sync("rsync", tmp_path)


def test_full_model_save_is_a_loadable_transformers_folder(smollm2_tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    backend = _backend(smollm2_tokenizer)
    _train(backend, 3)
    source = TorchWeightSource(backend)
    folder = source.save_model(tmp_path / "m")
    reloaded = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ids = [5, 17, 99, 4, 250, 1000]
    with torch.no_grad():
        logits = reloaded(input_ids=torch.tensor([ids])).logits[0, :-1]
    plain = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    assert torch.allclose(plain, torch.tensor(source.logprobs(ids)), atol=1e-5)  # LoRA merged exactly
    assert (folder / "tokenizer.json").exists() and not list(tmp_path.glob(".m.staging-*"))


def test_dev_endpoints_missing_is_a_clear_error():
    # an OpenAI server without VLLM_SERVER_DEV_MODE's endpoints
    with run_fake_server() as plain, pytest.raises(InfraError, match="VLLM_SERVER_DEV_MODE=1"):
        VLLMServer.attach(plain.base_url, "fake-model").pause()


def test_finding_the_vllm_python(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .venv-vllm here
    monkeypatch.delenv("RLLM_VLLM_PYTHON", raising=False)
    with pytest.raises(VLLMUnavailableError, match="make vllm"):
        find_vllm_python()  # this test environment has no vllm package
    with pytest.raises(VLLMUnavailableError, match="does not exist"):
        find_vllm_python(tmp_path / "nope" / "python")
    monkeypatch.setenv("RLLM_VLLM_PYTHON", "/usr/bin/env")
    assert find_vllm_python() == "/usr/bin/env"


def test_a_server_that_dies_while_starting_reports_its_log(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'ValueError: no such model' >&2\nexit 3\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(VLLMUnavailableError, match=r"exited with code 3[\s\S]*no such model"):
        VLLMServer.launch(tmp_path / "model", python=python, log_path=tmp_path / "log", startup_timeout=30)


@pytest.mark.parametrize("staleness", [0, 1])
def test_trainer_with_vllm_rollouts_on_an_attached_server(fake, smollm2_tokenizer, tmp_path, staleness):
    """The trainer's vllm path end to end, fast: rollouts from the (scripted) fake, each update synced into the
    fake's real weights and checked; the version every step's outputs carry is the one synced before it, or, with
    asynchronous training (max_staleness 1), the one synced two steps before while the server samples during the
    update."""
    from rllm.runs import load_metrics
    from rllm.training.trainer import AgentTrainer

    server, _ = fake
    overrides = [
        "rollout.n=2",
        "rollout.max_tokens=6",
        "rollout.max_steps=1",
        "trainer.tasks_per_step=2",
        "data.train_size=4",
        "data.val_size=0",
        "optim.micro_batch_size=2",
        "trainer.total_steps=3",
        "model.lora.rank=4",
        "model.lora.target_modules=[q_proj,v_proj]",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=fake",
        f"rollout.vllm.base_url={server.base_url}",
        "rollout.server=vllm",
        f"rollout.max_staleness={staleness}",
    ]
    config = load_config("configs/frozenlake_grpo.yaml", overrides)
    trainer = AgentTrainer(
        config=config, model=sharp_tiny_model(smollm2_tokenizer, 0), tokenizer=smollm2_tokenizer, progress=False
    )  # the weights the fake serves
    trainer.train()
    steps = [m for m in load_metrics(tmp_path / "fake") if "reward_mean" in m]
    assert [m["weight_version"] for m in steps] == [1, 2, 3] and server.version == "3"
    assert all(m["weight_sync_logprob_max_diff"] < 1e-3 for m in steps)
    sampled_with: dict[int, set[int]] = {}
    for line in (tmp_path / "fake" / "episodes.jsonl").read_text().splitlines():
        record = json.loads(line)
        for trajectory in record["episode"]["trajectories"]:
            for step in trajectory["steps"]:
                sampled_with.setdefault(record["step"], set()).add(step["model_output"]["weight_version"])
    # step k samples with the weights synced after step k - 1 - staleness
    assert sampled_with == {k: {max(0, k - 1 - staleness)} for k in (1, 2, 3)}
