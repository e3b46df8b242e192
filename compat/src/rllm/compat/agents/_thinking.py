"""rLLM agents' `accumulate_thinking=False`: earlier assistant turns are shown without their reasoning."""

from __future__ import annotations

import copy
from typing import Any


def without_earlier_thinking(messages: list[dict[str, Any]], accumulate_thinking: bool) -> list[dict[str, Any]]:
    """A copy of `messages`; unless `accumulate_thinking`, each assistant turn before the last keeps only what follows
    its `</think>`, as rLLM's agents show their history to the model."""
    messages = copy.deepcopy(messages)
    if not accumulate_thinking:
        for message in messages[:-1]:
            if message["role"] == "assistant" and "</think>" in message["content"]:
                message["content"] = message["content"].partition("</think>")[2]
    return messages
