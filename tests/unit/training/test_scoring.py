import warnings

import pytest

from rllm.config import AlgorithmConfig, ConfigError, RoleAlgorithmConfig, dump_config, load_config
from rllm.training.advantages import apply_gae, group_key, informative_tasks, score_episodes
from rllm.training.batch import build_rows
from rllm.types import Episode, ModelOutput, Step, TerminationReason, Trajectory

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
    batch = score_episodes(episodes, AlgorithmConfig(advantage="grpo"))
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
    batch = score_episodes(episodes, AlgorithmConfig(advantage="rloo"))
    # RLOO over the two valid ones: 1 - 0 = 1, 0 - 1 = -1; the infra error is gone
    assert [a[0] for a in batch.step_advantages] == [1.0, -1.0]
    assert batch.stats["excluded_infra_error"] == 1 and batch.stats["kept"] == 2


def test_uniform_groups_are_dropped_and_counted_when_asked():
    episodes = [_episode("a", i, {"agent": [1.0]}) for i in range(2)] + [
        _episode("b", 0, {"agent": [1.0]}),
        _episode("b", 1, {"agent": [0.0]}),
    ]
    batch = score_episodes(episodes, AlgorithmConfig(advantage="grpo", drop_uniform_groups=True))
    assert [ep.task_id for ep, _ in batch.trajectories] == ["b", "b"]
    assert batch.stats["dropped_uniform"] == 2


def test_overlong_filter_and_policy_error_reward():
    episodes = [
        _episode("a", 0, {"agent": [1.0]}),
        _episode("a", 1, {"agent": [1.0]}, reason=R.MAX_RESPONSE_LENGTH),
        _episode("a", 2, {"agent": [0.0]}, reason=R.POLICY_ERROR),
    ]
    algo = AlgorithmConfig(advantage="dr_grpo", filter_overlong=True, policy_error_reward=-1.0)
    batch = score_episodes(episodes, algo)
    # valid rewards [1, -1] -> mean 0 -> advantages [1, -1] (no std division)
    assert batch.rewards == [1.0, -1.0]
    assert [a[0] for a in batch.step_advantages] == [1.0, -1.0]
    assert batch.stats["excluded_overlong"] == 1


def test_stepwise_mode_normalises_discounted_step_returns_within_the_group():
    # returns with gamma 0.5: traj0 steps [0, 1] -> [0.5, 1.0]; traj1 step [0] -> [0.0]
    # group of three step returns [0.5, 1, 0]: mean 0.5 -> dr_grpo advantages [0, 0.5, -0.5]
    episodes = [_episode("a", 0, {"agent": [0.0, 1.0]}), _episode("a", 1, {"agent": [0.0]})]
    batch = score_episodes(episodes, AlgorithmConfig(advantage="dr_grpo", stepwise=True, gamma=0.5))
    assert batch.step_advantages == [[0.0, 0.5], [-0.5]]


def test_remax_uses_the_greedy_reward_of_each_group():
    episodes = [_episode("a", 0, {"agent": [1.0]}), _episode("a", 1, {"agent": [0.0]})]
    batch = score_episodes(episodes, AlgorithmConfig(advantage="remax"), greedy_rewards={"a:agent": 0.25})
    assert [a[0] for a in batch.step_advantages] == [0.75, -0.25]
    with pytest.raises(ValueError, match="greedy"):
        score_episodes(episodes, AlgorithmConfig(advantage="remax"))


# ------------------------------------------------------------------------------------------------ per-role settings


def _multi(episode_id: str, trajectories: list[tuple[str, list[float]]]) -> Episode:
    """An episode with several trajectories per role: `[(role, step rewards), ...]` in this order."""
    trajs = [Trajectory(name=role, steps=[Step(reward=r) for r in steps]) for role, steps in trajectories]
    return Episode(id=episode_id, trajectories=trajs, termination_reason=R.ENV_DONE)


