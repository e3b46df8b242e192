"""FrozenLake env, its task generator and its agent."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from rllm.tasks.frozenlake import (
    FROZENLAKE_SYSTEM_PROMPT,
    FrozenLakeAgent,
    FrozenLakeEnv,
    make_frozenlake_tasks,
    parse_move,
    render_grid,
    shortest_path,
    shortest_path_length,
)
from rllm.types import ModelOutput

# ---------------------------------------------------------------- maps


@pytest.mark.parametrize("size", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("hole_prob", [0.2, 0.4])
def test_generated_maps_are_solvable_and_deterministic(size, hole_prob):
    for seed in range(30):
        env = FrozenLakeEnv(size=size, hole_prob=hole_prob, seed=seed)
        assert env.desc == FrozenLakeEnv(size=size, hole_prob=hole_prob, seed=seed).desc
        assert len(env.desc) == size and all(len(row) == size for row in env.desc)
        assert shortest_path_length(env.desc) is not None


def test_hole_prob_is_the_probability_of_a_hole():
    assert all("H" not in "".join(FrozenLakeEnv(size=5, hole_prob=0.0, seed=s).desc) for s in range(10))
    cells = "".join("".join(FrozenLakeEnv(size=6, hole_prob=0.3, seed=s).desc)[1:-1] for s in range(100))
    # Redrawing unsolvable maps biases the rate down a little; gymnasium's p (frozen) would give about 0.7.
    assert 0.15 < cells.count("H") / len(cells) < 0.35


def test_shortest_path_bfs():
    assert shortest_path(["SF", "FG"]) in (["right", "down"], ["down", "right"])
    assert shortest_path(["SFF", "HHF", "GFF"]) == ["right", "right", "down", "down", "left", "left"]
    assert shortest_path(["SH", "HG"]) is None
    assert shortest_path_length(["SFF", "HHF", "GFF"]) == 6
    assert shortest_path_length(["SF", "FG"], start=(1, 1)) == 0


def test_render_grid_legend():
    assert render_grid(["SFH", "FFF", "HFG"], (1, 2)) == "_ _ O\n_ _ P\nO _ G"


# ---------------------------------------------------------------- stepping


def test_reaching_the_goal_gives_reward_1_and_ends():
    env = FrozenLakeEnv(desc=["SF", "FG"])
    observation, info = env.reset()
    assert observation == "P _\n_ G"
    assert info["position"] == [0, 0] and info["optimal_steps"] == 2
    assert env.step("right")[1:3] == (0.0, False)
    observation, reward, done, info = env.step("down")
    assert (reward, done, info["success"], info["steps"], info["position"]) == (1.0, True, True, 2, [1, 1])
    assert "goal" in observation


def test_falling_in_a_hole_ends_with_0():
    env = FrozenLakeEnv(desc=["SH", "FG"])
    env.reset()
    observation, reward, done, info = env.step(2)  # gymnasium's RIGHT
    assert (reward, done, info["fell_in_hole"], info["success"]) == (0.0, True, True, False)
    assert "hole" in observation


@pytest.mark.parametrize("action", ["up", "UP", " Up ", 3])
def test_actions_accept_words_in_any_case_and_gymnasium_ids(action):
    env = FrozenLakeEnv(desc=["SFF", "FFF", "FFG"])
    env.reset()
    env.step("down")
    assert env.step(action)[3]["position"] == [0, 0]


@pytest.mark.parametrize("action", [None, "", "jump", "up!", 4, -1, True, 2.0, ["up"]])
def test_invalid_action_does_not_move_but_counts(action):
    env = FrozenLakeEnv(desc=["SF", "FG"], max_steps=5)
    env.reset()
    observation, reward, done, info = env.step(action)
    assert info["invalid_action"] is True and info["position"] == [0, 0] and info["steps"] == 1
    assert (reward, done) == (0.0, False)
    assert observation.startswith("Invalid action.") and "up, down, left or right" in observation
    assert env.step("right")[3]["invalid_action"] is False


def test_bumping_the_edge_says_so():
    env = FrozenLakeEnv(desc=["SF", "FG"])
    env.reset()
    observation, _, done, info = env.step("up")
    assert "edge" in observation and info["position"] == [0, 0] and not done


def test_max_steps_ends_the_episode_with_0():
    env = FrozenLakeEnv(desc=["SFF", "FFF", "FFG"], max_steps=2)
    env.reset()
    assert env.step("left")[2] is False
    observation, reward, done, info = env.step(None)
    assert (reward, done, info["truncated"], info["success"]) == (0.0, True, True, False)
    assert "Out of moves" in observation


def test_goal_on_the_last_allowed_step_is_a_success():
    env = FrozenLakeEnv(desc=["SF", "FG"], max_steps=2)
    env.reset()
    env.step("down")
    _, reward, done, info = env.step("right")
    assert (reward, done, info["success"], info["truncated"]) == (1.0, True, True, False)


def test_step_after_done_raises_and_reset_restarts():
    env = FrozenLakeEnv(desc=["SH", "FG"])
    env.reset()
    env.step("right")
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("down")
    assert env.reset()[1]["position"] == [0, 0]
    assert env.step("down")[2] is False


def test_default_max_steps_scales_with_size():
    assert FrozenLakeEnv(size=3).max_steps == 12
    assert FrozenLakeEnv(size=3, max_steps=5).max_steps == 5


def test_episode_observations_and_infos_round_trip_through_json():
    env = FrozenLakeEnv(size=4, seed=7)
    records = [env.reset()]
    rng, done = random.Random(0), False
    while not done:
        observation, reward, done, info = env.step(rng.choice(["up", "down", "left", "right", None]))
        records.append((observation, info))
        assert isinstance(reward, float) and isinstance(done, bool)
    assert json.loads(json.dumps(records)) == [list(record) for record in records]


# ---------------------------------------------------------------- from_dict and tasks


def test_from_dict_ignores_unknown_keys():
    env = FrozenLakeEnv.from_dict({"size": 3, "hole_prob": 0.1, "seed": 4, "max_steps": 6, "id": "x", "extra": [1]})
    assert (env.size, env.hole_prob, env.seed, env.max_steps) == (3, 0.1, 4, 6)
    assert env.desc == FrozenLakeEnv(size=3, hole_prob=0.1, seed=4).desc


@pytest.mark.parametrize(
    ("row", "error", "words"),
    [
        ({"size": "4"}, TypeError, "size must be an int"),
        ({"size": True}, TypeError, "size must be an int"),
        ({"hole_prob": "0.2"}, TypeError, "hole_prob must be a number"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"max_steps": "10"}, TypeError, "max_steps must be an int"),
        ({"desc": "SFFG"}, TypeError, "desc must be a list"),
        ({"desc": ["SF", "FF"]}, ValueError, "G bottom-right"),
        ({"hole_prob": 1.0}, ValueError, r"hole_prob must be in \[0, 1\)"),
        ({"size": 1}, ValueError, "size must be at least 2"),
        ({"max_steps": 0}, ValueError, "max_steps must be at least 1"),
    ],
)
def test_from_dict_wrong_values_raise_clear_errors(row, error, words):
    with pytest.raises(error, match=words):
        FrozenLakeEnv.from_dict(row)


def test_make_frozenlake_tasks_is_deterministic_with_unique_ids():
    tasks = make_frozenlake_tasks(30, seed=3, sizes=(2, 3, 4), hole_prob=0.25)
    assert tasks == make_frozenlake_tasks(30, seed=3, sizes=(2, 3, 4), hole_prob=0.25)
    assert tasks != make_frozenlake_tasks(30, seed=4, sizes=(2, 3, 4), hole_prob=0.25)
    assert len({task["id"] for task in tasks}) == 30
    assert [task["size"] for task in tasks[:4]] == [2, 3, 4, 2]
    for task in tasks:
        env = FrozenLakeEnv.from_dict(task)
        assert env.desc == task["desc"] == FrozenLakeEnv(task["size"], task["hole_prob"], task["seed"]).desc
        assert task["optimal_steps"] == shortest_path_length(task["desc"])
    assert json.loads(json.dumps(tasks)) == tasks


def test_scripted_bfs_policy_always_succeeds():
    for task in make_frozenlake_tasks(60, seed=1, sizes=(2, 3, 4, 5), hole_prob=0.35):
        env = FrozenLakeEnv.from_dict(task)
        _, info = env.reset()
        done, reward = False, 0.0
        while not done:
            move = shortest_path(env.desc, tuple(info["position"]))[0]
            _, reward, done, info = env.step(move)
        assert reward == 1.0 and info["success"] and info["steps"] == task["optimal_steps"], task["id"]


def test_env_passes_check_env():
    from rllm.envs import check_env

    report = check_env(FrozenLakeEnv, make_frozenlake_tasks(1)[0], n_episodes=4)
    assert report.problems == [] and report.warnings == [] and report.multithread_safe is True


# ---------------------------------------------------------------- agent


@pytest.mark.parametrize(
    ("reply", "move"),
    [
        ("Action: Up", "up"),
        ("up", "up"),
        ("**Down**", "down"),
        ("I'll go right.", "right"),
        ("LEFT", "left"),
        ("Down is a hole, so I will move right", "right"),
        ("Action: left. Going left avoids the hole below (down).", "left"),
        ("Maybe up? Action: down", "down"),
        ("action:RIGHT", "right"),
        ("Action: up\nAction: down", "down"),
        ("I move down. Action: D", "down"),
        ("Move east", "right"),
        ("→", "right"),
        ("upon reflection, rightly so", None),
        ("I don't know", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_move(reply, move):
    assert parse_move(reply) == move


def test_agent_history_is_append_only_and_prompt_is_short():
    assert len(FROZENLAKE_SYSTEM_PROMPT) < 250
    env, agent = FrozenLakeEnv(desc=["SFF", "HFF", "FFG"]), FrozenLakeAgent()
    observation, info = env.reset()
    agent.update_from_env(observation, 0.0, False, info)
    seen: list[list[dict]] = []
    for reply in ["Action: right", "hmm", "Action: right", "Action: down", "Down again."]:
        seen.append([dict(message) for message in agent.chat_completions])
        action = agent.update_from_model(ModelOutput(text=reply)).action
        observation, reward, done, info = env.step(action)
        agent.update_from_env(observation, reward, done, info)
    for before, after in itertools.pairwise(seen):
        assert after[: len(before)] == before  # earlier messages never change
    assert agent.messages[0] == {"role": "system", "content": FROZENLAKE_SYSTEM_PROMPT}
    steps = agent.trajectory.steps
    assert [step.action for step in steps] == ["right", None, "right", "down", "down"]
    assert steps[1].info["invalid_action"] is True
    assert steps[-1].done and steps[-1].reward == 1.0
    assert agent.messages[-1]["role"] == "assistant"  # no user message after the episode ended


def test_agent_reads_content_before_text():
    agent = FrozenLakeAgent()
    assert agent.parse_action(ModelOutput(text="<think>up</think>left", content="left")) == "left"
