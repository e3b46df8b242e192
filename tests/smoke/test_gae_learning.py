"""PPO with a critic learns on the embedded model: on arithmetic, the value loss falls over a few steps and the GAE
returns move close to the discounted rewards (lam < 1, so returns lean on the critic's values). The run is also the
suite's clean run for the alarms (`rllm.health`): the demo's config, learning, and `rllm audit` finds nothing."""

from __future__ import annotations

import pytest

from rllm.audit import audit_run
from rllm.config import load_config
from rllm.engine import AgentWorkflowEngine
from rllm.inference import InferenceOptions
from rllm.runs import load_metrics
from rllm.training.advantages import apply_gae, score_episodes
from rllm.training.batch import build_rows
from rllm.training.trainer import AgentTrainer
from tests.support.cli import run_rllm

pytestmark = pytest.mark.slow

STEPS = 6


def _returns_error(trainer: AgentTrainer, values_of) -> float:
    """Mean |GAE return - discounted reward-to-go| over the action tokens of fresh rollouts, with values from
    `values_of(rows)`. gamma is 1, so every action token's discounted reward-to-go is its trajectory's reward."""
    cfg = trainer.config
    model = trainer.backend.make_rollout_model(InferenceOptions(seed=1))
    try:
        engine = AgentWorkflowEngine(
            workflow_class=trainer.workflow_class,
            workflow_args=trainer.workflow_args,
            model=model,
            sampling=cfg.rollout.to_sampling(seed=1),
        )
        episodes = engine.execute_tasks(trainer.val_dataset, n_rollouts=2)
    finally:
        model.close()
    batch = score_episodes(episodes, cfg.algorithm)
    rows, _ = build_rows(
        batch.trajectories,
        step_advantages=batch.step_advantages,
        step_rewards=batch.step_rewards,
        max_prompt_length=512,
        max_response_length=512,
    )
    apply_gae(rows, values_of(rows), cfg.algorithm)
    errors = [
        abs(row.returns[t] - batch.rewards[row.trajectory_index])
        for row in rows
        for t, mask in enumerate(row.loss_mask)
        if mask
    ]
    return sum(errors) / len(errors)


def test_the_critic_learns_on_arithmetic_with_the_embedded_model(tmp_path):
    config = load_config(
        "configs/arithmetic_grpo.yaml",
        [
            "algorithm.advantage=gae",
            "algorithm.lam=0.95",
            "rollout.n=2",
            "trainer.tasks_per_step=4",
            f"trainer.total_steps={STEPS}",
            "data.task_args.digits=[2,1]",
            "data.val_size=8",
            "trainer.val_every=0",
            "trainer.tensorboard=false",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=gae",
        ],
    )
    trainer = AgentTrainer(config=config, progress=False)
    trainer.train()
    steps = [m for m in load_metrics(tmp_path / "gae") if "value_loss" in m]
    assert len(steps) == STEPS
    first, last = steps[0]["value_loss"], [m["value_loss"] for m in steps[-3:]]
    assert sum(last) / 3 < 0.75 * first, [m["value_loss"] for m in steps]
    assert steps[0]["old_value_mean"] == 0.0 and steps[-1]["old_value_mean"] > 0.3  # from a zero head to the returns
    # With an untrained critic (values 0) the lam-returns shrink the reward by lam per token to the end; the trained
    # critic's values bring them close to the discounted rewards.
    untrained = _returns_error(trainer, lambda rows: [[0.0] * len(row) for row in rows])
    trained = _returns_error(trainer, trainer.backend.compute_values)
    assert trained < 0.7 * untrained, (trained, untrained)
    # a clean run of the demo's config raises no alarm (rllm.health), in its metrics or in `rllm audit`
    assert not [key for m in steps for key in m if key.startswith("alarm/")]
    assert audit_run(tmp_path / "gae").alarms == []
    audit = run_rllm("audit", str(tmp_path / "gae"))
    assert audit.returncode == 0 and f"{STEPS} steps, no alarms" in audit.stderr, audit.stdout + audit.stderr
