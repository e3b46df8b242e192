"""Supervised fine-tuning (`rllm.training.sft`, `TorchBackend.update(objective="sft")`): the loss and gradient of
TRL's `SFTTrainer` on the same tokens, TRL's own tokenization of the same conversations, and the SFT loop's
learning, checkpoints and resume on a tiny random-init model."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from rllm.config import AlgorithmConfig, ConfigError, LoraConfig, ModelConfig, OptimConfig, load_config
from rllm.models.registry import build_tiny_model
from rllm.runs import load_metrics
from rllm.training.backends.torch import TorchBackend
from rllm.training.sft import SFTTrainer
from rllm.training.sft_data import TrainingDataError, export_trl, rows_from_messages
from tests.support.episodes import sampled_episode


def _sft_backend(model, tokenizer, *, lora: bool, lr: float) -> TorchBackend:
    """A TorchBackend of one step on a copy of `model`, micro-batches of 2, no gradient clipping."""
    return TorchBackend(
        ModelConfig(lora=LoraConfig(enabled=lora)),
        AlgorithmConfig(),
        OptimConfig(micro_batch_size=2, grad_clip=None, lr=lr),
        total_steps=1,
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
    )


def _records(n: int) -> list[dict]:
    """Prompt/completion conversations of different lengths (so micro-batches pad differently)."""
    system = {"role": "system", "content": "Be brief."}
    return [
        {
            "prompt": [system, {"role": "user", "content": f"What is {i}+{7 * i}?"}],
            "completion": [{"role": "assistant", "content": f"The answer is {8 * i}." + " ok" * i}],
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def tiny(smollm2_tokenizer):
    return build_tiny_model(smollm2_tokenizer, seed=3)


def _trl_trainer(model, tokenizer, dataset, tmp_path, batch_size):
    trl = pytest.importorskip("trl")
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=batch_size,
        report_to=[],
        use_cpu=True,
        bf16=False,
        max_length=None,
        completion_only_loss=True,
    )
    return trl.SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)


def test_conversations_tokenize_as_trls_sft_trainer_does(tiny, smollm2_tokenizer, tmp_path):
    datasets = pytest.importorskip("datasets")
    tok, records = smollm2_tokenizer, _records(4)
    trainer = _trl_trainer(copy.deepcopy(tiny), tok, datasets.Dataset.from_list(records), tmp_path, 4)
    rows, _ = rows_from_messages(records, tok, max_length=512)
    for example, row in zip(trainer.train_dataset, rows, strict=True):
        ids, labels = example["input_ids"], example["labels"]
        n = len(row.input_ids)
        assert ids[:n] == row.input_ids
        assert [label != -100 for label in labels[:n]] == [bool(m) for m in row.loss_mask]
        # TRL's prompt-completion rows also train what the template prints after the end-of-turn token; ours stop
        assert tok.decode(ids[n:]).strip() == ""


def test_sft_loss_and_gradient_match_trls_sft_trainer(tiny, smollm2_tokenizer, tmp_path):
    datasets = pytest.importorskip("datasets")
    rows, _ = rows_from_messages(_records(5), smollm2_tokenizer, max_length=512)
    # ours: micro-batches of 2 (3 forward/backward passes, exact accumulation), full fine-tuning
    backend = _sft_backend(tiny, smollm2_tokenizer, lora=False, lr=1e-6)
    ours = backend.update(rows, temperature=1.0, objective="sft")
    # TRL: the exported rows (its pre-tokenized format), one batch of all five
    export_trl(rows, tmp_path / "rows.jsonl")
    dataset = datasets.Dataset.from_json(str(tmp_path / "rows.jsonl"))
    trainer = _trl_trainer(copy.deepcopy(tiny), smollm2_tokenizer, dataset, tmp_path, 5)
    batch = trainer.data_collator(list(trainer.train_dataset))  # its prepared rows (labels from completion_mask)
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), float("inf"))
    assert ours["loss"] == pytest.approx(loss.item(), abs=1e-4)
    assert ours["grad_norm"] == pytest.approx(grad_norm.item(), rel=1e-4)
    assert ours["loss_tokens"] == int((batch["labels"][:, 1:] != -100).sum())


def _config(tmp_path, data_path, *more):
    return load_config(
        None,
        [
            f"sft.messages={data_path}",
            "sft.batch_size=4",
            "data.task=arithmetic",
            "data.val_size=0",
            "trainer.tensorboard=false",
            f"trainer.run_dir={tmp_path / 'runs'}",
            "model.lora.enabled=false",
            "optim.lr=1e-2",
            "optim.micro_batch_size=2",
            *more,
        ],
    )


def _write(tmp_path, records):
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_sft_learns_the_data_and_records_its_run(tiny, smollm2_tokenizer, tmp_path):
    data = _write(tmp_path, _records(8))
    trainer = SFTTrainer(
        config=_config(tmp_path, data, "sft.epochs=6", "trainer.name=learn"),
        model=copy.deepcopy(tiny),
        tokenizer=smollm2_tokenizer,
        progress=False,
    )
    result = trainer.train()
    assert result["steps"] == 12  # ceil(6 epochs * 8 rows / 4)
    run_dir = tmp_path / "runs" / "learn"
    losses = [m["loss"] for m in load_metrics(run_dir) if "loss" in m]
    assert len(losses) == 12 and losses[-1] < 0.5 * losses[0]
    assert json.loads((run_dir / "manifest.json").read_text())["kind"] == "sft"
    assert json.loads((run_dir / "sft_data.json").read_text())["rows"] == 8
    assert load_config(run_dir / "config.yaml").trainer.total_steps == 12
    assert (run_dir / "checkpoints" / "latest").exists()


def test_a_stopped_sft_run_resumes_to_the_same_weights(tiny, smollm2_tokenizer, tmp_path):
    data = _write(tmp_path, _records(6))

    def run(*more):
        config = _config(tmp_path, data, "sft.epochs=2", *more)
        trainer = SFTTrainer(config=config, model=copy.deepcopy(tiny), tokenizer=smollm2_tokenizer, progress=False)
        trainer.train()
        return trainer

    whole = run("trainer.name=whole")
    run("trainer.name=parts", "trainer.stop_after=1")
    parts = run(f"trainer.resume={tmp_path / 'runs' / 'parts'}", "trainer.stop_after=5")
    assert parts.step == whole.step == 3
    for (name, a), (_, b) in zip(
        whole.backend.model.named_parameters(), parts.backend.model.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name
    strip = [
        {k: v for k, v in m.items() if "time" not in k and "per_s" not in k}
        for m in load_metrics(tmp_path / "runs" / "whole")
    ]
    assert strip == [
        {k: v for k, v in m.items() if "time" not in k and "per_s" not in k}
        for m in load_metrics(tmp_path / "runs" / "parts")
    ]


def test_sft_config_errors_name_the_fix(tmp_path, smollm2_tokenizer):
    with pytest.raises(ConfigError, match="exactly one data source: sft.episodes .* or sft.messages"):
        SFTTrainer(config=load_config(None, []), tokenizer=smollm2_tokenizer)
    with pytest.raises(ConfigError, match="torch backend only"):
        SFTTrainer(config=load_config(None, ["trainer.backend=verl"]), tokenizer=smollm2_tokenizer)


def test_every_sft_key_reaches_the_rows(tmp_path, smollm2_tokenizer):
    """The config's filters and limits, through `load_sft_rows` (what `rllm sft` calls), on a run directory."""
    from rllm.runs import RunLog
    from rllm.training.sft import load_sft_rows

    (tmp_path / "run").mkdir()
    log = RunLog(tmp_path / "run")
    log.log_episodes(
        1,
        [
            sampled_episode("a", 0, 1.0, name="solver"),
            sampled_episode("a", 1, 0.0, name="solver"),
            sampled_episode("a", 2, 0.5, name="solver", turns=3),
            sampled_episode("b", 0, 1.0, name="judge"),
        ],
        "train",
    )
    log.log_episodes(1, [sampled_episode("c", 0, 1.0, name="solver")], "val")
    log.close()

    def load(*keys):
        config = load_config(None, [f"sft.episodes={tmp_path / 'run'}", *keys])
        return load_sft_rows(config, smollm2_tokenizer)

    rows, stats = load(
        "sft.split=train", "sft.roles=[solver]", "sft.min_reward=0.5", "sft.task_pass_rate=mixed", "sft.max_per_task=1"
    )
    assert [r.episode_id for r in rows] == ["a:0"] and stats["after_roles"] == 3 and stats["after_max_per_task"] == 1
    rows, stats = load("sft.correct_only=false", "sft.split=train", "sft.max_length=8", "sft.overlong=drop")
    assert sorted(r.episode_id for r in rows) == ["a:0", "a:1", "b:0"] and stats["rows_dropped_overlong"] == 1
    with pytest.raises(TrainingDataError, match="longer than sft.max_length=8"):
        load("sft.max_length=8")
    rows, _ = load("sft.max_length=8", "sft.overlong=truncate", "sft.split=train", "sft.roles=[solver]")
    assert [len(r) for r in rows] == [5, 8]


@pytest.mark.parametrize("lora", [False, True])
def test_packed_rows_train_exactly_as_padded_micro_batches(tiny, smollm2_tokenizer, lora):
    from rllm.training.batch import pack_rows

    rows, _ = rows_from_messages(_records(7), smollm2_tokenizer, max_length=512)
    assert [len(p) for p in pack_rows(rows, 90)] != [1] * 7  # several rows share a pack

    def update(**kwargs):
        backend = _sft_backend(tiny, smollm2_tokenizer, lora=lora, lr=1e-3)
        metrics = backend.update(rows, temperature=1.0, objective="sft", **kwargs)
        return metrics, [p.detach().clone() for p in backend.model.parameters() if p.requires_grad]

    padded, padded_weights = update()
    packed, packed_weights = update(pack_length=90)
    assert packed["loss"] == pytest.approx(padded["loss"], abs=1e-6)
    assert packed["grad_norm"] == pytest.approx(padded["grad_norm"], rel=1e-5)
    assert packed["train_tokens"] == sum(len(r) for r in rows) < padded["train_tokens"] + 1
    for a, b in zip(packed_weights, padded_weights, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)  # AdamW divides tiny gradients by their size
