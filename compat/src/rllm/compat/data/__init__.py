"""rLLM v0.2's `rllm.data` names, served at `rllm.data` (rllm's own datasets are its tasks, `rllm.tasks`)."""

from rllm.compat._lazy import lazy_names

_WHERE = {"Dataset": "dataset", "DatasetRegistry": "dataset"}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)