def _solver_judge_batch() -> list[Episode]:
    return [
        _multi("t:0", [("solver", [1.0]), ("solver", [0.0, 0.0, 0.0]), ("judge", [1.0])]),
        _multi("t:1", [("judge", [-1.0]), ("solver", [0.0, 0.5, 0.5]), ("solver", [1.0])]),
        _multi("u:0", [("solver", [1.0]), ("solver", [0.0, 0.0]), ("judge", [0.5])]),
    ]


def test_solver_grpo_and_judge_reinforce_per_role():
    algo = AlgorithmConfig(advantage="grpo", roles={"judge": {"advantage": "reinforce"}})
    batch = score_episodes(_solver_judge_batch(), algo)
    keys = [group_key(ep, t) for ep, t in batch.trajectories]
    # original order is kept; 1-step and 3-step solvers of task t share one group
    assert keys == [
        "t:solver",
        "t:solver",
        "t:judge",
        "t:judge",
        "t:solver",
        "t:solver",
        "u:solver",
        "u:solver",
        "u:judge",
    ]
    # t:solver rewards [1, 0, 1, 1]: mean 0.75; squared deviations 0.0625 + 0.5625 + 0.0625 + 0.0625 = 0.75;
    #   unbiased var 0.75 / 3 = 0.25, std 0.5 -> (r - 0.75) / 0.5 = [0.5, -1.5, 0.5, 0.5]
    # t:judge (reinforce): raw rewards [1, -1]
    # u:solver [1, 0]: mean 0.5, std sqrt(0.5) = 0.70711 -> [0.70711, -0.70711]
    # u:judge alone (reinforce): its raw 0.5 -- GRPO would give a group of one 0
    expected = [[0.5], [-1.5] * 3, [1.0], [-1.0], [0.5] * 3, [0.5], [0.70711], [-0.70711] * 2, [0.5]]
    assert len(batch.step_advantages) == len(expected)
    for got, want in zip(batch.step_advantages, expected, strict=True):
        assert got == pytest.approx(want, abs=1e-4)
    assert batch.stats["groups"] == 4 and batch.stats["kept"] == 9


def test_without_roles_every_trajectory_uses_the_global_estimator():
    batch = score_episodes(_solver_judge_batch(), AlgorithmConfig(advantage="grpo"))
    # t:judge [1, -1]: mean 0, std sqrt(2) = 1.41421 -> +-0.70711; u:judge is a group of one -> 0
    judge = [a[0] for (_, t), a in zip(batch.trajectories, batch.step_advantages, strict=True) if t.name == "judge"]
    assert judge == pytest.approx([0.70711, -0.70711, 0.0], abs=1e-4)


def test_stepwise_for_one_role_only():
    episodes = [
        _multi("a:0", [("solver", [0.0, 1.0]), ("judge", [0.0, 1.0])]),
        _multi("a:1", [("solver", [0.0, 0.0, 2.0]), ("judge", [0.0, 0.0])]),
    ]
    algo = AlgorithmConfig(advantage="dr_grpo", roles={"solver": {"stepwise": True, "gamma": 0.5}})
    batch = score_episodes(episodes, algo)
    # solver returns, gamma 0.5: [0, 1] -> [0.5, 1.0]; [0, 0, 2] -> G2 = 2, G1 = 0 + 0.5 * 2 = 1, G0 = 0.5
    #   one group of 5 step returns [0.5, 1, 0.5, 1, 2]: mean 1 -> [-0.5, 0] and [-0.5, 0, 1]
    # judge stays trajectory-level: rewards [1, 0], mean 0.5 -> 0.5 and -0.5 on every step
    assert batch.step_advantages == [[-0.5, 0.0], [0.5, 0.5], [-0.5, 0.0, 1.0], [-0.5, -0.5]]


