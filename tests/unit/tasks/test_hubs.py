"""Environment hubs (`rllm.tasks.hubs`) with the real reasoning-gym and TextArena packages: names and did-you-mean,
rows, the libraries' own scorers and games, one-line errors. The evaluation and training step through rllm's loop
are in tests/integration/test_hubs_train.py."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest

from rllm.arguments import UnknownArgumentError
from rllm.envs import check_env
from rllm.tasks import get_task, is_task_name
from rllm.tasks.hubs import HubError, split_seed
from rllm.tasks.hubs import reasoning_gym as rg_hub
from rllm.tasks.hubs import textarena as ta_hub
from tests.support.hubs import hub_error, round_trip


def test_split_seeds_are_disjoint_by_construction():
    for seed in (0, 1, -5, 2**40):
        train, val = split_seed(seed, "train", 1000), split_seed(seed, "val", 1000)
        assert 0 <= train and train + 1000 <= 2**31 <= val and val + 1000 <= 2**32
    assert split_seed(0, "train", 10) != split_seed(1, "train", 10)
    with pytest.raises(ValueError, match="split must be 'train' or 'val'"):
        split_seed(0, "test", 10)


# ------------------------------------------------------------------------------------------------- reasoning-gym


def test_reasoning_gym_names_its_generators_and_suggests_the_closest():
    assert {"leg_counting", "arc_agi", "basic_arithmetic"} <= set(rg_hub.names())
    assert is_task_name("reasoning_gym:leg_counting")
    task = get_task("reasoning_gym:leg_counting")
    assert task.name == "reasoning_gym:leg_counting" and task.default_workflow == "single_turn"
    message = hub_error("reasoning_gym:leg_countin")
    assert "reasoning_gym has no generator 'leg_countin' (did you mean 'leg_counting'" in message
    assert "python -m rllm.tasks.hubs.reasoning_gym" in message
    assert "(did you mean reasoning_gym?)" in hub_error("reasoning_gm:leg_counting")


def test_reasoning_gym_rows_are_json_deterministic_and_the_splits_do_not_overlap():
    make = get_task("reasoning_gym:basic_arithmetic").make_tasks
    train = make(40, seed=0, split="train")
    assert train == make(40, seed=0, split="train") and round_trip(train) == train
    val = make(40, seed=1, split="val")
    same_seed_val = make(40, seed=0, split="val")
    for other in (val, same_seed_val):
        assert not {r["dataset_seed"] + r["index"] for r in train} & {r["dataset_seed"] + r["index"] for r in other}
        assert not {r["question"] for r in train} & {r["question"] for r in other}
    assert make(40, seed=2, split="train") != train
    assert len({r["id"] for r in train + val}) == 80
    assert make(0, seed=0) == []


def test_reasoning_gym_scores_with_the_generators_own_scorer_after_a_json_round_trip():
    for name in ("leg_counting", "arc_agi"):
        task = get_task(f"reasoning_gym:{name}")
        for row in round_trip(task.make_tasks(3, seed=4, split="val")):
            prompt = task.prompt_fn(row)
            assert prompt.startswith(row["question"]) and "<answer></answer>" in prompt
            right = task.reward_fn(row, f"Thinking it over.\n<answer>\n{row['answer']}\n</answer>")
            assert (right.reward, right.correct) == (1.0, True), (name, row["id"])
            wrong = task.reward_fn(row, "<answer>7</answer> no, <answer>not the answer</answer>")
            assert wrong.reward < 1.0 and not wrong.correct and wrong.info["answer"] == "not the answer"
            untagged = task.reward_fn(row, str(row["answer"]))
            assert (untagged.reward, untagged.correct, untagged.info["answer"]) == (0.0, False, None)
    # ARC compares boards as tuples: stored as plain JSON lists, its own answer would score 0.05
    row = round_trip(get_task("reasoning_gym:arc_agi").make_tasks(1, seed=4, split="val"))[0]
    flattened = json.loads(json.dumps(rg_hub._from_json(row["entry"])))
    dataset = rg_hub._dataset(row["generator"], row["config"], row["dataset_seed"], row["dataset_size"])
    assert dataset.score_answer(answer=row["answer"], entry=flattened) < 1.0


def test_reasoning_gym_task_args_are_the_generators_config_and_typos_are_refused_in_one_line():
    make = get_task("reasoning_gym:leg_counting").make_tasks
    rows = make(5, seed=0, min_animals=1, max_animals=1)
    assert all(row["entry"]["metadata"]["num_animals"] == 1 for row in rows)
    assert rows[0]["config"] == {"min_animals": 1, "max_animals": 1}
    row = round_trip(rows)[0]
    assert get_task("reasoning_gym:leg_counting").reward_fn(row, f"<answer>{row['answer']}</answer>").reward == 1.0
    with pytest.raises(UnknownArgumentError) as caught:
        make(2, seed=0, min_animal=1)
    message = str(caught.value)
    assert "data.task_args.min_animal" in message and "did you mean 'data.task_args.min_animals'" in message
    with pytest.raises(UnknownArgumentError, match=r"data.task_args.size: set it with data.train_size"):
        make(2, seed=0, size=3)
    with pytest.raises(HubError) as caught:
        make(2, seed=0, min_animals=5, max_animals=1)
    assert str(caught.value).startswith("reasoning_gym:leg_counting: its config refused") and "\n" not in str(
        caught.value
    )


def test_a_missing_hub_package_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    assert hub_error("reasoning_gym:leg_counting") == (
        "reasoning_gym:leg_counting needs the reasoning-gym package: pip install 'rllm[hubs]'"
    )
    monkeypatch.setitem(sys.modules, "textarena", None)
    assert hub_error("textarena:GuessTheNumber-v0") == (
        "textarena:GuessTheNumber-v0 needs the textarena package: pip install 'rllm[hubs]'"
    )


# ------------------------------------------------------------------------------------------------------ TextArena


def test_textarena_names_its_local_single_player_games_and_refuses_the_others_in_one_line():
    names = ta_hub.names()
    assert {"GuessTheNumber-v0", "TowerOfHanoi-v0", "Wordle-v0", "Sudoku-v0"} <= set(names)
    assert not {"TicTacToe-v0", "TwentyQuestions-v0", "Chess-v0"} & set(names)
    task = get_task("textarena:GuessTheNumber-v0")
    assert task.agent_class is ta_hub.TextArenaAgent and task.env_class is ta_hub.TextArenaEnv
    assert task.default_workflow == "agent_env"
    message = hub_error("textarena:GuessTheNumbr-v0")
    assert "textarena has no single-player game 'GuessTheNumbr-v0' (did you mean 'GuessTheNumber-v0'" in message
    assert "python -m rllm.tasks.hubs.textarena" in message
    assert "is a multi-player game" in hub_error("textarena:TicTacToe-v0")
    assert "needs an LLM game master" in hub_error("textarena:TwentyQuestions-v0")
    assert "does not load in the installed textarena" in hub_error("textarena:Klondike-v0")


def test_a_word_game_without_its_nltk_data_is_refused_naming_the_download_and_nothing_is_fetched():
    import nltk

    try:
        nltk.data.find("corpora/words")
        pytest.skip("nltk's word list is on this machine: Wordle runs")
    except LookupError:
        pass
    message = hub_error("textarena:Wordle-v0")
    assert message.startswith("textarena:Wordle-v0 needs nltk data") and "python -m nltk.downloader" in message
    assert "words" in message
    with pytest.raises(LookupError):
        nltk.data.find("corpora/words")


def test_textarena_rows_hold_the_env_id_and_a_seed_per_row_disjoint_between_splits():
    make = get_task("textarena:GuessTheNumber-v0").make_tasks
    train = make(16, seed=0, split="train")
    assert train == make(16, seed=0, split="train") and round_trip(train) == train
    assert {row["env_id"] for row in train} == {"GuessTheNumber-v0"}
    val = make(16, seed=0, split="val")
    assert len({row["seed"] for row in train + val}) == 32 and len({row["id"] for row in train + val}) == 32


def _guess_by_halving(env: ta_hub.TextArenaEnv) -> list[tuple[str, float, bool, dict]]:
    """Binary search on the game's hints: always a win in GuessTheNumber-v0 (1..20, 10 turns)."""
    low, high, steps = 1, 20, []
    while True:
        guess = (low + high) // 2
        observation, reward, done, info = env.step(f"My guess: [{guess}]")
        steps.append((observation, reward, done, info))
        if done:
            return steps
        low, high = (guess + 1, high) if "higher" in observation else (low, guess - 1)


