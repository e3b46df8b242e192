"""Training: advantage estimators (`rllm.training.advantages`), losses (`rllm.training.losses`), batching and the
trainer.

This package is import-light on purpose (docs/architecture.md, "Layers and the import rule": `import rllm` never
imports torch, transformers, vllm, ray or verl): torch is imported by the submodules that need it, never here, so
`import rllm.training` stays cheap on a machine without torch.
"""
