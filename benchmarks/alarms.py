"""The alarms (`rllm.health`) on real runs constructed to show a pathology, and on a clean one: which alarms each
raises, and at which step.

    .venv/bin/python benchmarks/alarms.py                 # about 6 minutes on 2 cores
    .venv/bin/python benchmarks/alarms.py --runs brevity  # one of them

Not in `make bench` (it validates rules, it times nothing). The runs train SmolLM2-135M (LoRA, learning rate 1e-3,
6 GRPO steps of 4 arithmetic questions x 4 samples, up to 48 tokens a reply); what each shows comes from its reward
or its sampling, and the model really learns it:
- `brevity`: the reward pays for short replies (1 - tokens/48) and nothing checks the answer: the replies shrink
  (`length_drift`) and the reward climbs while no answer is right (`reward_without_success`);
- `length`: the reward pays for long replies (tokens/48): they run into `max_tokens` (`truncation`);
- `repeat`: the prompt asks to repeat a phrase without stopping, at temperature 0.3, and the reward pays for length:
  the replies loop (`repetitive_replies`);
- `clean`: the demo's own config (`configs/arithmetic_grpo.yaml`: Qwen2.5-Coder-0.5B learning arithmetic, shortened
  to 6 steps) raises none.
The tiny-model runs of `tests/smoke/test_alarms.py` cover the rules whose pathology needs no learning (temperature
driven to 0, a huge step, a sampler at another temperature, a history edit), and the SWE agent tests cover edits of
protected tests.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rllm import Step, Trajectory, Workflow
from rllm.audit import audit_run
from rllm.config import load_config
from rllm.training.trainer import AgentTrainer
from smoke import add_smoke_flag, device_line, tiny_model_folder

MAX_TOKENS = 48


class _Scored(Workflow):
    """One reply to the task's question (or to `prompt`), scored by `score(reply tokens)`; never correct, since
    nothing here checks the answer: the success rate stays 0 whatever the reward does."""

    prompt: str | None = None

    def score(self, tokens: int) -> float:
        raise NotImplementedError

    async def run(self, task, uid):
        messages = [{"role": "user", "content": self.prompt or task["question"]}]
        output = await self.generate(messages)
        reward = self.score(len(output.completion_ids or []))
        step = Step(chat_completions=messages, model_output=output, reward=reward)
        self.commit(Trajectory(steps=[step], is_correct=False))


class PaysForBrevity(_Scored):
    def score(self, tokens: int) -> float:
        return 1 - tokens / MAX_TOKENS


class PaysForLength(_Scored):
    def score(self, tokens: int) -> float:
        return tokens / MAX_TOKENS


class AsksForRepetition(_Scored):
    prompt = "Repeat after me, without stopping: la la la la la la la la"

    def score(self, tokens: int) -> float:
        return tokens / MAX_TOKENS


SMOL = ["model.name=smollm2-135m-instruct", "optim.lr=1e-3", "optim.micro_batch_size=16"]
# name -> (workflow, overrides, the alarms it must raise)
RUNS = {
    "brevity": (PaysForBrevity, SMOL, {"length_drift", "reward_without_success"}),
    "length": (PaysForLength, SMOL, {"truncation"}),
    "repeat": (AsksForRepetition, [*SMOL, "rollout.temperature=0.3"], {"repetitive_replies"}),
    "clean": (None, ["data.task_args.digits=[2,1]"], set()),
}
COMMON = [
    "rollout.n=4",
    "trainer.tasks_per_step=4",
    f"rollout.max_tokens={MAX_TOKENS}",
    "data.val_size=0",
    "trainer.tensorboard=false",
    "trainer.save_every=0",
    "trainer.total_steps=6",
]


def run(name: str, root: Path, smoke: bool) -> tuple[dict[str, int], float]:
    """Train run `name`; {alarm: first step} from `rllm audit`'s replay of its logs, and its seconds."""
    workflow, overrides, _ = RUNS[name]
    sizes = [f"model.name={tiny_model_folder()}", "trainer.total_steps=2", "rollout.max_tokens=4"] if smoke else []
    config = load_config(
        "configs/arithmetic_grpo.yaml",
        [*COMMON, *overrides, *sizes, f"trainer.run_dir={root}", f"trainer.name={name}"],
    )
    started = time.perf_counter()
    trainer = AgentTrainer(config=config, workflow_class=workflow, progress=False)
    trainer.train()
    raised = {span.name: span.steps[0] for span in audit_run(root / name).alarms}
    return raised, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=list(RUNS))
    add_smoke_flag(parser)
    args = parser.parse_args()
    print(device_line(), flush=True)
    print(f"{'run':<10}{'expected':<44}{'raised (first step)':<56}{'seconds':>8}")
    met = 0
    with tempfile.TemporaryDirectory() as root:
        for name in args.runs:
            raised, seconds = run(name, Path(root), args.smoke)
            expected = RUNS[name][2]
            ok = expected <= set(raised) and (expected or not raised)
            met += bool(ok)
            shown = ", ".join(f"{alarm} ({step})" for alarm, step in sorted(raised.items())) or "none"
            print(f"{name:<10}{', '.join(sorted(expected)) or 'none':<44}{shown:<56}{seconds:>8.0f}", flush=True)
    print(f"runs raising what they should: {met}/{len(args.runs)}")


if __name__ == "__main__":
    main()