def test_remax_for_one_role_needs_greedy_rewards_only_for_its_groups():
    episodes = [
        _multi("a:0", [("solver", [1.0]), ("judge", [1.0])]),
        _multi("a:1", [("solver", [0.0]), ("judge", [0.0])]),
    ]
    algo = AlgorithmConfig(advantage="grpo", norm_by_std=False, roles={"judge": {"advantage": "remax"}})
    assert algo.uses_advantage("remax")
    batch = score_episodes(episodes, algo, greedy_rewards={"a:judge": 0.25})
    # solver (grpo without std): [1, 0] - 0.5 -> [0.5, -0.5]; judge (remax): [1, 0] - 0.25 -> [0.75, -0.25]
    assert [a[0] for a in batch.step_advantages] == [0.5, 0.75, -0.5, -0.25]
    with pytest.raises(ValueError, match="a:judge"):
        score_episodes(episodes, algo, greedy_rewards={"a:solver": 0.0})


def test_role_norm_by_std_override():
    episodes = [_episode("a", 0, {"judge": [2.0]}), _episode("a", 1, {"judge": [0.0]})]
    algo = AlgorithmConfig(advantage="grpo", roles={"judge": {"norm_by_std": False}})
    # [2, 0] - mean 1 = [1, -1], not divided by std sqrt(2) (which would give +-0.70711)
    assert [a[0] for a in score_episodes(episodes, algo).step_advantages] == [1.0, -1.0]


def test_gae_is_for_all_roles_or_none():
    with pytest.raises(ValueError, match=r"algorithm.roles.judge.advantage='gae'.*set algorithm.advantage=gae"):
        AlgorithmConfig(advantage="grpo", roles={"judge": {"advantage": "gae"}})
    with pytest.raises(ValueError, match=r"drop algorithm.roles.judge.advantage \(it inherits gae\)"):
        AlgorithmConfig(advantage="gae", roles={"judge": {"advantage": "reinforce"}})
    AlgorithmConfig(advantage="gae", roles={"judge": {"advantage": "gae", "gamma": 0.9}, "solver": {"gamma": 0.5}})
    with pytest.raises(ConfigError, match=r"algorithm.roles.*'gae'.*all roles or none"):
        load_config(None, ["algorithm.advantage=gae", "algorithm.roles.judge.advantage=grpo"])


def test_for_role_inherits_what_the_role_leaves_unset():
    algo = AlgorithmConfig(
        advantage="grpo", gamma=0.9, clip_high=0.28, roles={"judge": {"advantage": "reinforce", "stepwise": True}}
    )
    judge, solver = algo.for_role("judge"), algo.for_role("solver")
    assert (judge.advantage, judge.stepwise, judge.gamma, judge.norm_by_std, judge.clip_high) == (
        "reinforce",
        True,
        0.9,
        True,
        0.28,
    )
    assert judge.roles == {} and solver.roles == {}
    assert solver == AlgorithmConfig(advantage="grpo", gamma=0.9, clip_high=0.28)  # unlisted role: the globals
    assert algo.roles["judge"].gamma is None  # the source is unchanged


def test_uses_advantage_looks_at_the_global_setting_and_every_role():
    algo = AlgorithmConfig(advantage="rloo", roles={"judge": {"advantage": "reinforce"}, "solver": {"gamma": 0.5}})
    assert algo.uses_advantage("rloo") and algo.uses_advantage("reinforce")
    assert not algo.uses_advantage("remax") and not algo.uses_advantage("grpo")


