import subprocess
import sys

import rllm

PINNED_API = [
    "Action",
    "AgentExecutionEngine",
    "AgentTrainer",
    "AgentWorkflowEngine",
    "BaseAgent",
    "BaseEnv",
    "ChatRenderer",
    "DPOTrainer",
    "Episode",
    "FakeModel",
    "InfraError",
    "LocalModel",
    "ModelClient",
    "ModelNotAvailableError",
    "ModelOutput",
    "OpenAIClient",
    "PolicyError",
    "SFTTrainer",
    "SamplingParams",
    "Step",
    "TerminationEvent",
    "TerminationReason",
    "ToolCall",
    "TrainConfig",
    "Trajectory",
    "Workflow",
    "check_env",
    "load_config",
    "rollout",
]


def test_public_api_is_pinned():
    # Changing the public API is a decision: update this list on purpose.
    assert sorted(rllm.__all__) == sorted(PINNED_API)


def test_every_public_name_resolves():
    for name in rllm.__all__:
        assert getattr(rllm, name) is not None, name


def test_import_rllm_is_light():
    heavy = ["torch", "transformers", "vllm", "ray", "verl", "openai", "peft", "PIL"]
    code = (
        "import sys, rllm, rllm.engine, rllm.envs, rllm.agents, rllm.models, rllm.tasks, rllm.data, rllm.cli.main\n"
        "import rllm.config, rllm.runs, rllm.metrics, rllm.evaluation\n"
        "from rllm import load_config, TrainConfig\n"
        "import rllm.engine.workflow_engine, rllm.workflows.resolve, rllm.workflows.solver_judge\n"
        "import rllm.gateway, rllm.gateway.rollout, rllm.cli.serve, rllm.tasks.countdown\n"
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
