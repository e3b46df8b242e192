"""The training loop end to end on a tiny random-init model (real tokenizer): the CLI in a subprocess, and resume
reproducing an uninterrupted run bitwise."""

from __future__ import annotations

import typing

import pytest
import torch

from rllm.agents.base import BaseAgent
from rllm.config import AdvantageName, load_config
from rllm.envs.base import BaseEnv
from rllm.runs import load_metrics, read_episodes
from rllm.training.checkpoint import latest_checkpoint
from rllm.training.rollout_source import TaskSampler
from rllm.training.trainer import AgentTrainer, is_time_metric
from tests.support.cli import rllm_run, run_rllm
from tests.support.envs import LetterEnv
from tests.support.training import TINY, env_trainer, final_state


def test_rllm_train_cli_runs_two_steps(tmp_path, tiny_model_dir):
    args = ["configs/frozenlake_grpo.yaml", *TINY, f"model.name={tiny_model_dir}", "trainer.total_steps=2"]
    out, run = rllm_run("train", *args, run_root=tmp_path, name="cli")
    assert "val success rate" in out.stdout
    # a random model never solves FrozenLake: said once, at the first step, with the numbers
    assert out.stderr.count("step 1: the model solved 0% of its 4 episodes and 100% of the 2 groups") == 1
    metrics = load_metrics(run)
    train_steps = [m["step"] for m in metrics if "reward_mean" in m]
    assert train_steps == [1, 2]
    step = next(m for m in metrics if m["step"] == 2 and "reward_mean" in m)
    for key in (
        "clip_fraction",
        "approx_kl",
        "grad_norm",
        "token_mismatch",
        "time_rollout_s",
        "time_update_s",
        "time_push_s",
        "tokens_per_s",
        "response_length_mean",
        "success_rate",
    ):
        assert key in step, key
    assert 0 <= step["time_push_s"] <= step["time_update_s"]  # the push is part of the update's time
    assert "gpu_peak_memory_gib" not in step  # a CPU run has no GPU memory to report
    assert (run / "config.yaml").exists() and latest_checkpoint(run) is not None
    assert len(read_episodes(run, split="train")) == 2 * 2 * 2  # steps x tasks x rollout.n
    assert len(read_episodes(run, split="val")) == 2 * 2  # before and after, 2 validation tasks
    assert any((run / "tensorboard").glob("events.out.tfevents.*"))


PARITY_WORKFLOW = """
from rllm import Step, Trajectory, Workflow


class Parity(Workflow):
    \"\"\"One reply per question; reward 1 for an odd number of characters, which a random model earns about half the
    time, so every estimator gets groups with reward variance and a nonzero gradient.\"\"\"

    async def run(self, task, uid):
        messages = [{"role": "user", "content": task["question"]}]
        output = await self.generate(messages)
        step = Step(chat_completions=messages, model_output=output, reward=float(len(output.text) % 2))
        self.commit(Trajectory(steps=[step]))
"""


def _train_a_parity_step(tmp_path, model_dir, overrides: list[str]) -> dict:
    """One `rllm train` step of the parity workflow (groups of 4) under `overrides`: the step's metrics."""
    (tmp_path / "parity.py").write_text(PARITY_WORKFLOW)
    args = [
        "configs/arithmetic_grpo.yaml",
        *TINY,
        "rollout.n=4",
        f"model.name={model_dir}",
        "trainer.total_steps=1",
        "data.val_size=0",
        "trainer.tensorboard=false",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=run",
        f"workflow={tmp_path / 'parity.py'}:Parity",
        *overrides,
        "--no-progress",
    ]
    out = run_rllm("train", *args)
    assert out.returncode == 0, out.stderr[-3000:]
    (step,) = [m for m in load_metrics(tmp_path / "run") if "reward_mean" in m]
    return step


@pytest.mark.parametrize("advantage", typing.get_args(AdvantageName))
def test_every_advantage_estimator_trains_a_step_through_the_cli(tmp_path, tiny_model_dir, advantage):
    step = _train_a_parity_step(tmp_path, tiny_model_dir, [f"algorithm.advantage={advantage}"])
    assert step["skipped_update"] == 0 and step["grad_norm"] > 0 and 0 < step["reward_mean"] < 1
    _, state = final_state(tmp_path / "run")
    assert (state["value_head"] is not None) == (advantage == "gae")  # the critic is checkpointed
    if advantage == "gae":
        assert step["value_loss"] > 0 and step["return_mean"] > 0


