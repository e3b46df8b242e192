"""`DPOTrainer`: direct preference optimisation on pairs of trajectories (or TRL preference records), with the
same backend, checkpoints, run directory and validation as RL and SFT.

    rllm dpo configs/arithmetic_dpo.yaml dpo.episodes=runs/eval-arithmetic-...     # success/failure pairs a task
    rllm dpo configs/arithmetic_dpo.yaml dpo.episodes=null dpo.preferences=prefs.jsonl
    DPOTrainer(config=load_config(path)).train()

Choices:
- The `dpo` section names the data (`rllm.training.dpo_data`: a run's episodes, paired success/failure within a task
  and role, or TRL's `{prompt, chosen, rejected}` records), the loss (`sigmoid`, `ipo`, `hinge`; `beta`) and the
  reference. A step is one optimizer step on `dpo.batch_size` pairs (`TorchBackend.update_pairs`; a micro-batch holds
  both sides of `optim.micro_batch_size // 2` pairs); `ceil(epochs * pairs / batch_size)` steps.
- Reference log-probabilities: `precomputed` (default) runs the starting weights once over every pair before the
  first step (before loading a resumed checkpoint, so a resumed run gets the same numbers), as TRL's
  `precompute_ref_log_probs`; nothing but the policy stays in memory. `live` computes them every step with the LoRA
  adapters disabled (the starting model, `model.init_from` included): LoRA only, since full fine-tuning would need a
  frozen copy of the model.
- Metrics are TRL's: `rewards/chosen`, `rewards/rejected` (beta x log-ratio), `rewards/margins`,
  `rewards/accuracies`, `logps/chosen`, `logps/rejected`, plus `loss` and `grad_norm`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rllm.config import ConfigError, TrainConfig
from rllm.training.dpo_data import PreferencePair, pairs_from_episodes, pairs_from_preferences
from rllm.training.sft import OfflineTrainer

__all__ = ["DPOTrainer", "load_dpo_pairs"]


class DPOTrainer(OfflineTrainer):
    run_kind = section = "dpo"

    def __init__(
        self,
        *,
        config: TrainConfig,
        pairs: list[PreferencePair] | None = None,
        model: Any = None,
        tokenizer: Any = None,
        progress: bool = True,
        **workflow: Any,
    ) -> None:
        """`pairs` replaces the data the `dpo` section names; `workflow` and `val_dataset` are AgentTrainer's."""
        if config.dpo.reference == "live" and not config.model.lora.enabled:
            raise ConfigError(
                "dpo.reference=live computes the reference with the LoRA adapters disabled; with full "
                "fine-tuning (model.lora.enabled=false) use dpo.reference=precomputed"
            )
        self._references_ready = False
        super().__init__(config=config, examples=pairs, model=model, tokenizer=tokenizer, progress=progress, **workflow)

    def _load_examples(self, config: TrainConfig, tokenizer: Any, vision: Any) -> tuple[list, dict[str, int]]:
        return load_dpo_pairs(config, tokenizer)  # (preference messages with images are not rendered for a VLM yet)

    def _update_examples(self, examples: list) -> dict[str, float]:
        dpo = self.config.dpo
        return self.backend.update_pairs(examples, loss=dpo.loss, beta=dpo.beta, live_reference=dpo.reference == "live")

    def setup(self) -> None:
        super().setup()
        self._precompute_references()  # a fresh run: the weights are still the starting ones

    def _resume(self, checkpoint: Path) -> int:
        self._precompute_references()  # before the checkpoint's weights replace the starting ones
        return super()._resume(checkpoint)

    def _precompute_references(self) -> None:
        if self._references_ready or self.config.dpo.reference != "precomputed":
            return
        pairs: list[PreferencePair] = self.train_dataset
        rows = [row for pair in pairs for row in (pair.chosen, pair.rejected)]
        logprobs = self.backend.compute_logprobs(rows, temperature=1.0)
        sums = [
            sum(lp for lp, m in zip(row_lp, row.loss_mask, strict=True) if m)
            for row_lp, row in zip(logprobs, rows, strict=True)
        ]
        for index, pair in enumerate(pairs):
            pair.ref_chosen, pair.ref_rejected = sums[2 * index], sums[2 * index + 1]
        self._references_ready = True


def load_dpo_pairs(config: TrainConfig, tokenizer: Any) -> tuple[list[PreferencePair], dict[str, int]]:
    """The pairs `config.dpo` names (exactly one of `episodes` and `preferences`), length-checked."""
    from rllm.runs import read_episode_records
    from rllm.training.sft_data import check_data_path, read_jsonl

    dpo = config.dpo
    if (dpo.episodes is None) == (dpo.preferences is None):
        raise ConfigError(
            "rllm dpo needs exactly one data source: dpo.episodes (a run directory or its "
            "episodes.jsonl) or dpo.preferences (a JSONL of prompt/chosen/rejected records)"
        )
    if dpo.preferences is not None:
        check_data_path("dpo.preferences", dpo.preferences, run=False)
        return pairs_from_preferences(
            read_jsonl(dpo.preferences), tokenizer, max_length=dpo.max_length, overlong=dpo.overlong
        )
    check_data_path("dpo.episodes", dpo.episodes, run=True)
    return pairs_from_episodes(
        read_episode_records(dpo.episodes),
        split=dpo.split,
        roles=dpo.roles,
        max_pairs_per_task=dpo.max_pairs_per_task,
        max_length=dpo.max_length,
        overlong=dpo.overlong,
    )
