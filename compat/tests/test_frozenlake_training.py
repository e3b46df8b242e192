"""Our FrozenLake training script (tests/compat/scripts/frozenlake/train_lake.py, written against rLLM's public API:
`@hydra.main` on rLLM's PPO config, `AgentTrainer` with `FrozenLakeAgent`/`FrozenLakeEnv`, `DatasetRegistry`) run as
rLLM users run theirs: a script under Hydra with the overrides of rLLM's train_frozenlake_agent.sh. Changed in the
overrides: the model path (the tiny random-init model), the batch (2 tasks of a 4-row dataset, one epoch: 2 steps; 1
validation row) and data.max_response_length (10240 -> 32, so a CPU step takes seconds).

The random model never writes a valid FrozenLake action, so every reward is 0 and every group is uniform: with the
.sh's `rllm.rejection_sample.enable=True` both steps drop all 2 groups (16 episodes) and skip the update, exactly
as rLLM's trainer skips such a batch. The test therefore checks that the loop ran 2 steps through the translated
config, not a gradient (the solver-judge and smoke tests check gradients on rewards with variance)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra", reason="pip install rllm[compat]")

SCRIPTS = Path(__file__).parent / "scripts" / "frozenlake"
A = "actor_rollout_ref"

# train_frozenlake_agent.sh's overrides, in its order; the changed ones say so.
SH_OVERRIDES = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=2",  # changed: 64
    "data.val_batch_size=128",
    "data.max_prompt_length=4096",
    "data.max_response_length=32",  # changed: 10240
    f"{A}.model.path={{model}}",  # changed: Qwen/Qwen3-0.6B
    f"{A}.hybrid_engine=True",
    f"{A}.actor.optim.lr=1e-6",
    f"{A}.model.use_remove_padding=True",
    f"{A}.actor.loss_agg_mode=seq-mean-token-sum",
    f"{A}.actor.ppo_mini_batch_size=32",
    f"{A}.actor.use_dynamic_bsz=True",
    f"{A}.actor.ppo_max_token_len_per_gpu=24000",
    f"{A}.actor.use_kl_loss=False",
    f"{A}.actor.clip_ratio_high=0.28",
    f"{A}.actor.kl_loss_coef=0.001",
    f"{A}.actor.kl_loss_type=low_var_kl",
    f"{A}.actor.ulysses_sequence_parallel_size=1",
    f"{A}.model.enable_gradient_checkpointing=True",
    f"{A}.actor.fsdp_config.param_offload=True",
    f"{A}.actor.fsdp_config.optimizer_offload=True",
    f"{A}.rollout.tensor_model_parallel_size=1",
    f"{A}.rollout.name=vllm",
    f"{A}.rollout.mode=async",
    f"{A}.rollout.enforce_eager=False",
    f"{A}.rollout.temperature=0.7",
    f"{A}.rollout.gpu_memory_utilization=0.85",
    f"{A}.rollout.n=8",
    f"{A}.rollout.val_kwargs.n=4",
    f"{A}.rollout.val_kwargs.temperature=0.7",
    f"{A}.rollout.val_kwargs.top_p=0.8",
    f"{A}.rollout.val_kwargs.top_k=20",
    f"{A}.ref.fsdp_config.param_offload=True",
    f"{A}.ref.log_prob_micro_batch_size_per_gpu=1",
    f"{A}.rollout.log_prob_micro_batch_size_per_gpu=1",
    f"{A}.actor.entropy_coeff=0",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "rllm.mask_truncated_samples=False",
    "trainer.critic_warmup=0",
    "trainer.logger=['console','wandb']",
    "trainer.project_name='rllm-agent'",
    "trainer.experiment_name='frozenlake-agent-0.6B'",
    "trainer.val_before_train=True",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=40",
    "trainer.test_freq=10",
    "trainer.default_hdfs_dir=null",
    "rllm.rejection_sample.enable=True",
    "rllm.rejection_sample.multiplier=2",
    "+rllm.env.env_args.max_steps=8",
    "+rllm.env.env_args.is_slippery=False",
    "rllm.agent.max_steps=10",
    "rllm.stepwise_advantage.enable=False",
    "rllm.disable_thinking=False",
    "+rllm.agent.agent_args.max_steps=10",
    "+rllm.agent.agent_args.use_accumulate_history=True",
    "trainer.total_epochs=1",
]


def _run_script(script, args: list[str], cwd, env) -> subprocess.CompletedProcess:
    """`python script *args` in `cwd` under `env`, as a user runs an rLLM training script; it must succeed."""
    out = subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def test_a_frozenlake_train_script_under_rllm_s_overrides_trains_two_steps(tmp_path, tiny_model_dir):
    env = {**os.environ, "RLLM_HOME": str(tmp_path / "home")}
    prepare = "from lake_tasks import make_lake_tasks; make_lake_tasks(4, 1)"
    subprocess.run([sys.executable, "-c", prepare], cwd=SCRIPTS, env=env, check=True, capture_output=True)
    args = [arg.replace("{model}", str(tiny_model_dir)) for arg in SH_OVERRIDES]
    out = _run_script(str(SCRIPTS / "train_lake.py"), args, tmp_path, env)
    assert "wandb not available in rllm; metrics go to the run directory's metrics.jsonl" in out.stderr
    assert "no separate validation top_k" in out.stderr
    assert (tmp_path / "outputs").is_dir()  # Hydra's own output folder, in the cwd as in rLLM
    (run,) = (tmp_path / "checkpoints" / "rllm-agent").glob("frozenlake-agent-0.6B-*")  # default_local_dir
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # 2 tasks x rollout.n 8, every group uniform (reward 0) and dropped by rejection sampling
        assert r["episodes"] == 16 and r["batch/groups"] == 2 and r["batch/dropped_uniform"] == 16
        assert r["skipped_update"] == 1
    assert [r["val/episodes"] for r in records if "val/episodes" in r] == [
        4,
        4,
    ]  # 1 task x val_kwargs.n 4, before and after
    config = (run / "config.yaml").read_text()
    for line in [
        "name: " + str(tiny_model_dir),
        "advantage: grpo",
        "clip_high: 0.28",
        "loss_agg: seq-mean-token-sum",
        "drop_uniform_groups: true",
        "tasks_per_step: 2",
        "total_steps: 2",
        "max_steps: 10",
        "n: 8",
        "val_n: 4",
        "val_temperature: 0.7",
        "max_tokens: 32",
        "lr: 1.0e-06",
        "enabled: false",
    ]:
        assert line in config, line
    episode = json.loads((run / "episodes.jsonl").read_text().splitlines()[0])["episode"]
    assert "is_slippery" not in episode["task"]  # env_args reach each env (rLLM's order), not the logged rows


# An rLLM user's own training script, written as rLLM's examples write theirs (rLLM's SimpleWorkflow, a reward
# function, DatasetRegistry, @hydra.main). Its reward pays the parity of the reply's length, so the random tiny
# model's groups have variance and the updates are real.
PARITY_SCRIPT = """
import hydra

