import pytest

from rllm.config import AlgorithmConfig
from rllm.training.grouping import group_and_score, group_key
from rllm.types import Episode, Step, TerminationReason, Trajectory

R = TerminationReason


def _episode(task: str, idx: int, rewards: dict[str, list[float]], reason=R.ENV_DONE) -> Episode:
    trajectories = [Trajectory(name=role, steps=[Step(reward=r) for r in steps]) for role, steps in rewards.items()]
    return Episode(id=f"{task}:{idx}", trajectories=trajectories, termination_reason=reason)


def test_two_roles_group_by_task_and_role_with_hand_computed_grpo():
    # solver rewards of task a: [1, 0] -> mean 0.5, unbiased std 0.7071 -> +-0.7071
    # judge rewards of task a: [1, 1] -> all equal -> 0
    episodes = [
        _episode("a", 0, {"solver": [0.0, 1.0], "judge": [1.0]}),
        _episode("a", 1, {"solver": [0.0], "judge": [1.0]}),  # a shorter rollout lands in the same group
    ]
    batch = group_and_score(episodes, AlgorithmConfig(advantage="grpo"))
    keys = [group_key(ep, t) for ep, t in batch.trajectories]
    assert keys == ["a:solver", "a:judge", "a:solver", "a:judge"]
    adv = [round(a[0], 4) for a in batch.step_advantages]
    assert adv == [0.7071, 0.0, -0.7071, 0.0]
    assert [len(a) for a in batch.step_advantages] == [2, 1, 1, 1]  # broadcast to every step
    assert batch.stats["groups"] == 2


def test_infra_errors_are_excluded_from_baselines_and_training():
    episodes = [
        _episode("a", 0, {"agent": [1.0]}),
        _episode("a", 1, {"agent": [0.0]}),
        _episode("a", 2, {"agent": [0.0]}, reason=R.INFRA_ERROR),
    ]
    batch = group_and_score(episodes, AlgorithmConfig(advantage="rloo"))
    # RLOO over the two valid ones: 1 - 0 = 1, 0 - 1 = -1; the infra error is gone
    assert [a[0] for a in batch.step_advantages] == [1.0, -1.0]
    assert batch.stats["excluded_infra_error"] == 1 and batch.stats["kept"] == 2


def test_uniform_groups_are_dropped_and_counted_when_asked():
    episodes = [_episode("a", i, {"agent": [1.0]}) for i in range(2)] + [
        _episode("b", 0, {"agent": [1.0]}), _episode("b", 1, {"agent": [0.0]})]
    batch = group_and_score(episodes, AlgorithmConfig(advantage="grpo", drop_uniform_groups=True))
    assert [ep.task_id for ep, _ in batch.trajectories] == ["b", "b"]
    assert batch.stats["dropped_uniform"] == 2


def test_overlong_filter_and_policy_error_reward():
    episodes = [
        _episode("a", 0, {"agent": [1.0]}),
        _episode("a", 1, {"agent": [1.0]}, reason=R.MAX_RESPONSE_LENGTH),
        _episode("a", 2, {"agent": [0.0]}, reason=R.POLICY_ERROR),
    ]
    algo = AlgorithmConfig(advantage="dr_grpo", filter_overlong=True, policy_error_reward=-1.0)
    batch = group_and_score(episodes, algo)
    # valid rewards [1, -1] -> mean 0 -> advantages [1, -1] (no std division)
    assert batch.rewards == [1.0, -1.0]
    assert [a[0] for a in batch.step_advantages] == [1.0, -1.0]
    assert batch.stats["excluded_overlong"] == 1


def test_stepwise_mode_normalises_discounted_step_returns_within_the_group():
    # returns with gamma 0.5: traj0 steps [0, 1] -> [0.5, 1.0]; traj1 step [0] -> [0.0]
    # group of three step returns [0.5, 1, 0]: mean 0.5 -> dr_grpo advantages [0, 0.5, -0.5]
    episodes = [_episode("a", 0, {"agent": [0.0, 1.0]}), _episode("a", 1, {"agent": [0.0]})]
    batch = group_and_score(episodes, AlgorithmConfig(advantage="dr_grpo", stepwise=True, gamma=0.5))
    assert batch.step_advantages == [[0.0, 0.5], [-0.5]]


def test_remax_uses_the_greedy_reward_of_each_group():
    episodes = [_episode("a", 0, {"agent": [1.0]}), _episode("a", 1, {"agent": [0.0]})]
    batch = group_and_score(episodes, AlgorithmConfig(advantage="remax"), greedy_rewards={"a:agent": 0.25})
    assert [a[0] for a in batch.step_advantages] == [0.75, -0.25]
    with pytest.raises(ValueError, match="greedy"):
        group_and_score(episodes, AlgorithmConfig(advantage="remax"))
