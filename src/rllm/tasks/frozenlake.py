"""The `frozenlake` task: walk a text FrozenLake grid from the top-left corner to the goal without falling into a
hole, one move per turn (multi-turn). Reward 1.0 on reaching the goal, else 0.

Parts: `make_frozenlake_tasks` (the generator), `FrozenLakeEnv` (the grid), `FrozenLakeAgent` (the system prompt and
`parse_move`, which reads a reply's move).

The env is built on gymnasium's FrozenLake with `is_slippery=False`, so a move always goes where it says and the
whole episode is deterministic given the map. Maps are generated from `(size, hole_prob, seed)` by gymnasium's
`generate_random_map`, which redraws until a path from start to goal exists, so every map is solvable.

Env choices:
- `hole_prob` is the probability that a cell is a hole. gymnasium's `p` is the opposite (probability of *frozen*);
  we pass `p = 1 - hole_prob` so that configs read naturally ("0.2 of the lake is holes"). Redrawing unsolvable
  maps makes the realised rate a little lower, and makes a hole_prob above ~0.5 slow on large maps.
- Observations are short text grids, one row a line, cells separated by spaces so that a tokenizer sees one token
  per cell: `P` you, `_` ice, `O` hole, `G` goal (the start cell is ice). Small models pay for every prompt token
  once per sample and once per turn, so the grid carries no coordinates or decoration; the legend lives in the
  agent's system prompt.
- An action the env cannot read (None, an unknown word) is a policy error that the env handles itself: the player
  does not move, the step still counts, the observation says how to answer, and `info["invalid_action"]` is True.
  Ending the episode instead would give the model one chance at the format; counting the step keeps episodes
  bounded by `max_steps` whatever the model says.
- Dataset rows from `make_frozenlake_tasks` carry the map itself (`desc`) besides its seed, so a row stays the same
  map even if a later gymnasium draws random maps differently.
- `observation="image"` shows the board as a picture instead (`render_board`, for vision-language models): the
  observation is `{"image": <PIL image>, "text": <the feedback line, or "">}`, and `FrozenLakeAgent(observation=
  "image")` puts the picture and the line in one user message, with a system prompt that gives the colours. The
  board is drawn with PIL (gymnasium's own pictures need pygame), one square per cell, so the picture holds exactly
  what the text grid holds.

The agent's system prompt states the grid legend and the answer format in three lines: small models pay for every
prompt token once per sample and once per turn. Every observation becomes a user message and every reply an assistant
message, appended and never rewritten, so each turn's prompt extends the previous one token for token (the engine
renders multi-turn prompts as deltas, so training uses the sampled ids: docs/architecture.md, "Token exactness").

How a reply becomes a move (`parse_move`):
1. If the reply says "Action:", the first direction after the last "Action:" wins: that is the format we ask for,
   and the last marker is the model's final answer when it restates itself.
2. Otherwise the LAST direction mentioned wins. Models that think aloud tend to list the options first and decide
   at the end ("down is a hole, so I'll go right"); the first mention is more often a rejected option.
3. No direction at all gives None; the env then reports an invalid action and says how to answer.
Directions are whole words in any case (so "upon" or "rightly" do not count); compass words and arrows are read too,
because small models use them unprompted.
"""

from __future__ import annotations

import numbers
import random
import re
from collections import deque
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as _GymFrozenLake
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from rllm.agents.base import BaseAgent
from rllm.envs.base import BaseEnv
from rllm.images import image_part
from rllm.tasks import Task
from rllm.types import ModelOutput

__all__ = [
    "ACTIONS",
    "FROZENLAKE_IMAGE_SYSTEM_PROMPT",
    "FROZENLAKE_SYSTEM_PROMPT",
    "FrozenLakeAgent",
    "FrozenLakeEnv",
    "make_frozenlake_tasks",
    "parse_move",
    "render_board",
    "shortest_path",
    "shortest_path_length",
]

# gymnasium's action ids: LEFT=0, DOWN=1, RIGHT=2, UP=3.
ACTIONS: dict[str, int] = {"left": 0, "down": 1, "right": 2, "up": 3}
_MOVES: dict[str, tuple[int, int]] = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}
_CELL_TEXT = {"S": "_", "F": "_", "H": "O", "G": "G"}
_INVALID_HINT = "Invalid action. Reply with one move: up, down, left or right."
OBSERVATIONS = ("text", "image")
# Board colours (RGB): what the image system prompt names. Ice and holes differ in brightness as well as hue.
_CELL_COLOURS = {"S": (205, 230, 255), "F": (205, 230, 255), "H": (25, 35, 90), "G": (40, 170, 60)}
_PLAYER_COLOUR = (220, 40, 40)


def _check_type(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> None:
    # bool is an int subclass; `size=True` is always a mistake, so refuse it explicitly.
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"FrozenLakeEnv: {name} must be {what}, got {type(value).__name__} {value!r}")


