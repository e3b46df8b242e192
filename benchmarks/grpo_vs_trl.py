"""Wall time per GRPO step, rllm's `AgentTrainer` vs TRL's `GRPOTrainer`, on the same single-turn task, on this CPU.

    pip install -e ".[bench]"      # trl==1.16.0 and the torch extra
    .venv/bin/python benchmarks/grpo_vs_trl.py                                   # smollm2-135m-instruct, 3 steps
    .venv/bin/python benchmarks/grpo_vs_trl.py --model qwen2.5-coder-0.5b-instruct

One step = generate `--tasks` prompts x `--group` samples, score them, one optimizer step on the whole batch.
Each side runs in its own subprocess (so peak RSS is per side), both started by this script and driven in LOCKSTEP:
the parent lets exactly one child run one step at a time and alternates who goes first each step (ours, TRL / TRL,
ours / ...), so the load of other jobs on the machine is shared about evenly between the two sides. A child that
is not stepping is blocked on its stdin (no CPU). Step 1 of each side is warm-up and reported apart; the table
shows the mean of the `--steps` steps after it. Ratio = ours / TRL of the mean wall seconds per step.

Setting mapping (ours: `configs/arithmetic_grpo.yaml` + overrides -> TRL 1.16: `GRPOConfig` fields / arguments).
Each child also prints the settings it actually ran with (the "as run" lines under the table).
- model: model.name=M (registry: the fp32 transformers folder) -> the same folder through `registry.load_causal_lm`
  (fp32), passed as a model object, with `registry.load_tokenizer` as `processing_class`.
- precision: model.dtype=float32 -> bf16=False, fp16=False, use_cpu=True (TRL's default is bf16=True!).
- LoRA: r=16, alpha=32, dropout 0 on q/k/v/o/gate/up/down_proj -> `peft_config=peft.LoraConfig` with the same
  r, alpha, dropout and target_modules.
- gradient checkpointing: off -> gradient_checkpointing=False (TRL's default is True!).
- prompts: the arithmetic tasks (data.task=arithmetic, data.seed, digits 3 x 1), ArithmeticAgent's system prompt +
  the question through the chat template -> the SAME rows in the SAME order (our `TaskSampler` replayed in the TRL
  child, shuffle_dataset=False) as conversational prompts [system, user]; TRL renders them with the same chat
  template and add_generation_prompt (token-identical to ours, checked for both embedded models).
- prompts per step T: trainer.tasks_per_step=T -> generation_batch_size = T*G completions (= per_device_train_
  batch_size x steps_per_generation; TRL's sampler repeats each prompt G times).
- group size G: rollout.n=G -> num_generations=G.
- max new tokens N: rollout.max_tokens=N -> max_completion_length=N. Both stop at the tokenizer's EOS and the
  generation config's.
- sampling: temperature 1, top_p 1, top_k 0 -> the same. Ours samples with the continuous-batching `LocalModel`
  (one shared prefill per group); TRL with `model.generate` (one row per sample, left padding).
- reward: ArithmeticEnv (`parse_last_integer(reply) == answer`) -> a reward function doing exactly that.
- advantage: grpo with norm_by_std -> scale_rewards="group".
- KL: algorithm.kl_coef=0 (no reference) -> beta=0.0 (no reference model loaded).
- loss: token-mean, clip 0.2 / 0.28 -> loss_type="dapo" (token mean over the accumulated batch), epsilon=0.2,
  epsilon_high=0.28.
- updates: ppo_epochs=1, mini_batches=1 (ONE optimizer step per generation batch) -> num_iterations=1 and
  gradient_accumulation_steps = steps_per_generation = T*G/mb (ONE optimizer step per generation batch). Aligned
  this way TRL recomputes no "old" logprobs before the update; neither do we (we keep the sampling logprobs).
- micro-batch mb (`--micro-batch`, default 8): optim.micro_batch_size=mb -> per_device_train_batch_size=mb.
- optimizer: torch AdamW, lr (config: 1e-4) constant, no warm-up, betas/eps/weight decay, grad clip 1.0 ->
  optim="adamw_torch" (not the fused default), learning_rate, lr_scheduler_type="constant", warmup_steps=0,
  adam_beta1/2, adam_epsilon, weight_decay, max_grad_norm from the same config.
- no validation, no episode log (data.val_size=0, trainer.log_episodes=false; metrics.jsonl is still written) ->
  eval_strategy="no", save_strategy="no", report_to="none", log_completions=False, logging_steps=1.
- seed: trainer.seed -> seed, data_seed. Threads: torch's default (all cores) on both sides.

What each side's columns mean:
- ours: s/step = wall time from the start of `AgentTrainer._rollout` to the end of `_train_step` (rollout,
  grouping, row building, update, weight push, the metrics line); generation = `time_rollout_s`; update =
  `time_update_s` (from the same metrics).
- TRL: s/step = `on_step_begin` to `on_step_end` of the Trainer callback (one optimizer step: generation, the
  gradient-accumulation micro-steps, the optimizer step); generation = `_generate_and_score_completions`
  (tokenize, `generate`, decode, reward, advantages); update = s/step minus generation.

Fairness caveats: sampling is random on both sides, so completion lengths differ step to step (the table shows the
mean number of completion tokens per sample; a side that samples longer answers pays more). TRL also computes
the per-token entropy in its loss for logging, and pads every micro-batch to the longest completion of the whole
generation batch; we do neither. Those are implementation differences, and part of what is measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from smoke import add_smoke_flag, device_line, tiny_model_folder

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "arithmetic_grpo.yaml"
PROTOCOL_PREFIX = "@@bench "
SIDES = ("ours", "trl")
LABELS = {"ours": "ours (rllm)", "trl": "TRL GRPOTrainer"}
INSTALL_HINT = 'pip install -e ".[bench]"'


# ---- arguments ----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct", help="embedded model name or transformers folder")
    parser.add_argument("--group", type=int, default=4, help="samples per prompt (GRPO group)")
    parser.add_argument("--tasks", type=int, default=8, help="prompts per step")
    parser.add_argument("--max-tokens", type=int, default=12, help="max new tokens per sample")
    parser.add_argument("--steps", type=int, default=3, help="measured steps after the warm-up step")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=8,
        help="rows per forward/backward on both sides (ours optim.micro_batch_size, TRL "
        "per_device_train_batch_size); gradients accumulate to one optimizer step",
    )
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: the config's optim.lr)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    parser.add_argument("--verbose", action="store_true", help="show the children's logs (stderr) as they run")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke and args.child is None:  # the children get these through their own arguments
        args.model, args.group, args.tasks, args.max_tokens, args.steps, args.micro_batch = (
            tiny_model_folder(),
            2,
            2,
            4,
            1,
            4,
        )
    batch = args.group * args.tasks
    if args.group < 2:
        parser.error("--group must be >= 2 (GRPO needs a group)")
    args.micro_batch = min(args.micro_batch, batch)
    if batch % args.micro_batch:
        parser.error(
            f"--micro-batch {args.micro_batch} must divide group*tasks = {batch} "
            "(TRL accumulates whole micro-batches into one optimizer step)"
        )
    return args


def config_overrides(args: argparse.Namespace, run_dir: Path) -> list[str]:
    overrides = [
        f"model.name={args.model}",
        "model.dtype=float32",
        "model.lora.enabled=true",
        "model.gradient_checkpointing=false",
        f"rollout.n={args.group}",
        f"rollout.max_tokens={args.max_tokens}",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        "rollout.top_k=0",
        "rollout.max_steps=1",
        f"rollout.n_parallel={args.group * args.tasks}",
        "algorithm.advantage=grpo",
        "algorithm.kl_coef=0.0",
        "algorithm.entropy_coef=0.0",
        "algorithm.ppo_epochs=1",
        "algorithm.mini_batches=1",
        f"optim.micro_batch_size={args.micro_batch}",
        "optim.schedule=constant",
        "optim.warmup_steps=0",
        f"trainer.tasks_per_step={args.tasks}",
        f"trainer.total_steps={args.steps + 1}",
        f"trainer.seed={args.seed}",
        "trainer.val_every=0",
        "trainer.save_every=0",
        "trainer.log_episodes=false",
        "trainer.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        "trainer.name=ours",
        "data.val_size=0",
    ]
    if args.lr is not None:
        overrides.append(f"optim.lr={args.lr}")
    return overrides


# ---- the children ---------------------------------------------------------------------------------------------------


class Channel:
    """The child's side of the lockstep protocol: JSON lines out (on the real stdout), "go" lines in (stdin)."""

    def __init__(self) -> None:
        # Everything the libraries print goes to stderr; stdout carries only protocol lines.
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, **message: Any) -> None:
        self._out.write(PROTOCOL_PREFIX + json.dumps(message) + "\n")
        self._out.flush()

    def gate(self, step: int) -> None:
        """Say we are ready for `step`, then block until the parent says go."""
        self.send(event="ready", step=step)
        line = sys.stdin.readline()
        if line.strip() != "go":
            raise SystemExit(f"benchmark child: expected 'go' from the parent, got {line!r}")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_ours(args: argparse.Namespace, channel: Channel) -> None:
    import torch
    import transformers

    from rllm.config import load_config
    from rllm.training.trainer import AgentTrainer

    cfg = load_config(CONFIG, config_overrides(args, args.workdir / "ours"))

    class LockstepTrainer(AgentTrainer):
        async def _rollout(self, step: int) -> Any:
            channel.gate(step)  # the step's wall time starts with its rollouts
            self._step_started = time.perf_counter()
            return await super()._rollout(step)

        async def _train_step(self, step: int, rollouts: Any) -> dict[str, Any]:
            started = self._step_started
            metrics = await super()._train_step(step, rollouts)
            wall = time.perf_counter() - started
            channel.send(
                event="step",
                step=step,
                wall_s=wall,
                generation_s=metrics["time_rollout_s"],
                update_s=metrics["time_update_s"],
                completion_tokens=metrics["response_length_mean"],
                reward=metrics["reward_mean"],
                skipped_update=metrics.get("skipped_update", 0),
            )
            return metrics

    trainer = LockstepTrainer(config=cfg, progress=False)
    trainer.train()
    kernels = getattr(trainer.backend, "kernels", None)  # which linear shapes ran packed (rllm.inference.kernels)
    used = {
        "model.name": cfg.model.name,
        "model.dtype": cfg.model.dtype,
        "lora": cfg.model.lora.model_dump(),
        "gradient_checkpointing": cfg.model.gradient_checkpointing,
        "rollout.n": cfg.rollout.n,
        "tasks_per_step": cfg.trainer.tasks_per_step,
        "rollout.max_tokens": cfg.rollout.max_tokens,
        "temperature": cfg.rollout.temperature,
        "kl_coef": cfg.algorithm.kl_coef,
        "loss_agg": cfg.algorithm.loss_agg,
        "clip": [cfg.algorithm.clip_low, cfg.algorithm.clip_high],
        "ppo_epochs": cfg.algorithm.ppo_epochs,
        "mini_batches": cfg.algorithm.mini_batches,
        "micro_batch_size": cfg.optim.micro_batch_size,
        "lr": cfg.optim.lr,
        "schedule": cfg.optim.schedule,
        "grad_clip": cfg.optim.grad_clip,
    }
    channel.send(
        event="final",
        peak_rss_bytes=peak_rss_bytes(),
        threads=torch.get_num_threads(),
        settings=used,
        versions={"torch": torch.__version__, "transformers": transformers.__version__},
        kernels=kernels.describe() if kernels is not None else "torch's F.linear (packed linears off)",
    )


