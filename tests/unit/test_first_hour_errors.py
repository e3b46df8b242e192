"""Common first-hour mistakes are one line naming the file, key or path and the fix, found before any model loads
(issue 39, item 5); a training step whose every episode is an infrastructure error stops the run with the cause,
and the final table shows how episodes ended when any ended otherwise than by the env (item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.arguments import UnknownArgumentError
from rllm.cli.main import build_parser, main
from rllm.config import ConfigError, load_config
from rllm.engine.failures import AllEpisodesFailedError
from rllm.errors import InfraError, RllmError
from rllm.training.trainer import AgentTrainer, format_result_table
from rllm.workflows import Workflow
from rllm.workflows.resolve import check_config_args, workflow_for_config

_ROOT = Path(__file__).resolve().parents[2]


def _check_args(*overrides: str) -> None:
    """What `rllm eval` and `AgentTrainer` check before a model loads: the tasks, then the agent/env arguments."""
    config = load_config(None, ["data.val_size=2", *overrides])
    workflow_class, workflow_args = workflow_for_config(config)
    check_config_args(config, workflow_class, workflow_args, config.data.make_tasks("val"))


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (
            ["data.task=arithmetic", 'data.task_args={"digit": [2, 1]}'],
            "data.task_args.digit: arithmetic's task generator takes no such argument (did you mean "
            "'data.task_args.digits'?); it takes digits, operator",
        ),
        (["data.task=arithmetic", "data.task_args.seed=3"], "data.task_args.seed: set it with data.seed"),
        (
            ["data.task=frozenlake", "env_args.is_slipery=true"],
            "env_args.is_slipery: FrozenLakeEnv takes no such argument; it takes desc, hole_prob, ",
        ),
        (
            ["data.task=frozenlake", "env_args.hole_probb=0.1"],
            "env_args.hole_probb: FrozenLakeEnv takes no such argument (did you mean 'env_args.hole_prob'?)",
        ),
        (
            ["data.task=frozenlake", "agent_args.observaton=image"],
            "agent_args.observaton: FrozenLakeAgent takes no such argument (did you mean "
            "'agent_args.observation'?); it takes observation",
        ),
        # BaseAgent.__init__(**_) drops what it is given: a key for it would be silently ignored
        (["data.task=arithmetic", "agent_args.system_prompt=hi"], "agent_args.system_prompt: ArithmeticAgent takes "),
        (
            ["data.task=math", "workflow_args.system_promt=Be brief."],
            "did you mean 'workflow_args.system_prompt'?",
        ),
    ],
)
def test_a_mistyped_args_key_is_one_line_with_the_valid_names(overrides, says):
    with pytest.raises(UnknownArgumentError) as caught:
        _check_args(*overrides)
    message = str(caught.value)
    assert says in message and "\n" not in message, message


def test_args_that_reach_their_class_pass_the_check():
    _check_args("data.task=frozenlake", "env_args.hole_prob=0.1", "agent_args.observation=text")
    _check_args("data.task=math", "env_args.max_attempts=2")  # a FeedbackEnv keyword
    _check_args("data.task=mcp_kb", "env_args.result_hint=look it up")  # through ToolEnvironment.from_dict


def test_env_args_of_a_users_own_from_dict_are_not_second_guessed():
    """A user's `from_dict` may read any key of the row (here one its `__init__` does not take): refusing it would
    be wrong, so only the envs rllm ships are checked."""
    from rllm.envs.feedback import FeedbackEnv
    from rllm.tasks.arithmetic import ArithmeticAgent

    class GradedEnv(FeedbackEnv):
        @classmethod
        def from_dict(cls, task: dict) -> GradedEnv:
            return cls(dict(task, question=f"{task['question']} (level {task.get('difficulty', 1)})"))

    config = load_config(None, ["data.task=arithmetic", "data.val_size=2", "env_args.difficulty=3"])
    workflow_class, workflow_args = workflow_for_config(config, agent_class=ArithmeticAgent, env_class=GradedEnv)
    check_config_args(config, workflow_class, workflow_args, config.data.make_tasks("val"))


def test_malformed_yaml_names_the_file_line_and_column_on_one_line(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("trainer:\n  total_steps: 3\n   name: [x\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"config file {path}, line 3, column 8: not valid YAML: ") and "\n" not in message
    assert "<unicode string>" not in message


@pytest.mark.parametrize(
    ("kind", "overrides", "says"),
    [
        ("sft", ["sft.episodes=runs/nope"], "sft.episodes=runs/nope: no such file or directory; give a run directory"),
        ("sft", ["sft.messages=chats.jsonl"], "sft.messages=chats.jsonl: no such file; give a JSONL file"),
        ("dpo", ["dpo.episodes=."], "dpo.episodes=.: that directory has no episodes.jsonl"),
        ("dpo", ["dpo.preferences=prefs.jsonl"], "dpo.preferences=prefs.jsonl: no such file"),
    ],
)
def test_a_missing_data_path_is_named_before_anything_loads(tmp_path, monkeypatch, capsys, kind, overrides, says):
    monkeypatch.chdir(tmp_path)
    config = f"configs/arithmetic_{kind}.yaml"
    source = "sft.episodes" if kind == "sft" else "dpo.episodes"
    if "episodes" not in overrides[0]:
        overrides = [f"{source}=null", *overrides]
    (tmp_path / "configs").mkdir()
    (tmp_path / config).write_text((_ROOT / config).read_text())
    for export in ([], ["--export-trl", "out.jsonl"]):  # training, and the export for TRL
        assert main([kind, config, *overrides, "--no-progress", *export]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and err.count("\n") == 1, err


def test_train_and_rft_without_a_config_print_their_usage(capsys):
    for argv in (["train"], ["rft"], ["sft"], ["dpo"], ["train", "trainer.total_steps=3"]):  # an override: no config
        command = argv[0]
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"usage: rllm {command} ") and f"error: give a config, e.g. rllm {command} " in err


def test_options_go_before_or_after_the_overrides():
    parser = build_parser()
    for argv in (
        ["train", "c.yaml", "--no-progress", "trainer.total_steps=2", "rollout.n=2"],
        ["train", "c.yaml", "trainer.total_steps=2", "--no-progress", "rollout.n=2"],
        ["train", "--no-progress", "c.yaml", "trainer.total_steps=2", "rollout.n=2"],
    ):
        args = parser.parse_args(argv)
        assert (args.config, args.overrides, args.no_progress) == (
            "c.yaml",
            ["trainer.total_steps=2", "rollout.n=2"],
            True,
        )
    args = parser.parse_args(["eval", "math", "data.val_size=2", "--no-progress", "rollout.val_n=2"])
    assert args.overrides == ["data.val_size=2", "rollout.val_n=2"] and args.no_progress


class _EnvDown(Workflow):
    async def run(self, task, uid):
        raise InfraError("the sandbox service at 10.0.0.7 refused the connection")


def test_a_training_step_whose_every_episode_is_an_infra_error_stops_the_run(tmp_path, tiny_model_dir):
    tiny = ["data.train_size=4", "trainer.tasks_per_step=2", "rollout.n=2", "trainer.tensorboard=false"]
    run = [f"model.name={tiny_model_dir}", "data.task=arithmetic", "data.val_size=0", "trainer.total_steps=3"]
    config = load_config(None, [*run, *tiny, "rollout.retry_limit=0", f"trainer.run_dir={tmp_path}"])
    with pytest.raises(AllEpisodesFailedError) as caught:
        AgentTrainer(config=config, workflow_class=_EnvDown, progress=False).train()
    message = str(caught.value)
    assert message.startswith("all 4 episodes of training step 1 ended in an infrastructure error"), message
    assert "the sandbox service at 10.0.0.7 refused the connection" in message and isinstance(caught.value, RllmError)


def test_the_final_table_shows_how_episodes_ended_when_any_did_otherwise_than_by_the_env():
    val = {"success_rate": 0.5, "reward_mean": 0.5, "episodes": 4}
    done = {**val, "termination/env_done": 1.0}
    clean = {"val_before": done, "val_after": done, "steps": 2, "run_dir": "runs/x"}
    assert "ended" not in format_result_table(clean)
    after = {**val, "termination/env_done": 0.5, "termination/infra_error": 0.25, "termination/timeout": 0.25}
    last_step = {"termination/env_done": 0.75, "termination/max_turns": 0.25}
    mixed = {**clean, "val_after": after, "last_metrics": last_step}
    table = format_result_table(mixed)
    assert f"{'ended infra_error':24}{0.0:>10.3f}{0.25:>10.3f}" in table
    assert f"{'ended timeout':24}{0.0:>10.3f}{0.25:>10.3f}" in table
    assert f"{'ended max_turns':24}{0.0:>10.3f}{0.0:>10.3f}   (last training step: 0.250)" in table
    assert f"{'ended env_done':24}{1.0:>10.3f}{0.5:>10.3f}   (last training step: 0.750)" in table


def test_ctrl_c_in_a_command_that_saves_nothing_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("rllm.evaluation.evaluate", interrupted)
    assert main(["eval", "arithmetic", "data.val_size=1", "--no-progress"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted: rllm eval stopped (Ctrl-C)"
