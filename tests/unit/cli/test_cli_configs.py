"""`rllm configs` and shipped configs by name (rllm.cli.configs): no model is loaded. The wheel itself is tested by
scripts/wheel_test.sh (`make wheel-test`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import rllm
from rllm.cli import configs as configs_cmd
from rllm.cli import eval as eval_cmd
from rllm.cli import sft as sft_cmd
from rllm.cli import train as train_cmd
from rllm.cli.main import main
from rllm.errors import RllmError

CHECKOUT_CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_a_checkout_ships_every_yaml_in_configs():
    assert configs_cmd.shipped_configs_dir() == CHECKOUT_CONFIGS
    assert list(configs_cmd.shipped_configs()) == sorted(p.stem for p in CHECKOUT_CONFIGS.glob("*.yaml"))


def test_an_installed_wheel_reads_the_configs_inside_the_package(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "rllm"
    (package / "configs").mkdir(parents=True)
    (package / "configs" / "mine.yaml").write_text("# rllm train configs/mine.yaml\n# Mine.\n")
    monkeypatch.setattr(rllm, "__file__", str(package / "__init__.py"))
    assert configs_cmd.shipped_configs() == {"mine": package / "configs" / "mine.yaml"}


def test_rllm_configs_lists_each_with_its_command_and_one_line(capsys):
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = list(configs_cmd.shipped_configs())
    assert [line.split()[0] for line in lines[: len(names)]] == names
    by_name = {line.split()[0]: line for line in lines}
    assert "rllm train  The main job (`make demo`)" in by_name["arithmetic_grpo"]
    assert "rllm sft    Supervised warm start" in by_name["arithmetic_sft"]
    assert all(len(line) <= 120 for line in lines)
    assert "rllm configs cp NAME my.yaml" in lines[-1]


@pytest.mark.parametrize("name", list(configs_cmd.shipped_configs()))
def test_every_shipped_config_has_a_description(name):
    command, description = configs_cmd.describe(configs_cmd.shipped_configs()[name])
    assert command in ("rllm train", "rllm sft", "rllm dpo", "rllm rft")
    assert len(description) > 20 and not description.startswith(("rllm ", "first"))


def test_configs_cp_copies_the_file_and_never_overwrites(tmp_path, capsys):
    dest = tmp_path / "my.yaml"
    assert main(["configs", "cp", "arithmetic_grpo", str(dest)]) == 0
    assert dest.read_bytes() == (CHECKOUT_CONFIGS / "arithmetic_grpo.yaml").read_bytes()
    assert f"rllm train {dest}" in capsys.readouterr().out
    assert main(["configs", "cp", "arithmetic_grpo", str(dest)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["configs", "cp", "math_grpo", str(tmp_path)]) == 0  # a folder: the config's own file name
    assert (tmp_path / "math_grpo.yaml").is_file()


def test_configs_cp_of_an_unknown_name_lists_the_names(tmp_path, capsys):
    assert main(["configs", "cp", "nope", str(tmp_path / "x.yaml")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "'nope'" in line and "arithmetic_grpo" in line and "web_grpo" in line


def test_a_name_a_path_and_a_readme_path_outside_a_checkout_resolve(tmp_path, monkeypatch):
    shipped = str(CHECKOUT_CONFIGS / "arithmetic_grpo.yaml")
    assert configs_cmd.resolve_config("arithmetic_grpo") == shipped
    own = tmp_path / "arithmetic_grpo.yaml"
    own.write_text("trainer: {total_steps: 1}\n")
    assert configs_cmd.resolve_config(str(own)) == str(own)  # a path is a path
    monkeypatch.chdir(tmp_path)  # a folder without configs/, as after `pip install rllm`
    assert configs_cmd.resolve_config("arithmetic_grpo.yaml") == "arithmetic_grpo.yaml"  # a file here wins
    assert configs_cmd.resolve_config("configs/math_grpo.yaml") == str(CHECKOUT_CONFIGS / "math_grpo.yaml")
    assert configs_cmd.resolve_config("other/missing.yaml") == "other/missing.yaml"  # reading it says it is missing


def _record_config(monkeypatch, module) -> list[str]:
    seen: list[str] = []

    def record(args: argparse.Namespace) -> int:
        seen.append(args.config)
        return 0

    for attr in ("run", "run_rft"):
        if hasattr(module, attr):
            monkeypatch.setattr(module, attr, record)
    return seen


@pytest.mark.parametrize(
    ("command", "module"),
    [("train", train_cmd), ("sft", sft_cmd), ("dpo", sft_cmd), ("rft", sft_cmd), ("eval", eval_cmd)],
)
def test_every_config_command_takes_a_shipped_name(monkeypatch, command, module):
    seen = _record_config(monkeypatch, module)
    assert main([command, "arithmetic_sft", "trainer.total_steps=1"]) == 0
    assert seen == [str(CHECKOUT_CONFIGS / "arithmetic_sft.yaml")]


def test_eval_keeps_a_task_name_a_task(monkeypatch):
    seen = _record_config(monkeypatch, eval_cmd)
    assert main(["eval", "frozenlake", "data.val_size=2"]) == 0
    assert seen == ["frozenlake"]


def test_an_unknown_name_is_one_line_listing_the_names(capsys):
    # neither a shipped config nor a built-in task (`rllm train arithmetic` trains that task with the defaults)
    assert main(["train", "arithmetic_ppo", "trainer.total_steps=1"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: no config 'arithmetic_ppo'") and "arithmetic_grpo" in line and "rllm configs" in line


def test_resolve_raises_the_project_error():
    with pytest.raises(RllmError, match="shipped config"):
        configs_cmd.resolve_config("nope")
