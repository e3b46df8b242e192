"""`VerlBackend` (`trainer.backend: verl`): the update runs on verl's FSDP2 workers on a Ray cluster.

    backend = VerlBackend(config, run_dir)          # Ray up, workers placed, models loaded
    rollout_model = backend.make_rollout_model()    # a LocalModel on the driver's copy of the weights
    metrics = backend.update(rows, temperature=1.0) # one PPO update on the workers
    backend.push_weights(rollout_model)             # workers -> file -> driver copy (-> vLLM server)
    backend.close()                                 # workers gone; a Ray we started is stopped

What runs where:
- The driver (this process) keeps everything rllm-side: rollouts, advantages, rows, the mini-batch plan (the same
  seeded shuffle as the torch backend, `base.mini_batch_order`), and a float32 copy of the model that rollouts sample
  from. Each mini-batch goes to the workers as one `update_actor` call, so verl takes exactly one optimizer step per
  mini-batch, as the torch backend does.
- The workers are verl's own `ActorRolloutRefWorker` (`verl.workers.engine_workers`, FSDP2 engine) with our loss
  (`verl_worker.RllmActorLoss`, installed with `set_loss_fn`) and our LR schedule. The reference policy for the KL
  term is a colocated `ref` worker (full fine-tuning) or the actor with its LoRA adapters disabled (LoRA).
- Rows become verl's prompt/response layout exactly: the prompt is everything before the row's first loss token, the
  response everything after it, with our loss mask as `response_mask` (observation tokens inside the response stay
  masked), our sampled log-probs as `old_log_probs` and our advantages. Nothing is re-tokenized.
- After each update, rank 0 writes the merged full weights to `<run>/verl/weights.safetensors` (all ranks gather);
  the driver loads them into its copy, which the LocalModel shares, or which a vLLM server syncs from. On several
  nodes the run directory must be on a filesystem every node sees.
- Checkpoints: verl's sharded checkpoint (model, optimizer, extra state per rank) under the checkpoint's `verl/`
  folder, plus the driver's small state (`backend.pt`: shuffle generator, counters).

On CPU, `verl_cpu` supplies the platform verl lacks (gloo, no pinned memory); on GPU verl runs as it ships.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rllm.config import ConfigError, TrainConfig
from rllm.cpus import usable_cores
from rllm.errors import ImageError, RllmError
from rllm.inference.options import InferenceOptions
from rllm.training.backends.base import UpdateLog, mini_batch_order, push_weights_to
from rllm.training.batch import TrainingRow, nonfinite_tokens
from rllm.training.off_policy import MISMATCH_SUM_KEYS, mismatch_metrics

__all__ = ["VerlBackend", "VerlWorkerError", "require_verl"]

VERL_VERSION = "0.9.1"  # the CPU platform's patches (verl_cpu) touch verl's internals: tested with this one only
CPU_ENV = {
    "VERL_PLATFORM": "cpu",
    "VERL_USE_EXTERNAL_MODULES": "rllm.training.backends.verl_cpu",
    "VERL_ENGINE_DEVICE": "cuda",
}
STATE_FILE = "backend.pt"
STATE_FORMAT = 1
INSTALL_HINT = (
    "run `make verl` (builds .venv-verl, which `rllm train` then uses by itself) or `pip install 'rllm[verl]'`"
)
_OBJECT_STORE_BYTES = 512 * 2**20  # rows and metrics only; weights travel through files


class VerlWorkerError(RllmError):
    """A verl worker failed or died; the run stops (Ray shut down), its last checkpoint stays loadable."""


def require_verl() -> None:
    """Import verl (and on a CPU machine, our CPU platform for it) or fail with the install command."""
    import importlib.metadata

    if not torch.cuda.is_available():
        for key, value in CPU_ENV.items():
            os.environ.setdefault(key, value)
    try:
        import ray  # noqa: F401

        import verl  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"trainer.backend=verl needs verl and ray ({exc.name} is missing): {INSTALL_HINT}") from exc
    found = importlib.metadata.version("verl")
    if found != VERL_VERSION:
        raise ConfigError(
            f"rllm's verl backend is tested with verl=={VERL_VERSION}, found {found}: "
            f"pip install verl=={VERL_VERSION} (or `make verl`)"
        )


class VerlBackend:
    """See the module docstring. Same calls and metrics as `TorchBackend` (`base.TrainingBackend`)."""

    def __init__(self, config: TrainConfig, run_dir: Path, *, model: Any = None, tokenizer: Any = None) -> None:
        from rllm.models import registry

        if model is not None:
            raise ConfigError(
                "trainer.backend=verl loads the model in its workers from model.name (a registry name "
                "or a folder); save your model with save_pretrained and name that folder"
            )
        require_verl()
        self.config, self.algorithm = config, config.algorithm
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model_path = registry.resolve_model_path(config.model.name)
        self.tokenizer = tokenizer if tokenizer is not None else registry.load_tokenizer(config.model.name)
        self.vision = None  # text only: rows with images are refused (update, compute_logprobs)
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        # The driver's copy: what rollouts sample from. Merged weights, so weight sources see no LoRA.
        self.model = registry.load_causal_lm(self.model_path, dtype="float32").eval()
        self.lora = False
        self.exchange = Path(run_dir) / "verl" / "weights.safetensors"
        self.generator = torch.Generator().manual_seed(config.trainer.seed)
        self.updates = self.weight_version = self.optimizer_steps = 0
        self._connected, self._closed = False, False
        self.actor = self.ref = None
        try:
            self._start_ray()
            self._spawn_workers()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ Ray and the workers

    def _start_ray(self) -> None:
        import ray

        address = self.config.verl.ray_address or os.environ.get("RAY_ADDRESS")
        env = {k: v for k, v in os.environ.items() if k.startswith("VERL_")}
        env.update(TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join(_import_roots()))
        self._worker_env = env  # given to every worker too: a Ray the caller started has not got it
        runtime_env = {"env_vars": env}
        if ray.is_initialized():  # the caller's Ray: theirs to stop
            return
        self._connected = True
        if address:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        else:  # a local Ray with this machine's CPUs: asking for more workers than cores fails in _place
            ray.init(
                num_cpus=usable_cores(),
                object_store_memory=_OBJECT_STORE_BYTES,
                include_dashboard=False,
                runtime_env=runtime_env,
                log_to_driver=False,
            )

    def _spawn_workers(self) -> None:
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.single_controller.ray.base import create_colocated_worker_cls

        from rllm.training.backends.verl_worker import RllmActorLoss, RllmVerlWorker

        trainer = self.config.trainer
        pool = RayResourcePool(
            process_on_nodes=[trainer.workers_per_node] * trainer.nodes,
            use_gpu=self.device == "cuda",
            max_colocate_count=1,
        )
        self._place(pool)
        verl_config = self._verl_config()
        worker = ray.remote(RllmVerlWorker)
        roles = {"actor": RayClassWithInitArgs(cls=worker, config=verl_config.actor_rollout_ref, role="actor")}
        if self.algorithm.kl_coef > 0 and not self.config.model.lora.enabled:
            roles["ref"] = RayClassWithInitArgs(cls=worker, config=verl_config.actor_rollout_ref, role="ref")
        group = RayWorkerGroup(
            resource_pool=pool,
            ray_cls_with_init=create_colocated_worker_cls(roles),
            device_name=self.device,
            worker_env=self._worker_env,
        )
        groups = group.spawn(prefix_set=set(roles))
        self.ref = groups.get("ref")
        self._call("start the reference model", lambda: self.ref and self.ref.init_model())
        self.actor = groups["actor"]
        self._call("start the actor", self.actor.init_model)
        per_update, optim = self.algorithm.ppo_epochs * self.algorithm.mini_batches, self.config.optim
        self._call("install the loss", lambda: self.actor.set_loss_fn(RllmActorLoss(self.algorithm)))
        self._call(
            "install the LR schedule",
            lambda: self.actor.set_lr_schedule(
                optim.schedule, optim.warmup_steps * per_update, trainer.total_steps * per_update
            ),
        )
        self.dp_size = trainer.nodes * trainer.workers_per_node // self.config.verl.ulysses_sequence_parallel_size

    def _place(self, pool: Any) -> None:
        """Reserve the workers' bundles, or fail within `verl.placement_timeout` naming what is missing (Ray itself
        would wait forever for resources the cluster does not have)."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        trainer, resource = self.config.trainer, "GPU" if self.device == "cuda" else "CPU"
        bundle = {"CPU": 1, **({"GPU": 1} if self.device == "cuda" else {})}
        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        need = trainer.workers_per_node
        fitting = [r for r in nodes if r.get(resource, 0) >= need and r.get("CPU", 0) >= need]
        if len(fitting) < trainer.nodes:
            have = ", ".join(f"{r.get(resource, 0):g}" for r in nodes) or "none"
            raise ConfigError(
                f"trainer.nodes={trainer.nodes} x trainer.workers_per_node={trainer.workers_per_node} needs "
                f"{trainer.nodes} Ray node(s) with {trainer.workers_per_node} free {resource}(s) each; the cluster's "
                f"nodes have {have} {resource}(s). Lower trainer.workers_per_node / trainer.nodes or add nodes "
                "(`ray start --address=...`)."
            )
        groups = [
            placement_group([dict(bundle) for _ in range(trainer.workers_per_node)], strategy="STRICT_PACK")
            for _ in range(trainer.nodes)
        ]
        ready, _ = ray.wait(
            [g.ready() for g in groups], num_returns=len(groups), timeout=self.config.verl.placement_timeout
        )
        if len(ready) < len(groups):
            for g in groups:
                remove_placement_group(g)
            raise ConfigError(
                f"the Ray cluster could not place {trainer.nodes} x {trainer.workers_per_node} worker(s) "
                f"({bundle} each) within verl.placement_timeout={self.config.verl.placement_timeout:g}s: its free "
                f"resources are {ray.available_resources()}. Free them, lower trainer.workers_per_node, or raise "
                "the timeout."
            )
        from verl.single_controller.ray.base import sort_placement_group_by_node_ip

        pool.pgs = sort_placement_group_by_node_ip(groups)

    def _verl_config(self) -> Any:
        """verl's own `ppo_trainer` config (hydra), with our settings as overrides, then `verl.overrides`."""
        from hydra import compose, initialize_config_dir

        import verl

        directory = Path(verl.__file__).parent / "trainer" / "config"
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            return compose(config_name="ppo_trainer", overrides=self._overrides())

    def _overrides(self) -> list[str]:
        cfg, v = self.config, self.config.verl
        lora, optim = cfg.model.lora, cfg.optim
        micro = v.micro_batch_size or optim.micro_batch_size
        dtype = "bf16" if cfg.model.dtype == "bfloat16" else "fp32"
        attn = v.attn_implementation or ("sdpa" if self.device == "cpu" else None)
        a = "actor_rollout_ref"
        out = [
            f"{a}.model.path={self.model_path}",
            f"{a}.model.use_remove_padding=False",
            f"{a}.model.enable_gradient_checkpointing={cfg.model.gradient_checkpointing}",
            f"{a}.model.lora_rank={lora.rank if lora.enabled else 0}",
            f"{a}.model.lora_alpha={lora.alpha}",
            f"{a}.model.target_modules=[{','.join(lora.target_modules)}]",
            f"{a}.model.lora.merge=True",  # the rollout side receives merged weights
            f"{a}.actor.ppo_mini_batch_size={max(1, micro)}",
            f"{a}.actor.ppo_micro_batch_size_per_gpu={micro}",
            f"{a}.rollout.log_prob_micro_batch_size_per_gpu={micro}",
            f"{a}.ref.log_prob_micro_batch_size_per_gpu={micro}",
            f"{a}.actor.use_dynamic_bsz=False",
            f"{a}.actor.use_torch_compile=False",
            f"{a}.actor.use_kl_loss={self.algorithm.kl_coef > 0}",
            f"{a}.actor.optim.lr={optim.lr}",
            f"{a}.actor.optim.betas=[{optim.betas[0]},{optim.betas[1]}]",
            f"{a}.actor.optim.weight_decay={optim.weight_decay}",
            f"{a}.actor.optim.clip_grad={optim.grad_clip if optim.grad_clip is not None else 1e30}",
            f"+{a}.actor.optim.override_optimizer_config={{eps:{optim.eps}}}",
            f"{a}.actor.optim.total_training_steps={max(1, cfg.trainer.total_steps)}",
            f"trainer.device={self.device}",
        ]
        for role in ("actor", "ref"):
            out += [
                f"{a}.{role}.strategy={v.strategy}",
                f"{a}.{role}.fsdp_config.param_offload={v.param_offload}",
                f"{a}.{role}.fsdp_config.ulysses_sequence_parallel_size={v.ulysses_sequence_parallel_size}",
                f"{a}.{role}.fsdp_config.model_dtype=fp32",
                f"{a}.{role}.fsdp_config.seed={cfg.trainer.seed}",
                f"+{a}.{role}.fsdp_config.mixed_precision={{param_dtype:{dtype},reduce_dtype:fp32,buffer_dtype:fp32}}",
            ]
        out.append(f"{a}.actor.fsdp_config.optimizer_offload={v.optimizer_offload}")
        if attn:
            out.append(f"+{a}.model.override_config.attn_implementation={attn}")
        return out + list(v.overrides)

    def _call(self, what: str, fn: Any) -> Any:
        """Run a worker call; a worker that raised or died stops the run with its own error, named."""
        import ray

        try:
            return fn()
        except (ray.exceptions.RayError, ray.exceptions.RayActorError) as exc:
            raise VerlWorkerError(
                f"a verl worker failed to {what}: {exc}\nThe run's last checkpoint is intact; fix the cause and "
                "continue it with --resume <run dir>."
            ) from exc

    # ------------------------------------------------------------ rows -> verl's layout

    def _batch(
        self,
        rows: Sequence[TrainingRow],
        temperature: float,
        *,
        multiple: int,
        reference: Sequence[list[float]] | None = None,
        **meta: Any,
    ) -> tuple[Any, int]:
        """Rows as verl's left-padded prompt / right-padded response TensorDict (no-padding form), padded with
        copies of the first row carrying no loss token up to a multiple of `multiple`; returns (data, real rows)."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        if any(row.images for row in rows):
            raise ImageError(
                "rows with images (a vision-language model's rollouts) train with the torch backend "
                "only: set trainer.backend=torch"
            )
        real = len(rows)
        rows = list(rows) + [_without_loss(rows[0])] * (-real % multiple)
        starts = [_response_start(row) for row in rows]
        width_p, width_r = max(starts), max(len(row) - s for row, s in zip(rows, starts, strict=True))

        def right(values: list[list[Any]], pad: Any, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor([v + [pad] * (width_r - len(v)) for v in values], dtype=dtype)

        prompts = torch.tensor(
            [[self.pad_id] * (width_p - s) + row.input_ids[:s] for row, s in zip(rows, starts, strict=True)],
            dtype=torch.long,
        )
        prompt_mask = torch.tensor([[0] * (width_p - s) + [1] * s for s in starts], dtype=torch.long)
        responses = right([row.input_ids[s:] for row, s in zip(rows, starts, strict=True)], self.pad_id, torch.long)
        response_len = right([[1] * (len(row) - s) for row, s in zip(rows, starts, strict=True)], 0, torch.long)
        attention_mask = torch.cat([prompt_mask, response_len], dim=1)
        tensors = {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
            "response_mask": right([row.loss_mask[s:] for row, s in zip(rows, starts, strict=True)], 0, torch.long),
            "old_log_probs": right(
                [row.old_logprobs[s:] for row, s in zip(rows, starts, strict=True)], 0.0, torch.float32
            ),
            "advantages": right([row.advantages[s:] for row, s in zip(rows, starts, strict=True)], 0.0, torch.float32),
        }
        if reference is not None:
            reference = list(reference) + [[0.0] * len(rows[0])] * (len(rows) - real)
            tensors["ref_log_prob"] = right([r[s:] for r, s in zip(reference, starts, strict=True)], 0.0, torch.float32)
        data = tu.get_tensordict(tensor_dict=tensors, non_tensor_dict={"temperature": temperature or 1.0, **meta})
        return left_right_2_no_padding(data), real

    def _token_aligned(
        self, rows: Sequence[TrainingRow], data: Any, log_probs: Any, all_positions: bool = False
    ) -> list[list[float]]:
        """verl's per-response log-probs back to our per-row, token-aligned lists (0.0 off the loss mask)."""
        from verl.workers.utils.padding import no_padding_2_padding

        padded = no_padding_2_padding(log_probs, data).float()
        out = []
        for b, row in enumerate(rows):
            s = _response_start(row)
            values = [0.0] * s + padded[b, : len(row) - s].tolist()
            out.append(values if all_positions else [v * m for v, m in zip(values, row.loss_mask, strict=True)])
        return out

    # ------------------------------------------------------------ queries and the update

    def compute_logprobs(
        self, rows: Sequence[TrainingRow], *, temperature: float, reference: bool = False
    ) -> list[list[float]]:
        """Per-row, token-aligned logprobs under the current weights, or the KL reference's (LoRA: the actor with its
        adapters disabled; full fine-tuning: the ref workers, present when algorithm.kl_coef > 0)."""
        from verl.utils import tensordict_utils as tu

        if reference and self.ref is None and not self.config.model.lora.enabled:
            raise RuntimeError("full fine-tuning keeps a reference model only when algorithm.kl_coef > 0")
        meta = {"calculate_entropy": False, "compute_loss": False}
        lora_reference = reference and self.ref is None
        if lora_reference:
            meta["no_lora_adapter"] = True
        data, real = self._batch(rows, temperature, multiple=self.dp_size * self._micro(rows), **meta)
        micro = self._micro(rows)
        tu.assign_non_tensor(data, micro_batch_size_per_gpu=micro)
        call = self.ref.compute_ref_log_prob if reference and not lora_reference else self.actor.compute_log_prob
        output = self._call("compute log-probs", lambda: call(data))
        return self._token_aligned(rows, data, tu.get(output, "log_probs"))[:real]

    def _lr(self) -> float:
        """The learning rate of the optimizer step being taken (verl reports the next step's)."""
        from rllm.training.backends.torch_model import lr_factor

        optim, per_update = self.config.optim, self.algorithm.ppo_epochs * self.algorithm.mini_batches
        return optim.lr * lr_factor(
            self.optimizer_steps,
            schedule=optim.schedule,
            warmup=optim.warmup_steps * per_update,
            total=self.config.trainer.total_steps * per_update,
        )

    def _micro(self, rows: Sequence[TrainingRow]) -> int:
        micro = self.config.verl.micro_batch_size or self.config.optim.micro_batch_size
        return max(1, min(micro, -(-len(rows) // self.dp_size)))

    def update(
        self, rows: Sequence[TrainingRow], *, temperature: float, norm_length: int | None = None
    ) -> dict[str, float]:
        """One PPO update: the driver's seeded mini-batch plan, one `update_actor` (one optimizer step) per
        mini-batch; metrics as `TorchBackend.update` reports them."""
        from verl.utils import tensordict_utils as tu

        if not rows:
            raise ValueError("update needs at least one training row")
        algo, started = self.algorithm, time.perf_counter()
        if norm_length is None and algo.loss_agg == "seq-mean-token-sum-norm":
            norm_length = max(len(row) for row in rows) - 1
        reference = self.compute_logprobs(rows, temperature=temperature, reference=True) if algo.kl_coef > 0 else None
        log = UpdateLog()
        plan = mini_batch_order(
            len(rows), epochs=algo.ppo_epochs, mini_batches=algo.mini_batches, generator=self.generator
        )
        mismatch = None
        for index, mini_batch in enumerate(plan):
            chunk = [rows[i] for i in mini_batch]
            masks = [sum(row.loss_mask) for row in chunk]
            tokens = sum(masks)
            units = tokens if algo.loss_agg == "token-mean" else sum(m > 0 for m in masks)
            log.count_tokens(float(sum(len(row) for row in chunk)), float(tokens))
            if units == 0:  # every row masked: no gradient, no step (the torch backend's schedule still ticks)
                log.steps += 1
                continue  # (verl's does not: the schedule falls one step behind the torch backend's)
            micro = self._micro(chunk)
            data, _ = self._batch(
                chunk,
                temperature,
                multiple=self.dp_size * micro,
                reference=[reference[i] for i in mini_batch] if reference is not None else None,
                calculate_entropy=True,
                compute_loss=True,
                mini_batch_size=None,
                num_mini_batch=1,
                epochs=1,
                dataloader_kwargs={"shuffle": False},
                micro_batch_size_per_gpu=micro,
                rllm_units=units,
                rllm_tokens=tokens,
                rllm_norm_length=norm_length,
            )
            output = self._call("update the policy", lambda data=data: self.actor.update_actor(data))
            metrics = _summed_metrics(tu.get(output, "metrics"))
            sums = [metrics.pop(f"mismatch_sums/{key}", None) for key in MISMATCH_SUM_KEYS]
            if index == 0 and None not in sums:  # before any optimizer step of this update, as TorchBackend does
                mismatch = torch.tensor(sums, dtype=torch.float64)
            log.add({**metrics, "lr": self._lr()})
            if not math.isfinite(metrics.get("grad_norm", 0.0)):  # verl skipped this optimizer step itself
                log.add({"skipped_nonfinite": 1})
            log.steps += 1
            self.optimizer_steps += 1
        self.updates += 1
        log.add({"off_policy/nonfinite_tokens": nonfinite_tokens(rows)})
        return {**log.metrics(time.perf_counter() - started), **mismatch_metrics(mismatch)}

    # ------------------------------------------------------------ rollouts and weight sync

    def make_rollout_model(self, options: InferenceOptions | None = None) -> Any:
        """A `LocalModel` on the driver's copy of the weights, refreshed by every `push_weights`."""
        from rllm.inference.model import LocalModel

        return LocalModel(self.model, self.tokenizer, options)

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}

    def push_weights(self, client: Any) -> int:
        """Workers -> `<run>/verl/weights.safetensors` -> the driver's copy -> `client`; returns its version."""
        self._pull_weights()
        self.weight_version = push_weights_to(client, self)
        return self.weight_version

    def _pull_weights(self) -> None:
        from safetensors.torch import load_file

        self._call("export its weights", lambda: self.actor.export_weights(str(self.exchange)))
        state = load_file(str(self.exchange))
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise VerlWorkerError(f"verl exported weights this model does not have, e.g. {unknown[:3]}")
        with torch.no_grad():
            for name, tensor in state.items():
                own[name].copy_(tensor)

    # ------------------------------------------------------------ checkpoints and shutdown

    def save(self, directory: Path) -> None:
        """verl's sharded checkpoint into `directory/verl` (every rank writes its shard: on several nodes the
        directory must be shared) and the driver's state into `directory/backend.pt`."""
        target = Path(directory) / "verl"
        self._call("save a checkpoint", lambda: self.actor.save_checkpoint(str(target), global_step=self.updates))
        state = {
            "format": STATE_FORMAT,
            "backend": "verl",
            "generator": self.generator.get_state(),
            "updates": self.updates,
            "weight_version": self.weight_version,
            "optimizer_steps": self.optimizer_steps,
        }
        torch.save(state, Path(directory) / STATE_FILE)

    def load(self, directory: Path) -> None:
        state = torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=False)
        if state.get("backend") != "verl":
            raise ConfigError(f"{directory} was written by the torch backend; resume it with trainer.backend=torch")
        self._call("load a checkpoint", lambda: self.actor.load_checkpoint(str(Path(directory) / "verl")))
        self.generator.set_state(state["generator"])
        self.updates, self.weight_version = int(state["updates"]), int(state["weight_version"])
        self.optimizer_steps = int(state["optimizer_steps"])
        self._pull_weights()

    def close(self) -> None:
        """Kill the workers; stop the local Ray this backend started, or leave the cluster it joined (which keeps
        running). A Ray the caller had already started stays up."""
        if self._closed:
            return
        self._closed = True
        try:
            import ray
        except ImportError:
            return
        if not ray.is_initialized():
            return
        for group in (self.actor, self.ref):
            for handle in getattr(group, "workers", None) or []:
                try:
                    ray.kill(handle)
                except Exception:  # already dead: nothing to release
                    pass
        if self._connected:
            ray.shutdown()


# ---- helpers ----------------------------------------------------------------------------------------------------


def _response_start(row: TrainingRow) -> int:
    """Where the row's response begins in verl's layout: its first loss token (the last token when it has none, so
    both parts are non-empty)."""
    return next((t for t, m in enumerate(row.loss_mask) if m), len(row) - 1)


def _without_loss(row: TrainingRow) -> TrainingRow:
    from dataclasses import replace

    zeros = [0.0] * len(row)
    return replace(row, loss_mask=[0] * len(row), advantages=zeros, old_logprobs=zeros)


def _summed_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """verl's per-(rank, micro-batch) metric lists -> one value each: our pre-weighted `rllm/*` parts summed, the
    optimizer step's grad_norm as it is."""
    out = {}
    for key, value in metrics.items():
        flat = _flatten(value)
        if key.startswith("rllm/"):
            out[key.removeprefix("rllm/")] = sum(flat)
        elif key.startswith("mismatch_sums/"):  # raw sums over micro-batches and ranks; the largest |d| is a max
            out[key] = max(flat) if key.endswith("/abs_max") else sum(flat)
        elif key == "grad_norm" and flat:
            out[key] = flat[-1]
    return out


def _flatten(value: Any) -> list[float]:
    if isinstance(value, list | tuple):
        return [x for item in value for x in _flatten(item)]
    return [float(value)]


def _import_roots() -> list[str]:
    """Folders holding the `rllm` package and its dependencies, for the Ray workers' PYTHONPATH (an editable install
    is found through the venv anyway; a plain checkout on PYTHONPATH would not be)."""
    import rllm

    return [str(Path(rllm.__file__).resolve().parent.parent)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
