"""One RL step, top to bottom: `train_step(state, rollouts) -> metrics`.

    episodes -> score_episodes (groups, filters, advantages) -> build_rows (exact sampled ids, loss masks)
             -> update (GAE values, distillation, proximal log-probs, the backend's update) -> push_weights
             -> metrics (logged; `exactness/*`, the token-exactness report's, from the episodes, the rows and the
                update's `mismatch/*`) and alarms (`rllm.health`) -> finite checks

The step knows nothing of run directories, checkpoints or signals (`rllm.training.session`) nor of where its
rollouts came from (`rllm.training.rollout_source`); `StepState` is everything it reads and the little it carries
from one step to the next.

Choices:
- PPO with a critic (`algorithm.advantage: gae`): the backend's value head scores every action token of the rows,
  `apply_gae` turns rewards and values into advantages and returns, and the update trains the head with the clipped
  value loss; the head is part of every checkpoint.
- A step with nothing to train on (every group dropped or filtered) skips the update and says so in its metrics
  (`skipped_update=1`); nothing is dropped silently.
- On-policy distillation (`distill.teacher`): a teacher model scores every sampled token and the per-token reverse
  KL becomes the advantage (`rllm.training.distill`), after the estimator's advantages.
- The first step trained warns when the model solves every task or none (`warn_if_no_signal`): a group baseline
  then trains on nothing. `trainer.max_nonfinite_updates` skipped updates in a row stop the run (`check_finite`).
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rllm.config import TrainConfig
from rllm.engine.failures import raise_if_all_failed
from rllm.errors import RllmError
from rllm.exactness import step_metrics
from rllm.health import ALARM_PREFIX, HealthMonitor, episode_signals
from rllm.metrics import summarize_episodes
from rllm.runs import RunLog
from rllm.training.advantages import apply_gae, score_episodes
from rllm.training.batch import build_rows, trained_steps
from rllm.training.distill import apply_distillation
from rllm.training.off_policy import merge_mismatch_sums, mismatch_metrics, mismatch_sums
from rllm.training.rollout_source import RolloutPipeline, StepRollouts, SyncRollouts

__all__ = ["StepState", "TrainingDivergedError", "check_finite", "on_compute_thread", "train_step", "update_policy"]

T = TypeVar("T")


class TrainingDivergedError(RllmError):
    """Updates kept producing a non-finite loss or gradient; the run stops with its weights intact."""


@dataclass
class StepState:
    """What a step reads (the config, the backend, the rollout model it pushes to, the log, the teacher) and what
    carries over between steps (the streak of non-finite updates, whether the no-signal warning was checked)."""

    config: TrainConfig
    backend: Any  # rllm.training.backends.base.TrainingBackend
    rollout_model: Any
    log: RunLog
    source: SyncRollouts | RolloutPipeline  # whether the update overlaps rollouts; when the push may happen
    health: HealthMonitor = field(default_factory=HealthMonitor)  # the alarms' rules over the steps so far
    teacher: Any = None  # on-policy distillation's teacher (distill.teacher)
    nonfinite_streak: int = 0
    signal_checked: bool = False  # the first step trained warns when nothing has a learning signal


def on_compute_thread(rollout_model: Any, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, run on the thread the rollout model decodes on where it is a `LocalModel`
    (`call_on_worker`), else here; it blocks until done either way, as a synchronous update always has. One thread
    then does all of the run's torch work, which a CPU's OpenMP needs to run at speed (`rllm.cpus`' docstring)."""
    from rllm.inference.model import LocalModel

    if not isinstance(rollout_model, LocalModel):  # a server's client (vLLM), or a test's stand-in
        return fn(*args)
    return rollout_model.call_on_worker(functools.partial(fn, *args)).result()


