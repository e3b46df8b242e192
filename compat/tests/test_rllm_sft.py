"""rLLM v0.2's `AgentSFTTrainer` (rllm.trainer.agent_sft_trainer) over rllm's SFT trainer: rLLM-style rows and
verl's SFT config keys train a tiny model; rLLM's `process_trajectories` makes those rows from trajectories."""

from __future__ import annotations

import json
import math

import pytest

from rllm.config import ConfigError
from rllm.runs import load_metrics
from rllm.types import Step, Trajectory

pytest.importorskip("omegaconf")

from rllm.trainer.agent_sft_trainer import AgentSFTTrainer


def _rows(n: int) -> list[dict]:
    return [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} + {i}?"},
                {"role": "assistant", "content": f"{2 * i}"},
                {"role": "user", "content": "And doubled?"},
                {"role": "assistant", "content": f"{4 * i}"},
            ]
        }
        for i in range(n)
    ]


def _config(model_dir, tmp_path, *more: str) -> list[str]:
    return [
        f"model.partial_pretrain={model_dir}",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=2",
        "data.max_length=128",
        "trainer.total_epochs=1",
        "optim.lr=1e-3",
        "trainer.device=cpu",
        f"trainer.default_local_dir={tmp_path / 'runs' / 'sft'}",
        *more,
    ]


def test_agent_sft_trainer_trains_rllm_rows_from_a_parquet_file(tiny_model_dir, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pd.DataFrame(_rows(4)).to_parquet(tmp_path / "train.parquet")  # rLLM's SFT data format
    trainer = AgentSFTTrainer(config=_config(tiny_model_dir, tmp_path, f"data.train_files={tmp_path}/train.parquet"))
    assert trainer.config.sft.batch_size == 2 and trainer.config.model.lora.enabled is False  # lora_rank 0: full
    result = trainer.train()
    assert result["steps"] == 2  # ceil(1 epoch * 4 rows / 2)
    losses = [m["loss"] for m in load_metrics(tmp_path / "runs" / "sft") if "loss" in m]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)
    assert json.loads((tmp_path / "runs" / "sft" / "manifest.json").read_text())["kind"] == "sft"


def test_stepwise_trains_the_last_assistant_message_and_datasets_win_over_files(tmp_path):
    trainer = AgentSFTTrainer(
        config={"data.rllm.tokenize_and_mask_method": "stepwise", "data.train_files": "none"}, train_dataset=_rows(2)
    )
    first = trainer.records[0]
    assert [m["content"] for m in first["prompt"]] == ["What is 0 + 0?", "0", "And doubled?"]
    assert first["completion"] == [{"role": "assistant", "content": "0"}]
    cumulative = AgentSFTTrainer(config=None, train_dataset=_rows(1))
    assert cumulative.records == _rows(1) and cumulative.config.optim.grad_clip == 1.0


def test_process_trajectories_keeps_rewarded_conversations_as_rllm_does():
    talk = [
        {"role": "system", "content": "  "},
        {"role": "user", "content": " hi "},
        {"role": "assistant", "content": "hello", "tool_calls": []},
    ]
    good = Trajectory(steps=[Step(chat_completions=talk)], reward=1.0)
    low = Trajectory(steps=[Step(chat_completions=talk)], reward=0.5)
    short = Trajectory(steps=[Step(chat_completions=talk[:2])], reward=1.0)
    rows = AgentSFTTrainer.process_trajectories([good, low, short, Trajectory(reward=2.0)], reward_threshold=1.0)
    assert rows == [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"backend": "tinker"}, NotImplementedError, "torch backend"),
        ({"config": ["data.truncation=left"]}, ConfigError, "data.truncation"),
        ({"config": ["data.no_such_key=1"]}, ConfigError, "data.no_such_key"),
        ({"config": {"optim.lr_scheduler": "wsd"}}, ConfigError, "cosine"),
    ],
)
def test_what_rllm_cannot_honour_is_an_error_naming_it(kwargs, error, words):
    with pytest.raises(error, match=words):
        AgentSFTTrainer(train_dataset=_rows(1), **kwargs)


def test_hydra_composes_the_sft_yaml_as_rllm_scripts_do(tmp_path):
    hydra = pytest.importorskip("hydra")
    with hydra.initialize_config_module("rllm.trainer.config", version_base=None):
        config = hydra.compose("agent_sft_trainer", overrides=["model.lora_rank=8", "trainer.total_epochs=3"])
    trainer = AgentSFTTrainer(config=config, train_dataset=_rows(1))
    assert trainer.config.model.lora.enabled and trainer.config.model.lora.rank == 8 and trainer.config.sft.epochs == 3
    assert trainer.config.trainer.name.startswith("sft-")  # the default folder: a new run each time
