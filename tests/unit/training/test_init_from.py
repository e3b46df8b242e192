"""`model.init_from` (`rllm.training.init_from`): a run starts (or an eval runs) from another run's trained weights,
LoRA merged, computing exactly what the trained model computed."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from rllm.config import load_config
from rllm.evaluation import make_eval_model
from rllm.models.registry import build_tiny_model
from rllm.training.backends.torch import TorchBackend
from rllm.training.init_from import InitFromError, apply_init_weights
from rllm.training.sft import SFTTrainer

IDS = torch.tensor([[1, 20, 300, 4000, 42, 7, 9]])


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "chats.jsonl"
    records = [
        {"messages": [{"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": f"{i}!"}]}
        for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _trained(tmp_path, chats, tokenizer, model, *more):
    config = load_config(
        None,
        [
            f"sft.messages={chats}",
            "sft.batch_size=3",
            "sft.epochs=2",
            "data.val_size=0",
            "trainer.tensorboard=false",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=source",
            "optim.lr=1e-2",
            *more,
        ],
    )
    trainer = SFTTrainer(config=config, model=copy.deepcopy(model), tokenizer=tokenizer, progress=False)
    trainer.train()
    return trainer


@pytest.mark.parametrize("lora", [True, False])
def test_the_seeded_model_computes_what_the_trained_one_did(tmp_path, chats, smollm2_tokenizer, lora):
    base = build_tiny_model(smollm2_tokenizer, seed=5)
    source = _trained(
        tmp_path,
        chats,
        smollm2_tokenizer,
        base,
        f"model.lora.enabled={str(lora).lower()}",
        "model.lora.alpha=48",
        "model.lora.rank=8",
    )
    with torch.no_grad():
        expected = source.backend.model(IDS).logits
        seeded = copy.deepcopy(base)
        assert not torch.allclose(seeded(IDS).logits, expected, atol=1e-3)  # training moved the weights
        checkpoint = apply_init_weights(seeded, tmp_path / "source")
        assert checkpoint.name == "step_000004"
        torch.testing.assert_close(seeded(IDS).logits, expected, atol=1e-5, rtol=1e-5)


def test_a_backend_and_an_eval_model_start_from_the_seeded_weights(tmp_path, chats, smollm2_tokenizer, tiny_model_dir):
    from rllm.models.registry import load_causal_lm

    base = load_causal_lm(tiny_model_dir)
    source = _trained(tmp_path, chats, smollm2_tokenizer, base, f"model.name={tiny_model_dir}")
    config = load_config(None, [f"model.name={tiny_model_dir}", f"model.init_from={tmp_path / 'source'}"])
    with torch.no_grad():
        expected = source.backend.model(IDS).logits
        backend = TorchBackend(config.model, config.algorithm, config.optim, total_steps=1)  # fresh LoRA on top
        torch.testing.assert_close(backend.model(IDS).logits, expected, atol=1e-5, rtol=1e-5)
        eval_model = make_eval_model(config, tmp_path)
        torch.testing.assert_close(eval_model.model(IDS).logits, expected, atol=1e-5, rtol=1e-5)


def test_bad_sources_are_clear_errors(tmp_path, chats, smollm2_tokenizer):
    with pytest.raises(InitFromError, match="no checkpoint there"):
        apply_init_weights(build_tiny_model(smollm2_tokenizer), tmp_path)
    _trained(tmp_path, chats, smollm2_tokenizer, build_tiny_model(smollm2_tokenizer), "model.lora.enabled=false")
    other = build_tiny_model(smollm2_tokenizer, hidden_size=32)
    with pytest.raises(InitFromError, match=r"trained from another base model; set model.name to that run's"):
        apply_init_weights(other, tmp_path / "source")
