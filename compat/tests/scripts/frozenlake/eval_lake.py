"""Play the registered FrozenLake test maps with a served model through rLLM's `AgentExecutionEngine`, then print
pass@k. The model and the OpenAI-compatible server come from RLLM_COMPAT_MODEL and RLLM_COMPAT_BASE_URL."""

import asyncio
import os

from transformers import AutoTokenizer

from rllm.agents.frozenlake_agent import FrozenLakeAgent
from rllm.data.dataset import DatasetRegistry
from rllm.engine.agent_execution_engine import AgentExecutionEngine
from rllm.environments.frozenlake.frozenlake import FrozenLakeEnv
from rllm.utils import compute_pass_at_k


def lake_test_rows():
    """The test split, made first when this machine has none yet."""
    if not DatasetRegistry.dataset_exists("frozenlake", "test"):
        print("no frozenlake test split registered; making one")
        from lake_tasks import make_lake_tasks

        make_lake_tasks()
    return DatasetRegistry.load_dataset("frozenlake", "test").get_data()


def build_engine(model, server_url):
    return AgentExecutionEngine(
        agent_class=FrozenLakeAgent,
        agent_args={"max_steps": 10, "use_accumulate_history": True},  # the agent sees the whole game so far
        env_class=FrozenLakeEnv,
        env_args={"max_steps": 8, "is_slippery": False},  # deterministic moves: a reward means a real path
        engine_name="openai",
        rollout_engine_args={"base_url": server_url, "api_key": "unused"},
        tokenizer=AutoTokenizer.from_pretrained(model),
        sampling_params={"model": model, "temperature": 0.7, "top_p": 0.9},
        max_prompt_length=4096,
        max_response_length=2048,
        n_parallel_agents=16,
    )


if __name__ == "__main__":
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    engine = build_engine(os.environ["RLLM_COMPAT_MODEL"], os.environ["RLLM_COMPAT_BASE_URL"])
    tasks = lake_test_rows()
    results = asyncio.run(engine.execute_tasks(tasks))
    compute_pass_at_k(results)
