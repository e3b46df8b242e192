"""rLLM v0.2's `rllm.agents` names. Served at `rllm.agents` where rllm's own package does not define the name
(`BaseAgent` there is rllm's; rLLM's is `rllm.agents.agent.BaseAgent`)."""

from rllm.compat._lazy import lazy_names

_WHERE = {
    "Action": "agent",
    "BaseAgent": "agent",
    "Episode": "agent",
    "Step": "agent",
    "Trajectory": "agent",
    "FrozenLakeAgent": "frozenlake_agent",
    "MathAgent": "math_agent",
    "ToolAgent": "tool_agent",
    "CompetitionCodingAgent": "code_agent",
    "MiniWobAgent": "miniwob_agent",
    "SWEAgent": "swe_agent",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)
