"""Reward shaping helpers: small pure functions a reward function (or the trainer) adds to a task's reward.

soft_overlong_penalty(length=4000, max_length=4096, buffer=512)   # -> -0.8125 (DAPO's soft overlong punishment)
format_reward(text, "<answer>.+</answer>")                       # -> 0.0 when it matches, -1.0 when it does not
"""

from __future__ import annotations

import re

__all__ = ["format_reward", "soft_overlong_penalty"]


def soft_overlong_penalty(length: int, max_length: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at
    Scale", eq. 13; verl's `overlong_buffer`): 0 for a response of up to `max_length - buffer` tokens, then falling
    linearly to `-factor` at `max_length`, and `-factor` beyond. A response cut off at the limit is then penalised in
    proportion to how far into the buffer it ran, instead of a cliff between "just fit" and "cut"."""
    if not 0 < buffer < max_length:
        raise ValueError(f"the overlong buffer must be in (0, max_length={max_length}), got {buffer}")
    exceed = length - (max_length - buffer)
    return -factor * min(max(exceed, 0) / buffer, 1.0)


def format_reward(text: str, pattern: str, *, matched: float = 0.0, unmatched: float = -1.0) -> float:
    """`matched` when the regular expression `pattern` is found in `text` (re.search, DOTALL), else `unmatched`: the
    format term of R1-style rewards (an answer in the expected form), to add to the correctness reward."""
    return matched if re.search(pattern, text, flags=re.DOTALL) else unmatched
