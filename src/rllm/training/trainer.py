"""`AgentTrainer`: the RL loop for agents.

    trainer = AgentTrainer(agent_class=FrozenLakeAgent, env_class=FrozenLakeEnv, config=load_config(path),
                           train_dataset=rows, val_dataset=val_rows)
    trainer.train()
    AgentTrainer(workflow_class=SolverJudgeWorkflow, workflow_args={...}, config=...)  # every role, one model

Reading order: one RL step, file:function in the order it runs (docs/architecture.md, "One GRPO step", follows the
whole path, from the command line through sampling to the checkpoint).

    training/trainer.py           AgentTrainer._train_step       the step, top to bottom
    engine/workflow_engine.py     AgentWorkflowEngine.execute_tasks_async   each task rollout.n times -> Episodes
    training/advantages.py        score_episodes                 group by task:role, filter, per-step advantages
                                  compute_advantages             the dispatcher -> grpo_advantages, rloo_advantages, ...
    training/batch.py             build_rows                     exact sampled ids -> rows with loss masks
    training/advantages.py        apply_gae                      PPO with a critic only: values -> GAE, returns
    training/backends/torch.py    TorchBackend.update            epochs x mini-batches x micro-batches
                                  TorchBackend._loss             composes the pure losses below
    training/losses.py            policy_loss, kl_penalty, value_loss, aggregate
    training/backends/torch.py    TorchBackend.push_weights      the rollout model samples from the new weights
    (trainer.backend: verl)       training/backends/verl.py      the same calls on verl's workers on Ray

Set-up happens once, in `setup()`: seeds, backend, task sampler, run directory (fresh or resumed), rollout model,
engines, in that order.

Choices:
- The trainer sees its backend only through `rllm.training.backends.base.TrainingBackend`: `torch` (in this process)
  or `verl` (verl's FSDP workers on Ray, same loss, same mini-batches, weights back to a rollout copy here).
- Rollouts run on a `LocalModel` that shares the backend's model object (LoRA adapters live), so "pushing weights"
  on the embedded path is a version bump: the next rollouts are on-policy with no copy. With `rollout.server: vllm`
  (or `AgentTrainer(rollout="vllm")`) a vLLM server samples instead (`rllm.training.rollout_server`): started from
  the trainer's own weights or attached (`rollout.vllm.base_url`), synced after every update with the configured
  strategy (`rllm.models.weight_sync`), and checked against the trainer's logprobs after every sync (metrics
  `weight_sync_s`, `weight_sync_logprob_max_diff`). Every output carries the weight version it was sampled with.
- Sampling is seeded per step (`trainer.seed`, step) and per call (episode id, turn; see the engine), so a run is
  reproducible whatever order concurrent rollouts reach the model in. Resume is bitwise on CPU when the rollout
  batches are formed the same way (one rollout at a time, `rollout.n_parallel=1`, is always so; with concurrency
  the batch composition can differ in float rounding).
- What plays the tasks is resolved once (`rllm.workflows.resolve`): an explicit workflow class, else explicit agent
  and env classes, else `config.workflow` / the built-in task's default. Everything runs through the
  `AgentWorkflowEngine`; all roles of a workflow train the same model, each role with its own estimator
  (`algorithm.roles`). ReMax's greedy baseline for a role with several trajectories is their mean reward.
- PPO with a critic (`algorithm.advantage: gae`): the backend's value head scores every action token of the rows,
  `apply_gae` turns rewards and values into advantages and returns, and the update trains the head with the clipped
  value loss; the head is part of every checkpoint.
- A step with nothing to train on (every group dropped or filtered) skips the update and says so in its metrics
  (`skipped_update=1`); nothing is dropped silently.
- On-policy distillation (`distill.teacher`): a teacher model scores every sampled token and the per-token reverse
  KL becomes the advantage (`rllm.training.distill`), in `_update` after the estimator's advantages.
- Stopping: a checkpoint every step with LoRA, by time otherwise (`_save_due`; at most `trainer.keep_checkpoints`
  kept); Ctrl-C and SIGTERM drop or finish the step in progress, save and raise `TrainingInterrupted`
  (`rllm.training.interrupt`); a resumed run keeps its own config (`rllm.training.resume`); a fresh run that fails or
  stops before it logged anything removes its directory (`_remove_failed_start`).
- Off-policy: every update measures the sampler-trainer mismatch (`mismatch/*`); `algorithm.off_policy` picks the
  PPO ratio's anchor and the importance correction (`rllm.training.off_policy`). `rollout.max_staleness` > 0 trains
  asynchronously (`RolloutPipeline`, below): rollouts of later steps run on a copy of the weights while the update
  runs in a worker thread; the synchronous loop (0) is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import shutil
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm import runs
from rllm.config import ConfigError, TrainConfig, override_config
from rllm.engine.failures import raise_if_all_failed
from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.errors import RllmError
from rllm.harnesses import workflow_for_config
from rllm.metrics import summarize_episodes
from rllm.models.base import close_model
from rllm.runs import (
    RunLog,
    RunWriteError,
    create_run_dir,
    is_unstarted_train_run,
    view_command,
    write_json,
    write_manifest,
    writing,
)
from rllm.training.advantages import (
    apply_gae,
    group_key,
    informative_tasks,
    overlong_penalties,
    score_episodes,
    trajectory_reward,
)
from rllm.training.batch import build_rows, trained_steps
from rllm.training.checkpoint import (
    find_resumable_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    verify_checkpoint,
)
from rllm.training.distill import apply_distillation, make_teacher
from rllm.training.interrupt import TrainingInterrupted, say, stop_signals
from rllm.training.off_policy import merge_mismatch_sums, mismatch_metrics, mismatch_sums
from rllm.training.resume import ResumeError, check_resumed_config, resume_run_dir
from rllm.types import Episode
from rllm.workflows.resolve import check_config_args

__all__ = ["AgentTrainer"]

_TIME_KEYS = ("time_", "tokens_per_s", "train_time_s", "wall")  # metrics that differ run to run


class AgentTrainer:
    run_kind = "train"  # the run directory's manifest kind (rllm.training.sft.SFTTrainer: "sft")

    def __init__(
        self,
        *,
        agent_class: type | None = None,
        env_class: type | None = None,
        agent_args: dict | None = None,
        env_args: dict | None = None,
        workflow_class: type | None = None,
        workflow_args: dict | None = None,
        config: TrainConfig | None = None,
        train_dataset: list[dict] | None = None,
        val_dataset: list[dict] | None = None,
        backend: str | None = None,
        rollout: str | None = None,
        model: Any = None,
        tokenizer: Any = None,
        progress: bool = True,
    ) -> None:
        # backend= and rollout= set the config's trainer.backend and rollout.server, checked like config keys
        given = {"trainer.backend": backend, "rollout.server": rollout}
        arguments = [f"{key}={value}" for key, value in given.items() if value is not None]
        cfg = override_config(config or TrainConfig(), arguments, "AgentTrainer(backend=..., rollout=...)")
        if cfg.rollout.server == "openai":
            raise ConfigError(
                "rollout.server=openai samples from an endpoint whose weights the trainer cannot update; "
                "train with rollout.server=local or vllm (openai is for rllm eval)"
            )
        self.config = cfg
        self.workflow_class, self.workflow_args = workflow_for_config(
            cfg,
            workflow_class=workflow_class,
            workflow_args=workflow_args,
            agent_class=agent_class,
            env_class=env_class,
            agent_args=agent_args,
            env_args=env_args,
        )
        self.train_dataset = train_dataset if train_dataset is not None else cfg.data.make_tasks("train")
        self.val_dataset = val_dataset if val_dataset is not None else cfg.data.make_tasks("val")
        tasks = [task for task in (*self.train_dataset[:64], *self.val_dataset[:64]) if isinstance(task, dict)]
        check_config_args(cfg, self.workflow_class, self.workflow_args, tasks)  # a typo: one line, before any model
        self._model, self._tokenizer, self.progress = model, tokenizer, progress
        self.teacher = None  # on-policy distillation's teacher (distill.teacher), loaded by setup()
        self.run_dir: Path | None = None
        self._created_run_dir = False  # this process made run_dir (a failed start removes it while still empty)
        self._stop_signal: int | None = None  # the SIGINT/SIGTERM that asked the run to stop (rllm.training.interrupt)
        self._main_task: asyncio.Task | None = None
        self._saved_step: int | None = None  # the step of the newest checkpoint on disk
        self._signals = 0  # SIGINT/SIGTERM received; the second aborts at once
        self._removed_run_dir = False

    # ---- public ---------------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Run the whole loop; returns validation before/after, the run directory and the last step's metrics.
        Ctrl-C or SIGTERM stop it with its state saved and raise `TrainingInterrupted` (rllm.training.interrupt)."""
        try:
            with stop_signals(self._on_stop_signal):
                return asyncio.run(self._train())
        except RunWriteError as exc:  # a full disk: one line, and no --resume of a run its failed start removed
            if self._removed_run_dir:
                raise exc.not_resumable() from exc.__cause__
            raise
        except (_Stopped, KeyboardInterrupt) as exc:
            if self._stop_signal is None:  # not ours (no handler in this thread, or raised by user code)
                raise
            # after the run's clean-up (a run directory that held nothing yet is gone): the one line to show
            abandoned = exc.abandoned if isinstance(exc, _Stopped) else getattr(self, "step", 0) + 1
            raise TrainingInterrupted(
                self._stop_signal, self.run_dir, self._saved_step, abandoned=abandoned, removed=self._removed_run_dir
            ) from None

    # ---- the loop -------------------------------------------------------------------------------------------

    async def _train(self) -> dict[str, Any]:
        cfg = self.config
        log: RunLog | None = None
        result: dict[str, Any] = {}
        self._main_task = asyncio.current_task()
        failed = True
        try:
            self.setup()
            start_step = self.step
            result["run_dir"] = str(self.run_dir)
            print(f"run: {self.run_dir}   watch it: {view_command(self.run_dir)}", file=sys.stderr, flush=True)
            log = RunLog(self.run_dir, tensorboard=cfg.trainer.tensorboard, resume_step=start_step or None)
            if start_step == 0:
                self.val_history.append({"step": 0, **await self._validate(log, 0)})
            last = await self._loop(log, start_step)
            if self._stop_signal is not None and self.step < cfg.trainer.total_steps:
                if self._saved_step != self.step:
                    self._save()
                raise _Stopped(abandoned=None)
            # a resumed run with no step left (killed after its last save) has its last step's metrics in the log
            result["last_metrics"] = last or _logged_step_metrics(self.run_dir, self.step)
            if self.step == cfg.trainer.total_steps and self.val_history[-1]["step"] != self.step:
                self.val_history.append({"step": self.step, **await self._validate(log, self.step)})
            if self.step > start_step or self.resumed_from is None:
                self._save()  # else the checkpoint resumed from is this state already: never save a step twice
            failed = False
        except asyncio.CancelledError:
            if self._stop_signal is None or self._signals > 1:  # not ours, or asyncio.run's clean-up after an abort
                raise
            raise _Stopped(abandoned=getattr(self, "step", 0) + 1) from None  # the step in progress is dropped
        finally:
            if log is not None:
                log.close()
            await self.close()
            if failed:
                self._remove_failed_start()
        result.update(val_before=self.val_history[0], val_after=self.val_history[-1], steps=self.step)
        write_json(self.run_dir / "result.json", result)
        return result

    async def close(self) -> None:
        """Stop the rollout model and the backend (its workers and, for verl, the Ray processes it started);
        safe to call twice and after a failed `setup()`."""
        try:
            await self._close_rollout()
        finally:
            if getattr(self, "backend", None) is not None:
                self.backend.close()

    def _on_stop_signal(self, signum: int) -> None:
        """A SIGINT/SIGTERM (`rllm.training.interrupt`; runs in the main thread between two bytecodes). The first:
        when the state before the step in progress is on disk (or nothing was trained yet), that step is abandoned
        (the run's task is cancelled at its next await); else the step is finished, saved, and the run stops."""
        self._signals += 1
        if self._signals > 1:
            return  # stop_signals raises KeyboardInterrupt: stopped at once
        self._stop_signal = signum
        task, step = self._main_task, getattr(self, "step", 0)
        if task is None or task.done():
            return  # not started yet: the loop sees the flag
        if step == 0 or self._saved_step == step:
            task.cancel()
            task.get_loop().call_soon_threadsafe(lambda: None)  # wake the loop if it waits in select()
        else:
            last = f"step_{self._saved_step:06d}" if self._saved_step else "none yet"
            say(
                f"{signal.Signals(signum).name}: finishing step {step + 1}, then saving a checkpoint and stopping "
                f"(again to stop at once; the last checkpoint on disk: {last})"
            )

    def _save_due(self, step: int) -> bool:
        """`trainer.save_every` steps; automatic (null): every step with LoRA (a small checkpoint, ~0.2 s for the
        adapters of SmolLM2-135M or Qwen2.5-0.5B with their AdamW moments on a 2-core CPU), else once
        `trainer.save_every_minutes` have passed since the last save: full fine-tuning (SmolLM2-135M's checkpoint is
        1.5 GiB, ~5 s; Qwen2.5-0.5B's 7 GiB, ~20 s), and asynchronous training (`rollout.max_staleness` > 0), whose
        saves wait for the rollouts in flight and so would take the overlap away at every step."""
        cfg = self.config.trainer
        if cfg.save_every is not None:
            return cfg.save_every > 0 and step % cfg.save_every == 0
        if self.config.model.lora.enabled and not self.config.rollout.max_staleness:
            return True
        return time.monotonic() - self._last_save_time >= 60 * cfg.save_every_minutes

    def _remove_failed_start(self) -> None:
        """A run this process created that failed or was stopped before it logged anything (model not found, bad
        workflow, Ctrl-C while loading) leaves no directory behind: `rllm view` would list it as a stopped run, and
        a retry with the same trainer.name would be refused."""
        if self._created_run_dir and self.run_dir is not None and self.run_dir.is_dir():
            if runs.holds_nothing(self.run_dir):
                shutil.rmtree(self.run_dir, ignore_errors=True)
                self._removed_run_dir = not self.run_dir.exists()  # a read-only disk keeps it

    async def _loop(self, log: RunLog, start_step: int) -> dict[str, Any]:
        cfg = self.config.trainer
        stop = cfg.total_steps if cfg.stop_after is None else min(cfg.total_steps, start_step + cfg.stop_after)
        bar = _progress(self.progress, total=cfg.total_steps, initial=start_step)
        pipeline = RolloutPipeline(self, start_step) if self.config.rollout.max_staleness else None
        metrics: dict[str, Any] = {}
        try:
            for step in range(start_step + 1, stop + 1):
                if pipeline is None:
                    metrics = await self._train_step(step, log, await self._rollout(step))
                else:
                    started = time.perf_counter()
                    batch = await pipeline.take(step)
                    metrics = await self._train_step(
                        step, log, batch, waited=time.perf_counter() - started, pipeline=pipeline
                    )
                self.step = step
                if cfg.val_every and step % cfg.val_every == 0 and step < cfg.total_steps:
                    self.val_history.append({"step": step, **await self._validate(log, step)})
                if self._save_due(step) and step < stop:
                    if pipeline is not None:
                        await pipeline.settle()  # partial rollouts: the step in flight is finished, then saved
                    self._save()  # the loop's last step is saved once, after it (with the final validation)
                if pipeline is not None and step < stop:
                    pipeline.release()  # the next rollouts start on the weights just pushed (and validated)
                bar.set_postfix(self._progress_postfix(metrics))
                bar.update()
                if self._stop_signal is not None:
                    break  # asked to stop: _train saves this step (unless just saved) and reports
        except BaseException:
            bar.close()  # its line ends before what is printed next (an interruption's one line)
            if pipeline is not None:
                await pipeline.close(settle=False)
            raise
        if pipeline is not None:
            await pipeline.close(settle=True)
        bar.close()
        return metrics

    def _progress_postfix(self, metrics: dict[str, Any]) -> dict[str, str]:
        return {"reward": f"{metrics['reward_mean']:.2f}", "val": f"{self.val_history[-1]['success_rate']:.2f}"}

    async def _rollout(self, step: int) -> StepRollouts:
        """Step `step`'s episodes (and ReMax's greedy baselines) from the rollout model as it is now."""
        cfg = self.config
        tasks = self.sampler.take(cfg.trainer.tasks_per_step)
        started = time.perf_counter()
        version = self.rollout_model.weight_version
        self.engine.sampling = cfg.rollout.to_sampling(seed=_step_seed(cfg.trainer.seed, step))
        episodes = await self.engine.execute_tasks_async(tasks, n_rollouts=cfg.rollout.n)
        for round_ in range(1, cfg.algorithm.max_sampling_rounds):  # DAPO's dynamic sampling: refill
            found = informative_tasks(episodes, cfg.algorithm, max_tokens=cfg.rollout.max_tokens)
            missing = cfg.trainer.tasks_per_step - len(found)
            if missing <= 0:
                break
            more = self.sampler.take(missing)
            self.engine.sampling = cfg.rollout.to_sampling(seed=_step_seed(cfg.trainer.seed, f"{step}:refill{round_}"))
            episodes += await self.engine.execute_tasks_async(more, n_rollouts=cfg.rollout.n)
            tasks += more
        greedy = await self._greedy_baselines(tasks) if cfg.algorithm.uses_advantage("remax") else None
        return StepRollouts(step, episodes, greedy, time.perf_counter() - started, version)

    async def _train_step(
        self,
        step: int,
        log: RunLog,
        rollouts: StepRollouts,
        *,
        waited: float | None = None,
        pipeline: RolloutPipeline | None = None,
    ) -> dict[str, Any]:
        """Score and train on `rollouts`, then push the new weights. Synchronously (`pipeline` None) everything runs
        here; asynchronously the update runs in a worker thread while the pipeline's rollouts go on, and the push
        waits until the rollouts that must use the older weights are done."""
        cfg = self.config
        episodes = rollouts.episodes
        batch = score_episodes(episodes, cfg.algorithm, rollouts.greedy, max_tokens=cfg.rollout.max_tokens)
        if not self._signal_checked:  # the first step this trainer trains
            self._signal_checked = True
            _warn_if_no_signal(step, episodes, batch.stats)
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
            update.update(_staleness(rows, self.backend.weight_version, cfg.rollout.max_staleness))
            offload = pipeline is not None
            update.update(await _call(offload, self._update, rows))
        if pipeline is not None:
            await pipeline.wait_for_older_rollouts(step)
        pushed = time.perf_counter()
        version = self.backend.push_weights(self.rollout_model)
        time_push = time.perf_counter() - pushed
        update.update(getattr(self.rollout_model, "sync_metrics", {}))
        time_update = time.perf_counter() - started

        metrics = {
            **summarize_episodes(episodes, rollouts.seconds),
            "time_rollout_s": rollouts.seconds,
            **({"time_wait_rollout_s": waited} if waited is not None else {}),
            **{f"batch/{k}": v for k, v in {**batch.stats, **row_stats}.items()},
            **update,
            "time_update_s": time_update,
            "time_push_s": time_push,
            **(_gpu_peak_memory(cfg.model.device) if cfg.trainer.backend == "torch" else {}),
            "weight_version": version,
            "rollout_weight_version": rollouts.weight_version,
        }
        log.log(step, metrics)
        if cfg.trainer.log_episodes:
            log.log_episodes(step, episodes, "train", trained_steps(batch.trajectories, rows))
        raise_if_all_failed(episodes, f"training step {step}")  # nothing was trained: stop with the cause
        self._check_finite(step, update, batch.rewards)
        return metrics

    def _update(self, rows: list) -> dict[str, Any]:
        """The backend's work on one step's rows: GAE values, the decoupled mode's proximal log-probs, the update."""
        cfg, out = self.config, {}
        if cfg.algorithm.advantage == "gae":  # PPO with a critic: advantages and returns from its values
            out.update(apply_gae(rows, self.backend.compute_values(rows), cfg.algorithm))
        if self.teacher is not None:  # on-policy distillation: the teacher's per-token reverse KL as advantage
            out.update(apply_distillation(rows, self.teacher.score(rows), cfg.distill))
        prox = None
        if cfg.algorithm.off_policy.mode == "decoupled":  # pi_prox: this trainer's log-probs before the update
            prox = self.backend.compute_logprobs(rows, temperature=cfg.rollout.temperature)
            for row, logprobs in zip(rows, prox, strict=True):
                row.prox_logprobs = logprobs
        out.update(
            self.backend.update(rows, temperature=cfg.rollout.temperature, norm_length=cfg.rollout.max_response_length)
        )
        if prox is not None:  # every row's trainer log-probs exist: measure the mismatch on all of them
            out.update(_rows_mismatch(rows, cfg.algorithm.off_policy.mismatch_threshold))
        return out

    def _check_finite(self, step: int, update: dict[str, Any], rewards: list[float]) -> None:
        """Count updates skipped for a non-finite loss or gradient; stop after `trainer.max_nonfinite_updates` in
        a row (the weights are still the last finite ones; the last checkpoint is intact)."""
        self._nonfinite_streak = self._nonfinite_streak + 1 if update.get("skipped_nonfinite") else 0
        if self._nonfinite_streak >= self.config.trainer.max_nonfinite_updates:
            low, high = (min(rewards), max(rewards)) if rewards else (float("nan"),) * 2
            raise TrainingDivergedError(
                f"step {step}: {self._nonfinite_streak} updates in a row had a non-finite loss or gradient and were "
                f"skipped (trainer.max_nonfinite_updates={self.config.trainer.max_nonfinite_updates}); the weights "
                f"are unchanged. This step's trained rewards ranged over [{low:g}, {high:g}]: check the reward scale "
                "(rewards beyond ~1e38 overflow float32), then --resume from the last checkpoint."
            )

    async def _validate(self, log: RunLog, step: int) -> dict[str, float]:
        """Greedy (`rollout.val_temperature`) episodes on the validation tasks, logged under `val/`."""
        if not self.val_dataset:
            return {"success_rate": float("nan"), "reward_mean": float("nan"), "episodes": 0}
        self.val_engine.sampling = self.config.rollout.to_sampling(validation=True, seed=self.config.trainer.seed)
        started = time.perf_counter()
        episodes = await self.val_engine.execute_tasks_async(self.val_dataset, n_rollouts=self.config.rollout.val_n)
        summary = summarize_episodes(episodes, time.perf_counter() - started)
        log.log(step, {f"val/{k}": v for k, v in summary.items()})
        if self.config.trainer.log_episodes:
            log.log_episodes(step, episodes, "val")
        raise_if_all_failed(episodes, f"the validation at step {step}")
        kept = ("success_rate", "reward_mean", "turns_mean", "episodes")
        return {k: v for k, v in summary.items() if k in kept or k.startswith("termination/")}

    async def _greedy_baselines(self, tasks: list[dict]) -> dict[str, float]:
        """ReMax: one greedy rollout per task; its reward is the baseline of the task's group (per role)."""
        self.val_engine.sampling = self.config.rollout.to_sampling(validation=True, seed=self.config.trainer.seed)
        episodes = await self.val_engine.execute_tasks_async(tasks)
        rewards: dict[str, list[float]] = {}
        for episode in episodes:  # a role with several trajectories (k solvers): the mean of their rewards
            for trajectory in episode.trajectories:
                reward = trajectory_reward(episode, trajectory) + sum(
                    overlong_penalties(trajectory, self.config.algorithm, self.config.rollout.max_tokens)
                )
                rewards.setdefault(group_key(episode, trajectory), []).append(reward)
        return {key: sum(values) / len(values) for key, values in rewards.items()}

    # ---- set-up, checkpoints ------------------------------------------------------------------------------

    def setup(self) -> None:
        """Build the run's state, in the one order that works: seeds -> task sampler -> run directory, fresh or the
        resumed one (started over when it was killed before its first checkpoint) -> backend (model, optimizer;
        verl's workers exchange weights through the run directory) -> resumed state (weights, optimizer, sampler
        position, RNG, validation history) -> rollout model (after resuming, so a vLLM server starts from the
        resumed weights) -> engines."""
        from rllm.training.backends import make_backend

        cfg = self.config
        _seed_everything(cfg.trainer.seed)
        self.sampler = TaskSampler(self.train_dataset, cfg.trainer.seed)
        self.step, self.val_history, self._nonfinite_streak, self._signal_checked = 0, [], 0, False
        self.pending_rollouts: dict[int, StepRollouts] = {}  # async: sampled, not yet trained (RolloutPipeline)
        checkpoint = None
        if cfg.trainer.resume:
            resume_run_dir(cfg.trainer.resume)  # a path that is no run: one line, before anything loads
            checkpoint = _find_checkpoint(Path(cfg.trainer.resume))
        self.resumed_from = checkpoint
        if checkpoint is not None:
            self.run_dir = checkpoint.parent.parent
            check_resumed_config(self.run_dir, cfg, _checkpoint_step(checkpoint))
        elif cfg.trainer.resume:
            check_resumed_config(Path(cfg.trainer.resume), cfg, 0)
            self._restart_run_dir(Path(cfg.trainer.resume))
        else:
            self._new_run_dir()
        self._last_save_time = time.monotonic()
        self.backend = make_backend(cfg, self.run_dir, model=self._model, tokenizer=self._tokenizer)
        self.teacher = None
        if cfg.distill.teacher is not None:
            self.teacher = make_teacher(
                cfg.distill,
                student_tokenizer=self.backend.tokenizer,
                micro_batch_size=cfg.optim.micro_batch_size,
                device=cfg.model.device,
            )
        resumed_version = self._resume(checkpoint) if checkpoint is not None else None
        self._saved_step = self.step if checkpoint is not None else None
        if cfg.rollout.server == "vllm":
            from rllm.training.rollout_server import start_vllm_rollout

            self.rollout_model = start_vllm_rollout(cfg, self.backend, self.run_dir)
        else:
            # async training samples while the backend trains, and a rollout dtype other than the weights' samples
            # from its own converted weights: both from a copy, synced by push_weights, not the shared model
            kwargs = {"max_batch_size": cfg.rollout.n_parallel, "seed": cfg.trainer.seed}
            if cfg.rollout.max_staleness or cfg.rollout.dtype not in (None, "float32"):
                self.rollout_model = self.backend.make_rollout_copy(dtype=cfg.rollout.dtype, **kwargs)
            else:
                self.rollout_model = self.backend.make_rollout_model(**kwargs)
            if resumed_version is not None:
                self.rollout_model.set_weight_version(resumed_version)
        self.engine, self.val_engine = self._make_engine(), self._make_engine()

    def _resume(self, checkpoint: Path) -> int:
        """Load `checkpoint` into the backend and the trainer; returns its weight version."""
        self.step, parts = load_checkpoint(checkpoint)
        self.backend.load(checkpoint)
        state = parts["trainer"]
        self.sampler.position = state["sampler_position"]
        # checkpoints of the first release named these mean_reward / mean_turns (rllm.metrics' vocabulary since)
        renamed = {"mean_reward": "reward_mean", "mean_turns": "turns_mean"}
        # interned keys: the same string objects as a run that never stopped, so pickle shares them the same way and
        # the next checkpoint is byte-identical to that run's
        self.val_history = [
            {sys.intern(renamed.get(k, k)): v for k, v in entry.items()} for entry in state["val_history"]
        ]
        _set_rng_state(state["rng"])
        pending = [StepRollouts.from_state(entry) for entry in state.get("pending_rollouts", [])]
        self.pending_rollouts = {rollouts.step: rollouts for rollouts in pending}
        return state["weight_version"]

    def _new_run_dir(self) -> None:
        cfg = self.config
        self.run_dir = create_run_dir(cfg.trainer.run_dir, cfg.trainer.name, *self._run_name_parts())
        self._created_run_dir = True
        write_manifest(self.run_dir, self.run_kind, cfg)

    def _run_name_parts(self) -> tuple[str, ...]:
        return ("train", self.config.data.task, self.config.algorithm.advantage)

    def _restart_run_dir(self, run_dir: Path) -> None:
        """`--resume` of a run killed before its first checkpoint: it starts over in its own directory, what it
        logged is dropped (it is logged again). Its config.yaml (written atomically) is kept, never rewritten; only
        a run killed before it was written gets it (and the manifest, written just before it) now."""
        self.run_dir = run_dir
        with writing(run_dir, run_dir):
            for name in ("metrics.jsonl", "episodes.jsonl"):
                (run_dir / name).unlink(missing_ok=True)
            for leftover in run_dir.glob(".config.yaml.tmp-*"):
                leftover.unlink()
        if not (run_dir / "config.yaml").exists():
            write_manifest(run_dir, self.run_kind, self.config)

    async def _close_rollout(self) -> None:
        if getattr(self, "rollout_model", None) is not None:
            await close_model(self.rollout_model)

    def _make_engine(self) -> AgentWorkflowEngine:
        return AgentWorkflowEngine(
            workflow_class=self.workflow_class,
            workflow_args=self.workflow_args,
            model=self.rollout_model,
            **self.config.rollout.engine_kwargs(),
        )

    def _save(self) -> None:
        trainer_state = {
            "sampler_position": self.sampler.position,
            "val_history": self.val_history,
            "rng": _rng_state(),
            "weight_version": self.rollout_model.weight_version,
            "pending_rollouts": [self.pending_rollouts[step].to_state() for step in sorted(self.pending_rollouts)],
        }
        save_checkpoint(self.run_dir, self.step, {"trainer": trainer_state}, write=self.backend.save)
        self._saved_step, self._last_save_time = self.step, time.monotonic()
        prune_checkpoints(self.run_dir, self.config.trainer.keep_checkpoints)


