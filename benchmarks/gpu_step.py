"""A GPU-sized GRPO step of `rllm train`, and the largest Qwen2.5 shape that trains with LoRA on one 80 GB GPU.

    python benchmarks/gpu_step.py                        # on a GPU: fp32 then bf16 rollouts, 3 steps each
    python benchmarks/gpu_step.py --sizes                # Qwen2.5 0.5B, 1.5B, 3B, 7B, 14B: one LoRA step each
    python benchmarks/gpu_step.py --device cpu --small   # a 2-layer shape on a CPU (~1-2 min): checks the script
    python benchmarks/gpu_step.py --budget-s 300 --out step.json   # never runs past 300 s; the figures as JSON

The step (default mode): random-init weights of a Qwen2.5 shape, built from a shipped config and tokenizer
(`--model-config`, default the embedded qwen2.5-coder-0.5b-instruct's folder; its weights are not used, so only its
config and tokenizer files need to be on the machine) and saved to a temp folder, then `rllm train
configs/arithmetic_grpo.yaml model.device=cuda rollout.max_tokens=256 rollout.n=8 trainer.tasks_per_step=16
rollout.n_parallel=128 optim.micro_batch_size=32` for `--steps` steps (the first is a warm-up), run twice through
the CLI in a subprocess: with fp32 rollouts (the default: the LocalModel shares the training weights, the push is a
version bump) and with `rollout.dtype=bfloat16` (a bf16 copy that the push overwrites every step). Per step (the
first is the warm-up) it prints rollout, update and push seconds (`time_rollout_s`, `time_update_s` of which
`time_push_s`), tokens/s (sampled tokens per rollout second, and per step second), the rollout/update ratio (issue
38's target: <= 1.5), the step's peak GPU memory (`gpu_peak_memory_gib`, the torch allocator's peak, reset every
step; step 1's includes loading) and the sampler-vs-trainer log-prob mismatch (`mismatch/*`), all read from the
run's metrics.jsonl; then a `summary` line per rollout dtype (means over the steps after the first). A random model
never stops early, so every sample runs to `max_tokens`: the worst case.

`--sizes`: Qwen2.5 shapes in increasing size, one small GRPO step each with LoRA (the config's r=16, fp32 master
weights as the torch backend always keeps them), each in its own subprocess, so running out of memory ends only that
size; the weights are built at random directly on the GPU (a 14B checkpoint would not fit the disk). On a GPU with
more than `--cap-gib` (79 GiB: an 80 GB H100 shows 79.6 GiB, the CUDA context takes ~0.5 GiB) the allocator is capped
there (`torch.cuda.set_per_process_memory_fraction`), so an H200 answers the 80 GB question. After the first size
that runs out of memory the larger ones are not tried. Prints each size's peak memory and a `largest` line.

`--budget-s`: the wall-clock limit of the whole run. What would not fit is skipped and said so; a run that reaches
its share is stopped, and the steps it finished are still reported (the trainer logs each step as it ends). In the
step mode the fp32 run may use 60% of what is left after the build, the bf16 run the rest.

On a GPU machine with no rllm install (torch, transformers and peft there; pydantic and its needs, gymnasium carried
as wheels): `RLLM_HOME=DIR` where DIR/models/qwen2.5-coder-0.5b-instruct/ holds the embedded model's config.json,
generation_config.json, tokenizer.json, tokenizer_config.json and chat_template.jinja (no weights), then
`python3 benchmarks/write_results.py --only gpu-step gpu-sizes --out $OUT/RESULTS.md` (both, within ~7 minutes),
and `write_results.py --merge RESULTS.json` back here.

On a CPU `--small` swaps in a tiny shape (2 layers, hidden 128, the real vocabulary and tokenizer), 3 steps of 4
tasks x 4 samples x 16 tokens; `--sizes --small` runs that shape alone. Figures from a CPU say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import add_smoke_flag

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # this checkout's rllm, installed or not (a GPU machine has no install)

CONFIG = REPO / "configs" / "arithmetic_grpo.yaml"
EMBEDDED = "qwen2.5-coder-0.5b-instruct"
COMMON = ["data.val_size=0", "trainer.tensorboard=false"]
GPU_STEP = [
    "rollout.max_tokens=256",
    "rollout.n=8",
    "trainer.tasks_per_step=16",
    "rollout.n_parallel=128",
    "optim.micro_batch_size=32",
]
SMALL_STEP = [
    "rollout.max_tokens=16",
    "rollout.n=4",
    "trainer.tasks_per_step=4",
    "rollout.n_parallel=16",
    "optim.micro_batch_size=8",
]
SIZES_STEP = [
    "rollout.max_tokens=64",
    "rollout.n=4",
    "trainer.tasks_per_step=4",
    "rollout.n_parallel=16",
    "optim.micro_batch_size=16",
    "trainer.total_steps=1",
    "rollout.retry_limit=0",
]
ROLLOUT_DTYPES = {"fp32": [], "bf16": ["rollout.dtype=bfloat16"]}
# (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size, tie_word_embeddings)
# from the config.json of each Qwen/Qwen2.5-<size> model on the Hugging Face Hub. vocab_size 151936 for all (the
# tokenizer's; the published 7B and 14B pad it to 152064: 0.9M and 1.3M parameters fewer here).
QWEN25 = {
    "0.5B": (896, 24, 14, 2, 4864, True),
    "1.5B": (1536, 28, 12, 2, 8960, True),
    "3B": (2048, 36, 16, 2, 11008, True),
    "7B": (3584, 28, 28, 4, 18944, False),
    "14B": (5120, 48, 40, 8, 13824, False),
}
SMALL_SHAPE = (128, 2, 4, 2, 256, False)
KEYS = (
    "time_rollout_s",
    "time_update_s",
    "time_push_s",
    "tokens_per_s",
    "completion_tokens",
    "gpu_peak_memory_gib",
    "skipped_update",
)


def main() -> int:
    args = parse_args()
    if args.worker_size:
        return worker(args)
    deadline = time.monotonic() + args.budget_s
    report: dict = {"device": device_info(args.device), "mode": "sizes" if args.sizes else "step"}
    print(f"device: {report['device']['line']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-step-") as tmp:
        if args.sizes:
            report.update(sizes(args, Path(tmp), deadline))
        else:
            report.update(step(args, Path(tmp), deadline))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.out}")
    # a crash is a failure; running out of memory (--sizes) or out of budget is a figure
    crashed = [
        n
        for n, r in {**report.get("runs", {}), **report.get("sizes", {})}.items()
        if "error" in r and r.get("outcome") != "out of memory"
    ]
    return 1 if crashed else 0


def parse_args() -> argparse.Namespace:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--small", action="store_true", help="a tiny shape and step, to check the script on a CPU")
    parser.add_argument("--sizes", action="store_true", help="the largest Qwen2.5 shape that trains with LoRA")
    parser.add_argument(
        "--model-config",
        default=None,
        help=f"a folder with config.json and tokenizer files (default: the embedded {EMBEDDED})",
    )
    parser.add_argument("--steps", type=int, default=3, help="steps per run in the step mode (the first: warm-up)")
    parser.add_argument("--rollout-dtypes", nargs="+", choices=list(ROLLOUT_DTYPES), default=list(ROLLOUT_DTYPES))
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock limit of the whole run")
    parser.add_argument("--cap-gib", type=float, default=79.0, help="--sizes: GPU memory the allocator may use")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides, every run")
    parser.add_argument("--out", default=None, help="also write the figures here as JSON")
    parser.add_argument("--worker-size", default=None, help=argparse.SUPPRESS)  # one --sizes shape, in-process
    parser.add_argument("--worker-dir", default=None, help=argparse.SUPPRESS)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.smoke:  # the --small step on the CPU, whatever the machine has
        args.small, args.device, args.steps, args.rollout_dtypes = True, "cpu", 2, ["fp32"]
        args.set = ["rollout.n=2", "trainer.tasks_per_step=2", "rollout.max_tokens=4", *args.set]
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this torch ({torch.__version__}) sees no GPU; use --device cpu --small")
    if args.sizes and not args.device.startswith("cuda") and not args.small:
        parser.error("--sizes measures GPU memory: on a CPU add --small (the tiny shape alone, to check the script)")
    args.model_config = Path(args.model_config) if args.model_config else embedded_folder()
    if not (args.model_config / "config.json").exists():
        parser.error(
            f"no config.json in {args.model_config}: pass --model-config FOLDER (config and tokenizer files "
            f"of a Qwen2.5 model), or point $RLLM_HOME at a folder holding models/{EMBEDDED}/"
        )
    return args


def embedded_folder() -> Path:
    from rllm.models.registry import model_cache_dir

    return model_cache_dir(EMBEDDED)


def device_info(device: str) -> dict:
    """Names the device in a subprocess: CUDA initialised here would hold memory beside every run."""
    code = (
        "import json, torch, transformers, peft\n"
        "info = {'torch': torch.__version__, 'transformers': transformers.__version__, 'peft': peft.__version__}\n"
        f"if {device.startswith('cuda')!r}:\n"
        "    p = torch.cuda.get_device_properties(0)\n"
        "    info.update(name=torch.cuda.get_device_name(0), memory_gib=p.total_memory / 2**30,\n"
        "                cuda=torch.version.cuda)\n"
        "else:\n"
        "    info.update(threads=torch.get_num_threads())\n"
        "print(json.dumps(info))\n"
    )
    info = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=child_env()).stdout
    )
    versions = f"torch {info['torch']}, transformers {info['transformers']}, peft {info['peft']}"
    if "name" in info:
        info["line"] = f"{info['name']} ({info['memory_gib']:.1f} GiB, CUDA {info['cuda']}); {versions}"
    else:
        from rllm.cpus import cpu_model

        info["name"] = cpu_model()
        info["line"] = f"CPU {info['name']} ({info['threads']} torch threads); {versions}"
    return info


def child_env() -> dict[str, str]:
    paths = [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


# ---- the step -----------------------------------------------------------------------------------------------


def step(args: argparse.Namespace, tmp: Path, deadline: float) -> dict:
    started = time.perf_counter()
    model_dir = tmp / "model"
    params = build_model_folder(args.model_config, model_dir, SMALL_SHAPE if args.small else None)
    shape = "--small's" if args.small else "the"
    print(
        f"model: {params / 1e6:.1f} M parameters, random init, {shape} shape of {args.model_config}, built in "
        f"{time.perf_counter() - started:.0f} s"
    )
    workload = SMALL_STEP if args.small else GPU_STEP
    overrides = [
        f"model.name={model_dir}",
        f"model.device={args.device}",
        f"trainer.total_steps={args.steps}",
        f"trainer.run_dir={tmp / 'runs'}",
        *COMMON,
        *workload,
        *args.set,
    ]
    print(f"rllm train {CONFIG.relative_to(REPO)} {' '.join(overrides)}", flush=True)
    runs: dict[str, dict] = {}
    for i, name in enumerate(args.rollout_dtypes):
        left = deadline - time.monotonic()
        share = left * 0.6 if i + 1 < len(args.rollout_dtypes) else left
        if share < 20:
            why = f"its share of the budget, {share:.0f} s of the {left:.0f} s left, is under 20 s"
            print(f"{name} rollouts: skipped, {why}", flush=True)
            runs[name] = {"skipped": why}
            continue
        cmd = ["train", str(CONFIG), *overrides, *ROLLOUT_DTYPES[name], f"trainer.name={name}", "--no-progress"]
        runs[name] = train_run(name, cmd, tmp / "runs" / name, timeout=share, steps=args.steps)
    return {"params": params, "overrides": overrides, "runs": runs}


def build_model_folder(config_dir: Path, out: Path, shape: tuple | None) -> int:
    """Random-init weights of `config_dir`'s shape (or `shape`) saved with its tokenizer files; returns the
    parameter count. Built on the CPU: CUDA in this process would hold memory beside the runs."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    config = qwen_config(config_dir, shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    copy_tokenizer(config_dir, out)
    return sum(p.numel() for p in model.parameters())


