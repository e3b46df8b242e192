"""On-policy distillation (`rllm.training.distill`, `distill.teacher` in `rllm train`): the per-token advantage is
the teacher's log-prob minus the student's sampling log-prob, the teacher must share the tokenizer, and training
on it brings the student's samples closer to the teacher (the reverse KL falls)."""

from __future__ import annotations

import json

import pytest
import torch

from rllm.config import ConfigError, DistillConfig, load_config
from rllm.runs import load_metrics
from rllm.training.batch import TrainingRow
from rllm.training.distill import Teacher, apply_distillation, check_same_tokenizer
from rllm.training.trainer import AgentTrainer
from tests.support.models import saved_model_dir, sharp_tiny_model


def _row(advantage: float) -> TrainingRow:
    return TrainingRow(
        input_ids=[5, 6, 7, 8, 9],
        prompt_length=2,
        loss_mask=[0, 0, 1, 0, 1],
        old_logprobs=[0.0, 0.0, -1.0, 0.0, -3.0],
        advantages=[0.0, 0.0, advantage, 0.0, advantage],
        group_key="t:agent",
        episode_id="t:0",
        trajectory_name="agent",
    )


def test_the_advantage_is_the_teachers_logprob_minus_the_students():
    rows = [_row(0.5)]
    teacher = [[0.0, 0.0, -0.5, -9.0, -4.0]]
    metrics = apply_distillation(rows, teacher, DistillConfig(teacher="t", coef=2.0))
    assert rows[0].advantages == [0.0, 0.0, 2.0 * 0.5, 0.0, 2.0 * -1.0]  # the task advantage (0.5) is dropped
    assert metrics["distill/reverse_kl"] == pytest.approx((-0.5 + 1.0) / 2)
    assert metrics["distill/teacher_logprob"] == pytest.approx(-4.5 / 2)
    rows = [_row(0.5)]
    apply_distillation(rows, teacher, DistillConfig(teacher="t", coef=1.0, reward_weight=1.0))
    assert rows[0].advantages == [0.0, 0.0, 0.5 + 0.5, 0.0, -1.0 + 0.5]


def test_a_teacher_with_another_tokenizer_is_refused(smollm2_tokenizer, qwen_tokenizer):
    check_same_tokenizer(smollm2_tokenizer, smollm2_tokenizer, "same")
    with pytest.raises(
        ConfigError,
        match=r"distill.teacher=qwen does not share the student's tokenizer .*one "
        r"tokenizer; pick a teacher of the student's model family",
    ):
        check_same_tokenizer(smollm2_tokenizer, qwen_tokenizer, "qwen")


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, smollm2_tokenizer):
    return saved_model_dir(
        tmp_path_factory.mktemp("teacher"), sharp_tiny_model(smollm2_tokenizer, seed=7), smollm2_tokenizer
    )


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory, smollm2_tokenizer):
    """The teacher with noise on every weight: close enough that its samples are ones the teacher also scores, far
    enough that they disagree (a reverse KL of a few nats a token)."""
    path = tmp_path_factory.mktemp("student")
    model = sharp_tiny_model(smollm2_tokenizer, seed=7)
    generator = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * param.std() * NOISE)
    return saved_model_dir(path, model, smollm2_tokenizer)


NOISE = 0.1


def test_the_teacher_scores_the_students_tokens_as_its_own_forward_does(teacher_dir, smollm2_tokenizer):
    teacher = Teacher(str(teacher_dir), student_tokenizer=smollm2_tokenizer, micro_batch_size=2)
    rows = [
        _row(0.0),
        TrainingRow(
            input_ids=[11, 12, 13],
            prompt_length=1,
            loss_mask=[0, 1, 1],
            old_logprobs=[0.0, -1.0, -1.0],
            advantages=[0.0] * 3,
            group_key="t:agent",
            episode_id="t:1",
            trajectory_name="agent",
        ),
    ]
    scores = teacher.score(rows)
    with torch.no_grad():
        for row, score in zip(rows, scores, strict=True):
            ids = torch.tensor([row.input_ids])
            logprobs = torch.log_softmax(teacher.model(ids).logits[0, :-1].float(), -1)
            expected = logprobs.gather(-1, ids[0, 1:, None])[:, 0]
            for t, trained in enumerate(row.loss_mask):
                if trained:
                    assert score[t] == pytest.approx(expected[t - 1].item(), rel=1e-5)


def test_an_update_moves_the_sampled_tokens_towards_the_teacher(teacher_dir, student_dir, smollm2_tokenizer):
    from rllm.models.registry import load_causal_lm
    from rllm.training.backends.torch import TorchBackend

    config = load_config(
        None,
        [f"model.name={student_dir}", "model.lora.enabled=false", "optim.lr=1e-4", "algorithm.advantage=reinforce"],
    )
    backend = TorchBackend(
        config.model,
        config.algorithm,
        config.optim,
        total_steps=1,
        model=load_causal_lm(student_dir),
        tokenizer=smollm2_tokenizer,
    )
    generator = torch.Generator().manual_seed(0)
    rows = [
        TrainingRow(
            input_ids=torch.randint(100, 5000, (12,), generator=generator).tolist(),
            prompt_length=4,
            loss_mask=[0] * 4 + [1] * 8,
            old_logprobs=[0.0] * 12,
            advantages=[0.0] * 12,
            group_key=f"t{i}:agent",
            episode_id=f"t{i}:0",
            trajectory_name="agent",
        )
        for i in range(6)
    ]
    for row, logprobs in zip(rows, backend.compute_logprobs(rows, temperature=1.0), strict=True):
        row.old_logprobs = logprobs  # as if the student had sampled them: on-policy
    teacher = Teacher(str(teacher_dir), student_tokenizer=smollm2_tokenizer)
    scores = teacher.score(rows)
    apply_distillation(rows, scores, DistillConfig(teacher=str(teacher_dir)))
    backend.update(rows, temperature=1.0)
    new_logprobs = backend.compute_logprobs(rows, temperature=1.0)
    trained = [
        (t, row, new[t], score)
        for row, new, score in zip(rows, new_logprobs, scores, strict=True)
        for t in range(len(row))
        if row.loss_mask[t]
    ]
    moved = [(new - row.old_logprobs[t]) * row.advantages[t] for t, row, new, _ in trained]
    assert sum(m > 0 for m in moved) >= 0.9 * len(moved)  # up where the teacher is likelier, down where less
    gap_before = sum(abs(score[t] - row.old_logprobs[t]) for t, row, _, score in trained)
    gap_after = sum(abs(score[t] - new) for t, _, new, score in trained)
    assert gap_after < gap_before


