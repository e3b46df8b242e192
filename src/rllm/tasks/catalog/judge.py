"""The LLM-judge verifier: a model behind any OpenAI-compatible endpoint decides whether a reply's final answer
means the same as the reference (for benchmarks whose answers are free text: HLE-style QA, chart and document
questions).

The endpoint comes from the reward's keyword arguments (`data.reward_args: {base_url, model, api_key}`) or the
environment (`RLLM_JUDGE_BASE_URL`, `RLLM_JUDGE_MODEL`, `RLLM_JUDGE_API_KEY`). The judge is asked for one word on its
last line, CORRECT or INCORRECT, at temperature 0. Choices: an unreachable judge is an infrastructure error (the
episode is retried, never scored 0), and a verdict it does not state is refused as a reward error (counted, left out
of training): a judge that rambles must not read as a wrong answer.
"""

from __future__ import annotations

import os
import re
from typing import Any

from rllm.errors import InfraError
from rllm.rewards.base import RewardOutput, refuse_reward

__all__ = ["JUDGE_PROMPT", "judge_reward", "parse_verdict"]

JUDGE_PROMPT = """You grade an answer to a question against the reference answer.

Question:
{question}

Reference answer:
{reference}

Answer to grade (its final answer is what counts; ignore the working):
{response}

Does the answer's final answer mean the same as the reference answer? Reply with your reasoning in at most two
sentences, then a last line holding one word: CORRECT or INCORRECT."""

_VERDICT = re.compile(r"\b(INCORRECT|CORRECT)\b")


def parse_verdict(text: str) -> bool | None:
    """The judge's verdict: the last CORRECT/INCORRECT it wrote (upper case), or None when it wrote neither."""
    found = _VERDICT.findall(text or "")
    return None if not found else found[-1] == "CORRECT"


def judge_reward(
    task: dict,
    response: str,
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 60.0,
) -> RewardOutput:
    """1.0 when the judge says the reply's answer matches `task["answer"]` (a str or a list of accepted answers)."""
    base_url = base_url or os.environ.get("RLLM_JUDGE_BASE_URL")
    model = model or os.environ.get("RLLM_JUDGE_MODEL")
    if not base_url or not model:
        raise refuse_reward(
            "the judge verifier needs an OpenAI-compatible endpoint: set data.reward_args.base_url and .model "
            "(or RLLM_JUDGE_BASE_URL and RLLM_JUDGE_MODEL)"
        )
    if not str(response or "").strip():
        return RewardOutput(0.0, is_correct=False, info={"verdict": "empty reply"})
    answers = task.get("answer")
    if not isinstance(answers, (str, list)) or not answers:
        raise refuse_reward(f"row {task.get('id', '?')} has no 'answer' for the judge to compare with: fix the row")
    reference = answers if isinstance(answers, str) else " | ".join(map(str, answers))
    prompt = JUDGE_PROMPT.format(question=task.get("question", ""), reference=reference, response=response)
    text = _ask(base_url, model, api_key or os.environ.get("RLLM_JUDGE_API_KEY") or "EMPTY", prompt, timeout_s)
    verdict = parse_verdict(text)
    if verdict is None:
        raise refuse_reward(f"the judge {model} gave no CORRECT/INCORRECT verdict (it wrote: {text[-200:]!r})")
    return RewardOutput(float(verdict), is_correct=verdict, info={"judge": model, "judgement": text[-500:]})


def _ask(base_url: str, model: str, api_key: str, prompt: str, timeout_s: float) -> str:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=2)
    try:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], temperature=0.0, max_tokens=256
        )
    except (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError, openai.InternalServerError) as e:
        raise InfraError(f"the judge at {base_url} did not answer: {type(e).__name__}: {e}") from None
    except openai.APIStatusError as e:
        raise refuse_reward(
            f"the judge at {base_url} refused the request (HTTP {e.status_code}): {e.message}"
        ) from None
    message: Any = reply.choices[0].message if reply.choices else None
    return (message.content or "") if message is not None else ""