def qwen_config(config_dir: Path, shape: tuple | None):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(config_dir)
    if shape is not None:
        hidden, layers, heads, kv_heads, intermediate, tied = shape
        config.hidden_size, config.num_hidden_layers, config.intermediate_size = hidden, layers, intermediate
        config.num_attention_heads, config.num_key_value_heads = heads, kv_heads
        config.tie_word_embeddings, config.vocab_size = tied, 151936
        config.head_dim = hidden // heads
        if getattr(config, "layer_types", None):
            config.layer_types = ["full_attention"] * layers
        config.max_window_layers = layers
    return config


def copy_tokenizer(config_dir: Path, out: Path) -> None:
    skip = {"config.json", "manifest.json"}
    for path in config_dir.iterdir():
        if path.is_file() and path.name not in skip and path.suffix not in (".safetensors", ".bin", ".gguf", ".pt"):
            shutil.copy(path, out / path.name)


def train_run(name: str, cmd: list[str], run_dir: Path, *, timeout: float, steps: int) -> dict:
    started = time.perf_counter()
    code, tail = run_child([sys.executable, "-m", "rllm.cli.main", *cmd], timeout)
    wall = time.perf_counter() - started
    found = read_steps(run_dir)
    result: dict = {"wall_s": wall, "exit": code, "steps": found}
    if code == "timeout":
        print(f"{name} rollouts: stopped by the budget after {wall:.0f} s, {len(found)} of {steps} steps done")
    elif code != 0:
        print(f"{name} rollouts: exit {code} after {wall:.0f} s, {len(found)} of {steps} steps done\n{tail}")
        result["error"] = tail
    for metrics in found:
        print(f"{name} rollouts, {step_line(metrics)}")
    failed = first_episode_error(run_dir)
    if failed:
        print(f"{name} rollouts: WARNING, episodes failed, the first with: {failed}")
        result["episode_error"] = failed
    measured = found[1:] or found
    if measured:
        result["summary"] = summarize(measured)
        which = "the warm-up step only" if len(found) == 1 else f"means of steps 2-{len(found)}"
        print(f"summary {name} rollouts ({which}): {summary_line(result['summary'])}")
    print(f"{name} rollouts: wall {wall:.0f} s", flush=True)
    return result


