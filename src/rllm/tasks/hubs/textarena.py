"""TextArena's single-player games as rllm tasks: `data.task: textarena:GuessTheNumber-v0` (any single-player env id
that runs locally; `python -m rllm.tasks.hubs.textarena` lists them), played multi-turn in the agent/env loop.

Parts: `TextArenaEnv` (a `BaseEnv` around `textarena.make(env_id)`), `TextArenaAgent` (the chat side), `make_tasks`
(rows holding the env id and a per-row seed), `hub_task`.

- Each row has its own game seed, the `reset` seed TextArena takes; `split_seed` puts training and validation seeds
  in disjoint ranges. Two seeds can still deal the same game when a game has few (GuessTheNumber-v0 has 20 numbers).
- The first observation is TextArena's prompt for player 0 (the rules and the move format: most games read the move
  inside square brackets, e.g. "[7]"); each later one is what the game said since the last move, as one user
  message. The player's own move, which TextArena echoes back, is left out: it is already the assistant message. The
  agent keeps the whole conversation, so every turn's prompt extends the previous one (token exactness).
- The agent's reply (its content, without reasoning the server separated) is the action, through the env id's own
  action wrappers (`ActionFormattingWrapper` puts a reply without brackets inside them). Observation wrappers are
  skipped: they re-send the whole history every turn, which the conversation already holds.
- Rewards are TextArena's: 0 until the game is over, then its outcome for player 0 (1 for a win; many games give a
  loss partial credit, e.g. the share of Tower of Hanoi's disks already in place; an invalid move beyond the game's
  allowance ends the game with its penalty). `info["success"]` is a reward of 1. Turn limits are the game's own
  (TextArena ends the game at them; `reset`'s info gives `max_turns`, None for games without one): set
  `rollout.max_steps` to at least that, counting one more reply for each invalid move the game forgives.
- Only games that run locally: TextArena's online modes (`make_online`) are never used, and games whose module
  calls an LLM game master (TwentyQuestions, GuessWho: OpenRouter) or is not single-player are refused by name.
  `import textarena` and `make` of the local games open no connection (tests/unit/tasks/test_hubs.py runs them with the
  network closed). Word games load nltk's word lists, which TextArena downloads when it starts: rllm turns that
  download into a no-op, so such a game runs when the data is on disk and is otherwise refused in one line naming the
  `python -m nltk.downloader ...` command.
- TextArena draws from Python's global `random` (and `reset(seed=...)` calls `random.seed`). Each env keeps its own
  copy of that state and swaps it in for each call into TextArena, under one lock, so games are reproducible from
  their seed however many run at once, and the caller's `random` state is left as it was.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import threading
from collections.abc import Iterator
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.envs.base import BaseEnv
from rllm.tasks import Task
from rllm.tasks.hubs import HubError, import_hub_package, split_seed, unknown_name

__all__ = ["TEXTARENA_SYSTEM_PROMPT", "TextArenaAgent", "TextArenaEnv", "hub_task", "make_tasks", "names"]

HUB = "textarena"
# TextArena's own system prompt for its LLM agents (textarena.agents.basic_agents.STANDARD_GAME_PROMPT)
TEXTARENA_SYSTEM_PROMPT = (
    "You are a competitive game player. Make sure you read the game instructions carefully, and always follow the "
    "required format."
)
_ONLINE_MARKERS = ("ta.agents.", "OpenRouter", "OpenAI(", "openai")  # a game master that is an LLM behind an API
_VARIANT_SUFFIXES = ("-raw", "-train")  # the same game with other wrappers; accepted, not listed
_NO_NEW_MESSAGES = "(The game has nothing new to say.) Your move."
_LOCK = threading.RLock()  # one call into TextArena at a time: it uses the process's global random state


def _package(task: str = f"{HUB}:NAME") -> Any:
    return import_hub_package("textarena", package="textarena", task=task)


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, str]:
    """Every registered env id -> "" when it is a local single-player game, else why it is not (read from the source
    of its module, without importing it: some modules download data or fail to import)."""
    ta = _package()
    from textarena.envs.registration import ENV_REGISTRY

    root = os.path.dirname(os.path.dirname(os.path.abspath(ta.__file__)))
    verdicts: dict[str, str] = {}
    for env_id, spec in ENV_REGISTRY.items():
        entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
        verdicts[env_id] = _module_verdict(root, entry.partition(":")[0]) if entry else ""
    return verdicts


@functools.cache
def _module_verdict(root: str, module: str) -> str:
    path = os.path.join(root, *module.split(".")) + ".py"
    try:
        with open(path, encoding="utf-8") as file:
            source = file.read()
    except OSError:
        return "its module is missing from the installed textarena"
    if "SinglePlayerState" not in source:
        return "is a multi-player game; rllm plays TextArena's single-player games"
    if any(marker in source for marker in _ONLINE_MARKERS):
        return "needs an LLM game master behind an API (OpenRouter); rllm plays only games that run locally"
    try:
        compile(source, path, "exec")
    except SyntaxError as error:
        return f"does not load in the installed textarena (a SyntaxError in its module, line {error.lineno})"
    return ""


def names() -> list[str]:
    """The env ids of TextArena's local single-player games, sorted (their "-raw"/"-train" variants are accepted
    too)."""
    return sorted(i for i, why in _catalog().items() if not why and not i.endswith(_VARIANT_SUFFIXES))


def _check_env_id(env_id: str) -> None:
    catalog = _catalog()
    if env_id not in catalog:
        raise unknown_name(HUB, env_id, names(), what="single-player game")
    if catalog[env_id]:
        raise HubError(
            f"{HUB}:{env_id} {catalog[env_id]}; list those it can play with `python -m rllm.tasks.hubs.{HUB}`"
        )


def hub_task(name: str) -> Task:
    """The task `textarena:ENV_ID`: TextArena's game ENV_ID in the agent/env loop. The game is made once here (not
    dealt: some games take seconds to deal), so one that cannot run on this machine (its nltk data missing) is
    refused now, in one line, and not at the first rollout."""
    _package(f"{HUB}:{name}")
    _check_env_id(name)
    try:
        with TextArenaEnv(name, seed=0)._textarena() as ta:
            ta.make(name)
    except HubError:
        raise
    except Exception as error:
        detail = (str(error).strip().splitlines() or [""])[0]
        raise HubError(f"{HUB}:{name} does not start here: {type(error).__name__}: {detail}"[:500]) from None
    return Task(
        name=f"{HUB}:{name}",
        description=f"TextArena's single-player game {name}, rewarded by TextArena's outcome (multi-turn).",
        make_tasks=functools.partial(make_tasks, name),
        agent=TextArenaAgent,
        env=TextArenaEnv,
        default_workflow="agent_env",
    )


def make_tasks(env_id: str, n: int, *, seed: int = 0, split: str = "train") -> list[dict]:
    """`n` rows `{"id", "data_source", "env_id", "seed"}`, the same for the same seed and split; each row is one game
    of `env_id`, dealt by its own seed (training and validation seeds never overlap: `split_seed`)."""
    _check_env_id(env_id)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{HUB}:{env_id}: n must be a non-negative int, got {n!r}")
    first = split_seed(seed, split, n)
    return [
        {"id": f"{env_id}-{split}{seed}-{i}", "data_source": f"{HUB}:{env_id}", "env_id": env_id, "seed": first + i}
        for i in range(n)
    ]


class TextArenaEnv(BaseEnv):
    """One game of TextArena's `env_id`, dealt by `seed` (module docstring)."""

    def __init__(self, env_id: str, seed: int = 0) -> None:
        _package(f"{HUB}:{env_id}")
        _check_env_id(env_id)
        self.env_id, self.seed = env_id, int(seed)
        self._random_state = random.Random(self.seed).getstate()
        self._game: Any = None
        self._done = False

    @classmethod
    def from_dict(cls, task: dict) -> TextArenaEnv:
        """Build from a row; keys other than env_id and seed are ignored."""
        if not isinstance(task, dict) or "env_id" not in task:
            raise TypeError(f"TextArenaEnv.from_dict expects a row with an 'env_id', got {task!r}"[:300])
        return cls(env_id=task["env_id"], seed=task.get("seed", 0))

    def reset(self) -> tuple[str, dict]:
        self._random_state = random.Random(self.seed).getstate()  # every reset deals the same game
        with self._textarena() as ta:
            self._game = ta.make(self.env_id)
            self._game.reset(num_players=1, seed=self.seed)
            observation = self._new_messages()
            max_turns = getattr(self._state, "max_turns", None)
        self._done = False
        return observation, {"env_id": self.env_id, "seed": self.seed, "max_turns": max_turns}

    def step(self, action: Any) -> tuple[str, float, bool, dict]:
        if self._game is None:
            raise RuntimeError("TextArenaEnv.step() called before reset()")
        if self._done:
            raise RuntimeError("TextArenaEnv.step() called after the game ended; call reset() first")
        with self._textarena():
            turn = self._state.turn
            done, _ = self._game.step("" if action is None else str(action))
            observation = self._new_messages()
            # an invalid move the game forgives does not count as a turn; one it does not ends the game, flagged
            info = {"invalid_move": self._state.turn == turn, "turn": self._state.turn}
            reward = 0.0
            if done:
                rewards, game_info = self._game.close()
                reward = float((rewards or {}).get(0, 0.0))
                player = (game_info or {}).get(0, {})
                reason = str(player.get("reason") or "")
                observation = "\n".join(part for part in (observation, reason) if part)
                info["reason"] = reason
                info["invalid_move"] = info["invalid_move"] or bool(player.get("invalid_move"))
        self._done = bool(done)
        info["success"] = self._done and reward >= 1.0
        return observation or _NO_NEW_MESSAGES, reward, self._done, info

    def close(self) -> None:
        self._game = None

    @staticmethod
    def is_multithread_safe() -> bool:
        return True  # every call into TextArena holds the module's lock

    @property
    def _state(self) -> Any:
        return self._game.state

    def _new_messages(self) -> str:
        """What the game told player 0 since its last move, without the echo of that move (module docstring)."""
        import textarena as ta

        inner = self._game
        while isinstance(inner, ta.Wrapper):
            inner = inner.env
        _, messages = inner.get_observation()
        # the only player's move, echoed back (some games send it as player 0, others as the game)
        own_move = ta.ObservationType.PLAYER_ACTION
        texts = [str(text).strip() for _, text, kind in messages if kind != own_move]
        return "\n".join(text for text in texts if text)

    @contextlib.contextmanager
    def _textarena(self) -> Iterator[Any]:
        """TextArena, with this game's own global random state swapped in and nltk's downloader switched off."""
        ta = _package(f"{HUB}:{self.env_id}")
        import nltk

        refused: list[str] = []

        def no_download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
            refused.append(str(info_or_id))
            return False

        with _LOCK:
            outer = random.getstate()
            download, nltk.download = nltk.download, no_download
            random.setstate(self._random_state)
            try:
                yield ta
            except LookupError as error:
                if type(error) is not LookupError or "nltk" not in str(error):
                    raise  # a KeyError or IndexError of the game's own: not nltk's "Resource ... not found"
                wanted = sorted({*refused, *re.findall(r"nltk\.download\('([^']+)'\)", str(error))})
                raise HubError(
                    f"{HUB}:{self.env_id} needs nltk data that TextArena downloads when a game starts, which rllm "
                    f"does not let it do: fetch it once with `python -m nltk.downloader {' '.join(wanted)}`"
                ) from None
            finally:
                self._random_state = random.getstate()
                random.setstate(outer)
                nltk.download = download


class TextArenaAgent(BaseAgent):
    """The player: TextArena's system prompt for LLM players, each observation as a user message, the reply's content
    as the move (TextArena's games read the move from it, usually inside square brackets)."""

    system_prompt = TEXTARENA_SYSTEM_PROMPT


if __name__ == "__main__":
    print("\n".join(names()))
