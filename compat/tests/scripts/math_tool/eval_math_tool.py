"""Evaluate a served model on the "aime2024" test split as a tool-using agent: rLLM's `ToolAgent` with the python
tool, `ToolEnvironment` running its calls and grading the final answer with `math_reward_fn`. Each problem is tried
a few times so that pass@k means something. The model and server come from RLLM_COMPAT_MODEL and
RLLM_COMPAT_BASE_URL."""

import asyncio
import os

from transformers import AutoTokenizer

from rllm.agents import ToolAgent
from rllm.data.dataset import DatasetRegistry
from rllm.engine.agent_execution_engine import AgentExecutionEngine
from rllm.environments.tools.tool_env import ToolEnvironment
from rllm.rewards.reward_fn import math_reward_fn
from rllm.utils import compute_pass_at_k

ATTEMPTS_PER_PROBLEM = 4
INSTRUCTIONS = "Work the problem out, running Python through the python tool where it helps. Box the final answer."


def build_engine(model, server_url):
    return AgentExecutionEngine(
        agent_class=ToolAgent,
        agent_args={"tools": ["python"], "parser_name": "qwen", "system_prompt": INSTRUCTIONS},
        env_class=ToolEnvironment,
        env_args={"tools": ["python"], "reward_fn": math_reward_fn},
        engine_name="openai",
        rollout_engine_args={"base_url": server_url, "api_key": "unused"},
        tokenizer=AutoTokenizer.from_pretrained(model),
        sampling_params={"model": model, "temperature": 0.7, "top_p": 0.9},
        max_prompt_length=2048,
        max_response_length=4096,
        n_parallel_agents=16,
    )


def aime_problems():
    """The test split; fetched and registered first if this machine has none (`load_dataset` answers None)."""
    problems = DatasetRegistry.load_dataset("aime2024", "test")
    if problems is None:
        print("aime2024 is not registered here; fetching it")
        from math_tasks import register_math_tasks

        _, problems = register_math_tasks()
    return problems


if __name__ == "__main__":
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    engine = build_engine(os.environ["RLLM_COMPAT_MODEL"], os.environ["RLLM_COMPAT_BASE_URL"])
    tasks = aime_problems().repeat(n=ATTEMPTS_PER_PROBLEM)
    results = asyncio.run(engine.execute_tasks(tasks))
    compute_pass_at_k(results)