def summary_line(s: dict) -> str:
    nan = float("nan")
    return (
        f"rollout {s['time_rollout_s']:.2f} s, update {s['time_update_s']:.2f} s (push {s['time_push_s']:.3f} "
        f"s), rollout/update {s['ratio']:.2f} (target <= 1.5), {s['tokens_per_s']:.0f} tok/s rolling out, "
        f"{s['step_tokens_per_s']:.0f} tok/s a step, peak {memory(s.get('gpu_peak_memory_gib'))}, "
        f"mismatch |diff| mean {s.get('mismatch/abs_diff_mean', nan):.2e} max "
        f"{s.get('mismatch/abs_diff_max', nan):.2e}"
    )


def run_child(cmd: list[str], timeout: float) -> tuple[int | str, str]:
    """Exit code (or "timeout") and the last lines of stderr."""
    try:
        done = subprocess.run(
            cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return "timeout", "\n".join(err.splitlines()[-15:])
    return done.returncode, "\n".join(done.stderr.splitlines()[-15:])


def read_steps(run_dir: Path) -> list[dict]:
    from rllm.runs import load_metrics

    if not (run_dir / "metrics.jsonl").exists():
        return []
    return [m for m in load_metrics(run_dir) if "time_rollout_s" in m]


def first_episode_error(run_dir: Path) -> str | None:
    """The error of the first episode that ended in an error (a rollout that ran out of memory is one)."""
    path = run_dir / "episodes.jsonl"
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            episode = json.loads(line)["episode"]
        except (ValueError, KeyError):
            continue  # a torn last line
        if episode.get("termination_reason") in ("infra_error", "error"):
            return str(episode.get("info", {}).get("error"))[-500:]
    return None


def step_line(m: dict) -> str:
    mismatch = ", ".join(
        f"{k.split('/', 1)[1]} {v:.2e}" for k, v in m.items() if k.startswith("mismatch/") and k != "mismatch/tokens"
    )
    return (
        f"step {m['step']}: rollout {m['time_rollout_s']:.2f} s, update {m['time_update_s']:.2f} s (push "
        f"{m.get('time_push_s', float('nan')):.3f} s), rollout/update {ratio(m):.2f}, "
        f"{m['tokens_per_s']:.0f} tok/s rolling out, {step_tokens_per_s(m):.0f} tok/s a step, "
        f"{m['completion_tokens']} tokens, peak {memory(m.get('gpu_peak_memory_gib'))}, "
        f"mismatch: {mismatch or 'none measured'}"
    )


def summarize(steps: list[dict]) -> dict:
    keys = {k for m in steps for k in m if k in KEYS or k.startswith("mismatch/")}
    out = {k: statistics.mean(m[k] for m in steps if k in m) for k in sorted(keys)}
    out["ratio"] = out["time_rollout_s"] / out["time_update_s"] if out["time_update_s"] else float("nan")
    out["step_tokens_per_s"] = statistics.mean(step_tokens_per_s(m) for m in steps)
    if "gpu_peak_memory_gib" in out:
        out["gpu_peak_memory_gib"] = max(m.get("gpu_peak_memory_gib", 0.0) for m in steps)
    return out


def ratio(m: dict) -> float:
    return m["time_rollout_s"] / m["time_update_s"] if m["time_update_s"] else float("nan")


def step_tokens_per_s(m: dict) -> float:
    return m["completion_tokens"] / (m["time_rollout_s"] + m["time_update_s"])


def memory(gib: float | None) -> str:
    return "n/a (no GPU)" if gib is None else f"{gib:.1f} GiB"


# ---- --sizes ------------------------------------------------------------------------------------------------


def sizes(args: argparse.Namespace, tmp: Path, deadline: float) -> dict:
    shapes = {"tiny (--small)": SMALL_SHAPE} if args.small else QWEN25
    cap = f"; allocator cap {args.cap_gib:g} GiB where the GPU has more" if args.device.startswith("cuda") else ""
    print(f"sizes: one LoRA step each, {' '.join([*SIZES_STEP, *args.set])}{cap}", flush=True)
    results: dict[str, dict] = {}
    last_wall, failed = 0.0, None
    for name in shapes:
        left = deadline - time.monotonic()
        if failed is not None:
            results[name] = {"skipped": f"{failed} ran out of memory"}
        elif left < max(30.0, last_wall):
            results[name] = {"skipped": f"{left:.0f} s of the budget left, the last size took {last_wall:.0f} s"}
        else:
            started = time.perf_counter()
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker-size",
                name,
                "--device",
                args.device,
                "--model-config",
                str(args.model_config),
                "--worker-dir",
                str(tmp / name),
                "--cap-gib",
                str(args.cap_gib),
                *(["--small"] if args.small else []),
                "--set",
                *args.set,
            ]
            code, tail = run_child(cmd, left)
            last_wall = time.perf_counter() - started
            results[name] = size_result(code, tail, tmp / name, last_wall)
            if results[name]["outcome"] == "out of memory":
                failed = name
        print(f"size {name}: {size_line(results[name])}", flush=True)
    trained = [n for n, r in results.items() if r.get("outcome") == "trained"]
    largest = trained[-1] if trained else None
    tail = "; ".join(f"{n}: {r.get('outcome') or 'skipped'}" for n, r in results.items() if n not in trained)
    if largest:
        label = f"the Qwen2.5-{largest} shape" if largest in QWEN25 else largest
        peak = memory(results[largest].get("gpu_peak_memory_gib"))
        print(f"largest: {label} trains with LoRA (peak {peak}{cap}){'; ' + tail if tail else ''}")
    else:
        print(f"largest: none trained; {tail}")
    return {"sizes": results, "largest": largest, "cap_gib": args.cap_gib}


