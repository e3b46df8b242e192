"""On-policy distillation: the student samples (the RL loop's rollouts), a teacher scores every sampled token, and the
per-token reverse KL becomes the advantage (GKD's on-policy setting; Thinking Machines' "on-policy distillation").

    rllm train configs/arithmetic_grpo.yaml distill.teacher=qwen2.5-coder-0.5b-instruct model.name=<small student>

For each trained token t of a row (a sampled token, in its exact multi-turn context):

    advantage_t = distill.coef * (log p_teacher(x_t | x_<t) - log p_student(x_t | x_<t))
                  + distill.reward_weight * (the algorithm's advantage from the task reward)

where log p_student is the sampling log-prob (`row.old_logprobs`). The policy-gradient loss then lowers the
student's probability where it puts more mass than the teacher and raises it where less: the gradient of the
reverse KL(student || teacher) estimated on the student's own samples (the k1 estimator, one sample a position),
which is mode-seeking and needs only the teacher's log-prob of the sampled token, not its whole distribution. With
`reward_weight` 0 (the default) the task reward is only logged. Metrics: `distill/reverse_kl` (mean over trained
tokens of log p_student - log p_teacher) and `distill/teacher_logprob`.

The teacher is a local model (an embedded name or a transformers folder), scored in `distill.dtype` with the
trainer's micro-batch size; or, with `distill.endpoint.base_url`, a served model that returns prompt log-probs
(vLLM's `/v1/completions` with `prompt_logprobs`: token ids in, the log-prob of every prompt token out; a request a
row, 8 at a time, each retried on a connection error, 429 or 5xx). It must share the student's tokenizer (it scores
the student's token ids): the same vocabulary (`distill.teacher` names the served model's tokenizer), else the run
stops before its first step saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rllm.config import ConfigError, DistillConfig
from rllm.errors import RllmError
from rllm.training.batch import TrainingRow

__all__ = ["EndpointTeacher", "Teacher", "apply_distillation", "check_same_tokenizer", "make_teacher"]


def check_same_tokenizer(student: Any, teacher: Any, teacher_name: str) -> None:
    """Raise `ConfigError` unless both tokenizers map every token string to the same id."""
    student_vocab, teacher_vocab = student.get_vocab(), teacher.get_vocab()
    if student_vocab != teacher_vocab:
        differ = sum(teacher_vocab.get(token) != index for token, index in student_vocab.items())
        raise ConfigError(
            f"distill.teacher={teacher_name} does not share the student's tokenizer (vocabularies of "
            f"{len(teacher_vocab)} and {len(student_vocab)} tokens, {differ} of the student's tokens with another id "
            "or missing): on-policy distillation scores the student's token ids with the teacher, so both must use "
            "one tokenizer; pick a teacher of the student's model family"
        )


class Teacher:
    """A local teacher model scoring rows (`score`: token-aligned log-probs like `row.old_logprobs`)."""

    def __init__(
        self,
        name: str,
        *,
        student_tokenizer: Any,
        dtype: str = "float32",
        micro_batch_size: int = 4,
        device: str = "cpu",
        model: Any = None,
    ) -> None:
        import torch

        from rllm.models import registry

        check_same_tokenizer(student_tokenizer, registry.load_tokenizer(name), name)
        # float32 weights; bfloat16 scores under autocast with the output layer in float32, as the trainer does
        self.model = model if model is not None else registry.load_causal_lm(name, dtype="float32", device=device)
        self.model.eval().requires_grad_(False)
        self.autocast_dtype = torch.bfloat16 if dtype == "bfloat16" else None
        pad = student_tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else student_tokenizer.eos_token_id
        self.micro_batch_size = micro_batch_size

    def score(self, rows: Sequence[TrainingRow]) -> list[list[float]]:
        from rllm.training.backends.torch import score_rows

        return score_rows(
            self.model,
            rows,
            pad_id=self.pad_id,
            micro_batch_size=self.micro_batch_size,
            autocast_dtype=self.autocast_dtype,
        )


class EndpointTeacher:
    """A served teacher scoring rows through vLLM's prompt log-probs (module docstring)."""

    RETRIES = 4

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, concurrency: int = 8, timeout: float = 120.0
    ) -> None:
        self.url = base_url.rstrip("/") + "/completions"
        self.model, self.api_key, self.concurrency, self.timeout = model, api_key, concurrency, timeout

    def score(self, rows: Sequence[TrainingRow]) -> list[list[float]]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(self._score_row, rows))

    def _score_row(self, row: TrainingRow) -> list[float]:
        """Token-aligned like `row.old_logprobs`: entry t is the teacher's log p(token t | tokens < t), 0.0 at t = 0."""
        body = {"model": self.model, "prompt": row.input_ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
        entries = self._post(body)["choices"][0].get("prompt_logprobs")
        if not isinstance(entries, list) or len(entries) != len(row.input_ids):
            raise RllmError(
                f"distill.endpoint {self.url} returned no prompt log-probs for a "
                f"{len(row.input_ids)}-token prompt: the teacher must be served by vLLM "
                "(prompt_logprobs)"
            )
        pairs = zip(row.input_ids[1:], entries[1:], strict=True)
        return [0.0] + [float(entry[str(token)]["logprob"]) for token, entry in pairs]

    def _post(self, body: dict) -> dict:
        import json
        import time
        import urllib.error
        import urllib.request

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, json.dumps(body).encode(), headers)
        for attempt in range(self.RETRIES):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                retryable = exc.code == 429 or exc.code >= 500
                if not retryable or attempt == self.RETRIES - 1:
                    raise RllmError(
                        f"distill.endpoint {self.url} answered {exc.code}: {exc.read()[:300].decode(errors='replace')}"
                    ) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                if attempt == self.RETRIES - 1:
                    raise RllmError(f"distill.endpoint {self.url} unreachable: {exc}") from None
            time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")


def make_teacher(
    settings: DistillConfig, *, student_tokenizer: Any, micro_batch_size: int, device: str = "cpu"
) -> Teacher | EndpointTeacher:
    """The teacher `distill` configures, its tokenizer checked against the student's."""
    import os

    endpoint = settings.endpoint
    if endpoint.base_url is None:
        return Teacher(
            settings.teacher,
            student_tokenizer=student_tokenizer,
            dtype=settings.dtype,
            micro_batch_size=micro_batch_size,
            device=device,
        )
    from rllm.models import registry

    tokenizer_name = endpoint.tokenizer or settings.teacher
    check_same_tokenizer(student_tokenizer, registry.load_tokenizer(tokenizer_name), tokenizer_name)
    return EndpointTeacher(
        endpoint.base_url, endpoint.model or settings.teacher, api_key=os.environ.get(endpoint.api_key_env)
    )


def apply_distillation(
    rows: Sequence[TrainingRow], teacher_logprobs: Sequence[Sequence[float]], settings: DistillConfig
) -> dict[str, float]:
    """Set every trained token's advantage to the distillation advantage (module docstring), in place; returns the
    metrics."""
    gap_sum, teacher_sum, tokens = 0.0, 0.0, 0
    for row, teacher in zip(rows, teacher_logprobs, strict=True):
        for t, trained in enumerate(row.loss_mask):
            if not trained:
                continue
            gap = teacher[t] - row.old_logprobs[t]
            row.advantages[t] = settings.coef * gap + settings.reward_weight * row.advantages[t]
            gap_sum, teacher_sum, tokens = gap_sum + gap, teacher_sum + teacher[t], tokens + 1
    count = max(tokens, 1)
    return {"distill/reverse_kl": -gap_sum / count, "distill/teacher_logprob": teacher_sum / count}
