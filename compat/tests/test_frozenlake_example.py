"""Our FrozenLake evaluation script (tests/compat/scripts/frozenlake/eval_lake.py), written against rLLM's public API
(DatasetRegistry, AgentExecutionEngine, FrozenLakeAgent, FrozenLakeEnv, compute_pass_at_k) as an rLLM user would
write it, run as a script against a local OpenAI-compatible server that speaks token ids and plays the game from the
map in its prompt."""

from __future__ import annotations

import runpy
import sys
from collections import deque
from pathlib import Path

import pytest

from rllm.testing.fake_openai_server import FakeOpenAIServer, FakeReply, run_fake_server

SCRIPTS = Path(__file__).parent / "scripts" / "frozenlake"
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
ENV_ARGS = {"max_steps": 8, "is_slippery": False}  # eval_lake.py's env_args


def latest_map(prompt: str) -> tuple[list[list[str]], int]:
    """The grid of the prompt's last "Current Observation (n):" message, as cell letters, and n."""
    head, _, rest = prompt.rpartition("Current Observation (")
    assert head, "no observation in the prompt"
    number, _, rest = rest.partition("): \n")
    grid = rest.split("\nYou have not achieved the goal")[0]
    return [[cell.strip() for cell in row.split("\t")[:-1]] for row in grid.split("\n")], int(number)


def find(grid: list[list[str]], letter: str) -> tuple[int, int]:
    return next((r, c) for r, row in enumerate(grid) for c, cell in enumerate(row) if cell == letter)


def first_move_of_shortest_path(grid: list[list[str]]) -> str:
    start, goal, size = find(grid, "P"), find(grid, "G"), len(grid)
    first: dict[tuple[int, int], str | None] = {start: None}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        if (r, c) == goal:
            return first[goal]
        for move, (dr, dc) in MOVES.items():
            cell = (r + dr, c + dc)
            if 0 <= cell[0] < size and 0 <= cell[1] < size and cell not in first and grid[cell[0]][cell[1]] != "O":
                first[cell] = first[(r, c)] or move
                queue.append(cell)
    raise AssertionError("the env made a map with no path")


def player(grid: list[list[str]], turn: int) -> str:
    """A scripted policy that plays well but not always: on the first turn, a map whose hole count is 0 mod 3 gets a
    reply with no action block (invalid: no move), and 1 mod 3 a step into a neighbouring hole when there is one;
    every other reply is the first move of a shortest path, as a word or as its digit, in varying case."""
    holes = sum(row.count("O") for row in grid)
    r, c = find(grid, "P")
    if turn == 0 and holes % 3 == 0:
        return "The map is confusing, let me look again."
    if turn == 0 and holes % 3 == 1:
        for move, (dr, dc) in MOVES.items():
            if 0 <= r + dr < len(grid) and 0 <= c + dc < len(grid) and grid[r + dr][c + dc] == "O":
                return f"<think>{move} looks fine.</think> I go ```{move}```"
    move = first_move_of_shortest_path(grid)
    if turn % 2:
        return f"G is reachable; next ```{list(MOVES).index(move) + 1}```"
    return f"Step {turn}: ```{move.lower() if turn % 4 else move}``` is on a shortest path. Action: ```{move}```"


@pytest.fixture
def frozenlake_server(qwen_tokenizer):
    tokenizer = qwen_tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled: dict[tuple[int, ...], list[int]] = {}  # prompt ids -> the completion ids this server answered

    def reply(endpoint, body):
        grid, turn = latest_map(tokenizer.decode(body["prompt"]))
        text = player(grid, turn)
        ids = tokenizer.encode(text, add_special_tokens=False) + [end]
        sampled[tuple(body["prompt"])] = ids
        return FakeReply(text=text, token_ids=ids, logprobs=[-0.5] * len(ids))

    with run_fake_server(FakeOpenAIServer(model=tokenizer.name_or_path, reply_fn=reply)) as server:
        server.sampled = sampled
        yield server


