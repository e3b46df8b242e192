"""rLLM v0.2's FrozenLake environment (`rllm.environments.frozenlake.frozenlake.FrozenLakeEnv`), for agents and
scripts written against rLLM. rllm's own FrozenLake task (`rllm.tasks.frozenlake`) is a different game: start in the
top-left corner, other prompts and map generator. This one keeps rLLM's protocol and maps.

Like rLLM's, it is gymnasium's `FrozenLakeEnv` (so the moves, holes, slippery dynamics and `desc`/`s`/`P` are
gymnasium's) plus rllm's `BaseEnv`:

- **Maps** are drawn by `generate_random_map(size, p, seed, max_steps)`, which makes the same draws in the same order
  as rLLM's: one `gymnasium.utils.seeding.np_random(seed)` generator; per attempt, a `size`x`size` board of "F"/"H"
  (`p` = probability of frozen), then start row, start col, goal row, goal col (redrawn together until they differ);
  the attempt is kept when `reachable(board, max_steps)` says so. A row `{"seed", "size", "p"}` is the same map here
  as in rLLM.
- **Actions**: `"1"` Left, `"2"` Down, `"3"` Right, `"4"` Up (ints or an `Action` wrapping them work too); `0`, a
  falsy action or anything else is invalid: the player stays, reward 0, not done, `info["action_is_effective"]` False.
  (rLLM raises on an action it cannot `int()` or outside 0-4; nothing it returns differs otherwise.)
- **Rewards**: 1 on reaching the goal, 0 otherwise (a hole ends the episode with 0). A step taken while already on
  the goal returns reward 1 and done again, as rLLM does. The env never ends on a step count: the engine's
  `max_steps` bounds the episode.
- **Observation** (`render("tiny_rgb_array")`): one line per row, each cell `" P \\t"` player, `" _ \\t"` frozen
  (the start too), `" O \\t"` hole, `" G \\t"` goal, `" X \\t"` player in a hole, `" √ \\t"` player on the goal.

rLLM keeps the map-validity depth in a module global, `MAX_STEPS`, written by every constructor (`max_steps`, default
5) and read during generation: two envs built concurrently with different `max_steps` race on it. Here the depth is
per instance, and `MAX_STEPS` is a constant 5 (rLLM's default, still importable). What rLLM users observe is kept:
`FrozenLakeEnv(max_steps=8)` builds its first map with depth 8, and `reset()` rebuilds the map with depth 5 (rLLM's
`reset` re-runs its constructor without `max_steps`, which sets the global back to 5), so the map an episode is
played on is the depth-5 map for its `(seed, size, p)` whatever `max_steps` was.

One deliberate difference: rLLM's `reset()` forgets a hand-given `desc` and draws a random map; here an env built
from `desc` keeps it across `reset()` (unless the task passed to `reset` names `size`, `p` or `seed`).
"""

from __future__ import annotations

import copy
import operator
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv
from gymnasium.utils import seeding

from rllm.compat.environments.base.base_env import BaseEnv
from rllm.types import Action

__all__ = ["MAX_STEPS", "FrozenLakeEnv", "generate_random_map", "get_goal_position", "is_valid", "reachable"]

# rLLM's default map-validity depth (a mutable global there, a constant here: see the module docstring).
MAX_STEPS: int = 5

_NEIGHBOURS = ((1, 0), (0, 1), (-1, 0), (0, -1))  # the order rLLM's search expands them in (it decides which maps pass)


def reachable(board: list[list[str]], max_steps: int = MAX_STEPS) -> bool:
    """rLLM's validity test for a board of "S"/"F"/"H"/"G", reproduced exactly because it decides which maps exist.

    A depth-first search from "S" over non-hole cells that marks a cell visited the first time it is expanded and
    expands only cells reached in at most `max_steps` moves; it succeeds when an expanded cell neighbours "G". So
    the goal may be `max_steps + 1` moves away, and a cell first reached by a long detour is not expanded again from
    a shorter path: a map with a short path can still fail. Both quirks are rLLM's, kept for map parity."""
    size = len(board)
    starts = [(r, c, 0) for r in range(size) for c in range(size) if board[r][c] == "S"]
    if not starts:
        raise ValueError("FrozenLake board has no start cell 'S'")
    stack = starts[:1]
    expanded: set[tuple[int, int]] = set()
    while stack:
        row, col, depth = stack.pop()
        if depth > max_steps or (row, col) in expanded:
            continue
        expanded.add((row, col))
        for d_row, d_col in _NEIGHBOURS:
            r, c = row + d_row, col + d_col
            if not (0 <= r < size and 0 <= c < size):
                continue
            if board[r][c] == "G":
                return True
            if board[r][c] != "H":
                stack.append((r, c, depth + 1))
    return False