def test_textarena_guess_the_number_is_won_by_correct_moves_and_lost_by_bad_ones():
    env = ta_hub.TextArenaEnv.from_dict({"env_id": "GuessTheNumber-v0", "seed": 11, "id": "ignored"})
    observation, info = env.reset()
    assert "Guess The Number" in observation and "[5]" in observation
    assert info == {"env_id": "GuessTheNumber-v0", "seed": 11, "max_turns": 10}
    steps = _guess_by_halving(env)
    assert len(steps) <= 5 and all(reward == 0.0 and not done for _, reward, done, _ in steps[:-1])
    last_observation, reward, done, info = steps[-1]
    assert (reward, done, info["success"], info["invalid_move"]) == (1.0, True, True, False)
    assert "Congratulations" in last_observation and "My guess" not in last_observation  # the move is not echoed
    with pytest.raises(RuntimeError, match="after the game ended"):
        env.step("[3]")

    env.reset()
    observation, reward, done, info = env.step("[0]")  # out of range: TextArena forgives one invalid move
    assert (reward, done, info["invalid_move"]) == (0.0, False, True) and "invalid move" in observation
    observation, reward, done, info = env.step("no number at all")
    assert (reward, done, info["success"], info["invalid_move"]) == (0.0, True, False, True)
    assert info["reason"].startswith("Invalid Move")


