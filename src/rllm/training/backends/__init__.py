"""Training backends: what turns training rows into new weights.

- `rllm.training.backends.torch.TorchBackend`: the embedded backend (transformers + optional LoRA via peft, CPU or
  one GPU), sharing its model with the `LocalModel` that does the rollouts.
- `rllm.training.backends.torch_model`: its model-side helpers (LoRA setup, the forward pass that applies the
  output layer only where the loss is, merged LoRA weights for an inference server, the LR schedule).

Import-light on purpose (DESIGN.md, layers): nothing is imported here, so `import rllm.training.backends` does not
import torch; import the backend module you use.
"""