def size_result(code: int | str, tail: str, run_dir: Path, wall: float) -> dict:
    found = read_steps(run_dir / "run")
    info = json.loads((run_dir / "params.json").read_text()) if (run_dir / "params.json").exists() else {}
    result = {**info, "wall_s": wall, "exit": code}
    if found:
        result.update({k: v for k, v in found[0].items() if k in KEYS or k.startswith("mismatch/")})
    failed = first_episode_error(run_dir / "run")
    if failed:
        result["episode_error"] = failed
    if any("OutOfMemoryError" in text or "out of memory" in text for text in (tail, failed or "")):
        result["outcome"] = "out of memory"
    elif code == "timeout":
        result["outcome"] = "stopped by the budget"
    elif code != 0 or not found:
        result["outcome"], result["error"] = f"failed (exit {code})", tail
    else:
        result["outcome"] = "trained" if not found[0].get("skipped_update") else "rolled out, update skipped"
    return result


def size_line(r: dict) -> str:
    if "skipped" in r:
        return f"skipped: {r['skipped']}"
    params = f"{r['params'] / 1e9:.2f} B parameters, " if "params" in r else ""
    line = f"{params}{r['outcome']} in {r['wall_s']:.0f} s"
    if "time_rollout_s" in r:
        line += (
            f", peak {memory(r.get('gpu_peak_memory_gib'))}, rollout {r['time_rollout_s']:.1f} s, update "
            f"{r['time_update_s']:.1f} s"
        )
    return line + (f"\n{r['error']}" if "error" in r else "")