class _Stopped(Exception):
    """Raised out of the run's task when a signal stopped it; `train()` turns it into `TrainingInterrupted` once
    the clean-up is done. `abandoned`: the step in progress that was dropped (None: stopped between steps)."""

    def __init__(self, abandoned: int | None) -> None:
        super().__init__(abandoned)
        self.abandoned = abandoned


@dataclass
class StepRollouts:
    """One training step's episodes, as the rollout phase hands them to the update."""

    step: int
    episodes: list[Episode]
    greedy: dict[str, float] | None  # ReMax's greedy baselines
    seconds: float
    weight_version: int  # the rollout model's version when they were sampled

    def to_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "episodes": [episode.to_dict() for episode in self.episodes],
            "greedy": self.greedy,
            "seconds": self.seconds,
            "weight_version": self.weight_version,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> StepRollouts:
        return cls(
            state["step"],
            [Episode.from_dict(e) for e in state["episodes"]],
            state["greedy"],
            state["seconds"],
            state["weight_version"],
        )


class RolloutPipeline:
    """Asynchronous training (`rollout.max_staleness` = s >= 1): a producer task samples the rollouts of later
    steps while the trainer updates on earlier ones.

    The rollouts of step j are sampled with the weights pushed after step j - 1 - s (the initial ones for the first
    s + 1 steps), never newer and never older, so every token of step j is exactly s versions behind the weights it
    is trained from (fewer in the first steps), and a run is as reproducible as a synchronous one. The rollout model
    holds one version at a time: the push after step k waits until the rollouts of steps <= k + s, which need the
    older weights, are done (`wait_for_older_rollouts`), and the producer starts step k + s + 1 only once the trainer
    released the new weights (after validating and checkpointing them). At most s steps of rollouts wait for the
    update, so memory stays bounded. Finished but untrained rollouts are part of every checkpoint
    (`trainer.pending_rollouts`): a resumed run trains exactly the episodes the uninterrupted one would have.

    `rollout.partial_rollouts`: the push does not wait; the step in flight goes on with the new weights (its tokens
    then span two versions; the oldest bounds the staleness). A checkpoint waits for that step to finish
    (`settle`), so nothing sampled is lost or sampled twice, but the run is no longer reproducible bit for bit.
    """

    def __init__(self, trainer: AgentTrainer, start_step: int) -> None:
        self.trainer = trainer
        self.staleness = trainer.config.rollout.max_staleness
        self.total = trainer.config.trainer.total_steps
        self.partial = trainer.config.rollout.partial_rollouts
        self.released = start_step  # the step whose weights the rollout model holds and may sample with
        self.in_flight: int | None = None  # the step being sampled
        pending = trainer.pending_rollouts
        self.next_step = max(pending, default=start_step) + 1
        self.changed = asyncio.Condition()
        self.producer = asyncio.create_task(self._produce())

    async def _produce(self) -> None:
        pending = self.trainer.pending_rollouts
        try:
            while self.next_step <= self.total:
                step = self.next_step
                async with self.changed:
                    await self.changed.wait_for(lambda step=step: self.released >= step - 1 - self.staleness)
                self.in_flight = step
                rollouts = await self.trainer._rollout(step)
                async with self.changed:
                    pending[step] = rollouts
                    self.next_step, self.in_flight = step + 1, None
                    self.changed.notify_all()
        finally:
            async with self.changed:
                self.changed.notify_all()  # a waiter sees the producer's end (or its error) at once

    async def _wait(self, ready: Any) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: ready() or self.producer.done())
        if not ready():
            self.producer.result()  # re-raise the producer's error
            raise RuntimeError("the rollout producer stopped before the trainer's step")  # a bug, never expected

    async def take(self, step: int) -> StepRollouts:
        await self._wait(lambda: step in self.trainer.pending_rollouts)
        return self.trainer.pending_rollouts.pop(step)

    async def wait_for_older_rollouts(self, step: int) -> None:
        """Until the rollouts that must use the weights before step `step`'s update are sampled (partial rollouts:
        no wait)."""
        if self.partial:
            return
        last = min(step + self.staleness, self.total)
        await self._wait(lambda: self.next_step > last)

    async def settle(self) -> None:
        """Until no step is being sampled (the producer waits for its release, or has sampled every step)."""
        await self._wait(lambda: self.in_flight is None)

    def release(self) -> None:
        """The weights pushed after the current step may be sampled from."""
        self.released = self.trainer.step

        async def notify() -> None:
            async with self.changed:
                self.changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    async def close(self, *, settle: bool) -> None:
        """Stop the producer, after the step it is sampling (partial rollouts) when `settle`: the final checkpoint
        counts that step's tasks as taken. Without it (the run failed) that step is dropped; the last checkpoint
        was saved while no step was in flight."""
        if settle and not self.producer.done():
            await self.settle()
        self.producer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.producer