from rllm.data.dataset import DatasetRegistry
from rllm.rewards.reward_types import RewardOutput
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.workflows.simple_workflow import SimpleWorkflow


def parity_reward_fn(task_info, action):
    return RewardOutput(reward=float(len(action.action) % 2))


@hydra.main(config_path="pkg://rllm.trainer.config", config_name="agent_ppo_trainer", version_base=None)
def main(config):
    rows = [{"question": f"What is {i} + {i}?", "ground_truth": str(2 * i)} for i in range(4)]
    train = DatasetRegistry.register_dataset("parity", rows, "train")
    trainer = AgentTrainer(workflow_class=SimpleWorkflow, workflow_args={"reward_function": parity_reward_fn},
                           config=config, train_dataset=train)
    trainer.train()


if __name__ == "__main__":
    main()
"""


def test_an_rllm_style_training_script_updates_the_weights(tmp_path, tiny_model_dir):
    (tmp_path / "train_parity.py").write_text(PARITY_SCRIPT)
    env = {**os.environ, "RLLM_HOME": str(tmp_path / "home")}
    args = [
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        "data.max_response_length=12",
        "rllm.workflow.use_workflow=True",
        f"{A}.model.path={tiny_model_dir}",
        f"{A}.rollout.n=4",
        f"{A}.actor.optim.lr=1e-2",
        f"{A}.actor.ppo_mini_batch_size=2",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.project_name=p",
        "trainer.experiment_name=parity",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]
    _run_script("train_parity.py", args, tmp_path, env)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert r["episodes"] == 8 and 0 < r["reward_mean"] < 1
        assert r["skipped_update"] == 0 and r["grad_norm"] > 0 and r["token_mismatch"] == 0