async def train_step(state: StepState, rollouts: StepRollouts) -> dict[str, Any]:
    """Score and train on `rollouts`, then push the new weights. Synchronously everything runs here; pipelined, the
    update runs in a worker thread while the source's rollouts go on, and the push waits until the rollouts that
    must use the older weights are done."""
    cfg, step, episodes = state.config, rollouts.step, rollouts.episodes
    batch = score_episodes(episodes, cfg.algorithm, rollouts.greedy, max_tokens=cfg.rollout.max_tokens)
    if not state.signal_checked:
        state.signal_checked = True
        warn_if_no_signal(step, episodes, batch.stats)
    rows, row_stats = build_rows(
        batch.trajectories,
        step_advantages=batch.step_advantages,
        step_rewards=batch.step_rewards,
        max_prompt_length=cfg.rollout.max_prompt_length,
        max_response_length=cfg.rollout.max_response_length,
    )
    started = time.perf_counter()
    update: dict[str, Any] = {"skipped_update": int(not rows)}
    if rows:
        update.update(staleness_metrics(rows, state.backend.weight_version, cfg.rollout.max_staleness))
        if state.source.overlaps_updates:  # in a worker thread: the event loop keeps driving rollouts meanwhile
            update.update(await asyncio.to_thread(update_policy, state, rows))
        else:
            update.update(on_compute_thread(state.rollout_model, update_policy, state, rows))
    await state.source.before_push(step)
    pushed = time.perf_counter()
    version = state.backend.push_weights(state.rollout_model)
    time_push = time.perf_counter() - pushed
    update.update(getattr(state.rollout_model, "sync_metrics", {}))
    time_update = time.perf_counter() - started

    metrics = {
        **summarize_episodes(episodes, rollouts.seconds),
        "time_rollout_s": rollouts.seconds,
        **({"time_wait_rollout_s": rollouts.waited} if rollouts.waited is not None else {}),
        **{f"batch/{k}": v for k, v in {**batch.stats, **row_stats}.items()},
        **update,
        "time_update_s": time_update,
        "time_push_s": time_push,
        **(gpu_peak_memory(cfg.model.device) if cfg.trainer.backend == "torch" else {}),
        "weight_version": version,
        "rollout_weight_version": rollouts.weight_version,
        **episode_signals(episodes),
    }
    metrics.update(step_metrics(episodes, metrics, threshold=cfg.algorithm.off_policy.mismatch_threshold))
    metrics.update(raise_alarms(state, step, metrics))
    state.log.log(step, metrics)
    if cfg.trainer.log_episodes:
        state.log.log_episodes(step, episodes, "train", trained_steps(batch.trajectories, rows))
    raise_if_all_failed(episodes, f"training step {step}")  # nothing was trained: stop with the cause
    check_finite(state, step, update, batch.rewards)
    return metrics


def raise_alarms(state: StepState, step: int, metrics: dict[str, Any]) -> dict[str, float]:
    """`alarm/<name>` = 1 for each alarm of this step (`rllm.health`); one console line for each that starts here."""
    alarms, started = state.health.observe(metrics)
    for alarm in started:
        print(f"step {step}: alarm {alarm.name}: {alarm.message}", file=sys.stderr, flush=True)
    return {f"{ALARM_PREFIX}{alarm.name}": 1.0 for alarm in alarms}


def update_policy(state: StepState, rows: list) -> dict[str, Any]:
    """The backend's work on one step's rows: GAE values, the decoupled mode's proximal log-probs, the update."""
    cfg, backend, out = state.config, state.backend, {}
    if cfg.algorithm.advantage == "gae":  # PPO with a critic: advantages and returns from its values
        out.update(apply_gae(rows, backend.compute_values(rows), cfg.algorithm))
    if state.teacher is not None:  # on-policy distillation: the teacher's per-token reverse KL as advantage
        out.update(apply_distillation(rows, state.teacher.score(rows), cfg.distill))
    prox = None
    if cfg.algorithm.off_policy.mode == "decoupled":  # pi_prox: this trainer's log-probs before the update
        prox = backend.compute_logprobs(rows, temperature=cfg.rollout.temperature)
        for row, logprobs in zip(rows, prox, strict=True):
            row.prox_logprobs = logprobs
    out.update(backend.update(rows, temperature=cfg.rollout.temperature, norm_length=cfg.rollout.max_response_length))
    if prox is not None:  # every row's trainer log-probs exist: measure the mismatch on all of them
        out.update(rows_mismatch(rows, cfg.algorithm.off_policy.mismatch_threshold))
    return out