def run_example_script(server, tokenizer, monkeypatch) -> dict:
    """`python eval_lake.py` in-process: its folder on sys.path (its own `from lake_tasks import ...`), the model path
    and server URL in the environment."""
    monkeypatch.setenv("RLLM_COMPAT_MODEL", tokenizer.name_or_path)
    monkeypatch.setenv("RLLM_COMPAT_BASE_URL", server.base_url)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # the script sets it; monkeypatch restores it
    monkeypatch.syspath_prepend(str(SCRIPTS))
    try:
        return runpy.run_path(str(SCRIPTS / "eval_lake.py"), run_name="__main__")
    finally:
        sys.modules.pop("lake_tasks", None)


def test_run_script_plays_frozenlake_with_real_env_dynamics_and_exact_tokens(
    tmp_path, monkeypatch, capsys, frozenlake_server, qwen_tokenizer
):
    from rllm.data.dataset import DatasetRegistry
    from rllm.environments.frozenlake.frozenlake import FrozenLakeEnv

    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "home"))  # after the tokenizer fixture resolved the model path
    namespace = run_example_script(frozenlake_server, qwen_tokenizer, monkeypatch)
    out = capsys.readouterr().out

    # no dataset yet: the script registered one with its default sizes
    assert "no frozenlake test split registered; making one" in out
    assert len(DatasetRegistry.load_dataset("frozenlake", "train")) == 64
    tasks = DatasetRegistry.load_dataset("frozenlake", "test").get_data()
    assert len(tasks) == 12 and namespace["tasks"] == tasks

    results = namespace["results"]
    assert [trajectory.task for trajectory in results] == tasks  # task order
    end = qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
    for trajectory, task in zip(results, tasks, strict=True):
        # the rewards are the env's: replay the recorded actions on a fresh env built as the engine builds it
        env = FrozenLakeEnv.from_dict({**task, **ENV_ARGS})
        observation, _ = env.reset()
        assert 1 <= len(trajectory.steps) <= 5  # the engine's max_steps (the script leaves rLLM's default, 5)
        for number, step in enumerate(trajectory.steps):
            assert step.observation == observation  # the grid the agent answered
            observation, reward, done, info = env.step(step.action)
            assert (step.reward, step.done) == (reward, done)
            assert step.info["action_is_effective"] == info["action_is_effective"]
            assert not done or number == len(trajectory.steps) - 1  # the episode ends at the first done
            # the exact ids: the prompt is the chat template's render of what the agent sent (its messages before
            # the reply), the completion is what the server answered for that prompt
            sent = step.chat_completions[:-1]
            assert step.chat_completions[-1] == {"role": "assistant", "content": step.model_response}
            rendered = qwen_tokenizer.apply_chat_template(sent, add_generation_prompt=True, tokenize=False)
            assert qwen_tokenizer.decode(step.prompt_ids) == rendered
            assert step.response_ids == frozenlake_server.sampled[tuple(step.prompt_ids)]
            assert step.response_ids[-1] == end and step.logprobs == [-0.5] * len(step.response_ids)
            assert step.model_output.text == step.model_response
        assert trajectory.reward == sum(step.reward for step in trajectory.steps)
        assert trajectory.reward == (1.0 if env.success() else 0.0)
        # every turn's prompt extends the previous prompt + sampled completion: one training row per trajectory
        for previous, step in zip(trajectory.steps, trajectory.steps[1:], strict=False):
            context = previous.prompt_ids + previous.response_ids
            assert step.prompt_ids[: len(context)] == context

    # the scripted player makes the three kinds of episode: wins, holes, and invalid replies (no move, then a hint)
    rewards = [trajectory.reward for trajectory in results]
    assert 0 < sum(rewards) < len(rewards)
    steps = [step for trajectory in results for step in trajectory.steps]
    assert any(step.action == "0" and not step.info["action_is_effective"] for step in steps)
    assert any(step.done and step.reward == 0.0 for step in steps)  # fell into a hole
    hinted = [t for t in results if t.steps[0].action == "0" and len(t.steps) > 1]
    assert hinted and all("Your last response is invalid" in t.steps[1].chat_completions[-2]["content"] for t in hinted)

    # pass@k as rLLM's compute_pass_at_k prints it: one attempt per task, so pass@1 == pass@k == the success rate
    rate = sum(rewards) / len(rewards)
    assert "Total unique problems: 12" in out
    assert f"Average Pass@1 Accuracy: {rate}" in out and f"Average Pass@k Accuracy: {rate}" in out