def is_valid(board: list[list[str]], max_size: int) -> bool:
    """rLLM's name and signature for `reachable`: the search stays inside the top-left `max_size` x `max_size`
    square of `board` and expands cells at most `MAX_STEPS` moves from the start, as rLLM's does."""
    return reachable([row[:max_size] for row in board[:max_size]], MAX_STEPS)


def generate_random_map(
    size: int = 8, p: float = 0.8, seed: int | None = 0, max_steps: int = MAX_STEPS
) -> tuple[list[str], tuple[int, int]]:
    """rLLM's map for `(size, p, seed)` at validity depth `max_steps`: the rows as strings and the goal's (row, col).

    `p` is the probability that a cell is frozen (capped at 1). `seed=None` draws a fresh random map."""
    if seed is not None:
        seed = operator.index(seed)  # gymnasium wants a Python int; numpy ints from a dataset are the same seed
    size = operator.index(size)
    rng, _ = seeding.np_random(seed)
    frozen = min(1, p)
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[frozen, 1 - frozen]).tolist()
        while True:
            start = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            goal = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            if start != goal:
                break
        board[start[0]][start[1]] = "S"
        board[goal[0]][goal[1]] = "G"
        if reachable(board, max_steps):
            return ["".join(row) for row in board], goal


def get_goal_position(desc: Any) -> tuple[int, int] | None:
    """(row, col) of the first "G" in a map (rows of str or bytes), None if there is none."""
    cells = np.asarray(desc, dtype="c")
    found = np.argwhere(cells == b"G")
    return (int(found[0][0]), int(found[0][1])) if found.size else None


