"""Training backends: what turns training rows into new weights (the protocol: `base.TrainingBackend`).

- `rllm.training.backends.torch.TorchBackend` (`trainer.backend: torch`): the embedded backend (transformers +
  optional LoRA via peft, CPU or one GPU), sharing its model with the `LocalModel` that does the rollouts.
- `rllm.training.backends.verl.VerlBackend` (`trainer.backend: verl`): verl's FSDP2 actor/ref workers on a Ray
  cluster (`trainer.nodes` x `trainer.workers_per_node`), our loss injected; runs in the verl environment.
- `rllm.training.backends.torch_model`: the torch backend's model-side helpers (LoRA setup, the forward pass that
  applies the output layer only where the loss is, merged LoRA weights for an inference server, the LR schedule).

Import-light on purpose (docs/architecture.md, "Layers and the import rule": a heavy dependency is imported by the
one module that needs it): `import rllm.training.backends` imports neither torch nor verl; `make_backend` imports the
backend the config names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_backend(config: Any, run_dir: Path, *, model: Any = None, tokenizer: Any = None, kernels: Any = None) -> Any:
    """The training backend `config.trainer.backend` names, built from `config` (a `TrainConfig`). `kernels`: the
    torch backend's `rllm.inference.kernels.KernelChoice` (None: measured or cached); verl's workers choose their
    own kernels."""
    if config.trainer.backend == "verl":
        from rllm.training.backends.verl import VerlBackend

        return VerlBackend(config, run_dir, model=model, tokenizer=tokenizer)
    from rllm.training.backends.torch import TorchBackend

    return TorchBackend(
        config.model,
        config.algorithm,
        config.optim,
        total_steps=config.trainer.total_steps,
        seed=config.trainer.seed,
        device=config.model.device,
        model=model,
        tokenizer=tokenizer,
        kernels=kernels,
    )
