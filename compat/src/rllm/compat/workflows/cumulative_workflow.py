"""rLLM v0.2's `CumulativeWorkflow`: `MultiTurnWorkflow` whose whole conversation shares one response budget
(`max_response_length` minus what the conversation has grown since its first prompt). Here that is what every
conversation already does: its turns extend one training row, each call gets the budget that is left, and a spent
budget ends the episode `max_response_length`."""

from __future__ import annotations

from rllm.compat.workflows.multi_turn_workflow import MultiTurnWorkflow

__all__ = ["CumulativeWorkflow"]


class CumulativeWorkflow(MultiTurnWorkflow):
    pass