@pytest.mark.parametrize(
    ("loss", "extra"),
    [
        ("gspo", ["algorithm.clip_low=3e-4", "algorithm.clip_high=4e-4", "algorithm.loss_agg=seq-mean-token-mean"]),
        ("cispo", ["algorithm.clip_low=0.99", "algorithm.clip_high=0.28", "algorithm.overlong_buffer=2"]),
    ],
)
def test_gspo_and_cispo_train_a_step_through_the_cli(tmp_path, tiny_model_dir, loss, extra):
    step = _train_a_parity_step(tmp_path, tiny_model_dir, [f"algorithm.policy_loss={loss}", *extra])
    assert step["skipped_update"] == 0 and step["grad_norm"] > 0 and step["loss"] != 0
    if "algorithm.overlong_buffer=2" in extra:  # replies of 6 tokens, the limit: each punished (DAPO)
        assert step["batch/overlong_penalized"] > 0


class DeadOrLiveEnv(BaseEnv):
    """One reply. A dead task rewards nothing ever (a uniform group); a live one rewards an odd-length reply."""

    def __init__(self, live: bool) -> None:
        self.live = live

    @classmethod
    def from_dict(cls, task: dict) -> DeadOrLiveEnv:
        return cls(task["live"])

    def reset(self):
        return "Say something.", {}

    def step(self, action):
        return "", float(self.live and len(str(action)) % 2 == 1), True, {}


def test_dynamic_sampling_refills_uniform_groups_until_the_step_has_its_tasks(tmp_path, tiny_model_dir):
    tasks = [{"id": f"dead{i}", "live": False} for i in range(6)] + [{"id": f"live{i}", "live": True} for i in range(2)]
    overrides = [
        *TINY,
        f"model.name={tiny_model_dir}",
        "trainer.total_steps=2",
        "rollout.n=8",
        "rollout.max_steps=1",
        "data.val_size=0",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=dapo",
        "trainer.tensorboard=false",
        "algorithm.drop_uniform_groups=true",
        "algorithm.max_sampling_rounds=8",
    ]
    config = load_config("configs/frozenlake_grpo.yaml", overrides)
    assert any(not t["live"] for t in TaskSampler(tasks, config.trainer.seed).take(2))  # step 1 must refill
    trainer = AgentTrainer(
        agent_class=BaseAgent,
        env_class=DeadOrLiveEnv,
        train_dataset=tasks,
        val_dataset=[],
        config=config,
        progress=False,
    )
    trainer.train()
    for step in (m for m in load_metrics(tmp_path / "dapo") if "reward_mean" in m):
        assert step["batch/tasks"] > 2  # refilled past the 2 tasks a step asks for
        assert step["batch/tasks"] - step["batch/uniform_groups"] == 2  # until both live tasks were in the batch
        assert step["batch/kept"] == 2 * 8 and step["skipped_update"] == 0  # only their groups train


def _run(tmp_path, tiny_model_dir, name, extra=()):
    overrides = [
        *TINY,
        f"model.name={tiny_model_dir}",
        "trainer.total_steps=4",
        "rollout.n_parallel=1",
        "rollout.n=4",
        f"trainer.run_dir={tmp_path}",
        f"trainer.name={name}",
        *extra,
    ]
    tasks = [{"id": f"t{i}", "letter": letter} for i, letter in enumerate("eatoin")]
    return env_trainer(LetterEnv, tasks, overrides, val_tasks=tasks[:2]).train()