def _validate_desc(desc: Any) -> list[str]:
    if not isinstance(desc, (list, tuple)) or not all(isinstance(row, str) for row in desc):
        raise TypeError(f"FrozenLakeEnv: desc must be a list of strings like ['SF', 'FG'], got {desc!r}")
    rows = list(desc)
    if len(rows) < 2 or any(len(row) != len(rows) for row in rows):
        raise ValueError(f"FrozenLakeEnv: desc must be a square map of size >= 2, got {rows!r}")
    if rows[0][0] != "S" or rows[-1][-1] != "G" or set("".join(rows)) - set("SFHG"):
        raise ValueError(
            f"FrozenLakeEnv: desc must use only S, F, H, G with S top-left and G bottom-right, got {rows!r}"
        )
    return rows


def shortest_path(desc: list[str], start: tuple[int, int] = (0, 0)) -> list[str] | None:
    """Shortest list of moves ("up", ...) from `start` to the goal avoiding holes (BFS), or None if unreachable.

    Moves into the edge are never useful, so they are not explored.
    """
    size = len(desc)
    came_from: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        cell = frontier.popleft()
        if desc[cell[0]][cell[1]] == "G":
            return _walk_back(came_from, cell)
        for move, (d_row, d_col) in _MOVES.items():
            nxt = (cell[0] + d_row, cell[1] + d_col)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in came_from and desc[nxt[0]][nxt[1]] != "H":
                came_from[nxt] = (cell, move)
                frontier.append(nxt)
    return None


def _walk_back(came_from: dict, cell: tuple[int, int]) -> list[str]:
    moves: list[str] = []
    while came_from[cell] is not None:
        cell, move = came_from[cell]
        moves.append(move)
    return moves[::-1]


def shortest_path_length(desc: list[str], start: tuple[int, int] = (0, 0)) -> int | None:
    """Number of moves on a shortest safe path from `start` to the goal, or None if there is none."""
    path = shortest_path(desc, start)
    return None if path is None else len(path)


def render_grid(desc: list[str], position: tuple[int, int]) -> str:
    """The map as text: `P` you, `_` ice, `O` hole, `G` goal; cells separated by spaces."""
    lines = []
    for row_index, row in enumerate(desc):
        cells = [_CELL_TEXT[cell] for cell in row]
        if row_index == position[0]:
            cells[position[1]] = "P"
        lines.append(" ".join(cells))
    return "\n".join(lines)