class FrozenLakeEnv(GymFrozenLakeEnv, BaseEnv):
    """rLLM v0.2's FrozenLake: gymnasium's grid, a random start and goal, text observations, actions "1"-"4".

    Keyword arguments as rLLM's: `size=8`, `p=0.8` (probability of frozen), `seed=42`, `is_slippery=False`,
    `desc=None` (a hand-made map, rows of "S"/"F"/"H"/"G"), `max_steps=5` (validity depth of the first map only; see
    the module docstring). Unknown keywords are ignored, as rLLM does."""

    # render("state") codes, plus 4 = player in a hole and 5 = player on the goal
    MAP_LOOKUP: ClassVar[dict[bytes, int]] = {b"P": 0, b"F": 1, b"H": 2, b"G": 3}
    GRID_LOOKUP: ClassVar[dict[int, str]] = {0: " P \t", 1: " _ \t", 2: " O \t", 3: " G \t", 4: " X \t", 5: " √ \t"}
    ACTION_LOOKUP: ClassVar[dict[int, str]] = {0: "None", 1: "Left", 2: "Down", 3: "Right", 4: "Up"}
    INVALID_ACTION = 0
    PENALTY_FOR_INVALID = -1  # declared by rLLM and unused there too: an invalid action scores 0

    def __init__(self, **kwargs: Any) -> None:
        self._build(
            size=kwargs.pop("size", 8),
            p=kwargs.pop("p", 0.8),
            seed=kwargs.pop("seed", 42),
            is_slippery=kwargs.pop("is_slippery", False),
            desc=kwargs.pop("desc", None),
            max_steps=kwargs.pop("max_steps", MAX_STEPS),
        )

    def _build(self, *, size: int, p: float, seed: int | None, is_slippery: bool, desc: Any, max_steps: int) -> None:
        self.seed, self.size, self.p, self.max_steps = seed, size, p, max_steps
        if desc is None:
            rows, goal = generate_random_map(size=size, p=p, seed=seed, max_steps=max_steps)
        else:
            rows = [row.decode() if isinstance(row, bytes) else "".join(row) for row in desc]
            goal = get_goal_position(rows)
        self.goal_position = goal
        self.goal_postion = goal  # rLLM's spelling of the same attribute
        GymFrozenLakeEnv.__init__(self, desc=rows, is_slippery=is_slippery)
        self.ACTION_SPACE = gym.spaces.Discrete(4, start=1)
        self.map_kwargs = {"size": size, "p": p}
        self.env_kwargs = {"is_slippery": is_slippery, "desc": copy.deepcopy(desc), "seed": seed}
        self.action_map = {1: 0, 2: 1, 3: 2, 4: 3}  # rLLM's action -> gymnasium's (LEFT=0, DOWN=1, RIGHT=2, UP=3)
        self.reward = 0
        self._valid_actions: list[int] = []

    @staticmethod
    def from_dict(env_info: dict) -> FrozenLakeEnv:
        """One env per dataset row: `size`, `seed` and `p` are required; `max_steps` and `is_slippery` optional."""
        return FrozenLakeEnv(
            size=env_info["size"],
            seed=env_info["seed"],
            p=env_info["p"],
            max_steps=env_info.get("max_steps", MAX_STEPS),
            is_slippery=env_info.get("is_slippery", False),
        )

    def reset(self, task: dict | None = None) -> tuple[str, dict]:  # type: ignore[override]
        """Rebuild the map (validity depth 5, as rLLM's reset does) from `task`'s `size`/`p`/`seed`/`is_slippery`,
        else from the constructor's, put the player on the start and return `(observation, {})`."""
        task = task or {}
        regenerate = any(key in task for key in ("size", "p", "seed"))
        self._build(
            size=task.get("size", self.map_kwargs["size"]),
            p=task.get("p", self.map_kwargs["p"]),
            seed=task.get("seed", self.env_kwargs["seed"]),
            is_slippery=task.get("is_slippery", self.env_kwargs["is_slippery"]),
            desc=None if regenerate else self.env_kwargs["desc"],
            max_steps=MAX_STEPS,
        )
        GymFrozenLakeEnv.reset(self, seed=self.seed)
        return self.render("tiny_rgb_array"), {}

    def step(self, action: Any) -> tuple[str, float, bool, dict]:  # type: ignore[override]
        """Move the player (see the module docstring for actions and rewards)."""
        if self.success():
            return self.render(), 1.0, True, {"action_is_effective": False}
        move = self._as_move(action)
        if move == self.INVALID_ACTION:
            return self.render(), 0.0, False, {"action_is_effective": False}
        before = int(self.s)
        after, reward, terminated, _, _ = GymFrozenLakeEnv.step(self, self.action_map[move])
        return self.render(), float(reward), bool(terminated), {"action_is_effective": before != int(after)}

    def _as_move(self, action: Any) -> int:
        if isinstance(action, Action):
            action = action.action
        if not action:
            return self.INVALID_ACTION
        try:
            move = int(action)
        except (TypeError, ValueError):
            return self.INVALID_ACTION
        return move if move in self.action_map else self.INVALID_ACTION

    def _get_player_position(self) -> tuple[int, int]:
        return int(self.s) // self.ncol, int(self.s) % self.ncol

    def finished(self) -> bool:
        """The player is on the goal or in a hole."""
        return self.desc[self._get_player_position()] in b"GH"

    def success(self) -> bool:
        """The player is on the goal."""
        return self.desc[self._get_player_position()] in b"G"

    def render(self, mode: str = "tiny_rgb_array") -> Any:  # type: ignore[override]
        """`"tiny_rgb_array"` (the text observation), `"list"` (one string per row, cells space-separated),
        `"state"` (an int array, codes in `MAP_LOOKUP` plus 4/5), or gymnasium's `"rgb_array"`/`"ansi"`."""
        if mode in ("rgb_array", "ansi"):
            previous, self.render_mode = self.render_mode, mode
            try:
                return GymFrozenLakeEnv.render(self)
            finally:
                self.render_mode = previous
        if mode not in ("tiny_rgb_array", "list", "state"):
            raise ValueError(f"FrozenLakeEnv.render: unknown mode {mode!r}")
        state = self._state()
        if mode == "state":
            return state
        cells = [[self.GRID_LOOKUP[int(code)] for code in row] for row in state]
        if mode == "list":
            return [" ".join(cell.strip() for cell in row) for row in cells]
        return "\n".join("".join(row) for row in cells)

    def _state(self) -> np.ndarray:
        player = self._get_player_position()
        codes = {b"S": 1, b"F": 1, b"H": 2, b"G": 3}  # the start shows as frozen
        state = np.vectorize(lambda cell: codes[cell])(self.desc)
        under = self.desc[player]
        state[player] = 4 if under == b"H" else 5 if under == b"G" else 0
        return state
