"""`SFTTrainer`: supervised fine-tuning on the same rows, backend, checkpoints and run directory as RL.

    rllm sft configs/arithmetic_sft.yaml sft.episodes=runs/eval-arithmetic-...        # successes of an eval run
    rllm sft configs/arithmetic_sft.yaml sft.messages=data.jsonl sft.episodes=null    # TRL-style conversations
    SFTTrainer(config=load_config(path)).train()

Choices:
- One config tree: `rllm sft` reads the config `rllm train` reads. The `sft` section names the data (a run's
  episodes, or a JSONL of messages; `rllm.training.sft_data`) and its filters, epochs, batch size and length limit;
  `model`, `optim`, `trainer` (seed, save_every, val_every, stop_after, resume, run_dir, name) and validation
  (`data.task`, `data.val_size`, `rollout.val_*`) keep their meaning. The `algorithm` section is not used: the run
  records it as reset to its defaults (advantage reinforce), and `trainer.total_steps` as the computed step count.
- A step is one optimizer step on `sft.batch_size` rows, drawn like RL's tasks (`TaskSampler` of
  `rllm.training.rollout_source`: seeded shuffles epoch after epoch, a position that a checkpoint saves), so a
  killed run resumes exactly where it stopped; `ceil(epochs * rows / batch_size)` steps in all. The loss is the mean
  negative log-likelihood of every trained token in the step (`losses.sft_loss`; token-mean over the whole batch,
  exactly accumulated over micro-batches).
- Validation runs the task's episodes before and after training (and every `trainer.val_every` steps), with the
  weights pushed to the rollout model first: the same numbers `rllm train` reports. `data.val_size=0` skips it.
- The torch backend only (`trainer.backend: torch`); no asynchronous mode (there is nothing to roll out).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from rllm.config import AlgorithmConfig, ConfigError, TrainConfig, override_config
from rllm.runs import RunLog, write_json
from rllm.training.batch import TrainingRow
from rllm.training.sft_data import (
    check_data_path,
    check_data_paths,
    read_jsonl,
    rows_from_messages,
    rows_from_trajectories,
    select_trajectories,
)
from rllm.training.step import check_finite, on_compute_thread
from rllm.training.trainer import AgentTrainer

__all__ = ["OfflineTrainer", "SFTTrainer", "load_sft_rows"]


class OfflineTrainer(AgentTrainer):
    """The loop `SFTTrainer` and `rllm.training.dpo.DPOTrainer` share: a fixed list of examples (rows, pairs) drawn
    `batch_size` a step from the config section `section` names, one optimizer step each, with RL's run directory,
    checkpoints, resume and validation. Subclasses say how examples load and how a batch trains."""

    section = ""

    def __init__(
        self,
        *,
        config: TrainConfig,
        examples: list | None = None,
        model: Any = None,
        tokenizer: Any = None,
        progress: bool = True,
        **workflow: Any,
    ) -> None:
        if config.trainer.backend != "torch":
            raise ConfigError(f"rllm {self.section} trains on the torch backend only: set trainer.backend=torch")
        if examples is None:
            check_data_paths(config, self.section)  # a missing file: one line now, not after the tokenizer loads
        vision = None
        if tokenizer is None:
            from rllm.models.registry import load_tokenizer, load_vision

            tokenizer, vision = load_tokenizer(config.model.name), load_vision(config.model.name)
        self.data_stats: dict[str, int] = {}
        if examples is None:
            examples, self.data_stats = self._load_examples(config, tokenizer, vision)
        if not examples:
            raise ConfigError(f"{type(self).__name__} got nothing to train on")
        section = getattr(config, self.section)
        steps = math.ceil(section.epochs * len(examples) / section.batch_size)
        working = config.model_copy(update={"algorithm": AlgorithmConfig(advantage="reinforce")})
        working = override_config(
            working, [f"trainer.total_steps={steps}", "rollout.max_staleness=0"], f"rllm {self.section}"
        )
        super().__init__(
            config=working, train_dataset=examples, model=model, tokenizer=tokenizer, progress=progress, **workflow
        )

    def _load_examples(self, config: TrainConfig, tokenizer: Any, vision: Any) -> tuple[list, dict[str, int]]:
        """`vision`: a vision-language model's `VisionProcessor` (None for a text-only model)."""
        raise NotImplementedError

    def _update_examples(self, examples: list) -> dict[str, float]:
        raise NotImplementedError

    def _run_name_parts(self) -> tuple[str, ...]:
        section = getattr(self.config, self.section)
        source = getattr(section, "messages", None) or getattr(section, "preferences", None) or section.episodes
        source = source or "examples"
        return (self.section, Path(source).stem or Path(source).name)

    async def _train(self) -> dict[str, Any]:
        result = await super()._train()
        result["data"] = self.data_stats
        write_json(self.run_dir / "result.json", result)
        return result

    def setup(self) -> None:
        super().setup()
        data_file = self.run_dir / f"{self.section}_data.json"
        if self.data_stats and not data_file.exists():
            write_json(data_file, self.data_stats)

    async def _rollout(self, step: int) -> list:
        return self.sampler.take(getattr(self.config, self.section).batch_size)

    async def _train_step(self, step: int, examples: list) -> dict[str, Any]:
        started = time.perf_counter()
        update = on_compute_thread(self.rollout_model, self._update_examples, examples)
        metrics = {
            **update,
            "examples": len(examples),
            "epoch": self.sampler.position / len(self.train_dataset),
            "time_update_s": time.perf_counter() - started,
        }
        self.state.log.log(step, metrics)
        check_finite(self.state, step, update, [])
        return metrics

    async def _validate(self, log: RunLog, step: int) -> dict[str, float]:
        if self.val_dataset and self.backend.updates:  # sample from the trained weights (shared model: a version bump)
            self.backend.push_weights(self.rollout_model)
        return await super()._validate(log, step)

    def _progress_postfix(self, metrics: dict[str, Any]) -> dict[str, str]:
        return {
            "loss": f"{metrics.get('loss', float('nan')):.3f}",
            "val": f"{self.val_history[-1]['success_rate']:.2f}",
        }


