"""rLLM v0.2's FrozenLakeEnv and FrozenLakeAgent (`rllm.environments.frozenlake.frozenlake`, `rllm.agents.
frozenlake_agent`). The expected maps, observations and step results were computed by running rLLM v0.2.1's own
FrozenLake module (not part of this repository) on the same arguments."""

from __future__ import annotations

import pytest

from rllm.agents.agent import Action, BaseAgent, Trajectory
from rllm.agents.frozenlake_agent import FrozenLakeAgent
from rllm.environments.base.base_env import BaseEnv
from rllm.environments.frozenlake import frozenlake
from rllm.environments.frozenlake.frozenlake import FrozenLakeEnv, generate_random_map

# (seed, size, p, validity depth) -> rLLM's map and goal
RLLM_MAPS = [
    ((42, 4, 0.8, 5), ["FFSF", "FHFF", "FFFH", "GHFF"], (3, 0)),
    ((0, 3, 0.6, 5), ["HFG", "FHS", "HHF"], (0, 2)),
    ((1234, 6, 0.7, 5), ["FFFHFH", "HFFFFF", "FFFSFF", "HFFGHH", "FHFHFF", "FFFFFF"], (3, 3)),
    ((99, 2, 0.85, 5), ["FG", "FS"], (0, 1)),
    (
        (7, 8, 0.8, 8),
        ["FHFFFHFH", "FFFFFFFF", "HGFHFFFF", "FFFHFFFF", "FFFSFFHF", "FHFHFFFF", "FHFFFFFF", "HFHFFFFF"],
        (2, 1),
    ),
    ((0, 6, 0.8, 8), ["FFFFHH", "FFFHHF", "HFSFHF", "FFFFFF", "FFHHFG", "FFFFFF"], (4, 5)),
    ((0, 6, 0.8, 5), ["HFGFFF", "FHSFFH", "FFHFFF", "FFFFFF", "FFFFFH", "FFFHFH"], (0, 2)),
]


def grid(*rows: str) -> str:
    cells = {"P": " P \t", "_": " _ \t", "O": " O \t", "G": " G \t", "X": " X \t", "V": " √ \t"}
    return "\n".join("".join(cells[cell] for cell in row) for row in rows)


# ---- the env ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "rows", "goal"), RLLM_MAPS)
def test_maps_are_rllms_for_the_same_seed_size_and_p(args, rows, goal):
    seed, size, p, depth = args
    assert generate_random_map(size=size, p=p, seed=seed, max_steps=depth) == (rows, goal)


def test_construction_uses_max_steps_and_reset_regenerates_at_depth_5_without_a_global():
    env = FrozenLakeEnv.from_dict({"seed": 0, "size": 6, "p": 0.8, "max_steps": 8})
    assert env.desc.astype(str).tolist() == [list(row) for row in RLLM_MAPS[5][1]]  # built at depth 8
    other = FrozenLakeEnv(seed=0, size=6, p=0.8, max_steps=3)  # rLLM: this would overwrite its module global
    observation, info = env.reset()
    assert env.desc.astype(str).tolist() == [list(row) for row in RLLM_MAPS[6][1]]  # depth 5, as rLLM's reset
    assert observation == grid("O_G___", "_OP__O", "__O___", "______", "_____O", "___O_O")
    assert info == {} and frozenlake.MAX_STEPS == 5 and other.max_steps == 3 and env.goal_position == (0, 2)


def test_the_example_rows_give_rllms_observation():
    row = {"seed": 40757, "size": 4, "p": 0.7820540871529649, "index": 2, "uid": "40757_4_0.7820540871529649"}
    env = FrozenLakeEnv.from_dict({**row, "max_steps": 8, "is_slippery": False})
    assert env.reset() == (grid("OO_O", "_O_O", "GP__", "____"), {})
    assert env.step("1") == (grid("OO_O", "_O_O", "V___", "____"), 1.0, True, {"action_is_effective": True})
    assert env.success() and env.finished()