@pytest.mark.parametrize("advantage", ["grpo", "gae"])  # gae: the critic head is saved and restored too
def test_resume_after_step_2_of_4_equals_an_uninterrupted_run_bitwise(tmp_path, tiny_model_dir, advantage):
    extra = [f"algorithm.advantage={advantage}"]
    _run(tmp_path, tiny_model_dir, "straight", extra)
    _run(tmp_path, tiny_model_dir, "resumed", [*extra, "trainer.stop_after=2"])
    assert final_state(tmp_path / "resumed")[0] == 2
    _run(tmp_path, tiny_model_dir, "ignored", [*extra, f"trainer.resume={tmp_path / 'resumed'}"])

    step_a, state_a = final_state(tmp_path / "straight")
    step_b, state_b = final_state(tmp_path / "resumed")
    assert step_a == step_b == 4
    params_a, params_b = state_a["trainable"], state_b["trainable"]
    assert params_a.keys() == params_b.keys() and params_a
    for name in params_a:
        assert torch.equal(params_a[name], params_b[name]), name
    if advantage == "gae":
        head_a, head_b = state_a["value_head"], state_b["value_head"]
        assert all(torch.equal(head_a[k], head_b[k]) for k in head_a) and head_a["weight"].abs().sum() > 0
    # the weights moved: this is not two runs that both did nothing
    assert any(m.get("grad_norm", 0) > 0 for m in load_metrics(tmp_path / "straight"))

    def comparable(run):
        return [{k: v for k, v in m.items() if not is_time_metric(k)} for m in load_metrics(tmp_path / run)]

    assert comparable("straight") == comparable("resumed")


def _parity_reward(task: dict, response: str) -> float:
    """A reward a random model earns about half the time, so both roles' groups have variance."""
    return float(len(response) % 2)


def test_solver_judge_workflow_trains_both_roles_with_their_own_estimators(tmp_path, tiny_model_dir, monkeypatch):
    from rllm.tasks.countdown import countdown_prompt
    from rllm.training import losses
    from rllm.workflows.solver_judge import SolverJudgeWorkflow

    overrides = [
        *TINY,
        f"model.name={tiny_model_dir}",
        "trainer.total_steps=2",
        "rollout.n=2",
        "rollout.n_parallel=4",
        "rollout.max_prompt_length=256",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=sj",
        "algorithm.roles.judge.policy_loss=cispo",
        "algorithm.roles.judge.clip_low=0.99",
    ]
    config = load_config("configs/countdown_solver_judge.yaml", overrides)
    assert config.algorithm.for_role("judge").advantage == "reinforce"
    assert config.algorithm.for_role("solver").advantage == "grpo"
    # each role's rows reach its own policy loss, with its clip range
    seen: dict[str, list] = {"ppo": [], "cispo": []}
    for kind in seen:

        def spy(*args, _kind=kind, _loss=losses.POLICY_LOSSES[kind], **kwargs):
            seen[_kind].append((int((args[3].sum(-1) > 0).sum()), kwargs["clip_low"]))
            return _loss(*args, **kwargs)

        monkeypatch.setitem(losses.POLICY_LOSSES, kind, spy)
    trainer = AgentTrainer(
        workflow_class=SolverJudgeWorkflow,
        config=config,
        progress=False,
        workflow_args={"prompt_fn": countdown_prompt, "reward_fn": _parity_reward},
    )
    result = trainer.train()
    steps = [m for m in load_metrics(tmp_path / "sj") if "reward_mean" in m]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        # 2 tasks x 2 episodes: 2 solver attempts each (n_solutions in the config) and one judge
        assert m["role/solver/count"] == 8 and m["role/judge/count"] == 4
        assert 0 <= m["role/solver/reward_mean"] <= 1 and 0 <= m["role/judge/success_rate"] <= 1
        assert m["skipped_update"] == 0 and m["token_mismatch"] == 0
    assert any(m["grad_norm"] > 0 for m in steps)
    assert "val/role/judge/success_rate" in load_metrics(tmp_path / "sj")[0]
    assert result["steps"] == 2
    # per step 8 solver rows (ppo, clip 0.2) and 4 judge rows (cispo, clip 0.99)
    assert sum(rows for rows, _ in seen["ppo"]) == 16 and {clip for _, clip in seen["ppo"]} == {0.2}
    assert sum(rows for rows, _ in seen["cispo"]) == 8 and {clip for _, clip in seen["cispo"]} == {0.99}