class TrainingDivergedError(RllmError):
    """Updates kept producing a non-finite loss or gradient; the run stops with its weights intact."""


class TaskSampler:
    """Hands out tasks in epochs, each a seeded shuffle of the dataset; `position` (tasks handed out so far) fully
    determines what comes next, so a resumed run sees the same tasks as an uninterrupted one."""

    def __init__(self, tasks: list[dict], seed: int, position: int = 0) -> None:
        if not tasks:
            raise ValueError("the training dataset is empty: give train_dataset rows or set data.train_size >= 1")
        self.tasks, self.seed, self.position = tasks, seed, position

    def take(self, k: int) -> list[dict]:
        out = []
        for _ in range(k):
            epoch, index = divmod(self.position, len(self.tasks))
            order = list(range(len(self.tasks)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            out.append(self.tasks[order[index]])
            self.position += 1
        return out


# ---- helpers --------------------------------------------------------------------------------------------------


async def _call(offload: bool, function: Any, *args: Any) -> Any:
    """`function(*args)` here, or in a worker thread so that the event loop keeps driving rollouts meanwhile."""
    return await asyncio.to_thread(function, *args) if offload else function(*args)


def _staleness(rows: list, version: int, bound: int) -> dict[str, float]:
    """How many weight versions the trained tokens lag the weights they are trained from, per sampled step of each
    row; more than `rollout.max_staleness` would be a bug of the pipeline, so it stops the run."""
    lags = [version - sampled for row in rows for sampled in row.weight_versions]
    if not lags:
        return {}
    if max(lags) > bound:
        raise RuntimeError(f"rows sampled {max(lags)} weight versions ago exceed rollout.max_staleness={bound}")
    return {"off_policy/staleness_mean": sum(lags) / len(lags), "off_policy/staleness_max": max(lags)}


def _rows_mismatch(rows: list, threshold: float) -> dict[str, float]:
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


def _step_seed(seed: int, step: int | str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{step}".encode(), digest_size=4).digest(), "little")


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _find_checkpoint(path: Path) -> Path | None:
    """`--resume` of a checkpoint folder (used as it is, once verified) or of a run directory (its newest intact
    checkpoint, after repairing what a killed save left; every repair and skipped damaged checkpoint is said). None
    for a training run directory killed before its first checkpoint: that run starts over."""
    if (path / "manifest.json").exists() and path.parent.name == "checkpoints":
        verify_checkpoint(path)
        return path
    found, notes = find_resumable_checkpoint(path)
    for note in notes:
        warnings.warn(f"--resume {path}: {note}", RuntimeWarning, stacklevel=2)
    if found is None:
        if not is_unstarted_train_run(path):
            raise ResumeError(
                f"--resume {path}: no checkpoint found (expected {path}/checkpoints/latest) and it is "
                "not a training run stopped before its first one; give a training run's folder"
            )
        warnings.warn(
            f"--resume {path}: the run was stopped before its first checkpoint; it starts over",
            RuntimeWarning,
            stacklevel=2,
        )
    return found


def _checkpoint_step(checkpoint: Path) -> int:
    """The step of a (verified) checkpoint folder, from its manifest: nothing is loaded."""
    return int(json.loads((checkpoint / "manifest.json").read_text(encoding="utf-8"))["step"])


def _logged_step_metrics(run_dir: Path, step: int) -> dict[str, Any]:
    """What `run_dir`'s metrics.jsonl holds for training step `step` (not its validation)."""
    for record in reversed(runs.load_metrics(run_dir)):  # runs.: trainer.load_metrics is a deprecated alias
        if record["step"] == step and not any(key.startswith("val/") for key in record):
            return {k: v for k, v in record.items() if k != "step"}
    return {}


def _progress(enabled: bool, *, total: int, initial: int):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", disable=not enabled)


def _warn_if_no_signal(step: int, episodes: list, stats: dict[str, Any]) -> None:
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


def _gpu_peak_memory(device: str) -> dict[str, float]:
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


def is_time_metric(key: str) -> bool:
    """Metrics that measure wall time and so differ between otherwise identical runs."""
    return any(part in key for part in _TIME_KEYS)


def format_result_table(result: dict[str, Any]) -> str:
    before, after = result["val_before"], result["val_after"]
    lines = [
        f"{'':24}{'before':>10}{'after':>10}",
        f"{'val success rate':24}{before['success_rate']:>10.3f}{after['success_rate']:>10.3f}",
        f"{'val mean reward':24}{before['reward_mean']:>10.3f}{after['reward_mean']:>10.3f}",
        *_termination_rows(before, after, result.get("last_metrics") or {}),
        f"validation tasks: {after.get('episodes', 0)}   steps: {result['steps']}   run: {result['run_dir']}",
        f"see its episodes and trained tokens: {view_command(result['run_dir'])}",
    ]
    return "\n".join(lines)


def _termination_rows(before: dict, after: dict, last_step: dict) -> list[str]:
    """Rows of the final table for how episodes ended, when any ended otherwise than by the env (`env_done`): a
    timeout or an infra error there means the numbers above are not the model's whole story. The last training
    step's fractions are in the row's note."""
    summaries = (before, after, last_step)
    reasons = sorted({k for s in summaries for k, v in s.items() if k.startswith("termination/") and v})
    if reasons in ([], ["termination/env_done"]):
        return []
    rows = []
    for key in reasons:
        train = f"   (last training step: {last_step[key]:.3f})" if key in last_step else ""
        name = "ended " + key.removeprefix("termination/")
        rows.append(f"{name:24}{before.get(key, 0.0):>10.3f}{after.get(key, 0.0):>10.3f}{train}")
    return rows
