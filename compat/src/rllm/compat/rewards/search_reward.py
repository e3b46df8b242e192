"""rLLM v0.2's `rllm.rewards.search_reward`: `RewardSearchFn(config)(RewardInput(task_info=..., action=...))`, the
reward of rLLM's search (HotpotQA-style question answering) examples.

The reply's answer is compared with `task_info["ground_truth"]` (else `task_info["answer"]`; one string or a list)
after SQuAD's normalisation (lower case, no punctuation, no articles, single spaces):
- an exact match with any of them: `correct_reward`, correct;
- else the best token F1 over them: at least `F1_THRESHOLD` (0.3, rLLM's) is correct and pays `correct_reward *
  F1`; below it, `incorrect_reward`. "yes", "no" and "noanswer" score F1 0 unless they match exactly;
- no ground truth: `unk_error_reward`.
The answer is read from the reply with `<think>...</think>` removed: the last `\\boxed{...}`, else the last
`<answer>...</answer>`, else the first bold `**...**` of more than two characters, else what follows the last "the
answer is" / "answer:", else the whole reply. rLLM tries more guesses (dates, capitalised names, numbers, scored
sentences) before the whole reply; a reply that states its answer in one of the forms above is read the same way.
`metadata` holds the extracted answer, the ground truths, the best match and its F1, precision and recall.
The call also takes rLLM's reward-function form, `fn(task_info, action)`.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

from rllm.compat.rewards.reward_types import RewardConfig, RewardInput
from rllm.rewards.base import RewardOutput

__all__ = ["F1_THRESHOLD", "RewardSearchFn", "extract_search_answer", "normalize_answer", "token_f1"]

F1_THRESHOLD = 0.3
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_ANSWER_PHRASE = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|answer\s*:)\s*:?\s*([^\n]+)", re.IGNORECASE)
_CLOSED_CLASSES = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """SQuAD's normal form: lower case, punctuation and articles removed, whitespace collapsed."""
    text = str(text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, reference: str, *, closed_classes: bool = True) -> tuple[float, float, float]:
    """(F1, precision, recall) of the normalised tokens. With `closed_classes` (HotpotQA's rule) a yes/no/noanswer
    on either side must match exactly."""
    predicted, wanted = normalize_answer(prediction), normalize_answer(reference)
    if closed_classes and (predicted in _CLOSED_CLASSES or wanted in _CLOSED_CLASSES) and predicted != wanted:
        return 0.0, 0.0, 0.0
    predicted_tokens, wanted_tokens = predicted.split(), wanted.split()
    common = sum((Counter(predicted_tokens) & Counter(wanted_tokens)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision, recall = common / len(predicted_tokens), common / len(wanted_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def extract_search_answer(response: str) -> str:
    """The answer a reply states (see the module docstring for the order of the forms read)."""
    from rllm.rewards.math import extract_boxed

    text = _THINK.sub("", str(response)).strip()
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    tagged = _ANSWER_TAG.findall(text)
    if tagged:
        return tagged[-1].strip()
    bold = [m.strip() for m in _BOLD.findall(text) if len(m.strip()) > 2 and re.search(r"\w", m)]
    if bold:
        return bold[0]
    phrases = _ANSWER_PHRASE.findall(text)
    if phrases and phrases[-1].strip(" .!"):
        return phrases[-1].strip().rstrip(".!").strip()
    return " ".join(text.split())


class RewardSearchFn:
    """rLLM's search reward (see the module docstring)."""

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config if config is not None else RewardConfig()

    def __call__(self, input: RewardInput | dict, action: Any = None) -> RewardOutput:
        task_info, response = (input.task_info, input.action) if isinstance(input, RewardInput) else (input, action)
        truth = task_info.get("ground_truth") or task_info.get("answer")
        if truth is None:
            return RewardOutput(
                reward=self.config.unk_error_reward, is_correct=False, metadata={"error": "No ground truth provided"}
            )
        metadata = self.evaluate_answer(str(response or ""), truth)
        if metadata["exact_match"]:
            return RewardOutput(reward=self.config.correct_reward, is_correct=True, metadata=metadata)
        if metadata["f1_score"] >= F1_THRESHOLD:
            reward = self.config.correct_reward * metadata["f1_score"]
            return RewardOutput(reward=reward, is_correct=True, metadata=metadata)
        return RewardOutput(reward=self.config.incorrect_reward, is_correct=False, metadata=metadata)

    def evaluate_answer(self, response: str, ground_truth: str | list[str]) -> dict[str, Any]:
        """The extracted answer's best exact match or F1 over the ground truths, as reward metadata."""
        answer = extract_search_answer(response)
        truths = [ground_truth] if isinstance(ground_truth, str) else [str(t) for t in ground_truth]
        best = {"best_match": "", "f1_score": 0.0, "precision": 0.0, "recall": 0.0, "exact_match": False}
        method = None
        for truth in (t.strip() for t in truths):
            if normalize_answer(answer) == normalize_answer(truth):
                best = {"best_match": truth, "f1_score": 1.0, "precision": 1.0, "recall": 1.0, "exact_match": True}
                method = "exact_match"
                break
            f1, precision, recall = token_f1(answer, truth)
            if f1 > best["f1_score"]:
                best = {
                    "best_match": truth,
                    "f1_score": f1,
                    "precision": precision,
                    "recall": recall,
                    "exact_match": False,
                }
                method = "f1_score"
        summary = {"extracted_answer": answer, "ground_truths": truths, "evaluation_method": method}
        return {**summary, **best, "f1_threshold": F1_THRESHOLD}