def render_board(desc: list[str], position: tuple[int, int], *, cell: int = 16) -> Any:
    """The map as a PIL picture, `cell` pixels a cell: light blue ice, dark blue holes, a green goal, you a red disc
    (on the goal when you reached it); thin grey lines between cells."""
    from PIL import Image, ImageDraw

    size = len(desc)
    picture = Image.new("RGB", (size * cell, size * cell), (150, 150, 150))
    draw = ImageDraw.Draw(picture)
    for row, line in enumerate(desc):
        for col, kind in enumerate(line):
            left, top = col * cell, row * cell
            draw.rectangle((left + 1, top + 1, left + cell - 1, top + cell - 1), fill=_CELL_COLOURS[kind])
    margin = max(2, cell // 5)
    top, left = position[0] * cell, position[1] * cell
    draw.ellipse((left + margin, top + margin, left + cell - margin, top + cell - margin), fill=_PLAYER_COLOUR)
    return picture


def parse_env_action(action: Any) -> int | None:
    """gymnasium action id for a direction word (any case, surrounding spaces ignored) or an int 0..3; else None."""
    if isinstance(action, str):
        return ACTIONS.get(action.strip().lower())
    if isinstance(action, numbers.Integral) and not isinstance(action, bool) and 0 <= int(action) <= 3:
        return int(action)
    return None


class FrozenLakeEnv(BaseEnv):
    """Text FrozenLake on a generated, solvable `size`×`size` map.

    Reward 1.0 on reaching the goal, else 0. Done on the goal, a hole, or after `max_steps` steps (invalid actions
    count). `max_steps=None` means `4 * size`: room for a detour or two, while a lost model still ends quickly.
    A `desc` (gymnasium's map format, rows of S/F/H/G) replaces the generated map when given; `size` is then
    read from it. `observation="image"` shows the board as a picture (see the module docstring).
    """

    blocking = False  # pure Python state: the engine steps it inline, no thread hop

    def __init__(
        self,
        size: int = 4,
        hole_prob: float = 0.2,
        seed: int = 0,
        max_steps: int | None = None,
        desc: list[str] | None = None,
        observation: str = "text",
    ) -> None:
        _check_type("seed", seed, numbers.Integral, "an int")
        if observation not in OBSERVATIONS:
            raise ValueError(f"FrozenLakeEnv: observation must be one of {OBSERVATIONS}, got {observation!r}")
        self.observation = observation
        _check_type("hole_prob", hole_prob, numbers.Real, "a number")
        _check_type("size", size, numbers.Integral, "an int")
        if not 0 <= hole_prob < 1:
            raise ValueError(f"FrozenLakeEnv: hole_prob must be in [0, 1), got {hole_prob}")
        if desc is not None:
            self.desc = _validate_desc(desc)
        else:
            if size < 2:
                raise ValueError(f"FrozenLakeEnv: size must be at least 2, got {size}")
            # gymnasium's p is the probability of frozen ice; it loops until the map is solvable.
            self.desc = generate_random_map(size=int(size), p=1.0 - float(hole_prob), seed=int(seed))
        self.size = len(self.desc)
        self.hole_prob = float(hole_prob)
        self.seed = int(seed)
        if max_steps is not None:
            _check_type("max_steps", max_steps, numbers.Integral, "an int or None")
            if max_steps < 1:
                raise ValueError(f"FrozenLakeEnv: max_steps must be at least 1, got {max_steps}")
        self.max_steps = 4 * self.size if max_steps is None else int(max_steps)
        self._gym = _GymFrozenLake(desc=self.desc, is_slippery=False)
        self._rng = random.Random(self.seed)
        self._steps = 0
        self._done = False
        self._state = 0

    @classmethod
    def from_dict(cls, task: dict) -> FrozenLakeEnv:
        """Build from a dataset row; keys other than size, hole_prob, seed, max_steps, desc and observation are
        ignored."""
        if not isinstance(task, dict):
            raise TypeError(f"FrozenLakeEnv.from_dict expects a dict, got {type(task).__name__}")
        known = ("size", "hole_prob", "seed", "max_steps", "desc", "observation")
        return cls(**{key: task[key] for key in known if key in task})

    @property
    def position(self) -> tuple[int, int]:
        return divmod(self._state, self.size)

    def reset(self) -> tuple[str | dict, dict]:
        self._state, _ = self._gym.reset(seed=self.seed)
        self._steps = 0
        self._done = False
        info = {
            "size": self.size,
            "max_steps": self.max_steps,
            "optimal_steps": shortest_path_length(self.desc),
            "position": list(self.position),
        }
        return self._observe(""), info

    def step(self, action: Any) -> tuple[str | dict, float, bool, dict]:
        if self._done:
            raise RuntimeError("FrozenLakeEnv.step() called after the episode ended; call reset() first")
        self._steps += 1
        action_id = parse_env_action(action)
        moved = False
        if action_id is not None:
            before = self._state
            self._state, _, _, _, _ = self._gym.step(action_id)
            moved = self._state != before
        cell = self.desc[self.position[0]][self.position[1]]
        success, fell = cell == "G", cell == "H"
        truncated = not (success or fell) and self._steps >= self.max_steps
        self._done = success or fell or truncated
        observation = self._status(action_id is None, moved, success, fell, truncated)
        info = {
            "success": success,
            "fell_in_hole": fell,
            "truncated": truncated,
            "invalid_action": action_id is None,
            "steps": self._steps,
            "position": list(self.position),
        }
        return observation, (1.0 if success else 0.0), self._done, info

    def _status(self, invalid: bool, moved: bool, success: bool, fell: bool, truncated: bool) -> str | dict:
        # One short line of feedback, only when something other than a plain move happened.
        if invalid:
            note = _INVALID_HINT
        elif success:
            note = "You reached the goal!"
        elif fell:
            note = "You fell into a hole."
        elif not moved:
            note = "You hit the edge and did not move."
        else:
            note = ""
        if truncated:
            note = (note + " Out of moves.").strip()
        return self._observe(note)

    def _observe(self, note: str) -> str | dict:
        if self.observation == "image":
            return {"image": render_board(self.desc, self.position), "text": note}
        grid = render_grid(self.desc, self.position)
        return f"{note}\n{grid}" if note else grid

    def sample_action(self, rng: random.Random | None = None) -> str:
        """A random direction word, drawn from `rng` when given (`rllm.envs.check_env` passes its own, so that
        its episodes differ from each other yet follow its seed), else from an RNG seeded by the map's seed."""
        return (rng or self._rng).choice(list(ACTIONS))

    def close(self) -> None:
        self._gym.close()

    @staticmethod
    def is_multithread_safe() -> bool:
        return True  # no shared state: each instance owns its map, its gymnasium env and its RNG


# ----------------------------------------------------------------------------------------------------------- agent

FROZENLAKE_SYSTEM_PROMPT = (
    "You are P on a frozen lake grid. _ is ice, O is a hole (you lose), G is the goal.\n"
    "Reach G. Each turn, reply with one move: up, down, left or right.\n"
    "Answer like: Action: right"
)
FROZENLAKE_IMAGE_SYSTEM_PROMPT = (
    "You are the red disc on a frozen lake, shown as a picture of square cells. Light blue is ice, dark blue is a hole "
    "(you lose), green is the goal.\nReach the goal. Each turn, reply with one move: up, down, left or right.\n"
    "Answer like: Action: right"
)

_SYNONYMS = {
    "up": "up",
    "down": "down",
    "left": "left",
    "right": "right",
    "north": "up",
    "south": "down",
    "west": "left",
    "east": "right",
    "↑": "up",
    "↓": "down",
    "←": "left",
    "→": "right",
}
_DIRECTION = re.compile(r"\b(up|down|left|right|north|south|east|west)\b|([↑↓←→])", re.IGNORECASE)
_ACTION_MARKER = re.compile(r"action\s*:", re.IGNORECASE)


def _directions(text: str) -> list[str]:
    return [_SYNONYMS[match.group(0).lower()] for match in _DIRECTION.finditer(text)]


def parse_move(text: str | None) -> str | None:
    """The move a reply asks for ("up", "down", "left", "right"), or None; see the module docstring for the rule."""
    if not text:
        return None
    markers = list(_ACTION_MARKER.finditer(text))
    if markers:
        after_marker = _directions(text[markers[-1].end() :])
        if after_marker:
            return after_marker[0]
    mentioned = _directions(text)
    return mentioned[-1] if mentioned else None


class FrozenLakeAgent(BaseAgent):
    """Multi-turn FrozenLake agent: observation in as a user message, one move out per reply. `observation="image"`
    for the env's pictures (its system prompt names the colours instead of the symbols)."""

    system_prompt = FROZENLAKE_SYSTEM_PROMPT

    def __init__(self, observation: str = "text", **kwargs: Any) -> None:
        if observation not in OBSERVATIONS:
            raise ValueError(f"FrozenLakeAgent: observation must be one of {OBSERVATIONS}, got {observation!r}")
        self.observation = observation
        if observation == "image":
            self.system_prompt = FROZENLAKE_IMAGE_SYSTEM_PROMPT
        super().__init__(**kwargs)

    def format_observation(self, observation: Any) -> str | list[dict[str, Any]]:
        is_picture = isinstance(observation, dict) and "image" in observation
        if is_picture != (self.observation == "image"):
            sent, built = ("pictures", "text") if is_picture else ("text", "pictures")
            raise TypeError(
                f"FrozenLakeAgent.format_observation: the env sends {sent} but the agent was built for "
                f"{built}: set the same `observation` in agent_args and env_args (text or "
                "image)"
            )
        if not is_picture:
            return str(observation)
        parts = [image_part(observation["image"])]
        return parts + [{"type": "text", "text": observation["text"] or "Your move."}]

    def parse_action(self, output: ModelOutput) -> str | None:
        return parse_move(output.content if output.content is not None else output.text)


# ------------------------------------------------------------------------------------------------------- generator


def make_frozenlake_tasks(
    n: int,
    *,
    seed: int = 0,
    sizes: tuple[int, ...] = (2, 3, 4),
    hole_prob: float = 0.2,
    max_steps: int | None = None,
) -> list[dict]:
    """`n` dataset rows for `FrozenLakeEnv.from_dict`, deterministic given `seed`.

    Sizes cycle through `sizes` in order so every size is equally represented; each row gets its own map seed
    (distinct within the list) and a stable `id` built from size, hole_prob and that seed. Rows also carry the map
    (`desc`) and `optimal_steps` (the BFS path length), handy for curricula and for checking a policy.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"make_frozenlake_tasks: n must be a non-negative int, got {n!r}")
    if not sizes:
        raise ValueError("make_frozenlake_tasks: sizes must not be empty")
    rng = random.Random(seed)
    used: set[int] = set()
    tasks = []
    for index in range(n):
        size = sizes[index % len(sizes)]
        map_seed = rng.randrange(2**31)
        while map_seed in used:
            map_seed = rng.randrange(2**31)
        used.add(map_seed)
        env = FrozenLakeEnv(size=size, hole_prob=hole_prob, seed=map_seed, max_steps=max_steps)
        tasks.append(
            {
                "id": f"frozenlake-{size}x{size}-p{hole_prob:g}-{map_seed}",
                "size": size,
                "hole_prob": hole_prob,
                "seed": map_seed,
                "max_steps": env.max_steps,
                "desc": list(env.desc),
                "optimal_steps": shortest_path_length(env.desc),
            }
        )
    return tasks


TASK = Task(
    name="frozenlake",
    description="Walk a generated FrozenLake grid to the goal without falling in a hole (multi-turn).",
    make_tasks=make_frozenlake_tasks,
    agent=FrozenLakeAgent,
    env=FrozenLakeEnv,
)
