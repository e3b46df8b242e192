"""rLLM v0.2's Hydra config package: `agent_ppo_trainer.yaml`, found by rLLM's train scripts through
`@hydra.main(config_path="pkg://rllm.trainer.config", config_name="agent_ppo_trainer", version_base=None)`.

Importing it registers OmegaConf's `mul` resolver (upstream registers it in its trainer; the yaml's
`data.gen_batch_size` uses it) when omegaconf is installed; without omegaconf it is just the folder of the yaml."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR", "register_resolvers"]

CONFIG_DIR = Path(__file__).parent


def register_resolvers() -> None:
    try:
        from omegaconf import OmegaConf
    except ImportError:  # the yaml is still readable; composing it needs `pip install rllm[compat]`
        return
    if not OmegaConf.has_resolver("mul"):
        OmegaConf.register_new_resolver("mul", lambda a, b: a * b)


register_resolvers()