def run_trl(args: argparse.Namespace, channel: Channel) -> None:
    import peft
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rllm.config import load_config
    from rllm.models import registry
    from rllm.tasks import get_task
    from rllm.tasks.arithmetic import ArithmeticAgent, parse_last_integer
    from rllm.training.rollout_source import TaskSampler

    cfg = load_config(CONFIG, config_overrides(args, args.workdir / "ours-unused"))
    # The same task rows in the same order as our trainer takes them (its TaskSampler, same seeds).
    rows = get_task(cfg.data.task).make_tasks(cfg.data.train_size, seed=cfg.data.seed, **cfg.data.task_args)
    ordered = TaskSampler(rows, cfg.trainer.seed).take(cfg.trainer.tasks_per_step * cfg.trainer.total_steps)
    system = ArithmeticAgent.system_prompt
    dataset = Dataset.from_list(
        [
            {
                "prompt": [{"role": "system", "content": system}, {"role": "user", "content": row["question"]}],
                "answer": int(row["answer"]),
            }
            for row in ordered
        ]
    )

    def arithmetic_reward(completions: list, answer: list, **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(parse_last_integer(text) == int(a)) for text, a in zip(texts, answer, strict=True)]

    tokenizer = registry.load_tokenizer(cfg.model.name)
    model = registry.load_causal_lm(cfg.model.name, dtype="float32")
    lora = cfg.model.lora
    peft_config = peft.LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    batch = args.group * args.tasks
    algo, optim = cfg.algorithm, cfg.optim
    grpo_args = GRPOConfig(
        output_dir=str(args.workdir / "trl"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=batch // args.micro_batch,  # steps_per_generation follows: one opt. step/batch
        num_generations=args.group,
        max_completion_length=args.max_tokens,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
        beta=0.0,
        num_iterations=1,
        epsilon=algo.clip_low,
        epsilon_high=algo.clip_high,
        loss_type="dapo",  # token mean over the accumulated batch = our token-mean
        scale_rewards="group" if algo.norm_by_std else "none",
        mask_truncated_completions=False,
        learning_rate=optim.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        adam_beta1=optim.betas[0],
        adam_beta2=optim.betas[1],
        adam_epsilon=optim.eps,
        weight_decay=optim.weight_decay,
        max_grad_norm=optim.grad_clip if optim.grad_clip is not None else 0.0,
        max_steps=args.steps + 1,
        shuffle_dataset=False,
        seed=args.seed,
        data_seed=args.seed,
        logging_steps=1,
        log_completions=False,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )

    timings: dict[str, Any] = {"generation_s": 0.0, "completion_tokens": [], "reward": []}

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            started = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            timings["generation_s"] += time.perf_counter() - started
            timings["completion_tokens"].extend(out["completion_mask"].sum(-1).tolist())
            return out

    class Lockstep(TrainerCallback):
        def on_step_begin(self, args_: Any, state: Any, control: Any, **_: Any) -> None:
            channel.gate(state.global_step + 1)
            timings.update(generation_s=0.0, completion_tokens=[], started=time.perf_counter())

        def on_step_end(self, args_: Any, state: Any, control: Any, **_: Any) -> None:
            wall = time.perf_counter() - timings["started"]
            tokens = timings["completion_tokens"]
            channel.send(
                event="step",
                step=state.global_step,
                wall_s=wall,
                generation_s=timings["generation_s"],
                update_s=wall - timings["generation_s"],
                completion_tokens=sum(tokens) / max(len(tokens), 1),
            )

    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=arithmetic_reward,
        args=grpo_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[Lockstep()],
    )
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    trainer.train()
    a = trainer.args
    used = {
        "dtype": str(trainer.model.dtype),
        "lora": {
            "r": peft_config.r,
            "alpha": peft_config.lora_alpha,
            "dropout": peft_config.lora_dropout,
            "target_modules": sorted(peft_config.target_modules),
        },
        "bf16": a.bf16,
        "gradient_checkpointing": a.gradient_checkpointing,
        "num_generations": a.num_generations,
        "generation_batch_size": a.generation_batch_size,
        "max_completion_length": a.max_completion_length,
        "temperature": a.temperature,
        "beta": a.beta,
        "loss_type": a.loss_type,
        "epsilon": [a.epsilon, a.epsilon_high],
        "num_iterations": a.num_iterations,
        "per_device_train_batch_size": a.per_device_train_batch_size,
        "gradient_accumulation_steps": a.gradient_accumulation_steps,
        "steps_per_generation": a.steps_per_generation,
        "learning_rate": a.learning_rate,
        "lr_scheduler_type": _plain(a.lr_scheduler_type),
        "optim": _plain(a.optim),
        "max_grad_norm": a.max_grad_norm,
    }
    channel.send(
        event="final",
        peak_rss_bytes=peak_rss_bytes(),
        threads=torch.get_num_threads(),
        trainable_params=trainable,
        settings=used,
        versions={
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "torch": torch.__version__,
        },
    )


