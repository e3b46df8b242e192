"""`rllm eval TASK [--workflow NAME]`: evaluate a built-in task's agent/env (or a workflow) on N generated tasks against the embedded model or any
OpenAI-compatible endpoint; prints success rate, mean reward, mean turns and tokens/s, and writes
`episodes.jsonl` + `summary.json` into a run directory."""

from __future__ import annotations

import argparse
import asyncio
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate an agent on a built-in task")
    p.add_argument("task", help="built-in task name, e.g. frozenlake")
    p.add_argument("--workflow", default=None,
                   help="what plays the task: agent_env, single_turn, solver_judge or package.module:Class "
                        "(default: the task's own)")  # fmt: skip
    p.add_argument("--n", type=int, default=16, help="number of tasks (default 16)")
    p.add_argument("--rollouts", type=int, default=1, help="rollouts per task (default 1)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the task generator and of sampling")
    p.add_argument(
        "--model",
        default=None,
        help="embedded model name or local folder (default: the embedded default); "
        "with --base-url, the served model's name",
    )
    p.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="with --base-url: tokenizer name/folder for token-in/token-out (exact ids and logprobs)",
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--max-tokens", type=int, default=64, help="most new tokens per model call")
    p.add_argument("--max-steps", type=int, default=8, help="most agent turns per episode")
    p.add_argument("--n-parallel", type=int, default=16, help="concurrent rollouts")
    p.add_argument("--out", default="runs", help="parent folder of the run directory")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rllm.engine.workflow_engine import AgentWorkflowEngine
    from rllm.evaluation import evaluate
    from rllm.models.base import SamplingParams
    from rllm.runs import create_run_dir
    from rllm.tasks import get_task
    from rllm.workflows.resolve import resolve_workflow

    spec = get_task(args.task)
    tasks = spec.make_tasks(args.n, seed=args.seed)
    workflow_class, workflow_args = resolve_workflow(spec, workflow=args.workflow, max_steps=args.max_steps)
    model = _make_model(args)
    out_dir = create_run_dir(args.out, None, "eval", args.task)
    with tqdm(total=len(tasks) * args.rollouts, desc=f"eval {args.task}", unit="ep") as bar:
        engine = AgentWorkflowEngine(
            workflow_class=workflow_class,
            workflow_args=workflow_args,
            model=model,
            sampling=SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed),
            n_parallel_tasks=args.n_parallel,
            on_episode_done=lambda _: bar.update(),
        )
        summary = await evaluate(engine, tasks, out_dir, n_rollouts=args.rollouts)
    await _close(model)
    _print_summary(summary, out_dir)
    return 0


def _make_model(args: argparse.Namespace):
    if args.base_url:
        from rllm.models.openai import OpenAIClient

        if not args.model:
            raise SystemExit("--base-url needs --model (the served model's name)")
        return OpenAIClient(args.base_url, args.model, tokenizer=args.tokenizer)
    from rllm.models.local import LocalModel

    return LocalModel.from_pretrained(args.model or "default", seed=args.seed)


async def _close(model) -> None:
    closer = getattr(model, "aclose", None) or getattr(model, "close", None)
    if closer is not None:
        result = closer()
        if asyncio.iscoroutine(result):
            await result


def _print_summary(summary: dict, out_dir) -> None:
    print(f"success rate   {summary['success_rate']:.3f}  ({summary['episodes']} episodes)")
    print(f"mean reward    {summary['reward_mean']:.3f}")
    print(f"mean turns     {summary['turns_mean']:.2f}")
    print(
        f"tokens/s       {summary['tokens_per_s']:.1f}  ({summary['completion_tokens']} tokens "
        f"in {summary['wall_time_s']:.1f} s)"
    )
    endings = {k.removeprefix("termination/"): round(v, 3) for k, v in summary.items() if k.startswith("termination/")}
    print(f"terminations   {json.dumps(endings)}")
    print(f"token mismatch {summary['token_mismatch']}")
    roles = sorted({key.split("/")[1] for key in summary if key.startswith("role/")})
    if len(roles) > 1:
        for role in roles:
            print(f"role {role:9} success {summary[f'role/{role}/success_rate']:.3f}  "
                  f"mean reward {summary[f'role/{role}/reward_mean']:.3f}  "
                  f"({summary[f'role/{role}/count']} trajectories)")  # fmt: skip
    print(f"run directory  {out_dir}")