def test_textarena_tower_of_hanoi_is_won_by_the_optimal_moves_and_lost_by_illegal_ones():
    env = ta_hub.TextArenaEnv("TowerOfHanoi-v0", seed=0)
    observation, info = env.reset()
    assert "A: [3, 2, 1]" in observation and info["max_turns"] == 14
    for move in ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]"]:
        assert env.step(move)[1:3] == (0.0, False)
    observation, reward, done, info = env.step("[A C]")
    assert (reward, done, info["success"], info["turn"]) == (1.0, True, True, 7) and "C: [3, 2, 1]" in observation
    env.reset()
    assert env.step("[C A]")[1:3] == (0.0, False)  # from an empty tower
    _, reward, done, info = env.step("[B A]")
    assert (reward, done, info["success"]) == (0.0, True, False)


def test_textarena_games_follow_their_seed_and_leave_the_callers_random_state_alone():
    def transcript(seed: int) -> list:
        env = ta_hub.TextArenaEnv("GuessTheNumber-v0", seed=seed)
        return [env.reset()[0], *_guess_by_halving(env)]

    random.seed(123)
    expected = random.random()
    random.seed(123)
    first = transcript(5)
    assert random.random() == expected
    assert transcript(5) == first
    again = ta_hub.TextArenaEnv("2048-v0", seed=4)
    assert [again.reset()[0], again.step("[w]")] == [again.reset()[0], again.step("[w]")]  # a reset deals anew
    assert len({json.dumps(transcript(seed)) for seed in range(6)}) > 1
    # two games played in turns each follow their own seed
    one, two = ta_hub.TextArenaEnv("2048-v0", seed=1), ta_hub.TextArenaEnv("2048-v0", seed=2)
    alone = ta_hub.TextArenaEnv("2048-v0", seed=1)
    for env in (one, two, alone):
        env.reset()
    moves = ["[w]", "[a]", "[s]", "[d]"] * 3
    interleaved = [(one.step(move), two.step(move))[0] for move in moves]
    assert interleaved == [alone.step(move) for move in moves]


def test_the_textarena_env_passes_rllms_env_check():
    report = check_env(
        ta_hub.TextArenaEnv, {"env_id": "GuessTheNumber-v0", "seed": 3}, actions=["[10]", "[5]", "oops", "[15]"]
    )
    assert not report.problems and report.determinism_checked


def test_neither_hub_opens_a_connection_to_import_make_or_play():
    """In a fresh interpreter whose sockets refuse to connect: importing both libraries, making rows, scoring and
    playing a game never try (TextArena's online modes and LLM game masters are never reached)."""
    script = textwrap.dedent(
        """
        import socket
        attempts = []
        def refuse(*args, **kwargs):
            attempts.append(args[1:] or args)
            raise OSError("network closed by the test")
        socket.socket.connect = socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        from rllm.tasks import get_task
        task = get_task("reasoning_gym:leg_counting")
        row = task.make_tasks(2, seed=0)[0]
        assert task.reward_fn(row, "<answer>" + row["answer"] + "</answer>").reward == 1.0
        for name in ("GuessTheNumber-v0", "Wordle-v0"):
            try:
                env = get_task("textarena:" + name).env_class("" + name, seed=1)
            except Exception as error:  # Wordle without its nltk data: refused, not downloaded
                assert "nltk" in str(error), error
                continue
            env.reset()
            env.step("[1]")
        print("attempts", attempts)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "attempts []" in out.stdout