def test_steps_move_score_and_end_at_the_goal_as_rllm():
    env = FrozenLakeEnv.from_dict({"seed": 1234, "size": 6, "p": 0.7})
    observation, _ = env.reset()
    assert observation == grid("___O_O", "O_____", "___P__", "O__GOO", "_O_O__", "______")
    assert env.step("1") == (
        grid("___O_O", "O_____", "__P___", "O__GOO", "_O_O__", "______"),
        0.0,
        False,
        {"action_is_effective": True},
    )
    assert env.step(Action("2"))[1:] == (0.0, False, {"action_is_effective": True})
    on_goal = grid("___O_O", "O_____", "______", "O__VOO", "_O_O__", "______")
    assert env.step(3) == (on_goal, 1.0, True, {"action_is_effective": True})
    assert env.finished() and env.success()
    # a step after the goal: reward 1 and done again, no move (rLLM's behaviour, whatever the action)
    assert env.step("4") == (on_goal, 1.0, True, {"action_is_effective": False})
    assert env.step("0") == (on_goal, 1.0, True, {"action_is_effective": False})


@pytest.mark.parametrize("action", ["0", 0, "", None, Action("0"), Action(None), "abc", "9", 7, "left"])
def test_an_invalid_action_does_not_move_and_scores_0(action):
    env = FrozenLakeEnv(seed=1234, size=6, p=0.7)
    observation, _ = env.reset()
    assert env.step(action) == (observation, 0.0, False, {"action_is_effective": False})


def test_a_hole_ends_the_episode_with_0_and_shows_x():
    env = FrozenLakeEnv.from_dict({"seed": 0, "size": 3, "p": 0.6})
    assert env.reset()[0] == grid("O_G", "_OP", "OO_")
    assert env.render("list") == ["O _ G", "_ O P", "O O _"]
    assert env.render("state").tolist() == [[2, 1, 3], [1, 2, 0], [2, 2, 1]]
    assert env.step("1") == (grid("O_G", "_X_", "OO_"), 0.0, True, {"action_is_effective": True})
    assert env.finished() and not env.success()
    assert env.step("3") == (grid("O_G", "_X_", "OO_"), 0.0, True, {"action_is_effective": False})  # gym: stays


def test_slippery_dynamics_follow_the_seed_as_rllms():
    env = FrozenLakeEnv(seed=5, size=5, p=0.75, is_slippery=True)
    assert env.reset()[0] == grid("OO__P", "_G__O", "___OO", "O____", "__O__")
    _, reward, done, info = env.step("1")  # Left, slipped down into a hole (rLLM's draw for this seed)
    assert (reward, done, info) == (0.0, True, {"action_is_effective": True})
    assert env.render("list") == ["O O _ _ _", "_ G _ _ X", "_ _ _ O O", "O _ _ _ _", "_ _ O _ _"]


def test_from_dict_needs_size_seed_and_p_and_is_an_rllm_base_env():
    with pytest.raises(KeyError):
        FrozenLakeEnv.from_dict({"seed": 1, "size": 4})
    env = FrozenLakeEnv.from_dict({"seed": 1, "size": 4, "p": 0.8, "extra": "ignored"})
    assert isinstance(env, BaseEnv) and FrozenLakeEnv.is_multithread_safe()
    env.idx = 3
    assert env.idx == 3


def test_reset_with_a_task_rebuilds_that_map_and_a_desc_survives_reset():
    env = FrozenLakeEnv(seed=1, size=4, p=0.8)
    env.reset(task={"seed": 42, "size": 4, "p": 0.8})
    assert env.desc.astype(str).tolist() == [list(row) for row in RLLM_MAPS[0][1]]
    handmade = FrozenLakeEnv(desc=["SFF", "FHF", "FFG"])
    assert handmade.reset()[0] == grid("P__", "_O_", "__G") and handmade.goal_position == (2, 2)


# ---- the agent ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "action", "thought"),
    [
        ("I go ```Left```", "1", "I go"),
        ("```down```", "2", ""),
        ("plan: ```Up``` no wait ```RIGHT```", "3", "plan: ```Up``` no wait"),
        ("```4```", "4", ""),
        ("```02```", "2", ""),
        ("```5```", "0", ""),
        ("```north```", "0", ""),
        ("I think I should go up.", "0", "I think I should go up."),
        ("``` Up ```", "4", "``` Up ```"),  # padded: the action is read, the thought is the whole reply (rLLM's)
        ("```\nDown\n```", "2", "```\nDown\n```"),
        ("```²```", "0", ""),  # rLLM crashes here (int("²")); invalid instead
    ],
)
def test_the_agent_reads_the_last_code_block(reply, action, thought):
    agent = FrozenLakeAgent()
    agent.update_from_env(grid("P_", "_G"), 0.0, False, {})
    returned = agent.update_from_model(reply)
    assert isinstance(returned, Action) and returned.action == action
    step = agent.get_current_state()
    assert (step.action, step.thought, step.model_response) == (action, thought, reply)


