"""The skyrl_gym, openenv and verifiers hubs (`rllm.tasks.hubs`) with the real packages: names and did-you-mean,
rows, the libraries' own environments and rewards, one-line errors. The evaluation and training step through rllm's
loop are in tests/integration/test_hubs_more_train.py.

- skyrl_gym: SkyRL-Gym's gsm8k envs, rows from the catalog's GSM8K fixture (tests/fixtures/catalog) or a file in
  SkyRL's data format.
- openenv: OpenEnv ships no environment on PyPI; `openenv init`'s template (the echo environment) is what the package
  ships, generated here with the package's own generator and served by rllm's subprocess server.
- verifiers: it cannot share rllm's venv (its mcp pins; see rllm.tasks.hubs.verifiers), so these tests skip without
  it and run under a venv that has it (`pip install -e '.[dev,torch,verifiers]'`); the environments are small
  modules of ours, in the exact shape verifiers loads (a module with `load_environment(...) -> vf.Environment`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rllm.arguments import UnknownArgumentError
from rllm.envs import check_env
from rllm.tasks import get_task, is_task_name
from rllm.tasks.hubs import HubError
from tests.support.hubs import (
    FIXTURES,
    forget_modules,
    hub_error,
    importable_vf_environments,
    make_echo_env,
    round_trip,
)


def test_the_three_hubs_are_named_and_a_missing_package_is_one_line(monkeypatch):
    for name in ("skyrl_gym:gsm8k", "openenv:echo_env", "verifiers:x"):
        assert is_task_name(name)
    monkeypatch.setitem(sys.modules, "skyrl_gym", None)
    assert hub_error("skyrl_gym:gsm8k") == "skyrl_gym:gsm8k needs the skyrl-gym package: pip install 'rllm[hubs]'"
    monkeypatch.setitem(sys.modules, "openenv.core", None)
    assert hub_error("openenv:echo_env") == "openenv:echo_env needs the openenv-core package: pip install 'rllm[hubs]'"
    monkeypatch.setitem(sys.modules, "verifiers", None)
    assert hub_error("verifiers:vf_sums").startswith(
        "verifiers:vf_sums needs the verifiers package: pip install -e '.[verifiers]' into a venv of its own"
    )
    assert "(did you mean skyrl_gym?)" in hub_error("skyrl_gm:gsm8k")


# ----------------------------------------------------------------------------------------------------- SkyRL-Gym


def _skyrl():
    pytest.importorskip("skyrl_gym")
    from rllm.tasks.hubs import skyrl_gym

    return skyrl_gym


def test_skyrl_gym_names_its_local_envs_and_refuses_the_others_in_one_line():
    hub = _skyrl()
    assert {"gsm8k", "gsm8k_multi_turn", "aime", "text2sql"} <= set(hub.names())
    assert not {"search", "lcb"} & set(hub.names())
    task = get_task("skyrl_gym:gsm8k")
    assert task.agent_class is hub.SkyRLGymAgent and task.env_class is hub.SkyRLGymEnv
    message = hub_error("skyrl_gym:gsm8")
    assert "skyrl_gym has no environment 'gsm8' (did you mean 'gsm8k'" in message
    assert "python -m rllm.tasks.hubs.skyrl_gym" in message
    assert "retrieval server" in hub_error("skyrl_gym:search")
    assert "outside rllm's sandbox" in hub_error("skyrl_gym:lcb")


def test_skyrl_gym_gsm8k_rows_come_from_the_catalog_as_skyrl_writes_them_and_splits_are_its_own():
    _skyrl()
    make = get_task("skyrl_gym:gsm8k").make_tasks
    train = make(3, seed=0, split="train", data_dir=str(FIXTURES))
    assert train == make(3, seed=0, split="train", data_dir=str(FIXTURES)) and round_trip(train) == train
    row = train[0]
    assert row["env_class"] == "gsm8k" and row["data_source"] == "skyrl_gym:gsm8k"
    assert row["prompt"][0]["content"].endswith('output the final answer after "####".')
    assert row["reward_spec"]["method"] == "rule" and "," not in row["reward_spec"]["ground_truth"]
    val = make(3, seed=0, split="val", data_dir=str(FIXTURES))
    assert not {json.dumps(r["prompt"]) for r in train} & {json.dumps(r["prompt"]) for r in val}
    assert len({r["id"] for r in train + val}) == 6
    with pytest.raises(HubError, match=r"4 val rows asked for, the catalog's gsm8k has 3"):
        make(4, seed=0, split="val", data_dir=str(FIXTURES))
    assert make(0, seed=0) == []
    with pytest.raises(HubError, match=r"skyrl_gym:aime has no built-in data: .*data.task_args.dataset"):
        get_task("skyrl_gym:aime").make_tasks(2, seed=0)


def _skyrl_file(tmp_path: Path, count: int = 40, env_class: str = "gsm8k") -> Path:
    rows = [
        {
            "data_source": "sums",
            "prompt": [
                {"role": "system", "content": "Answer after ####."},
                {"role": "user", "content": f"What is {i} + {i}?"},
            ],
            "env_class": env_class,
            "reward_spec": {"method": "rule", "ground_truth": str(2 * i)},
            "extra_info": {"index": i},
        }
        for i in range(count)
    ]
    path = tmp_path / f"{env_class}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_skyrl_gym_reads_skyrl_data_files_one_file_split_by_prompt_and_a_folder_by_file(tmp_path):
    _skyrl()
    make = get_task("skyrl_gym:gsm8k").make_tasks
    path = _skyrl_file(tmp_path)
    train = make(20, seed=1, split="train", dataset=str(path))
    val = make(5, seed=1, split="val", dataset=str(path))
    assert not {json.dumps(r["prompt"]) for r in train} & {json.dumps(r["prompt"]) for r in val}
    assert make(20, seed=2, split="train", dataset=str(path)) != train
    assert train[0]["prompt"][0]["role"] == "system" and "extra_info" in train[0]
    folder = tmp_path / "skyrl"
    folder.mkdir()
    lines = path.read_text().splitlines(keepends=True)
    (folder / "train.jsonl").write_text("".join(lines[:30]))
    (folder / "validation.jsonl").write_text("".join(lines[30:]))
    val = make(10, seed=0, split="val", dataset=str(folder))
    assert sorted(r["extra_info"]["index"] for r in val) == list(range(30, 40))
    with pytest.raises(HubError, match=r"holds rows for env_class gsm8k, not aime"):
        get_task("skyrl_gym:aime").make_tasks(2, seed=0, dataset=str(path))
    with pytest.raises(HubError, match="is neither a file nor a folder"):
        make(2, seed=0, dataset=str(tmp_path / "missing.parquet"))
    with pytest.raises(UnknownArgumentError, match="data.task_args.datset"):
        from rllm.config import load_config

        load_config(None, ["data.task=skyrl_gym:gsm8k", f"data.task_args.datset={path}"]).data.make_tasks("train")


def test_skyrl_gym_envs_reward_with_skyrls_own_scorers_single_and_multi_turn(tmp_path):
    hub = _skyrl()
    rows = round_trip(get_task("skyrl_gym:gsm8k").make_tasks(2, seed=0, split="val", data_dir=str(FIXTURES)))
    env = hub.SkyRLGymEnv.from_dict(rows[0])
    observation, info = env.reset()
    assert observation == rows[0]["prompt"] and info["max_turns"] == 1
    truth = rows[0]["reward_spec"]["ground_truth"]
    assert env.step(f"So it is\n#### {truth}")[1:3] == (1.0, True)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("#### 1")
    env.reset()
    _, reward, done, info = env.step(f"The answer is {truth}")  # no '####': SkyRL's strict scorer gives 0
    assert (reward, done, info["success"]) == (0.0, True, False)

    multi = get_task("skyrl_gym:gsm8k_multi_turn").make_tasks(1, seed=0, split="val", data_dir=str(FIXTURES))[0]
    env = hub.SkyRLGymEnv.from_dict({**multi, "max_turns": 3})
    assert env.reset()[1]["max_turns"] == 3
    observation, reward, done, _ = env.step("#### -1")  # well formatted, wrong: SkyRL's per-turn format credit
    assert 0.0 < reward < 1.0 and not done and observation[0]["role"] == "user" and "####" in observation[0]["content"]
    observation, reward, done, info = env.step(f"#### {multi['reward_spec']['ground_truth']}")
    assert (observation, reward, done, info["success"], info["metrics"]) == ([], 1.0, True, True, {"steps": 2})

    agent = hub.SkyRLGymAgent()
    agent.update_from_env([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], 0.0, False, {})
    assert [m["role"] for m in agent.chat_completions] == ["system", "user"]


def test_skyrl_gym_env_passes_rllms_env_check(tmp_path):
    hub = _skyrl()
    row = get_task("skyrl_gym:gsm8k_multi_turn").make_tasks(
        1, seed=3, dataset=str(_skyrl_file(tmp_path, env_class="gsm8k_multi_turn"))
    )[0]
    report = check_env(hub.SkyRLGymEnv, row, actions=["#### 1", "no", "#### 2", "#### 3", "#### 4"])
    assert not report.problems


# ------------------------------------------------------------------------------------------------------- OpenEnv


@pytest.fixture
def echo_env(tmp_path, monkeypatch):
    """`openenv:echo_env` importable for this test; its servers stopped after it."""
    pytest.importorskip("openenv.core")
    from rllm.tasks.hubs import openenv as hub

    make_echo_env(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget_modules("echo_env")
    hub._environment.cache_clear()
    yield hub
    hub.shutdown_servers()
    hub._environment.cache_clear()
    forget_modules("echo_env")


def test_openenv_names_its_env_packages_and_suggests_the_closest(echo_env):
    assert "echo_env" in echo_env.names()
    task = get_task("openenv:echo_env")
    assert task.agent_class is echo_env.OpenEnvAgent and task.env_class is echo_env.OpenEnvEnv
    message = hub_error("openenv:echo_en")
    assert "openenv has no environment package 'echo_en' (did you mean 'echo_env'" in message
    assert "python -m rllm.tasks.hubs.openenv" in message
    train = task.make_tasks(8, seed=0, split="train")
    assert train == task.make_tasks(8, seed=0, split="train") and round_trip(train) == train
    val = task.make_tasks(8, seed=0, split="val")
    assert len({r["seed"] for r in train + val}) == 16 and {r["env"] for r in train} == {"echo_env"}


def test_openenv_plays_the_echo_env_over_its_own_server_and_client_and_stops_the_server(echo_env):
    env = echo_env.OpenEnvEnv.from_dict({"env": "echo_env", "seed": 5, "id": "ignored"})
    observation, info = env.reset()
    assert observation == "Echo Env environment ready!" and info["action_field"] == "message"
    assert env.step("Hello") == ("Hello", 0.5, False, {"invalid_action": False, "metadata": {}, "success": False})
    assert env.step("Hello again")[1] == pytest.approx(1.1)  # the echo env's own reward: 0.1 per character
    server = env._server
    env.close()
    assert echo_env.running_servers() == 1  # kept idle for the next episode
    second = echo_env.OpenEnvEnv("echo_env", seed=6)
    second.reset()
    assert second._server is server  # reused
    third = echo_env.OpenEnvEnv("echo_env", seed=7)
    third.reset()  # the first one is busy: a second server
    assert third._server is not server and echo_env.running_servers() == 2
    second.close()
    third.close()
    echo_env.shutdown_servers()
    assert echo_env.running_servers() == 0 and server.process.poll() is not None


def test_openenv_an_action_of_several_fields_is_read_from_json_and_a_bad_one_is_told_not_sent(echo_env):
    from openenv.core.env_server.types import Action
    from pydantic import Field

    class MoveAction(Action):  # two fields: the reply must be JSON
        row: int = Field(...)
        col: int = Field(...)

    assert echo_env._text_field(MoveAction) is None
    assert echo_env._make_action(MoveAction, 'I play {"row": 1, "col": 2}').row == 1
    for reply, why in (("no json", "no JSON object"), ('{"row": 1}', "col: Field required")):
        with pytest.raises(ValueError, match=why):
            echo_env._make_action(MoveAction, reply)
    env = echo_env.OpenEnvEnv("echo_env", seed=0)
    env._action_class = MoveAction
    observation, _ = env.reset()
    assert "Reply with one JSON object" in observation and '"row"' in observation
    observation, reward, done, info = env.step("row 1, col 2")
    assert (reward, done, info["invalid_action"]) == (0.0, False, True) and "no JSON object" in observation
    env.close()


def test_the_openenv_env_passes_rllms_env_check(echo_env):
    with pytest.warns(Warning, match="did not end within 3"):  # the echo env never ends an episode
        report = check_env(echo_env.OpenEnvEnv, {"env": "echo_env", "seed": 1}, max_steps=3, actions=["a", "bb"])
    assert not report.problems


def test_openenv_a_server_that_cannot_start_is_one_line(echo_env, tmp_path):
    (tmp_path / "echo_env" / "server" / "app.py").write_text("raise SystemExit('broken on purpose')\n")
    env = echo_env.OpenEnvEnv("echo_env", seed=0)
    with pytest.raises(HubError) as caught:
        env.reset()
    assert str(caught.value).startswith("openenv:echo_env: its server exited while starting: broken on purpose")


# ----------------------------------------------------------------------------------------------------- verifiers


@pytest.fixture
def vf_envs(tmp_path, monkeypatch):
    """The three test environments importable for this test (verifiers loads an environment by importing it)."""
    yield from importable_vf_environments(tmp_path, monkeypatch)


def test_verifiers_loads_an_environment_by_name_and_refuses_unknown_ones_in_one_line(vf_envs):
    task = get_task("verifiers:vf_sums")
    assert task.name == "verifiers:vf_sums" and task.default_workflow == "rllm.harnesses.verifiers:VerifiersWorkflow"
    assert "Single-digit sums" in task.description
    message = hub_error("verifiers:vf_sumz")
    assert (
        message.startswith("verifiers has no environment 'vf_sumz'")
        and "python -m rllm.tasks.hubs.verifiers" in message
    )
    assert "defines no load_environment()" in hub_error("verifiers:textwrap")


def test_verifiers_rows_are_its_formatted_dataset_rows_json_and_seeded(vf_envs):
    make = get_task("verifiers:vf_sums").make_tasks
    train = make(10, seed=0, split="train")
    assert train == make(10, seed=0, split="train") and round_trip(train) == train
    row = train[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and row["prompt"][0]["content"] == (
        "Reply with the number only."
    )
    assert row["env_id"] == "vf_sums" and row["env_args"] == {} and isinstance(row["example_id"], int)
    val = make(10, seed=0, split="val")  # eval_dataset: 10 rows of their own
    assert not {r["answer"] + r["prompt"][1]["content"] for r in train} & {
        r["answer"] + r["prompt"][1]["content"] for r in val
    }
    with pytest.raises(HubError, match="11 val rows asked for, the environment has 10"):
        make(11, seed=0, split="val")
    custom = make(3, seed=0, split="val", system_prompt="Digits only.")
    assert custom[0]["prompt"][0]["content"] == "Digits only." and custom[0]["env_args"] == {
        "system_prompt": "Digits only."
    }
    with pytest.raises(UnknownArgumentError, match="did you mean 'data.task_args.system_prompt'"):
        make(3, seed=0, system_promt="x")
    # one dataset only: the splits are parts of it, by prompt
    tools_train = get_task("verifiers:vf_tools").make_tasks(20, seed=0, split="train")
    tools_val = get_task("verifiers:vf_tools").make_tasks(3, seed=0, split="val")
    assert not {json.dumps(r["prompt"]) for r in tools_train} & {json.dumps(r["prompt"]) for r in tools_val}
