"""rLLM v0.2's `FrozenLakeAgent` (`rllm.agents.frozenlake_agent`), the agent of rLLM's FrozenLake example, for
`rllm.environments.frozenlake.frozenlake.FrozenLakeEnv` and rLLM's `AgentExecutionEngine`.

Same constructor, messages, parsing and steps as rLLM v0.2.1's:

- `reset()`: one system message (`SYSTEM_PROMPT`, or `MULTI_SHOT_SYSTEM_PROMPT` with `use_multistep_prompt=True`),
  step counter 0, a new trajectory.
- `update_from_env(observation, reward, done, info)`: writes reward, done and info onto the latest step, then
  appends a user message `"Current Observation ({n}): \\n{grid}\\nYou have not achieved the goal, ..."`, always (also
  when `done`, as rLLM does), plus a line saying the last reply was invalid when the grid did not change after an
  action, and `"The maximum number of steps remaining is {k}."` while `max_steps - n > 0`.
- `update_from_model(response)`: drops the text up to `</think>` unless `use_accumulate_thinking`, reads the action
  from the LAST ```` ```...``` ```` block (`left`/`down`/`right`/`up` in any case -> `"1"`-`"4"`, a digit 1-4 kept,
  anything else `"0"`, the env's invalid action), appends the assistant message and a new `Step` (the messages
  including the reply, `thought` = the text before that block, `action`, `model_response`, the observation it
  answered) and returns `Action(action)`.
- `chat_completions`: every message with `use_accumulate_history=True` (the default), else the system message and
  the latest message.

The system prompts are ours, with the content of rLLM's: the rules, the symbols, the answer format (the move in a
```` ``` ```` block), and for the multi-shot prompt worked examples. rLLM's prompt opens with Qwen's identity line;
ours does not. Replace them by subclassing (`SYSTEM_PROMPT = ...`), as with rLLM's.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory
from rllm.compat.environments.frozenlake.frozenlake import FrozenLakeEnv

__all__ = ["FrozenLakeAgent"]

_GUIDE = """You are a helpful assistant playing FrozenLake: you walk on a frozen lake, one move per turn.

How the game works
Goal: move the player (P) onto the goal (G); you win when they are on the same cell.

Map symbols:
_ Frozen tile | O Hole | G Goal | P Player

Rules:
1. Do not step into a hole (O): the game ends and you lose.
2. Frozen tiles can be slippery, so a move may sometimes take you sideways instead.

Moves you can make (one per turn):
Up | Down | Left | Right

Rewards:
Falling into a hole: 0
Reaching the goal: +1.0

