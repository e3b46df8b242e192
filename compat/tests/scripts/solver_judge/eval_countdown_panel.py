"""Run the countdown panel workflow over the registered "countdown" test split with rLLM's `AgentWorkflowEngine`
and an `OpenAIEngine` pointed at a served model (RLLM_COMPAT_MODEL, RLLM_COMPAT_BASE_URL); print how often the
judge picked a right answer and keep every episode in logs/countdown_panel.json."""

import asyncio
import json
import os
import sys
from pathlib import Path

from countdown_panel import CountdownPanel
from transformers import AutoTokenizer

from rllm.data.dataset import DatasetRegistry
from rllm.engine import OpenAIEngine
from rllm.engine.agent_workflow_engine import AgentWorkflowEngine
from rllm.rewards.countdown_reward import countdown_reward_fn

EPISODES_FILE = Path("logs") / "countdown_panel.json"


def countdown_puzzles():
    puzzles = DatasetRegistry.load_dataset("countdown", "test")
    if puzzles is None:
        sys.exit("register a 'countdown' test split first (rows with question, target and nums)")
    return puzzles.get_data()


def build_engine(model, server_url):
    rollout_engine = OpenAIEngine(
        model=model,
        tokenizer=AutoTokenizer.from_pretrained(model),
        base_url=server_url,
        api_key="unused",
        max_prompt_length=2048,
        max_response_length=512,
        sampling_params={"temperature": 0.7, "top_p": 0.9},
    )
    return AgentWorkflowEngine(
        workflow_cls=CountdownPanel,
        workflow_args={"n_solutions": 2, "reward_function": countdown_reward_fn},
        rollout_engine=rollout_engine,
        config=None,
        n_parallel_tasks=16,
        retry_limit=1,
    )


if __name__ == "__main__":
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    engine = build_engine(os.environ["RLLM_COMPAT_MODEL"], os.environ["RLLM_COMPAT_BASE_URL"])
    puzzles = countdown_puzzles()
    print(f"{len(puzzles)} countdown puzzles")
    episodes = asyncio.run(engine.execute_tasks(puzzles))
    print("judge picked a right answer in", sum(e.is_correct for e in episodes) / len(episodes), "of the puzzles")
    EPISODES_FILE.parent.mkdir(exist_ok=True)
    EPISODES_FILE.write_text(json.dumps([episode.to_dict() for episode in episodes], indent=2))