# ---- the parent ---------------------------------------------------------------------------------------------------


class Child:
    def __init__(self, side: str, args: argparse.Namespace, argv: list[str], workdir: Path) -> None:
        self.side = side
        self.log_path = workdir / f"{side}.log"
        self._log = None if args.verbose else open(self.log_path, "w")
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--child", side, "--workdir", str(workdir)]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            cwd=REPO,
            env=env,
        )

    def receive(self) -> dict[str, Any]:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait()
                tail = ""
                if self._log is not None:
                    self._log.flush()
                    tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
                raise SystemExit(
                    f"the {self.side} child exited (code {self.proc.returncode}) before finishing; "
                    f"last lines of its log:\n{tail}"
                )
            if line.startswith(PROTOCOL_PREFIX):
                return json.loads(line[len(PROTOCOL_PREFIX) :])

    def expect(self, event: str) -> dict[str, Any]:
        message = self.receive()
        if message["event"] != event:
            raise SystemExit(f"{self.side} child: expected {event!r}, got {message}")
        return message

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._log is not None:
            self._log.close()


def child_argv(args: argparse.Namespace) -> list[str]:
    argv = [
        "--model",
        args.model,
        "--group",
        str(args.group),
        "--tasks",
        str(args.tasks),
        "--max-tokens",
        str(args.max_tokens),
        "--steps",
        str(args.steps),
        "--micro-batch",
        str(args.micro_batch),
        "--seed",
        str(args.seed),
    ]
    if args.lr is not None:
        argv += ["--lr", repr(args.lr)]
    return argv


