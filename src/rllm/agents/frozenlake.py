"""`FrozenLakeAgent`: plays `rllm.envs.frozenlake.FrozenLakeEnv` one move per turn.

The system prompt states the grid legend and the answer format in three lines: small models pay for every prompt
token once per sample and once per turn. Every observation becomes a user message and every reply an assistant
message, appended and never rewritten, so each turn's prompt extends the previous one token for token (the engine
renders multi-turn prompts as deltas; see DESIGN.md, token exactness).

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

import re
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.types import ModelOutput

__all__ = ["FROZENLAKE_SYSTEM_PROMPT", "FrozenLakeAgent", "parse_move"]

FROZENLAKE_SYSTEM_PROMPT = (
    "You are P on a frozen lake grid. _ is ice, O is a hole (you lose), G is the goal.\n"
    "Reach G. Each turn, reply with one move: up, down, left or right.\n"
    "Answer like: Action: right"
)

_SYNONYMS = {
    "up": "up", "down": "down", "left": "left", "right": "right",
    "north": "up", "south": "down", "west": "left", "east": "right",
    "↑": "up", "↓": "down", "←": "left", "→": "right",
}  # fmt: skip
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
    """Multi-turn FrozenLake agent: observation in as a user message, one move out per reply."""

    system_prompt = FROZENLAKE_SYSTEM_PROMPT

    def format_observation(self, observation: Any) -> str:
        return str(observation)

    def parse_action(self, output: ModelOutput) -> str | None:
        return parse_move(output.content if output.content is not None else output.text)
