"""rLLM v0.2's `rllm.engine` names. Served at `rllm.engine` where rllm's own package does not define the name
(`AgentExecutionEngine` and `AgentWorkflowEngine` there are rllm's; rLLM's constructors are at
`rllm.engine.agent_execution_engine` and `rllm.engine.agent_workflow_engine`). `AsyncAgentExecutionEngine` is rLLM's
other name of its execution engine, here too."""

from rllm.compat._lazy import lazy_names

_WHERE = {
    "AgentExecutionEngine": "agent_execution_engine",
    "AgentWorkflowEngine": "agent_workflow_engine",
    "AsyncAgentExecutionEngine": "agent_execution_engine",
    "ModelOutput": "rollout",
    "OpenAIEngine": "rollout",
    "RolloutEngine": "rollout",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)