def test_the_agent_messages_are_rllms():
    agent = FrozenLakeAgent(max_steps=2)
    assert isinstance(agent, BaseAgent) and agent.trajectory == Trajectory()
    assert agent.chat_completions == [{"role": "system", "content": FrozenLakeAgent.SYSTEM_PROMPT}]
    first = grid("P_", "_G")
    agent.update_from_env(observation=first, reward=0.0, done=False, info={"max_steps": 5})
    assert agent.messages[-1] == {
        "role": "user",
        "content": f"Current Observation (0): \n{first}\nYou have not "
        "achieved the goal, P has not reached G yet. Please give the next action.\nThe maximum number of steps "
        "remaining is 2.",
    }
    agent.update_from_model("Hmm.")  # invalid: the env does not move the player
    info = {"action_is_effective": False}
    agent.update_from_env(first, 0.0, False, info)
    (step,) = agent.trajectory.steps
    assert step.observation == first and step.chat_completions == agent.messages[:3] and step.info == info
    assert agent.messages[-1]["content"].startswith("Current Observation (1): \n")
    assert "\nYour last response is invalid. Your position didn't change at all." in agent.messages[-1]["content"]
    assert agent.messages[-1]["content"].endswith("The maximum number of steps remaining is 1.")
    agent.update_from_model("```Right```")
    last = grid("_P", "_G")
    agent.update_from_env(last, 0.0, False, {})
    content = agent.messages[-1]["content"]
    assert "invalid" not in content and "remaining" not in content  # 2 - 2 steps left: no line, as rLLM
    agent.update_from_model("```Down```")
    agent.update_from_env(grid("__", "_V"), 1.0, True, {"action_is_effective": True})
    assert agent.messages[-1]["role"] == "user"  # rLLM appends the observation even when done
    assert [(s.action, s.reward, s.done) for s in agent.trajectory.steps] == [
        ("0", 0.0, False),
        ("3", 0.0, False),
        ("2", 1.0, True),
    ]
    agent.reset()
    assert agent.step == 0 and agent.trajectory.steps == [] and len(agent.messages) == 1


def test_the_agent_options_thinking_history_and_multi_shot_prompt():
    agent = FrozenLakeAgent(use_accumulate_thinking=False, use_accumulate_history=False, use_multistep_prompt=True)
    assert agent.messages[0]["content"] == FrozenLakeAgent.MULTI_SHOT_SYSTEM_PROMPT
    assert "Example 1" in FrozenLakeAgent.MULTI_SHOT_SYSTEM_PROMPT and "```Right```" in agent.messages[0]["content"]
    agent.update_from_env(grid("P_", "_G"), 0.0, False, {})
    assert agent.max_steps is None and "remaining" not in agent.messages[-1]["content"]
    action = agent.update_from_model("<think>right is ```Left```?</think>Going ```Right```")
    assert action.action == "3" and agent.messages[-1]["content"] == "Going ```Right```"
    agent.update_from_env(grid("_P", "_G"), 0.0, False, {})
    assert agent.chat_completions == [agent.messages[0], agent.messages[-1]] and len(agent.messages) == 4
    keeps = FrozenLakeAgent()
    keeps.update_from_env(grid("P_", "_G"), 0.0, False, {})
    keeps.update_from_model("<think>x</think>```Up```")
    assert keeps.messages[-1]["content"] == "<think>x</think>```Up```" and keeps.chat_completions is keeps.messages


def test_is_valid_is_rllms_name_for_reachable_at_depth_max_steps():
    assert frozenlake.is_valid([["S", "F"], ["F", "G"]], 2) is True
    assert frozenlake.is_valid([["S", "H"], ["H", "G"]], 2) is False
    corridor = [["S", *"F" * 8, "G"]] + [["H"] * 10 for _ in range(9)]  # the goal is 9 moves away
    assert frozenlake.is_valid(corridor, 10) is False  # beyond MAX_STEPS (5) + 1, as rLLM's search
    assert frozenlake.reachable(corridor, max_steps=8) is True
    short = [["S", "F", "F", "G"]] + [["H"] * 4 for _ in range(3)]
    assert frozenlake.is_valid(short, 4) is True
    assert frozenlake.is_valid(short, 3) is False  # the search stays in the 3 x 3 square, which has no goal
