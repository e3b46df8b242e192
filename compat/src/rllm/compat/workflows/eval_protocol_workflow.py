"""rLLM v0.2's `rllm.workflows.eval_protocol_workflow.EvalProtocolWorkflow` runs Fireworks' eval-protocol benchmarks;
not available here (a named exception of issue 40: Fireworks' integration)."""

raise ImportError(
    "rllm.workflows.eval_protocol_workflow is not available: rllm does not integrate Fireworks' eval-protocol; write "
    "the benchmark as an rllm Workflow (rllm.workflows.Workflow) or a task (see docs/add-a-task.md)"
)