def test_each_step_is_saved_once_and_a_resumed_run_stamps_its_weight_version(tmp_path, tiny_model_dir, monkeypatch):
    """save_every=1: steps 1 and 2 saved once each (the last one after the final validation, not twice). After
    resuming at step 2, the first new step's episodes were sampled with weight version 2, not 0."""
    import rllm.training.session as session_module
    from rllm.runs import read_episode_records

    saved = []
    original = session_module.save_checkpoint
    monkeypatch.setattr(
        session_module,
        "save_checkpoint",
        lambda run_dir, step, *a, **k: (saved.append(step), original(run_dir, step, *a, **k))[1],
    )
    _run(tmp_path, tiny_model_dir, "once", ["trainer.save_every=1", "trainer.stop_after=2"])
    assert saved == [1, 2]
    done = _run(tmp_path, tiny_model_dir, "ignored", ["trainer.save_every=1", f"trainer.resume={tmp_path / 'once'}"])
    assert saved == [1, 2, 3, 4]
    # resuming the finished run (killed after its last save) saves nothing again and reports the same last step
    again = _run(tmp_path, tiny_model_dir, "ignored", ["trainer.save_every=1", f"trainer.resume={tmp_path / 'once'}"])
    assert saved == [1, 2, 3, 4]
    timeless = [{k: v for k, v in result["last_metrics"].items() if not is_time_metric(k)} for result in (done, again)]
    assert timeless[0] == timeless[1] and timeless[0]["weight_version"] == 4
    versions = {
        record["step"]: {s.model_output.weight_version for t in record["episode"].trajectories for s in t.steps}
        for record in read_episode_records(tmp_path / "once", "train")
    }
    assert versions == {1: {0}, 2: {1}, 3: {2}, 4: {3}}  # step k samples with the weights of k - 1 updates


def test_a_kill_between_the_final_validation_and_the_last_save_leaves_logs_as_an_uninterrupted_run(
    tmp_path, tiny_model_dir, monkeypatch
):
    """The final validation is logged, then the process dies before step 2 is saved: the resumed run redoes step 2
    and its validation, and metrics and episodes hold each record once, as in a run that was never killed."""
    from rllm.runs import read_episode_records

    extra = ["trainer.total_steps=2", "trainer.save_every=1"]
    _run(tmp_path, tiny_model_dir, "straight", extra)
    original = AgentTrainer._save

    def killed_at_the_last_save(self):
        if self.step == 2 and self.val_history[-1]["step"] == 2:  # after the final validation
            raise KeyboardInterrupt  # what a kill -9 leaves: everything logged, nothing saved for step 2
        original(self)

    monkeypatch.setattr(AgentTrainer, "_save", killed_at_the_last_save)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, tiny_model_dir, "killed", extra)
    monkeypatch.setattr(AgentTrainer, "_save", original)
    _run(tmp_path, tiny_model_dir, "ignored", [*extra, f"trainer.resume={tmp_path / 'killed'}"])

    def comparable(run):
        return [{k: v for k, v in m.items() if not is_time_metric(k)} for m in load_metrics(tmp_path / run)]

    assert comparable("killed") == comparable("straight")
    episodes = {
        run: [(r["step"], r["split"]) for r in read_episode_records(tmp_path / run)] for run in ("straight", "killed")
    }
    assert episodes["killed"] == episodes["straight"]


class HugeRewardEnv(LetterEnv):
    """A user's reward on the wrong scale: 1e39 is a finite float, but as a REINFORCE advantage (reward units) it
    overflows the float32 loss, whose gradient is then NaN."""

    def step(self, action):
        observation, reward, done, info = super().step(action)
        return observation, reward * 1e39, done, info


def test_non_finite_updates_are_skipped_and_the_run_stops_with_its_weights_intact(tmp_path, tiny_model_dir):
    from rllm.training.step import TrainingDivergedError

    overrides = [
        *TINY,
        f"model.name={tiny_model_dir}",
        "trainer.total_steps=4",
        "rollout.n=4",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=huge",
        "trainer.max_nonfinite_updates=2",
        "model.lora.enabled=false",
        "data.val_size=0",
        "algorithm.advantage=reinforce",
    ]
    tasks = [{"id": f"t{i}", "letter": letter} for i, letter in enumerate("eatoin")]
    trainer = env_trainer(HugeRewardEnv, tasks, overrides)
    from rllm.models.registry import load_causal_lm

    initial = load_causal_lm(tiny_model_dir).state_dict()
    with pytest.raises(TrainingDivergedError, match=r"step 2: 2 updates in a row had a non-finite loss or gradient"):
        trainer.train()
    steps = [m for m in load_metrics(tmp_path / "huge") if "reward_mean" in m]
    assert [m["skipped_nonfinite"] for m in steps] == [1, 1] and all(m["skipped_update"] == 0 for m in steps)
    weights = trainer.backend.model.state_dict()
    assert all(torch.equal(weights[name], initial[name]) for name in initial)  # never stepped on a NaN gradient
