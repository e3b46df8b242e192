"""Train a FrozenLake agent with rLLM's `AgentTrainer` on the registered splits (run lake_tasks.py first); the
trainer's settings are Hydra overrides on the command line, as in rLLM's PPO config."""

import hydra

from rllm.agents.frozenlake_agent import FrozenLakeAgent
from rllm.data import DatasetRegistry
from rllm.environments.frozenlake.frozenlake import FrozenLakeEnv
from rllm.trainer.agent_trainer import AgentTrainer


@hydra.main(config_path="pkg://rllm.trainer.config", config_name="agent_ppo_trainer", version_base=None)
def train(config):
    trainer = AgentTrainer(
        agent_class=FrozenLakeAgent,
        env_class=FrozenLakeEnv,
        config=config,
        train_dataset=DatasetRegistry.load_dataset("frozenlake", "train"),
        val_dataset=DatasetRegistry.load_dataset("frozenlake", "test"),
    )
    trainer.train()


if __name__ == "__main__":
    train()