def test_rllm_train_distils_with_the_teacher_and_logs_it(teacher_dir, student_dir, tmp_path):
    config = load_config(
        None,
        [
            f"model.name={student_dir}",
            f"distill.teacher={teacher_dir}",
            "data.task=arithmetic",
            "data.val_size=0",
            "trainer.total_steps=2",
            "trainer.tasks_per_step=2",
            "rollout.n=2",
            "rollout.max_tokens=6",
            "trainer.tensorboard=false",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=distill",
        ],
    )
    AgentTrainer(config=config, progress=False).train()
    steps = [m for m in load_metrics(tmp_path / "distill") if "distill/reverse_kl" in m]
    assert len(steps) == 2 and all(m["distill/reverse_kl"] > 0 and m["loss_tokens"] > 0 for m in steps)
    # every training run writes its token-exactness report; the trainer's log-probs are the float32 sampler's
    report = json.loads((tmp_path / "distill" / "exactness.json").read_text())
    assert [s["logprob_tokens"] for s in report["steps"]] == [m["batch/loss_tokens"] for m in steps]
    assert report["totals"]["logprob_abs_diff_max"] < 1e-3 and report["problems"] == []
    assert report["totals"]["turns"] == 2 * 2 * 2 and report["totals"]["prefix_breaks"] == 0
    with pytest.raises(ConfigError, match="distill.teacher is set but trainer.backend=verl does not use it"):
        load_config(None, [f"distill.teacher={teacher_dir}", "trainer.backend=verl"])


def test_an_endpoint_teacher_reads_prompt_logprobs_and_retries_a_429(teacher_dir, smollm2_tokenizer):
    """Against a stand-in for vLLM's /v1/completions (prompt_logprobs computed by the local teacher; the first call
    answers 429). The real server is tested in tests/integration/test_vllm_server.py."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from rllm.training.distill import EndpointTeacher

    local = Teacher(str(teacher_dir), student_tokenizer=smollm2_tokenizer)
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append(body)
            if len(calls) == 1:
                self.send_response(429)
                self.end_headers()
                return
            ids = body["prompt"]
            row = TrainingRow(
                input_ids=ids,
                prompt_length=1,
                loss_mask=[0] + [1] * (len(ids) - 1),
                old_logprobs=[0.0] * len(ids),
                advantages=[0.0] * len(ids),
                group_key="t:a",
                episode_id="t:0",
                trajectory_name="a",
            )
            (scores,) = local.score([row])
            entries = [None] + [{str(t): {"logprob": s, "rank": 1}} for t, s in zip(ids[1:], scores[1:], strict=True)]
            payload = json.dumps({"choices": [{"text": "x", "prompt_logprobs": entries}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        endpoint = EndpointTeacher(f"http://127.0.0.1:{httpd.server_port}/v1", "teacher", concurrency=1)
        rows = [_row(0.0)]
        (served,) = endpoint.score(rows)
    finally:
        httpd.shutdown()
    (expected,) = local.score(rows)
    assert [served[t] for t in (2, 4)] == pytest.approx([expected[t] for t in (2, 4)], rel=1e-6)
    assert len(calls) == 2 and calls[1]["prompt_logprobs"] == 0 and calls[1]["prompt"] == rows[0].input_ids


def test_the_configured_teacher_local_in_bf16_or_served(teacher_dir, smollm2_tokenizer, qwen_tokenizer, monkeypatch):
    from rllm.training.distill import EndpointTeacher, make_teacher

    fp32 = make_teacher(
        DistillConfig(teacher=str(teacher_dir)), student_tokenizer=smollm2_tokenizer, micro_batch_size=2
    )
    bf16 = make_teacher(
        DistillConfig(teacher=str(teacher_dir), dtype="bfloat16"),
        student_tokenizer=smollm2_tokenizer,
        micro_batch_size=2,
    )
    assert bf16.autocast_dtype == torch.bfloat16
    (a,), (b,) = fp32.score([_row(0.0)]), bf16.score([_row(0.0)])
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 0.05 * max(abs(x) for x in a)
    monkeypatch.setenv("TEACHER_KEY", "secret")
    settings = load_config(
        None,
        [
            f"distill.teacher={teacher_dir}",
            "distill.endpoint.base_url=http://teacher:8000/v1",
            "distill.endpoint.api_key_env=TEACHER_KEY",
        ],
    ).distill
    served = make_teacher(settings, student_tokenizer=smollm2_tokenizer, micro_batch_size=2)
    assert isinstance(served, EndpointTeacher)
    assert (served.url, served.model, served.api_key) == (
        "http://teacher:8000/v1/completions",
        str(teacher_dir),
        "secret",
    )
    with pytest.raises(ConfigError, match="does not share the student's tokenizer"):
        make_teacher(settings, student_tokenizer=qwen_tokenizer, micro_batch_size=2)