def worker(args: argparse.Namespace) -> int:
    """One `--sizes` shape: random weights built on the device, one step through `AgentTrainer` in this process."""
    import torch
    from transformers import AutoModelForCausalLM

    from rllm.config import load_config
    from rllm.models.registry import load_tokenizer
    from rllm.training.trainer import AgentTrainer

    out = Path(args.worker_dir)
    out.mkdir(parents=True)
    if args.device.startswith("cuda"):
        total = torch.cuda.get_device_properties(0).total_memory
        if total > args.cap_gib * 2**30:
            torch.cuda.set_per_process_memory_fraction(args.cap_gib * 2**30 / total)
    config = qwen_config(args.model_config, SMALL_SHAPE if args.small else QWEN25[args.worker_size])
    torch.manual_seed(0)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    (out / "params.json").write_text(json.dumps({"params": sum(p.numel() for p in model.parameters())}))
    overrides = [
        f"model.name={args.model_config}",
        f"model.device={args.device}",
        f"trainer.run_dir={out}",
        "trainer.name=run",
        *COMMON,
        *SIZES_STEP,
        *args.set,
    ]
    trainer = AgentTrainer(
        config=load_config(CONFIG, overrides), model=model, tokenizer=load_tokenizer(args.model_config), progress=False
    )
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