class SFTTrainer(OfflineTrainer):
    run_kind = section = "sft"

    def __init__(
        self,
        *,
        config: TrainConfig,
        rows: list[TrainingRow] | None = None,
        model: Any = None,
        tokenizer: Any = None,
        progress: bool = True,
        **workflow: Any,
    ) -> None:
        """`rows` replaces the data the `sft` section names; `workflow` (workflow_class, agent_class, ...) and
        `val_dataset` are AgentTrainer's, for validation."""
        super().__init__(config=config, examples=rows, model=model, tokenizer=tokenizer, progress=progress, **workflow)

    def _load_examples(self, config: TrainConfig, tokenizer: Any, vision: Any) -> tuple[list, dict[str, int]]:
        return load_sft_rows(config, tokenizer, vision=vision)

    def _update_examples(self, examples: list) -> dict[str, float]:
        sft = self.config.sft
        return self.backend.update(
            examples, temperature=1.0, objective="sft", pack_length=sft.max_length if sft.packing else None
        )


def load_sft_rows(
    config: TrainConfig, tokenizer: Any, *, vision: Any = None
) -> tuple[list[TrainingRow], dict[str, int]]:
    """The rows `config.sft` names (exactly one of `episodes` and `messages`), filtered and length-checked.
    `vision` renders messages with images for a vision-language model (`rllm.models.vision`)."""
    from rllm.runs import read_episode_records

    sft = config.sft
    if (sft.episodes is None) == (sft.messages is None):
        raise ConfigError(
            "rllm sft needs exactly one data source: sft.episodes (a run directory or its "
            "episodes.jsonl) or sft.messages (a JSONL of conversations)"
        )
    if sft.messages is not None:
        check_data_path("sft.messages", sft.messages, run=False)
        return rows_from_messages(
            read_jsonl(sft.messages), tokenizer, max_length=sft.max_length, overlong=sft.overlong, vision=vision
        )
    check_data_path("sft.episodes", sft.episodes, run=True)
    pairs, stats = select_trajectories(
        read_episode_records(sft.episodes),
        split=sft.split,
        roles=sft.roles,
        correct_only=sft.correct_only,
        min_reward=sft.min_reward,
        task_pass_rate=sft.task_pass_rate,
        max_per_task=sft.max_per_task,
    )
    rows, row_stats = rows_from_trajectories(pairs, max_length=sft.max_length, overlong=sft.overlong)
    return rows, {**stats, **row_stats}