def check_finite(state: StepState, step: int, update: dict[str, Any], rewards: list[float]) -> None:
    """Count updates skipped for a non-finite loss or gradient; stop after `trainer.max_nonfinite_updates` in
    a row (the weights are still the last finite ones; the last checkpoint is intact)."""
    state.nonfinite_streak = state.nonfinite_streak + 1 if update.get("skipped_nonfinite") else 0
    limit = state.config.trainer.max_nonfinite_updates
    if state.nonfinite_streak >= limit:
        low, high = (min(rewards), max(rewards)) if rewards else (float("nan"),) * 2
        raise TrainingDivergedError(
            f"step {step}: {state.nonfinite_streak} updates in a row had a non-finite loss or gradient and were "
            f"skipped (trainer.max_nonfinite_updates={limit}); the weights "
            f"are unchanged. This step's trained rewards ranged over [{low:g}, {high:g}]: check the reward scale "
            "(rewards beyond ~1e38 overflow float32), then --resume from the last checkpoint."
        )


def staleness_metrics(rows: list, version: int, bound: int) -> dict[str, float]:
    """How many weight versions the trained tokens lag the weights they are trained from, per sampled step of each
    row; more than `rollout.max_staleness` would be a bug of the pipeline, so it stops the run."""
    lags = [version - sampled for row in rows for sampled in row.weight_versions]
    if not lags:
        return {}
    if max(lags) > bound:
        raise RuntimeError(f"rows sampled {max(lags)} weight versions ago exceed rollout.max_staleness={bound}")
    return {"off_policy/staleness_mean": sum(lags) / len(lags), "off_policy/staleness_max": max(lags)}


def rows_mismatch(rows: list, threshold: float) -> dict[str, float]:
    """`mismatch/*` of the rows' recomputed (`prox_logprobs`) against their sampled log-probs, over every row."""
    import torch

    total = None
    for row in rows:
        sums = mismatch_sums(
            torch.tensor(row.prox_logprobs),
            torch.tensor(row.old_logprobs),
            torch.tensor(row.loss_mask),
            threshold=threshold,
        )
        total = merge_mismatch_sums(total, sums)
    return mismatch_metrics(total)


def warn_if_no_signal(step: int, episodes: list, stats: dict[str, Any]) -> None:
    """Warn when the model solves the task always or never (or every group's rewards are all equal): a group
    baseline then gives every sample advantage 0, and the run would train on nothing without saying so."""
    if not episodes or not stats.get("groups"):
        return
    pass_rate = sum(episode.is_correct for episode in episodes) / len(episodes)
    uniform = stats["uniform_groups"] / stats["groups"]
    if 0.0 < pass_rate < 1.0 and uniform < 1.0:
        return
    warnings.warn(
        f"step {step}: the model solved {pass_rate:.0%} of its {len(episodes)} episodes and {uniform:.0%} of the "
        f"{stats['groups']} groups have all-equal rewards (batch/uniform_groups): GRPO, RLOO and REINFORCE++ give "
        "those zero advantage, so this step trains on (almost) nothing. Use tasks the model solves sometimes "
        "(easier or harder data, a partial-credit reward), more samples per task (rollout.n), or a warm start "
        "(rllm sft; model.init_from).",
        RuntimeWarning,
        stacklevel=2,
    )


def gpu_peak_memory(device: str) -> dict[str, float]:
    """`gpu_peak_memory_gib`: the most GPU memory this process's torch allocator held since the last step's reading
    (the step's rollout, update and push; the first step's includes loading the model), then the peak is reset;
    nothing on a CPU. Reserved-but-free cache and other processes' memory (a vLLM server) are not counted."""
    if not str(device).startswith("cuda"):
        return {}
    import torch

    if not torch.cuda.is_available():
        return {}
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    torch.cuda.reset_peak_memory_stats(device)
    return {"gpu_peak_memory_gib": peak}
