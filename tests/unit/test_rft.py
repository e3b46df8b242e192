"""`rllm rft` (`rllm.rft.run_rft`): attempts at the training tasks, the successes of tasks with
0 < pass rate < 1 kept, SFT on exactly their tokens, validation before/after. The attempts come from a scripted
model speaking the real tokenizer's ids (so which tasks are mixed is known); SFT and validation run the real loop on
a tiny model folder."""

from __future__ import annotations

import json
from collections import Counter

from rllm.config import load_config
from rllm.models.fake import FakeModel
from rllm.rft import run_rft
from rllm.runs import read_episodes
from rllm.tasks import get_task


def test_rft_keeps_only_the_successes_of_mixed_tasks(tmp_path, tiny_model_dir, smollm2_tokenizer, monkeypatch):
    tasks = get_task("arithmetic").make_tasks(3, seed=0)
    answers = {t["question"]: t["answer"] for t in tasks}
    seen: Counter[str] = Counter()

    def reply(prompt, sampling):  # task 0: always right, task 1: right on its first attempt only, task 2: never
        text = smollm2_tokenizer.decode(prompt)
        question = next(q for q in answers if q in text)
        index = list(answers).index(question)
        seen[question] += 1
        right = index == 0 or (index == 1 and seen[question] == 1)
        return str(answers[question] if right else answers[question] + 1)

    models = []

    def scripted(config, run_dir):
        models.append(FakeModel(reply, tokenizer=smollm2_tokenizer))
        return models[-1]

    monkeypatch.setattr("rllm.evaluation.make_eval_model", scripted)
    config = load_config(
        None,
        [
            f"model.name={tiny_model_dir}",
            "data.task=arithmetic",
            "data.train_size=5",
            "rft.tasks=3",
            "rft.temperature=0.7",
            "data.val_size=2",
            "rft.attempts=3",
            "sft.batch_size=2",
            "sft.epochs=2",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=rft",
            "trainer.tensorboard=false",
            "rollout.max_tokens=4",
        ],
    )
    result = run_rft(config, progress=False)
    attempts = read_episodes(tmp_path / "rft" / "attempts")
    assert len(attempts) == 9 and sum(e.is_correct for e in attempts) == 4  # 3 + 1 + 0: the first 3 of 5 tasks
    assert {call.sampling.temperature for call in models[0].calls} == {0.7}
    assert result["attempts"]["success_rate"] == 4 / 9
    assert result["data"]["tasks"] == 1 and result["data"]["rows"] == 1  # the one success of the mixed task
    assert result["steps"] == 1 and result["val_before"]["episodes"] == 2 and result["val_after"]["step"] == 1
    sft_data = json.loads((tmp_path / "rft" / "sft" / "sft_data.json").read_text())
    assert sft_data["after_correct_only"] == 4 and sft_data["after_task_pass_rate"] == 1
    assert json.loads((tmp_path / "rft" / "result.json").read_text())["rft_run_dir"] == str(tmp_path / "rft")