def test_roles_load_from_yaml_and_dotted_overrides(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("algorithm:\n  advantage: grpo\n  roles:\n    judge:\n      advantage: reinforce\n")
    cfg = load_config(path)
    assert cfg.algorithm.roles == {"judge": RoleAlgorithmConfig(advantage="reinforce")}
    assert cfg.algorithm.for_role("judge").advantage == "reinforce"
    # a dotted override creates the role's entry; another key of the same role merges into it
    overridden = load_config(None, ["algorithm.roles.judge.advantage=reinforce", "algorithm.roles.judge.gamma=0.5"])
    assert overridden.algorithm.roles == {"judge": RoleAlgorithmConfig(advantage="reinforce", gamma=0.5)}
    (tmp_path / "dumped.yaml").write_text(dump_config(overridden))
    assert load_config(tmp_path / "dumped.yaml") == overridden
    with pytest.raises(ConfigError, match="algorithm.roles.judge.advantag"):
        load_config(None, ["algorithm.roles.judge.advantag=reinforce"])


def test_stepwise_remax_baselines_follow_the_groups_when_a_first_trajectory_is_empty():
    # a:0 has no steps, so the first *step* seen is b's: the per-group baselines must still line up with the keys
    episodes = [_episode("a", 0, {"s": []}), _episode("b", 0, {"s": [1.0]}), _episode("a", 1, {"s": [1.0]})]
    algo = AlgorithmConfig(advantage="remax", stepwise=True)
    batch = score_episodes(episodes, algo, greedy_rewards={"a:s": 0.0, "b:s": 0.5})
    # b: 1 - 0.5 = 0.5; a:1: 1 - 0 = 1 (the empty a:0 is excluded)
    assert batch.step_advantages == [[0.5], [1.0]]


# ------------------------------------------------------------------------------------ PPO with a critic (GAE)


def _token_step(prompt: list[int], completion: list[int], reward: float) -> Step:
    output = ModelOutput(prompt_ids=prompt, completion_ids=completion, logprobs=[-0.5] * len(completion))
    return Step(model_output=output, reward=reward)


def _two_turns(second_prompt: list[int]) -> Episode:
    """Turn 0 samples [3, 4] after [1, 2] (reward 0.5); turn 1 samples [6] after `second_prompt` (reward 1.0)."""
    steps = [_token_step([1, 2], [3, 4], 0.5), _token_step(second_prompt, [6], 1.0)]
    return Episode(id="t:0", trajectories=[Trajectory(steps=steps)], termination_reason=R.ENV_DONE)


def _gae_rows(episode: Episode, algo: AlgorithmConfig):
    batch = score_episodes([episode], algo)
    rows, _ = build_rows(
        batch.trajectories,
        step_advantages=batch.step_advantages,
        step_rewards=batch.step_rewards,
        max_prompt_length=64,
        max_response_length=64,
    )
    return rows


def test_the_critic_sees_each_steps_reward_stepwise_and_the_trajectorys_reward_otherwise_on_its_last_token():
    episode = _two_turns([1, 2, 3, 4, 5])  # extends: one row [1 2 | 3 4 | 5 | 6]
    (row,) = _gae_rows(episode, AlgorithmConfig(advantage="gae"))
    assert row.input_ids == [1, 2, 3, 4, 5, 6] and row.loss_mask == [0, 0, 1, 1, 0, 1]
    assert row.rewards == [0, 0, 0, 0, 0, 1.5]  # the trajectory's reward (sum of steps) at its very end
    (row,) = _gae_rows(episode, AlgorithmConfig(advantage="gae", stepwise=True))
    assert row.rewards == [0, 0, 0, 0.5, 0, 1.0]
    assert row.advantages == [0.0] * 6  # left for apply_gae


def test_gae_returns_are_the_discounted_rewards_to_go_and_advantages_are_whitened():
    algo = AlgorithmConfig(advantage="gae", stepwise=True, gamma=0.5, lam=1.0)
    (row,) = _gae_rows(_two_turns([1, 2, 3, 4, 5]), algo)
    values = [0.0, 0.0, 0.2, 0.4, 9.0, 0.6]  # 9.0 sits on an observation token: never read
    stats = apply_gae([row], [values], algo)
    # action tokens t2, t3, t5 with rewards [0, 0.5, 1.0], gamma 0.5 per action token:
    #   G5 = 1.0; G3 = 0.5 + 0.5 * 1.0 = 1.0; G2 = 0 + 0.5 * 1.0 = 0.5   (lam = 1: returns need no values)
    assert row.returns == pytest.approx([0, 0, 0.5, 1.0, 0, 1.0])
    # G - V = [0.3, 0.6, 0.4]: mean 0.4333, unbiased std 0.15275 -> whitened
    assert row.advantages == pytest.approx([0, 0, -0.8729, 1.0911, 0, -0.2182], abs=1e-4)
    assert row.old_values == values
    assert stats["return_mean"] == pytest.approx(2.5 / 3) and stats["old_value_mean"] == pytest.approx(0.4)


def test_gae_bootstraps_across_the_rows_of_a_split_trajectory():
    algo = AlgorithmConfig(advantage="gae", gamma=0.9, lam=0.5)
    (merged,) = _gae_rows(_two_turns([1, 2, 3, 4, 5]), algo)
    first, second = _gae_rows(_two_turns([7, 5]), algo)  # turn 1 rewrote history: a second row [7 5 | 6]
    assert (first.input_ids, second.input_ids) == ([1, 2, 3, 4], [7, 5, 6])
    apply_gae([merged], [[0, 0, 0.1, 0.3, 0, 0.7]], algo)
    apply_gae([first, second], [[0, 0, 0.1, 0.3], [0, 0, 0.7]], algo)
    # the same three action tokens with the same values: the split row continues the trajectory, it does not end it
    assert first.returns[2:] + second.returns[2:] == pytest.approx([merged.returns[i] for i in (2, 3, 5)])
    assert first.advantages[2:] + second.advantages[2:] == pytest.approx([merged.advantages[i] for i in (2, 3, 5)])


# ---- refused rewards: never trained as 0 -----------------------------------------------------------------------


def test_a_non_finite_env_reward_ends_its_episode_and_is_left_out_of_training_counted():
    import math
    from collections import Counter

    from rllm.agents.base import BaseAgent
    from rllm.config import AlgorithmConfig
    from rllm.engine.execution import AgentExecutionEngine
    from rllm.models.fake import FakeModel
    from rllm.training.advantages import score_episodes
    from rllm.types import TerminationReason
    from tests.support.envs import CounterEnv

    class NaNOnTask1(CounterEnv):
        def step(self, action):
            observation, reward, done, info = super().step(action)
            return observation, math.nan if self.name == "1" else reward, done, info

    engine = AgentExecutionEngine(
        agent_class=BaseAgent,
        env_class=NaNOnTask1,
        model=FakeModel("yes"),
        env_args={"log": Counter()},
        retry_backoff=0.0,
    )
    episodes = engine.execute_tasks([{"id": i, "k": 1} for i in range(3)], n_rollouts=2)
    reasons = [ep.termination_reason for ep in episodes]
    assert (
        reasons == [TerminationReason.ENV_DONE] * 2 + [TerminationReason.ERROR] * 2 + [TerminationReason.ENV_DONE] * 2
    )
    assert "NaNOnTask1.step returned the reward nan; rewards must be finite" in episodes[2].info["error"]
    assert episodes[2].info["error_site"] == "reward" and episodes[2].metrics["retries"] == 0  # a bug: not retried
    batch = score_episodes(episodes, AlgorithmConfig(advantage="reinforce"))
    assert batch.stats["excluded_reward_error"] == 2 and len(batch.trajectories) == 4
    assert all(episode.task_id != "1" for episode, _ in batch.trajectories)


def test_a_reward_function_returning_nan_is_left_out_of_training_counted():
    import math

    from rllm.config import AlgorithmConfig
    from rllm.engine.workflow_engine import AgentWorkflowEngine
    from rllm.models.fake import FakeModel
    from rllm.training.advantages import score_episodes
    from rllm.types import TerminationReason
    from rllm.workflows.single_turn import SingleTurnWorkflow

    def nan_for_b(task, response):
        return math.nan if task["question"] == "b" else 1.0

    workflow_args = {"reward_fn": nan_for_b, "prompt_fn": lambda t: t["question"]}
    engine = AgentWorkflowEngine(workflow_class=SingleTurnWorkflow, model=FakeModel("yes"), workflow_args=workflow_args)
    episodes = engine.execute_tasks([{"id": q, "question": q} for q in "abc"], n_rollouts=2)
    refused = [ep for ep in episodes if ep.termination_reason is TerminationReason.ERROR]
    assert len(refused) == 2 and "nan_for_b returned a non-finite reward nan" in refused[0].info["error"]
    batch = score_episodes(episodes, AlgorithmConfig(advantage="reinforce"))
    assert batch.stats["excluded_reward_error"] == 2 and len(batch.trajectories) == 4


@pytest.mark.parametrize("advantage", ["grpo", "rloo", "reinforce_pp"])
def test_a_uniform_group_of_partial_credit_rewards_trains_with_exactly_zero_advantage(advantage):
    episodes = [_episode("a", i, {"agent": [0.7]}) for i in range(8)] + [
        _episode("b", i, {"agent": [0.1 * (i % 2)]}) for i in range(4)
    ]
    batch = score_episodes(episodes, AlgorithmConfig(advantage=advantage))
    assert [a[0] for a in batch.step_advantages[:8]] == [0.0] * 8
    assert all(a[0] != 0.0 for a in batch.step_advantages[8:])


def test_the_first_step_warns_when_the_task_gives_no_signal():
    from rllm.training.step import warn_if_no_signal

    never = [_episode("a", i, {"agent": [0.0]}) for i in range(4)] + [
        _episode("b", i, {"agent": [0.0]}) for i in range(4)
    ]
    batch = score_episodes(never, AlgorithmConfig())
    assert batch.stats["uniform_groups"] == batch.stats["groups"] == 2
    with pytest.warns(RuntimeWarning, match=r"step 1: the model solved 0% of its 8 episodes and 100% of the 2 groups"):
        warn_if_no_signal(1, never, batch.stats)
    mixed = [_episode("a", i, {"agent": [float(i % 2)]}) for i in range(4)]
    for episode in mixed:
        episode.is_correct = episode.trajectories[0].steps[0].reward > 0
    batch = score_episodes(mixed, AlgorithmConfig())
    assert batch.stats["uniform_groups"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_no_signal(1, mixed, batch.stats)  # a signal: silent


def _replies(task: str, idx: int, lengths: list[int], reward: float) -> Episode:
    steps = [
        Step(model_output=ModelOutput(prompt_ids=[1], completion_ids=[2] * n, logprobs=[-0.1] * n)) for n in lengths
    ]
    steps[-1].reward = reward
    return Episode(id=f"{task}:{idx}", trajectories=[Trajectory(steps=steps)], termination_reason=R.ENV_DONE)


def test_dapo_soft_overlong_punishment_is_added_to_each_replys_reward():
    # max_tokens 10, buffer 4: replies of <= 6 tokens cost 0; 8 tokens -(8 - 6) / 4 = -0.5; 10 tokens -1
    episodes = [
        _replies("a", 0, [6], 1.0),
        _replies("a", 1, [8], 1.0),
        _replies("a", 2, [10], 1.0),
        _replies("a", 3, [8, 10], 1.0),
    ]
    algorithm = AlgorithmConfig(advantage="rloo", overlong_buffer=4)
    batch = score_episodes(episodes, algorithm, max_tokens=10)
    assert batch.rewards == [1.0, 0.5, 0.0, -0.5]  # two replies: both punished, -0.5 - 1
    assert batch.stats["overlong_penalized"] == 4
    assert score_episodes(episodes, AlgorithmConfig(advantage="rloo")).rewards == [1.0] * 4  # off by default
    stepwise = score_episodes(
        episodes, AlgorithmConfig(advantage="rloo", overlong_buffer=4, stepwise=True), max_tokens=10
    )
    assert stepwise.step_rewards[3] == [-0.5, 0.0]  # each step carries its own reply's punishment


def test_an_overlong_buffer_must_leave_room_before_the_limit():
    with pytest.raises(ConfigError, match="overlong_buffer=12 must be below rollout.max_tokens=12"):
        load_config(None, ["algorithm.overlong_buffer=12", "rollout.max_tokens=12"])


def test_refilling_needs_the_uniform_groups_dropped():
    with pytest.raises(ConfigError, match="set algorithm.drop_uniform_groups=true"):
        load_config(None, ["algorithm.max_sampling_rounds=3"])
    episodes = [_episode("a", i, {"agent": [float(i % 2)]}) for i in range(2)]
    episodes += [_episode("b", i, {"agent": [1.0]}) for i in range(2)]
    assert informative_tasks(episodes, AlgorithmConfig()) == {"a"}
