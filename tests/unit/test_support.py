"""No setting that silently does nothing: every config key takes effect on each backend x rollout server, or
`rllm.support` refuses it there.

The walk (`test_every_key_takes_effect_or_is_refused_on_every_path`) enumerates every leaf key of `TrainConfig`
and every path a run can take: `rllm train` on torch or verl with the local or vLLM server (the openai server
refuses training as a whole), and `rllm eval` with the local, vLLM or openai server. A (key, path) passes when a
declaration of `rllm.support.UNSUPPORTED` refuses the key there, or when the code of that path reads the key.
Reads are found statically (`config_reads`: an AST scan of src/rllm that follows config sections through local
names, instance attributes and call arguments, and confines reads under `if cfg.rollout.server == ...` or
`trainer.backend` branches), then each module is mapped to the paths it runs on (`MODULE_PATHS`, below: the torch
backend's modules run on torch only, verl's on verl only, the vLLM server's on vllm only, evaluation on eval
only). So a key that someone adds and reads only in `backends/torch.py` fails the walk on verl until it is read
there or declared. The scan is static, not a read tracker around a real run, because the verl and vLLM paths need
their own environments (and a model) that a unit test does not have. Not counted as taking effect: validation
(`rllm/config.py`, `rllm/support.py`), refusals (an `if` that raises), and what only records or shows the config
(`rllm/runs.py`, `rllm/viewer/`). Keys moot because of another key's value (`algorithm.lam` without gae) are outside
the walk; `rllm.support`'s `condition` entries declare the few that are refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.config import ConfigError, check_support, load_config
from rllm.support import (
    BEGIN,
    END,
    OTHER_COMMANDS,
    TRAINING_ONLY,
    UNSUPPORTED,
    context_of,
    refusal,
    support_table,
    under,
    write_support_table,
)
from tests.unit.config_reads import LEAVES, Read, config_reads

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "training" / "settings.md"

TRAIN_PATHS = [("train", b, s) for b in ("torch", "verl") for s in ("local", "vllm")]
EVAL_PATHS = [("eval", None, s) for s in ("local", "vllm", "openai")]

# Which paths a module's code runs on: (command, backend, server) patterns, None matching any. First match wins;
# a module matched by none runs on every path of train and eval (workflows, harnesses, the engine, ...).
MODULE_PATHS: list[tuple[str, list[tuple[str | None, str | None, str | None]]]] = [
    ("training/backends/torch", [("train", "torch", None)]),  # torch.py, torch_model.py
    ("training/backends/verl", [("train", "verl", None)]),  # verl.py, verl_worker.py, verl_cpu.py
    ("training/rollout_server.py", [("train", None, "vllm")]),
    ("training/sft", []),  # rllm sft and rllm dpo: other commands, not on these paths
    ("training/dpo", []),
    ("cli/sft.py", []),
    ("rft.py", []),
    ("training/", [("train", None, None)]),
    ("cli/train.py", [("train", None, None)]),
    ("evaluation.py", [("eval", None, None)]),
    ("cli/eval.py", [("eval", None, None)]),
    ("models/vllm_", [(None, None, "vllm")]),
    ("runs.py", []),  # the manifest records the config; it does not act on it
    ("viewer/", []),  # shows a run's config
    ("", [(None, None, None)]),
]

# Reads the scan cannot see, each with where it happens: `getattr(config, self.section)` picks sft or dpo.
UNSEEN_READS = {
    "sft.epochs": "training/sft.py",
    "sft.batch_size": "training/sft.py",
    "dpo.epochs": "training/sft.py",
    "dpo.batch_size": "training/sft.py",
}


@pytest.fixture(scope="module")
def reads() -> set[Read]:
    return config_reads()


def _module_paths(module: str) -> list[tuple[str | None, str | None, str | None]]:
    return next(paths for prefix, paths in MODULE_PATHS if module.startswith(prefix))


def _read_on(reads: set[Read], key: str, path: tuple[str, str | None, str]) -> list[Read]:
    command, backend, server = path
    found = []
    for read in reads:
        if read.key != key:
            continue
        confined = dict(read.confined)  # reads under `if cfg.rollout.server == ...` count for those values only
        if server not in confined.get("server", {server}) or backend not in confined.get("backend", {backend}):
            continue
        for c, b, s in _module_paths(read.module):
            if c in (None, command) and b in (None, backend) and s in (None, server):
                found.append(read)
    return found


def _refused_on(key: str, path: tuple[str, str | None, str]) -> bool:
    """Whether a declaration refuses every non-default value of `key` on `path` (a value entry refuses some)."""
    command, backend, server = path
    for entry in UNSUPPORTED:
        if entry.when is not None or not under(key, (entry.key.removesuffix(".*"),)):
            continue
        if entry.device is not None:
            continue  # refused on one device only: the path itself must read it
        if entry.command is not None and command not in entry.command:
            continue
        if entry.backend is not None and (backend is None or backend not in entry.backend):
            continue
        if entry.server is not None and server not in entry.server:
            continue
        return True
    return False


def _in_scope(key: str, command: str) -> bool:
    if under(key, tuple(OTHER_COMMANDS)):
        return False
    return command == "train" or not under(key, TRAINING_ONLY)


def test_every_key_takes_effect_or_is_refused_on_every_path(reads):
    ignored = []
    for key in LEAVES:
        for path in TRAIN_PATHS + EVAL_PATHS:
            if not _in_scope(key, path[0]) or _refused_on(key, path):
                continue
            if not _read_on(reads, key, path):
                ignored.append(f"{key} on {'/'.join(p for p in path if p)}")
    assert not ignored, (
        "keys that parse and then do nothing: read them on that path or declare them in rllm/support.py's "
        f"UNSUPPORTED ({len(ignored)}): {ignored}"
    )


def test_the_walk_sees_a_key_read_by_one_backend_only(reads):
    """The walk can fail: model.lora.dropout is read by the torch backend's code only, so without its declaration
    the verl paths would report it; rollout.vllm.sync only where the vLLM server runs."""
    assert _read_on(reads, "model.lora.dropout", ("train", "torch", "local"))
    assert not _read_on(reads, "model.lora.dropout", ("train", "verl", "local"))
    assert _refused_on("model.lora.dropout", ("train", "verl", "local"))
    assert _read_on(reads, "rollout.vllm.sync", ("train", "torch", "vllm"))
    assert not _read_on(reads, "rollout.vllm.sync", ("train", "torch", "local"))
    assert not _read_on(reads, "inference.max_batch_size", ("eval", None, "openai"))  # confined by the if
    assert _read_on(reads, "inference.max_batch_size", ("eval", None, "local"))


def test_every_declared_key_is_a_key_of_the_config():
    sections = {key.rsplit(".", 1)[0] for key in LEAVES if "." in key}
    for entry in UNSUPPORTED:
        key = entry.key.removesuffix(".*")
        assert key in LEAVES if not entry.key.endswith(".*") else key in sections, entry.key
    for key in (*TRAINING_ONLY, *OTHER_COMMANDS):
        assert key in LEAVES or any(leaf.startswith(f"{key}.") for leaf in LEAVES), key


def test_every_command_section_key_is_read_by_its_command(reads):
    seen = {read.key for read in reads} | set(UNSEEN_READS)
    unread = [key for key in LEAVES if under(key, tuple(OTHER_COMMANDS)) and key not in seen]
    assert not unread, f"keys of sft/dpo/rft that nothing reads: {unread}"


def test_unseen_reads_are_where_the_table_says():
    for key, module in UNSEEN_READS.items():
        text = (ROOT / "src" / "rllm" / module).read_text()
        assert "getattr(config, self.section)" in text and key.split(".")[1] in text, key


# --------------------------------------------------------------------------------------------- the refusal itself

# A value other than the default for each declared key (the walk's declarations, exercised for real).
SET_VALUES = {
    "rollout.vllm.*": "rollout.vllm.dtype=bfloat16",
    "rollout.openai.*": "rollout.openai.base_url=http://x/v1",
    "inference.*": "inference.max_batch_size=3",
    "verl.*": "verl.strategy=fsdp",
    "distill.*": "distill.coef=2",
    "rollout.server": "rollout.server=openai",
    "rollout.dtype": "rollout.dtype=bfloat16",
    "inference.cuda_graphs": "inference.cuda_graphs=false",
    "inference.packed_linears": "inference.packed_linears=false",
    "model.init_from": "model.init_from=runs/x",
    "model.dtype": "model.dtype=bfloat16",
    "model.device": "model.device=cuda",
    "trainer.nodes": "trainer.nodes=2",
    "trainer.workers_per_node": "trainer.workers_per_node=2",
    "model.lora.dropout": "model.lora.dropout=0.1",
    "model.vision_tower": "model.vision_tower=trainable",
    "rollout.max_staleness": "rollout.max_staleness=1",
    "rollout.partial_rollouts": "rollout.partial_rollouts=true",
    "algorithm.off_policy.mode": "algorithm.off_policy.mode=decoupled",
    "algorithm.off_policy.is_level": "algorithm.off_policy.is_level=token algorithm.off_policy.is_mode=mask",
    "algorithm.off_policy.is_mode": "algorithm.off_policy.is_mode=mask",
    "algorithm.off_policy.is_high": "algorithm.off_policy.is_high=3",
    "algorithm.off_policy.is_low": "algorithm.off_policy.is_low=0.5",
    "algorithm.advantage": "algorithm.advantage=gae",
    "algorithm.roles": "algorithm.roles.judge.clip_high=0.3",
    "algorithm.lam": "algorithm.lam=0.9",
    "algorithm.value_coef": "algorithm.value_coef=1",
    "algorithm.value_clip": "algorithm.value_clip=null",
    "optim.critic_lr": "optim.critic_lr=0.001",
    "rollout.vllm.sync": "rollout.vllm.sync=lora",
    "rollout.vllm.python": "rollout.vllm.python=/opt/vllm/bin/python",
    "rollout.vllm.dtype": "rollout.vllm.dtype=bfloat16",
    "rollout.vllm.max_model_len": "rollout.vllm.max_model_len=512",
    "rollout.vllm.max_lora_rank": "rollout.vllm.max_lora_rank=32",
    "rollout.vllm.startup_timeout": "rollout.vllm.startup_timeout=5",
    "rollout.vllm.extra_args": "rollout.vllm.extra_args=[--enforce-eager]",
    "distill.endpoint.timeout": "distill.endpoint.timeout=5",
    "distill.endpoint.max_retries": "distill.endpoint.max_retries=1",
}


# Overrides that make an entry's condition hold (the defaults already do for the others).
CONDITIONS = {"rollout.vllm.base_url set": ["rollout.vllm.base_url=http://127.0.0.1:8000/v1"]}


def _context_overrides(entry) -> list[str]:
    """Overrides that put a config where `entry` applies (its first backend, server and device, its condition)."""
    out = list(CONDITIONS.get(entry.condition[0], [])) if entry.condition else []
    if entry.backend:
        out.append(f"trainer.backend={entry.backend[0]}")
    if entry.server:
        out.append(f"rollout.server={entry.server[0]}")
    if entry.device == ("cuda",):
        out.append("model.device=cuda")
    return out


@pytest.mark.parametrize("entry", UNSUPPORTED, ids=lambda e: f"{e.key}:{e.where()}")
def test_each_declaration_refuses_its_key_in_one_line_and_only_where_it_applies(entry, monkeypatch):
    import rllm.config as config_module

    monkeypatch.setattr(config_module, "refusal", lambda config, command=None: None)  # build it unrefused
    setting = SET_VALUES[entry.key]
    config = load_config(None, [*_context_overrides(entry), *setting.split()])
    command = entry.command[0] if entry.command else None
    message = refusal(config, command)
    key = setting.split("=")[0]
    assert message is not None and message.startswith(key), (setting, message)
    assert "\n" not in message and " is set but " in message and "; " in message
    assert refusal(load_config(None, _context_overrides(entry)), command) is None  # the default: accepted


def test_a_key_set_to_its_default_is_not_refused():
    assert load_config(None, ["rollout.vllm.dtype=float32", "verl.strategy=fsdp2", "inference.cuda_graphs=true"])


def test_the_refusal_names_the_key_the_server_and_what_to_use():
    with pytest.raises(ConfigError) as raised:
        load_config(None, ["rollout.vllm.gpu_memory_utilization=0.5"])
    assert "unknown key" in str(raised.value)  # a typo is not a refusal: it is unknown
    with pytest.raises(ConfigError, match=r"rollout.vllm.dtype is set but rollout.server=local does not use it "):
        load_config(None, ["rollout.vllm.dtype=bfloat16"])
    with pytest.raises(ConfigError, match=r"use rollout.server=vllm$"):
        load_config(None, ["rollout.vllm.max_model_len=512"])
    assert load_config(None, ["rollout.server=vllm", "rollout.vllm.max_model_len=512"]).rollout.vllm.max_model_len


def test_cuda_graphs_are_refused_on_cpu_only():
    with pytest.raises(ConfigError, match="inference.cuda_graphs is set but .* on cpu does not use it"):
        load_config(None, ["inference.cuda_graphs=false"])
    assert load_config(None, ["inference.cuda_graphs=false", "model.device=cuda"]).inference.cuda_graphs is False
    with pytest.raises(ConfigError, match="inference.packed_linears is set but .* on cuda does not use it"):
        load_config(None, ["inference.packed_linears=false", "model.device=cuda"])


def test_command_refusals_come_at_the_start_of_train_and_eval():
    config = load_config(None, ["rollout.server=vllm", "model.init_from=runs/x"])  # trains: served from it
    check_support(config, "train")
    with pytest.raises(ConfigError, match="model.init_from is set but rllm eval with rollout.server=vllm"):
        check_support(config, "eval")
    endpoint = load_config(None, ["rollout.server=openai", "rollout.openai.base_url=http://x/v1"])
    check_support(endpoint, "eval")
    with pytest.raises(ConfigError, match="rollout.server=openai is set but rllm train does not support it"):
        check_support(endpoint, "train")
    assert context_of(load_config(None, ["trainer.backend=verl"]), "train")["device"] == "cpu"


def test_rllm_eval_refuses_before_any_task_model_or_run_directory(tmp_path):
    from rllm.evaluation import evaluate

    config = load_config(None, ["rollout.server=vllm", "model.init_from=runs/x", f"trainer.run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="model.init_from is set but rllm eval with rollout.server=vllm"):
        evaluate(config)
    assert list(tmp_path.iterdir()) == []


def test_every_shipped_config_passes_train_and_eval_checks():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        config = load_config(path)
        check_support(config, "train")
        check_support(config, "eval")


# ------------------------------------------------------------------------------------------------- the docs page


def test_the_docs_support_table_is_generated_from_the_declarations():
    text = PAGE.read_text()
    inside = text.partition(BEGIN)[2].partition(END)[0].strip()
    assert inside == support_table().strip(), (
        f"{PAGE.relative_to(ROOT)} is out of date: run `python -m rllm.support` from the repository root"
    )


def test_the_generator_rewrites_only_between_its_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# Head\n\n{BEGIN}\nOLD-TABLE\n{END}\n\nTail\n")
    assert write_support_table(page) is True
    text = page.read_text()
    assert text == f"# Head\n\n{BEGIN}\n{support_table()}\n{END}\n\nTail\n"
    assert write_support_table(page) is False  # up to date: unchanged
    page.write_text("# no markers\n")
    with pytest.raises(ValueError, match="has no .* markers"):
        write_support_table(page)
