"""Direct preference optimisation (`losses.dpo_loss`, `TorchBackend.update_pairs`, `rllm.training.dpo`): the losses'
formulas, loss and gradient equal to TRL's `DPOTrainer` on the same pairs, learning, and resume."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from rllm.config import AlgorithmConfig, ConfigError, LoraConfig, ModelConfig, OptimConfig, load_config
from rllm.runs import load_metrics
from rllm.training.backends.torch import TorchBackend
from rllm.training.dpo import DPOTrainer
from rllm.training.dpo_data import pairs_from_preferences
from rllm.training.losses import dpo_loss
from tests.support.models import sharp_tiny_model


def _preferences(n: int) -> list[dict]:
    return [
        {
            "prompt": [{"role": "user", "content": f"What is {i}+{3 * i}?"}],
            "chosen": [{"role": "assistant", "content": f"It is {4 * i}."}],
            "rejected": [{"role": "assistant", "content": f"Maybe {4 * i + 1}, or more" + " or less" * (i % 3)}],
        }
        for i in range(n)
    ]


# ---- the losses --------------------------------------------------------------------------------------------------


def test_dpo_losses_follow_their_formulas():
    chosen, rejected = torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -4.0])
    ref_chosen, ref_rejected = torch.tensor([-3.5, -4.0]), torch.tensor([-3.0, -4.5])
    beta = 0.5
    c, r = chosen - ref_chosen, rejected - ref_rejected  # [0.5, -1.0], [-1.0, 0.5]
    loss, metrics = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=beta)
    expected = [-math.log(1 / (1 + math.exp(-beta * (a - b)))) for a, b in zip(c.tolist(), r.tolist(), strict=True)]
    assert loss.item() == pytest.approx(sum(expected) / 2)
    assert metrics["rewards/accuracies"].item() == 0.5 and metrics["rewards/margins"].item() == pytest.approx(0.0)
    hinge, _ = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=beta, kind="hinge")
    assert hinge.item() == pytest.approx((max(0, 1 - beta * 1.5) + max(0, 1 - beta * -1.5)) / 2)
    tokens_c, tokens_r = torch.tensor([2, 4]), torch.tensor([5, 1])
    ipo, _ = dpo_loss(
        chosen,
        rejected,
        ref_chosen,
        ref_rejected,
        beta=beta,
        kind="ipo",
        chosen_tokens=tokens_c,
        rejected_tokens=tokens_r,
    )
    deltas = [0.5 / 2 - -1.0 / 5, -1.0 / 4 - 0.5 / 1]
    assert ipo.item() == pytest.approx(sum((d - 1 / (2 * beta)) ** 2 for d in deltas) / 2)
    with pytest.raises(ValueError, match="unknown DPO loss 'kto'"):
        dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=beta, kind="kto")


# ---- parity with TRL -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template_tokenizer(smollm2_tokenizer):
    """SmolLM2's tokenizer with a chat template that prints nothing after the end-of-turn token, so that TRL's
    prompt-completion tokenization and ours cover exactly the same tokens (ours stops at the end-of-turn token)."""
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = tokenizer.chat_template.replace("'<|im_end|>' + '\n'", "'<|im_end|>'")
    assert tokenizer.chat_template != smollm2_tokenizer.chat_template
    return tokenizer


@pytest.mark.parametrize("kind", ["sigmoid", "ipo", "hinge"])
def test_dpo_loss_and_gradient_match_trls_dpo_trainer(template_tokenizer, tmp_path, kind):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    tok, records = template_tokenizer, _preferences(5)
    policy, reference = sharp_tiny_model(tok, seed=1), sharp_tiny_model(tok, seed=2)
    pairs, _ = pairs_from_preferences(records, tok, max_length=512)
    full = ModelConfig(lora=LoraConfig(enabled=False))
    scorer = TorchBackend(
        full, AlgorithmConfig(), OptimConfig(), total_steps=1, model=copy.deepcopy(reference), tokenizer=tok
    )
    rows = [row for pair in pairs for row in (pair.chosen, pair.rejected)]
    sums = [
        sum(lp for lp, m in zip(lps, row.loss_mask, strict=True) if m)
        for lps, row in zip(scorer.compute_logprobs(rows, temperature=1.0), rows, strict=True)
    ]
    for index, pair in enumerate(pairs):
        pair.ref_chosen, pair.ref_rejected = sums[2 * index], sums[2 * index + 1]
    # ours: micro-batches of 2 pairs (3 forward/backward passes)
    backend = TorchBackend(
        full,
        AlgorithmConfig(),
        OptimConfig(micro_batch_size=4, grad_clip=None, lr=1e-7),
        total_steps=1,
        model=copy.deepcopy(policy),
        tokenizer=tok,
    )
    ours = backend.update_pairs(pairs, loss=kind, beta=0.1)
    # TRL: its own tokenization of the same records, one batch, the reference model run live
    args = trl.DPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=5,
        beta=0.1,
        loss_type=[kind],
        report_to=[],
        use_cpu=True,
        bf16=False,
        max_length=None,
    )
    trainer = trl.DPOTrainer(
        model=copy.deepcopy(policy),
        ref_model=copy.deepcopy(reference),
        args=args,
        train_dataset=datasets.Dataset.from_list(records),
        processing_class=tok,
    )
    for example, pair in zip(trainer.train_dataset, pairs, strict=True):  # the same tokens
        assert example["prompt_ids"] + example["chosen_ids"] == pair.chosen.input_ids
        assert example["prompt_ids"] + example["rejected_ids"] == pair.rejected.input_ids
    batch = trainer.data_collator(list(trainer.train_dataset))
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), float("inf"))
    assert abs(loss.item()) > 1e-3  # policy and reference differ: the loss is not the trivial log 2 / 1 / 1/(4 b^2)
    assert ours["loss"] == pytest.approx(loss.item(), abs=1e-4, rel=1e-5)
    assert ours["grad_norm"] == pytest.approx(grad_norm.item(), rel=1e-4)


# ---- the trainer -----------------------------------------------------------------------------------------------------


def _config(tmp_path, data, *more):
    return load_config(
        None,
        [
            f"dpo.preferences={data}",
            "dpo.batch_size=4",
            "data.task=arithmetic",
            "data.val_size=0",
            "trainer.tensorboard=false",
            f"trainer.run_dir={tmp_path / 'runs'}",
            "optim.lr=5e-3",
            "optim.micro_batch_size=4",
            *more,
        ],
    )


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "prefs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _preferences(8)))
    return path


def test_dpo_widens_the_margin_with_either_reference(data, smollm2_tokenizer, tmp_path):
    model = sharp_tiny_model(smollm2_tokenizer, seed=4)
    metrics = {}
    for reference in ("precomputed", "live"):
        trainer = DPOTrainer(
            config=_config(tmp_path, data, "dpo.epochs=4", f"dpo.reference={reference}", f"trainer.name={reference}"),
            model=copy.deepcopy(model),
            tokenizer=smollm2_tokenizer,
            progress=False,
        )
        assert trainer.train()["steps"] == 8
        metrics[reference] = load_metrics(tmp_path / "runs" / reference)
    steps = metrics["precomputed"]
    assert steps[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy = reference at the start
    assert steps[-1]["rewards/margins"] > 0.5 and steps[-1]["rewards/accuracies"] == 1.0
    assert steps[-1]["loss"] < 0.5 * math.log(2)
    # the adapters-off reference is the starting model: the same run either way
    assert [m["loss"] for m in steps] == pytest.approx([m["loss"] for m in metrics["live"]], abs=1e-5)
    assert json.loads((tmp_path / "runs" / "live" / "manifest.json").read_text())["kind"] == "dpo"


def test_a_stopped_dpo_run_resumes_to_the_same_weights(data, smollm2_tokenizer, tmp_path):
    model = sharp_tiny_model(smollm2_tokenizer, seed=4)

    def run(*more):
        trainer = DPOTrainer(
            config=_config(tmp_path, data, "dpo.epochs=2", "model.lora.enabled=false", *more),
            model=copy.deepcopy(model),
            tokenizer=smollm2_tokenizer,
            progress=False,
        )
        trainer.train()
        return trainer

    whole = run("trainer.name=whole")
    run("trainer.name=parts", "trainer.stop_after=2")
    parts = run(f"trainer.resume={tmp_path / 'runs' / 'parts'}")
    for (name, a), (_, b) in zip(
        whole.backend.model.named_parameters(), parts.backend.model.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name  # the resumed run's reference came from the starting weights, not step 2's


def test_dpo_config_errors_name_the_fix(data, smollm2_tokenizer):
    with pytest.raises(ConfigError, match="exactly one data source: dpo.episodes .* or dpo.preferences"):
        DPOTrainer(config=load_config(None, []), tokenizer=smollm2_tokenizer)
    with pytest.raises(ConfigError, match="dpo.reference=live computes the reference with the LoRA adapters disabled"):
        DPOTrainer(
            config=load_config(None, [f"dpo.preferences={data}", "dpo.reference=live", "model.lora.enabled=false"]),
            tokenizer=smollm2_tokenizer,
        )