def run_parent(args: argparse.Namespace) -> int:
    missing = [name for name in ("trl", "datasets", "peft", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"error: this benchmark needs {', '.join(missing)}, which is not installed. Install the benchmark "
            f"extra (it includes the torch extra): {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    from rllm.errors import ModelNotAvailableError
    from rllm.models.registry import resolve_model_path

    try:
        resolve_model_path(args.model)
    except ModelNotAvailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    total = args.steps + 1
    results: dict[str, dict[str, Any]] = {side: {"steps": []} for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="grpo-vs-trl-") as tmp:
        workdir = Path(tmp)
        print(
            f"benchmark: {args.model}, {args.tasks} prompts x {args.group} samples, <= {args.max_tokens} new tokens, "
            f"{total} steps each (1 warm-up + {args.steps}), lockstep; logs in {workdir}",
            flush=True,
        )
        started = time.perf_counter()
        children = {side: Child(side, args, child_argv(args), workdir) for side in SIDES}
        try:
            ready = {side: child.expect("ready") for side, child in children.items()}  # both loaded
            print(f"both sides loaded in {time.perf_counter() - started:.0f}s", flush=True)
            for step in range(1, total + 1):
                order = SIDES if step % 2 else SIDES[::-1]
                for side in order:
                    child = children[side]
                    if ready[side] is None:
                        ready[side] = child.expect("ready")
                    child.go()
                    message = child.expect("step")
                    results[side]["steps"].append(message)
                    m = message
                    print(
                        f"  step {step} {side:4}: {m['wall_s']:6.2f}s (generation {m['generation_s']:.2f}s, "
                        f"update {m['update_s']:.2f}s, {m['completion_tokens']:.1f} tokens/sample)",
                        flush=True,
                    )
                    # Wait until it is parked again (or done) so its after-step work never overlaps the other side.
                    nxt = child.receive()
                    ready[side] = nxt if nxt["event"] == "ready" else None
                    if nxt["event"] == "final":
                        results[side]["final"] = nxt
            for side, child in children.items():
                if "final" not in results[side]:
                    results[side]["final"] = child.expect("final")
                child.proc.wait(timeout=120)
        finally:
            for child in children.values():
                child.close()

    summary = summarize(results)
    print(device_line(f"ours {results['ours']['final'].get('kernels', 'not reported')}"))
    print(format_table(summary, args, results))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary, "raw": results}, indent=2
            )
        )
    return 0


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)  # enums as their plain value


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float("nan") if not ordered else ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    summary = {}
    for side, result in results.items():
        warm, measured = result["steps"][0], result["steps"][1:]
        summary[side] = {
            "warmup_s": warm["wall_s"],
            "step_s": _mean([s["wall_s"] for s in measured]),
            "median_step_s": _median([s["wall_s"] for s in measured]),
            "generation_s": _mean([s["generation_s"] for s in measured]),
            "update_s": _mean([s["update_s"] for s in measured]),
            "completion_tokens": _mean([s["completion_tokens"] for s in measured]),
            "peak_rss_gb": result["final"]["peak_rss_bytes"] / 1e9,
        }
    return summary


