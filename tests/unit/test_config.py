"""`rllm.config`: defaults, YAML + dotted overrides, error messages, round trip, help, and every shipped config."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from rllm.config import ConfigError, TrainConfig, config_help, dump_config, load_config
from rllm.errors import RllmError
from rllm.models.base import SamplingParams

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def _fields(model: type[BaseModel], prefix: str = ""):
    """(dotted key, FieldInfo) for every field of the tree, sections included."""
    for name, field in model.model_fields.items():
        yield prefix + name, field
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _fields(field.annotation, f"{prefix}{name}.")


def test_defaults_load():
    cfg = load_config(None)
    assert cfg == TrainConfig()
    assert cfg.model.name == "qwen2.5-coder-0.5b-instruct"
    assert cfg.model.lora.enabled and "down_proj" in cfg.model.lora.target_modules
    assert cfg.algorithm.advantage == "grpo" and cfg.algorithm.mask_infra_errors is True
    assert cfg.rollout.n >= 2 and cfg.trainer.tasks_per_step >= 1


def test_default_model_matches_the_registry():
    from rllm.models.registry import DEFAULT_MODEL

    assert TrainConfig().model.name == DEFAULT_MODEL


def test_yaml_then_overrides_with_types(tmp_path):
    path = _write(
        tmp_path,
        "trainer:\n  total_steps: 5\n  resume: some/run\noptim:\n  lr: 1e-4\nrollout:\n  temperature: 1.0\n",
    )
    overrides = [
        "trainer.total_steps=20",
        "rollout.temperature=0.7",
        "model.lora.enabled=false",
        "algorithm.advantage=rloo",
        "model.lora.target_modules=[q_proj,v_proj]",
        "trainer.resume=null",
        "algorithm.dual_clip=3",
        "data.task_args.sizes=[2, 3]",
        "agent_args={max_history: 4}",
    ]
    cfg = load_config(str(path), overrides)
    assert cfg.trainer.total_steps == 20 and type(cfg.trainer.total_steps) is int
    assert cfg.rollout.temperature == 0.7
    assert cfg.model.lora.enabled is False
    assert cfg.algorithm.advantage == "rloo"
    assert cfg.model.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.trainer.resume is None
    assert cfg.algorithm.dual_clip == 3.0
    assert cfg.optim.lr == 1e-4 and type(cfg.optim.lr) is float  # YAML 1.1 would have made "1e-4" a string
    assert cfg.data.task_args == {"sizes": [2, 3]}
    assert cfg.agent_args == {"max_history": 4}


def test_scientific_notation_in_free_form_dicts_is_a_float():
    cfg = load_config(None, ["env_args.hole_prob=2e-1"])
    assert cfg.env_args["hole_prob"] == pytest.approx(0.2)


def test_unknown_key_in_yaml_names_the_dotted_key_and_suggests(tmp_path):
    path = _write(tmp_path, "trainer:\n  total_stpes: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "trainer.total_stpes" in message and "trainer.total_steps" in message
    assert isinstance(info.value, RllmError)


def test_unknown_key_in_override_names_the_dotted_key_and_suggests():
    with pytest.raises(ConfigError, match=r"model\.lora\.rnak.*did you mean 'model\.lora\.rank'"):
        load_config(None, ["model.lora.rnak=8"])


def test_unknown_section_in_override_fails_clearly():
    with pytest.raises(ConfigError, match=r"unknown key 'optimizer'.*did you mean 'optim'"):
        load_config(None, ["optimizer.lr=1e-4"])
    with pytest.raises(ConfigError, match=r"'trainer\.total_steps' is a setting"):
        load_config(None, ["trainer.total_steps.x=1"])


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ("trainer.total_steps=abc", "trainer.total_steps", "int"),
        ("trainer.total_steps=1.5", "trainer.total_steps", "int"),
        ("trainer.total_steps=true", "trainer.total_steps", "not a bool"),
        ("model.lora.enabled=maybe", "model.lora.enabled", "bool"),
        ("algorithm.advantage=rlo", "algorithm.advantage", "did you mean 'rloo'"),
        ("algorithm.clip_low=1.0", "algorithm.clip_low", "< 1"),
        ("optim.betas=[0.9, 1.5]", "optim.betas", "[0, 1)"),
        ("data.task=frozenlak", "data.task", "frozenlake"),
        ("model.lora=false", "model.lora", "section"),
    ],
)
def test_wrong_value_names_key_value_and_expectation(override, key, expected):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    message = str(info.value)
    assert key in message and override.partition("=")[2].split(",")[0].strip("[") in message
    assert expected in message


def test_wrong_type_in_yaml_names_the_key(tmp_path):
    path = _write(tmp_path, "rollout:\n  n: lots\n")
    with pytest.raises(ConfigError, match=r"rollout\.n = 'lots'"):
        load_config(path)


@pytest.mark.parametrize("override", ["trainer.total_steps=", "trainer.total_steps= ", "trainer.total_steps", "=3"])
def test_malformed_override_fails(override):
    with pytest.raises(ConfigError, match="override"):
        load_config(None, [override])


def test_group_estimators_need_a_group():
    with pytest.raises(ConfigError, match=r"rollout\.n >= 2.*baseline"):
        load_config(None, ["rollout.n=1", "algorithm.advantage=rloo"])
    with pytest.raises(ConfigError, match=r"drop_uniform_groups"):
        load_config(None, ["rollout.n=1", "algorithm.advantage=reinforce_pp", "algorithm.drop_uniform_groups=true"])
    assert load_config(None, ["rollout.n=1", "algorithm.advantage=reinforce_pp"]).rollout.n == 1
    assert load_config(None, ["algorithm.advantage=gae"]).algorithm.advantage == "gae"


def test_bad_files_fail_clearly(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "trainer: [\n"))
    assert load_config(_write(tmp_path, "# only a comment\n")) == TrainConfig()


def test_dump_then_load_round_trips(tmp_path):
    cfg = load_config(None, ["optim.lr=3e-5", "algorithm.dual_clip=3.0", "data.task_args={sizes: [4]}"])
    path = _write(tmp_path, dump_config(cfg))
    assert load_config(path) == cfg


def test_to_sampling():
    rollout = load_config(None, ["rollout.temperature=0.7", "rollout.max_tokens=16", "rollout.top_k=5"]).rollout
    train, val = rollout.to_sampling(), rollout.to_sampling(validation=True)
    assert isinstance(train, SamplingParams)
    assert (train.temperature, train.max_tokens, train.top_k) == (0.7, 16, 5)
    assert val.greedy and val.max_tokens == 16
    kwargs = rollout.engine_kwargs()
    assert kwargs["n_parallel"] == rollout.n_parallel and kwargs["episode_timeout"] == rollout.episode_timeout
    assert "max_steps" not in kwargs  # the agent/env workflow's argument, not the engine's


def test_every_field_has_a_description_and_is_in_help():
    help_text = config_help()
    keys = list(_fields(TrainConfig))
    assert len(keys) > 50
    for dotted, field in keys:
        assert field.description and field.description.strip(), f"{dotted} has no description"
        assert dotted in help_text, dotted
        assert field.description in help_text, dotted


def test_import_is_light():
    code = "import sys, rllm.config; print([m for m in ('torch', 'transformers') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_configs_are_shipped():
    assert CONFIGS, "configs/ holds no YAML file"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_names_its_command(path):
    first_line = path.read_text().splitlines()[0]
    assert re.match(rf"# rllm (train|sft|dpo|rft) configs/{re.escape(path.name)}", first_line), first_line
    load_config(path)


def test_empty_section_in_yaml_means_defaults(tmp_path):
    path = _write(tmp_path, "trainer:\n  # total_steps: 5\nmodel:\n  lora:\n")
    assert load_config(path) == TrainConfig()
    assert load_config(path, ["trainer.total_steps=3"]).trainer.total_steps == 3


def test_agent_trainer_arguments_are_checked_like_config_keys():
    from rllm.training.trainer import AgentTrainer

    small = load_config(None, ["data.train_size=2", "data.val_size=0"])
    wrong_backend = r"(?s)AgentTrainer\(backend=.*trainer.backend = 'jax': input should be 'torch' or 'verl'"
    with pytest.raises(ConfigError, match=wrong_backend):
        AgentTrainer(backend="jax", config=small)
    with pytest.raises(ConfigError, match="rollout.server=openai is set but rllm train does not support it"):
        AgentTrainer(rollout="openai", config=small)
    trainer = AgentTrainer(rollout="vllm", config=small)  # nothing starts before train()
    assert (trainer.config.rollout.server, trainer.config.trainer.backend) == ("vllm", "torch")
    assert small.rollout.server == "local"  # the caller's config is not changed


def test_backend_keys_are_checked_against_each_other():
    with pytest.raises(ConfigError, match="trainer.workers_per_node is set but trainer.backend=torch does not use it"):
        load_config(None, ["trainer.workers_per_node=2"])
    with pytest.raises(ConfigError, match="algorithm.advantage=gae is set but trainer.backend=verl does not"):
        load_config(None, ["trainer.backend=verl", "algorithm.advantage=gae"])
    with pytest.raises(ConfigError, match="rollout.vllm.sync=lora is set but .*hands rollouts merged weights"):
        load_config(None, ["trainer.backend=verl", "rollout.server=vllm", "rollout.vllm.sync=lora"])
    with pytest.raises(ConfigError, match="rollout.dtype is set but rollout.server=vllm does not use it"):
        load_config(None, ["rollout.server=vllm", "rollout.dtype=bfloat16"])
    with pytest.raises(ConfigError, match="rollout.dtype is set but trainer.backend=verl does not use it"):
        load_config(None, ["trainer.backend=verl", "rollout.dtype=float32"])
    config = load_config(
        None,
        [
            "trainer.backend=verl",
            "trainer.nodes=2",
            "trainer.workers_per_node=4",
            "verl.micro_batch_size=1",
            "verl.overrides=[a.b=1]",
        ],
    )
    assert (config.trainer.nodes, config.trainer.workers_per_node, config.verl.micro_batch_size) == (2, 4, 1)
    assert config.verl.overrides == ["a.b=1"] and config.verl.strategy == "fsdp2"


def test_verl_backend_without_verl_names_the_install_command(tmp_path):
    """In the main environment verl is not installed: the backend refuses with the command that installs it."""
    pytest.importorskip("torch")
    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here")
    from rllm.training.backends import make_backend

    config = load_config(None, ["trainer.backend=verl"])
    with pytest.raises(ConfigError, match=r"trainer.backend=verl needs verl and ray .*make verl"):
        make_backend(config, tmp_path)
