"""`AgentTrainer`: the RL loop for agents.

    trainer = AgentTrainer(agent_class=FrozenLakeAgent, env_class=FrozenLakeEnv, config=load_config(path),
                           train_dataset=rows, val_dataset=val_rows)
    trainer.train()
    AgentTrainer(workflow_class=SolverJudgeWorkflow, workflow_args={...}, config=...)  # every role, one model

The trainer composes three objects, each readable on its own:
- `rllm.training.session.RunSession`: the run directory (fresh, resumed, restarted), checkpoints, Ctrl-C and SIGTERM,
  the clean-up of a failed start;
- a rollout source (`rllm.training.rollout_source`): `take(step) -> rollouts`, synchronous or pipelined;
- `rllm.training.step.train_step(state, rollouts) -> metrics`: advantages, rows, update, push, metrics, checks.

Reading order: one RL step, file:function in the order it runs (docs/architecture.md, "One GRPO step", follows the
whole path, from the command line through sampling to the checkpoint).

    training/trainer.py           AgentTrainer._loop             take -> step -> validate -> save, per step
    training/rollout_source.py    sample_rollouts                tasks, the step's seed -> the engine
    engine/workflow_engine.py     AgentWorkflowEngine.execute_tasks_async   each task rollout.n times -> Episodes
    training/step.py              train_step                     the step, top to bottom
    training/advantages.py        score_episodes                 group by task:role, filter, per-step advantages
                                  compute_advantages             the dispatcher -> grpo_advantages, rloo_advantages, ...
    training/batch.py             build_rows                     exact sampled ids -> rows with loss masks
    training/step.py              update_policy                  GAE values, distillation, proximal log-probs, update
    training/backends/torch.py    TorchBackend.update            epochs x mini-batches x micro-batches
                                  TorchBackend._loss             composes the pure losses below
    training/losses.py            policy_loss, kl_penalty, value_loss, aggregate
    training/backends/torch.py    TorchBackend.push_weights      the rollout model samples from the new weights
    (trainer.backend: verl)       training/backends/verl.py      the same calls on verl's workers on Ray

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
  reproducible whatever order concurrent rollouts reach the model in. Each engine call is given its sampling
  settings (training's, validation's): the one engine is never reconfigured. Resume is bitwise on CPU when the
  rollout batches are formed the same way (one rollout at a time, `rollout.n_parallel=1`, is always so; with
  concurrency the batch composition can differ in float rounding).
- What plays the tasks is resolved once (`rllm.workflows.resolve`): an explicit workflow class, else explicit agent
  and env classes, else `config.workflow` / the built-in task's default. Everything runs through the
  `AgentWorkflowEngine`; all roles of a workflow train the same model, each role with its own estimator
  (`algorithm.roles`). ReMax's greedy baseline for a role with several trajectories is their mean reward.
- Stopping and resuming are the session's (`rllm.training.session`): checkpoints by step or time, Ctrl-C and
  SIGTERM, a resumed run's own config, the removal of a failed start's directory.
- Off-policy: every update measures the sampler-trainer mismatch (`mismatch/*`); `algorithm.off_policy` picks the
  PPO ratio's anchor and the importance correction (`rllm.training.off_policy`). `rollout.max_staleness` > 0 trains
  asynchronously (`rllm.training.rollout_source.RolloutPipeline`): rollouts of later steps run on a copy of the
  weights while the update runs in a worker thread; the synchronous loop (0) is unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from rllm import runs, runtime
from rllm.config import TrainConfig, check_support, inference_options, override_config
from rllm.cpus import hold_threads, in_passing_thread
from rllm.engine.failures import raise_if_all_failed
from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.harnesses import workflow_for_config
from rllm.health import ALARM_PREFIX, HealthMonitor
from rllm.inference.kernels import KernelChoice
from rllm.inference.packed_linears import time_paths
from rllm.metrics import summarize_episodes
from rllm.models.base import close_model
from rllm.runs import RunLog, add_to_manifest, view_command, write_json
from rllm.training.distill import make_teacher
from rllm.training.numerics import KERNELS_KEY
from rllm.training.rollout_source import StepRollouts, TaskSampler, make_rollout_source, sample_rollouts
from rllm.training.session import RunSession, StoppedBySignal, rng_state, seed_everything, set_rng_state
from rllm.training.step import StepState, train_step
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
        check_support(cfg, "train")  # e.g. rollout.server=openai: keys training would ignore, before anything loads
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
        self.session = RunSession(cfg, self.run_kind)
        # the run's state, built by setup(): what trains, what samples, where the loop is
        self.backend: Any = None
        self.teacher: Any = None  # on-policy distillation's teacher (distill.teacher)
        self.rollout_model: Any = None
        self.engine: AgentWorkflowEngine | None = None
        self.sampler: TaskSampler | None = None
        self.step = 0  # the last step trained
        self.val_history: list[dict[str, Any]] = []
        self.pending_rollouts: dict[int, StepRollouts] = {}  # pipelined: sampled, not yet trained (checkpointed)
        self.state: StepState | None = None  # what train_step reads and carries, built when the loop starts

    @property
    def run_dir(self) -> Path | None:
        return self.session.run_dir

    # ---- public ---------------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Run the whole loop; returns validation before/after, the run directory and the last step's metrics.
        Ctrl-C or SIGTERM stop it with its state saved and raise `TrainingInterrupted` (rllm.training.interrupt)."""
        return self.session.run(self._train, lambda: self.step)

    async def close(self) -> None:
        """Stop the rollout model and the backend (its workers and, for verl, the Ray processes it started);
        safe to call twice and after a failed `setup()`."""
        try:
            if self.rollout_model is not None:
                await close_model(self.rollout_model)
        finally:
            hold_threads(None)  # the next run (in this process) chooses its own
            if self.backend is not None:
                self.backend.close()

    # ---- the loop -------------------------------------------------------------------------------------------

    async def _train(self) -> dict[str, Any]:
        cfg, session = self.config, self.session
        log: RunLog | None = None
        result: dict[str, Any] = {}
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
            if session.stop_signal is not None and self.step < cfg.trainer.total_steps:
                if session.saved_step != self.step:
                    self._save()
                raise StoppedBySignal(abandoned=None)
            # a resumed run with no step left (killed after its last save) has its last step's metrics in the log
            result["last_metrics"] = last or _logged_step_metrics(self.run_dir, self.step)
            if self.step == cfg.trainer.total_steps and self.val_history[-1]["step"] != self.step:
                self.val_history.append({"step": self.step, **await self._validate(log, self.step)})
            if self.step > start_step or session.resumed_from is None:
                self._save()  # else the checkpoint resumed from is this state already: never save a step twice
            failed = False
        except asyncio.CancelledError:
            if not session.cancelled_by_stop_signal():
                raise
            raise StoppedBySignal(abandoned=self.step + 1) from None  # the step in progress is dropped
        finally:
            if log is not None:
                log.close()
            await self.close()
            if failed:
                session.remove_failed_start()
        result.update(val_before=self.val_history[0], val_after=self.val_history[-1], steps=self.step)
        write_json(self.run_dir / "result.json", result)
        return result

    async def _loop(self, log: RunLog, start_step: int) -> dict[str, Any]:
        """Each step: its rollouts from the source, `train_step`, validation and a checkpoint when due, then the
        new weights released to the source."""
        cfg = self.config.trainer
        stop = cfg.total_steps if cfg.stop_after is None else min(cfg.total_steps, start_step + cfg.stop_after)
        bar = _progress(self.progress, total=cfg.total_steps, initial=start_step)
        source = make_rollout_source(self.config, self._rollout, self.pending_rollouts, start_step)
        logged = self.run_dir / "metrics.jsonl"
        health = HealthMonitor(runs.load_metrics(self.run_dir) if logged.exists() else [])  # a resumed run's so far
        self.state = StepState(
            self.config, self.backend, self.rollout_model, log, source, health=health, teacher=self.teacher
        )
        metrics: dict[str, Any] = {}
        try:
            for step in range(start_step + 1, stop + 1):
                metrics = await self._train_step(step, await source.take(step))
                self.step = step
                if cfg.val_every and step % cfg.val_every == 0 and step < cfg.total_steps:
                    self.val_history.append({"step": step, **await self._validate(log, step)})
                if self.session.save_due(step) and step < stop:
                    await source.before_save()
                    self._save()  # the loop's last step is saved once, after it (with the final validation)
                if step < stop:
                    source.release(step)  # the next rollouts may use the weights just pushed (and validated)
                bar.set_postfix(self._progress_postfix(metrics))
                bar.update()
                if self.session.stop_signal is not None:
                    break  # asked to stop: _train saves this step (unless just saved) and reports
        except BaseException:
            bar.close()  # its line ends before what is printed next (an interruption's one line)
            await source.close(settle=False)
            raise
        await source.close(settle=True)
        bar.close()
        return metrics

    # ---- what a subclass changes (rllm.training.sft's offline trainers) -------------------------------------

    async def _rollout(self, step: int) -> StepRollouts:
        """Step `step`'s episodes (and ReMax's greedy baselines) from the rollout model as it is now."""
        return await sample_rollouts(step, self.config, self.sampler, self.engine)

    async def _train_step(self, step: int, rollouts: StepRollouts) -> dict[str, Any]:
        metrics = await train_step(self.state, rollouts)
        runtime.trim_freed_memory()  # the step's freed memory back to the system: a flat floor over a long run
        return metrics

    async def _validate(self, log: RunLog, step: int) -> dict[str, float]:
        """Greedy (`rollout.val_temperature`) episodes on the validation tasks, logged under `val/`."""
        if not self.val_dataset:
            return {"success_rate": float("nan"), "reward_mean": float("nan"), "episodes": 0}
        sampling = self.config.rollout.to_sampling(validation=True, seed=self.config.trainer.seed)
        started = time.perf_counter()
        episodes = await self.engine.execute_tasks_async(
            self.val_dataset, n_rollouts=self.config.rollout.val_n, sampling=sampling
        )
        summary = summarize_episodes(episodes, time.perf_counter() - started)
        log.log(step, {f"val/{k}": v for k, v in summary.items()})
        if self.config.trainer.log_episodes:
            log.log_episodes(step, episodes, "val")
        raise_if_all_failed(episodes, f"the validation at step {step}")
        kept = ("success_rate", "reward_mean", "turns_mean", "episodes")
        return {k: v for k, v in summary.items() if k in kept or k.startswith("termination/")}

    def _progress_postfix(self, metrics: dict[str, Any]) -> dict[str, str]:
        postfix = {"reward": f"{metrics['reward_mean']:.2f}", "val": f"{self.val_history[-1]['success_rate']:.2f}"}
        alarms = [key.removeprefix(ALARM_PREFIX) for key in metrics if key.startswith(ALARM_PREFIX)]
        return {**postfix, "alarms": ",".join(alarms)} if alarms else postfix

    def _run_name_parts(self) -> tuple[str, ...]:
        return ("train", self.config.data.task, self.config.algorithm.advantage)

    # ---- set-up, checkpoints ------------------------------------------------------------------------------

    def setup(self) -> None:
        """Build the run's state, in the one order that works: seeds -> task sampler -> run directory, fresh or the
        resumed one (started over when it was killed before its first checkpoint), and the torch thread count the
        run holds (`rllm.training.numerics`) -> backend (model, optimizer; verl's workers exchange weights through
        the run directory) -> resumed state (weights, optimizer, sampler position, RNG, validation history) ->
        rollout model (after resuming, so a vLLM server starts from the resumed weights) -> engine."""
        from rllm.training.backends import make_backend

        cfg = self.config
        seed_everything(cfg.trainer.seed)
        self.sampler = TaskSampler(self.train_dataset, cfg.trainer.seed)
        self.step, self.val_history, self.pending_rollouts = 0, [], {}
        checkpoint = self.session.open(self._run_name_parts())
        hold_threads(self.session.torch_threads)  # before any model runs: its rollouts and updates, one count
        # a resume: the run's own kernel choice (rllm.training.numerics); a fresh run's measured or cached
        kernels = KernelChoice.from_record(self.session.kernels_record, timer=time_paths)
        self.backend = make_backend(cfg, self.run_dir, model=self._model, tokenizer=self._tokenizer, kernels=kernels)
        self.teacher = None
        if cfg.distill.teacher is not None:
            self.teacher = make_teacher(
                cfg.distill,
                student_tokenizer=self.backend.tokenizer,
                micro_batch_size=cfg.optim.micro_batch_size,
                device=cfg.model.device,
            )
        # loading a checkpoint copies weights: in a thread that exits, so this one starts no OpenMP team (rllm.cpus)
        resumed_version = in_passing_thread(self._resume, checkpoint) if checkpoint is not None else None
        self.rollout_model = self._make_rollout_model(resumed_version)
        self._record_kernels()
        self.engine = AgentWorkflowEngine(
            workflow_class=self.workflow_class,
            workflow_args=self.workflow_args,
            model=self.rollout_model,
            **cfg.rollout.engine_kwargs(),
        )

    def _record_kernels(self) -> None:
        """The linear layers' kernel choice (`rllm.inference.kernels`: measured on this machine, cached, or a resumed
        run's own) goes in the manifest and on stderr, where packed linears are on: a run's numerics depend on it,
        and its `--resume` makes the same choice from this record (`rllm.training.numerics`)."""
        choice = getattr(self.backend, "kernels", None) or getattr(self.rollout_model, "kernels", None)
        if isinstance(choice, KernelChoice):  # a test's mock backend has every attribute
            add_to_manifest(self.run_dir, KERNELS_KEY, choice.record())
            print(f"kernels: {choice.describe()}", file=sys.stderr, flush=True)

    def _make_rollout_model(self, resumed_version: int | None) -> Any:
        cfg = self.config
        if cfg.rollout.server == "vllm":
            from rllm.training.rollout_server import start_vllm_rollout

            return start_vllm_rollout(cfg, self.backend, self.run_dir)
        # async training samples while the backend trains, and a rollout dtype other than the weights' samples
        # from its own converted weights: both from a copy, synced by push_weights, not the shared model
        options = inference_options(cfg)
        if cfg.rollout.max_staleness or cfg.rollout.dtype not in (None, "float32"):
            model = self.backend.make_rollout_copy(dataclasses.replace(options, dtype=cfg.rollout.dtype))
        else:
            model = self.backend.make_rollout_model(options)
        if resumed_version is not None:
            model.set_weight_version(resumed_version)
        return model

    def _resume(self, checkpoint: Path) -> int:
        """Load `checkpoint` into the backend and the trainer; returns its weight version."""
        self.step, state = self.session.load(checkpoint, self.backend)
        self.sampler.position = state["sampler_position"]
        # checkpoints of the first release named these mean_reward / mean_turns (rllm.metrics' vocabulary since)
        renamed = {"mean_reward": "reward_mean", "mean_turns": "turns_mean"}
        # interned keys: the same string objects as a run that never stopped, so pickle shares them the same way and
        # the next checkpoint is byte-identical to that run's
        self.val_history = [
            {sys.intern(renamed.get(k, k)): v for k, v in entry.items()} for entry in state["val_history"]
        ]
        set_rng_state(state["rng"])
        pending = [StepRollouts.from_state(entry) for entry in state.get("pending_rollouts", [])]
        self.pending_rollouts = {rollouts.step: rollouts for rollouts in pending}
        return state["weight_version"]

    def _save(self) -> None:
        trainer_state = {
            "sampler_position": self.sampler.position,
            "val_history": self.val_history,
            "rng": rng_state(),
            "weight_version": self.rollout_model.weight_version,
            "pending_rollouts": [self.pending_rollouts[step].to_state() for step in sorted(self.pending_rollouts)],
        }
        self.session.save(self.step, trainer_state, self.backend)


# ---- helpers --------------------------------------------------------------------------------------------------


def _logged_step_metrics(run_dir: Path, step: int) -> dict[str, Any]:
    """What `run_dir`'s metrics.jsonl holds for training step `step` (not its validation)."""
    for record in reversed(runs.load_metrics(run_dir)):  # runs.: trainer.load_metrics is a deprecated alias
        if record["step"] == step and not any(key.startswith("val/") for key in record):
            return {k: v for k, v in record.items() if k != "step"}
    return {}


def _progress(enabled: bool, *, total: int, initial: int):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", disable=not enabled)


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