def format_table(
    summary: dict[str, dict[str, float]], args: argparse.Namespace, results: dict[str, dict[str, Any]]
) -> str:
    ours, theirs = summary["ours"], summary["trl"]
    header = (
        f"{'side':18}{'warm-up s':>10}{'s/step':>9}{'gen s':>8}{'update s':>10}{'tok/sample':>12}{'peak RSS GB':>13}"
    )
    lines = ["", header, "-" * len(header)]
    for side in SIDES:
        s = summary[side]
        lines.append(
            f"{LABELS[side]:18}{s['warmup_s']:>10.2f}{s['step_s']:>9.2f}{s['generation_s']:>8.2f}"
            f"{s['update_s']:>10.2f}{s['completion_tokens']:>12.1f}{s['peak_rss_gb']:>13.2f}"
        )
    per_step = [
        o["wall_s"] / t["wall_s"]
        for o, t in zip(results["ours"]["steps"][1:], results["trl"]["steps"][1:], strict=True)
    ]
    ratio = ours["step_s"] / theirs["step_s"]
    gen_ratio, update_ratio = ours["generation_s"] / theirs["generation_s"], ours["update_s"] / theirs["update_s"]
    split = f"generation {gen_ratio:.2f}, update {update_ratio:.2f}"
    steps = ", ".join(f"{r:.2f}" for r in per_step)
    median = ours["median_step_s"] / theirs["median_step_s"]
    batch = args.tasks * args.group
    settings = (
        f"model {args.model}, fp32, LoRA r=16 alpha=32 on q/k/v/o/gate/up/down, {args.tasks} prompts x "
        f"{args.group} samples = {batch} completions/step, <= {args.max_tokens} new tokens, temperature 1, "
        f"no KL, 1 epoch, 1 optimizer step per step (micro-batch {args.micro_batch} x "
        f"{batch // args.micro_batch} "
        f"accumulated), {args.steps} measured steps after 1 warm-up, lockstep"
    )
    threads = f"torch threads: ours {results['ours']['final']['threads']}, TRL {results['trl']['final']['threads']}"
    lines += [
        "",
        f"settings: {settings}; {threads}",
        f"ours as run: {json.dumps(results['ours']['final']['settings'])}",
        f"TRL as run:  {json.dumps(results['trl']['final']['settings'])}",
        f"versions: {json.dumps(results['trl']['final']['versions'])}",
        f"ratio ours/TRL = {ratio:.2f}   (mean s/step; {split}; median s/step {median:.2f}; per step pair: {steps})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from rllm import runtime

    runtime.enable()  # measured as the rllm commands run: every process-wide tuning on (rllm.runtime)
    args = parse_args(argv)
    if args.child is None:
        return run_parent(args)
    channel = Channel()
    if args.child == "ours":
        run_ours(args, channel)
    else:
        run_trl(args, channel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