Each turn you get the current map. Think about it first, then give your move inside ``` ```.
Give only the NEXT move in the ``` ```: for example, to move up, end your answer with ```Up```.
Reach the goal in as few moves as you can, planning your route ahead.
Slipping is rare, so take it into account without dwelling on it.
"""

_CELLS = {"P": " P \t", "_": " _ \t", "O": " O \t", "G": " G \t"}


def _grid(*rows: str) -> str:
    """A map drawn as the env draws it (`FrozenLakeEnv.render("tiny_rgb_array")`), from rows like "P__O"."""
    return "\n".join("".join(_CELLS[cell] for cell in row) for row in rows)


def _example(number: int, grid: str, answer: str) -> str:
    return (
        f"Example {number}:\nUser: Current Observation:\n{grid}\n"
        "You have not achieved the goal, P has not reached G yet. Please give the next action.\n\n"
        f"Assistant: {answer}\n\n"
    )


_EXAMPLES = (
    "\nHere is how a few turns can go:\n"
    + _example(
        1,
        _grid("P___", "_O__", "___O", "O__G"),
        "P is in the top-left corner and G is in the bottom-right corner, so I need to go right and down. The tiles "
        "to the right of P and below it are both frozen; going right keeps me further from the hole in the second "
        "row. Action: ```Right```",
    )
    + _example(
        2,
        _grid("____", "__O_", "___P", "O__G"),
        "G is directly below P and that tile is the goal, not a hole. One move down wins. Action: ```Down```",
    )
    + _example(
        3,
        _grid("_____", "_OPO_", "__O__", "_____", "___G_"),
        "G is below and to the right of P. The tiles left of, right of and below P are all holes, so the only safe "
        "move is up; from there I can go around. Action: ```Up```",
    )
    + _example(
        4,
        _grid("____", "___O", "_O__", "_GP_"),
        "P is next to G but not on it, so the game is not over. G is directly to the left of P. Action: ```Left```",
    )
    + "Now it is your turn. Think first, then put your move in ``` ```. Every turn, the move MUST be one of Up, Down, "
    "Left, Right.\n"
)

_CLOSING = """
Think first, then put your move in ``` ```. Every turn, the move MUST be one of Up, Down, Left, Right.
"""

_DIRECTIONS = {"left": 1, "down": 2, "right": 3, "up": 4}
_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)
_INVALID_REPLY = (
    "\nYour last response is invalid. Your position didn't change at all. You may need to recheck your thinking "
    "process, action outputted, and the format of response. Remember, you should only output the NEXT ACTION at each "
    "interation in the ``` ```. For example, if you want to move up, you should output ```Up```."
)


class FrozenLakeAgent(BaseAgent):
    """rLLM's FrozenLake agent: see the module docstring."""

    SYSTEM_PROMPT: str = _GUIDE + _CLOSING
    MULTI_SHOT_SYSTEM_PROMPT: str = _GUIDE + _EXAMPLES

    def __init__(
        self,
        max_steps: int | None = None,
        use_accumulate_thinking: bool | None = True,
        use_multistep_prompt: bool | None = False,
        use_accumulate_history: bool | None = True,
    ) -> None:
        self._trajectory = Trajectory()
        self.messages: list[dict[str, str]] = []
        self.step: int = 0
        self.accumulate_thinking = use_accumulate_thinking  # keep the reasoning before </think> in the history
        self.multistep_prompt = use_multistep_prompt
        self.max_steps = max_steps  # only shapes the prompt ("steps remaining"); the engine's max_steps ends episodes
        self.accumulate_history = use_accumulate_history
        self.current_observation: Any = None
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        prompt = self.MULTI_SHOT_SYSTEM_PROMPT if self.multistep_prompt else self.SYSTEM_PROMPT
        self.messages = [{"role": "system", "content": prompt}]
        self.step = 0

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        steps = self._trajectory.steps
        if steps:
            steps[-1].reward, steps[-1].done, steps[-1].info = reward, done, info
        grid = str(observation)
        content = (
            f"Current Observation ({self.step}): \n{grid}\n"
            "You have not achieved the goal, P has not reached G yet. Please give the next action."
        )
        if steps and steps[-1].action is not None and steps[-1].observation == grid:
            content += _INVALID_REPLY
        if self.max_steps is not None and self.max_steps - self.step > 0:
            content += f"\nThe maximum number of steps remaining is {self.max_steps - self.step}."
        self.messages.append({"role": "user", "content": content})
        self.current_observation = grid

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        content = response
        if not self.accumulate_thinking:
            _, think_end, after = content.partition("</think>")
            if think_end:
                content = after
        thought, action = self._parse_model_response(content)
        self.messages.append({"role": "assistant", "content": content})
        self._trajectory.steps.append(
            Step(
                chat_completions=copy.deepcopy(self.chat_completions),
                thought=thought,
                action=action,
                model_response=content,
                observation=self.current_observation,
            )
        )
        self.step += 1
        return Action(action=action)

    def _parse_model_response(self, response: str) -> tuple[str, str]:
        """(thought, action): the action from the last ``` block, the thought the text before it (the whole reply
        when there is no block or, as in rLLM, when the block's content is padded with whitespace)."""
        blocks = _BLOCK.findall(response)
        if not blocks:
            return response, str(FrozenLakeEnv.INVALID_ACTION)
        last = blocks[-1].strip()
        at = response.rfind(f"```{last}```")
        thought = response[:at].strip() if at != -1 else response
        word = last.lower()
        if word in _DIRECTIONS:
            return thought, str(_DIRECTIONS[word])
        if word.isdigit():
            try:
                number = int(word)
            except ValueError:  # digits int() cannot read (superscripts)
                number = FrozenLakeEnv.INVALID_ACTION
            if number in _DIRECTIONS.values():
                return thought, str(number)
        return thought, str(FrozenLakeEnv.INVALID_ACTION)

    def _process_action_for_validation(self, response: str) -> str:
        return self._parse_model_response(response)[1]

    @property
    def chat_completions(self) -> list[dict[str, str]]:
        if self.accumulate_history or len(self.messages) <= 1:
            return self.messages
        return [self.messages[0], self.messages[-1]]

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory
