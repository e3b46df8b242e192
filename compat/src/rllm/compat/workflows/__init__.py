"""rLLM v0.2's `rllm.workflows` names. Served at `rllm.workflows` where rllm's own package does not define the name
(`Workflow` and `TerminationEvent` there are rllm's; rLLM's are at `rllm.workflows.workflow`)."""

from rllm.compat._lazy import lazy_names

_WHERE = {
    "Workflow": "workflow",
    "TerminationEvent": "workflow",
    "TerminationReason": "workflow",
    "SingleTurnWorkflow": "single_turn_workflow",
    "MultiTurnWorkflow": "multi_turn_workflow",
    "CumulativeWorkflow": "cumulative_workflow",
    "SimpleWorkflow": "simple_workflow",
    "TimingTrackingMixin": "timing_mixin",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)
