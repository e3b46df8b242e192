"""`HarborAgent`: the shell-tool agent of rllm's SWE task (`rllm.tasks.swe.SWEAgent`: tool calls parsed from the
reply, long tool outputs cut on arrival) with a terminal task's system prompt: the task's instruction is the first
message, `bash` runs a command in the task's working directory, `finish` ends the episode."""

from __future__ import annotations

from rllm.tasks.swe.agent import SWEAgent

__all__ = ["HARBOR_SYSTEM_PROMPT", "HarborAgent"]

HARBOR_SYSTEM_PROMPT = (
    "You are working in a Linux terminal to complete a task. Run commands with the bash tool: each call runs in a "
    "fresh shell in the task's working directory, and there is no network. Look around first, make the changes the "
    "task asks for, check your work by running it, then call the finish tool. Call exactly one tool per reply."
)


class HarborAgent(SWEAgent):
    system_prompt = HARBOR_SYSTEM_PROMPT
