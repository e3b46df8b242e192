"""Short text answers (HotpotQA, SQuAD, TriviaQA) and translations (WMT24++): exact match, token F1 and chrF.

`f1_reward` and `exact_match_reward` read the reply's answer span (`extract_answer_span`) and compare it with
`task["answer"]` (one reference or a list of accepted ones) after SQuAD's normalisation: lower case, no punctuation,
no articles, single spaces. `chrf_reward` scores the whole reply against the reference translation(s) with
sacrebleu's chrF.

Choices:
- SQuAD's normalisation and F1 exactly (the max over references, an empty side scores 1 only against an empty
  side), so numbers agree with the published ones; "The Eiffel Tower." and "eiffel tower" are one answer.
- The span is the last `\\boxed{...}`, else the text after the last "Answer:" / "answer is", else the reply's last
  non-empty line: an F1 over a whole chain of thought would reward rambling that happens to mention the answer.
- chrF reads the whole reply: a translation is the reply, and a preamble ("Here is the translation:") costs chrF,
  which is the signal that teaches a policy to leave it out. sacrebleu is imported on first use (`rllm[tasks]`).
- A reply that is empty or not a string scores 0 (the model's failure); a row without a usable `answer` is refused
  (`RewardError`): a dataset bug is not a zero reward.
"""

from __future__ import annotations

import collections
import functools
import re
import string
from collections.abc import Sequence
from typing import Any

from rllm.rewards.base import RewardOutput, refuse_reward
from rllm.rewards.math import extract_boxed

__all__ = [
    "chrf_reward",
    "exact_match",
    "exact_match_reward",
    "extract_answer_span",
    "f1_reward",
    "is_abbreviation",
    "normalize_text",
    "token_f1",
]

# ------------------------------------------------------------------------------------------------- normalisation

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_text(text: Any) -> str:
    """SQuAD's normal form: lower case, ASCII punctuation removed, articles (a, an, the) removed, whitespace
    collapsed to single spaces. A non-string is read as its `str()` (None as "")."""
    text = "" if text is None else str(text)
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _as_list(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else [str(gold) for gold in golds]


def exact_match(prediction: str, golds: str | Sequence[str]) -> bool:
    """Whether `prediction` equals any of `golds` after `normalize_text`."""
    normal = normalize_text(prediction)
    return any(normal == normalize_text(gold) for gold in _as_list(golds))


def token_f1(prediction: str, golds: str | Sequence[str]) -> float:
    """SQuAD's token F1 of `prediction` against the best of `golds` (tokens of `normalize_text`, counted with
    repeats). When either side has no tokens the score is 1 if both have none, else 0."""
    predicted = normalize_text(prediction).split()
    return max((_f1(predicted, normalize_text(gold).split()) for gold in _as_list(golds)), default=0.0)


def _f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        return float(predicted == gold)
    same = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------------------------------------------- extraction

_ANSWER_PHRASE = re.compile(r"\banswer\b\s*(?:is\b|:)", re.IGNORECASE)
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\{([^{}]*)\}")
_SENTENCE_BREAK = re.compile(r"[.!?]\s+")
_DOTTED = re.compile(r"[A-Za-z]{1,2}(?:\.[A-Za-z]{1,2})+")  # U.S. e.g. i.e. Ph.D. D.C.
# "no" is left out: "No." answers a yes/no question far more often than it abbreviates "number"
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft vs etc inc ltd co capt lt gen col sgt rev fig vol approx dept est".split()
)


def is_abbreviation(word: str) -> bool:
    """Whether a period right after `word` belongs to it rather than ending a sentence: a one-letter initial
    ("J."), a dotted abbreviation ("U.S.", "e.g.") or a common title or short form ("Dr.", "St.", "etc.")."""
    word = word.lstrip("([{\"'“‘")
    return (len(word) == 1 and word.isupper()) or bool(_DOTTED.fullmatch(word)) or word.lower() in _ABBREVIATIONS


def extract_answer_span(response: Any) -> str | None:
    """The reply's answer: the last `\\boxed{...}` (with `\\text{...}` unwrapped); else what follows the last
    "Answer:" / "answer is" on its line (or the next non-empty line when that is empty), cut at the end of its
    sentence; else the last non-empty line. Markdown emphasis, quotes and a trailing period are stripped. None for a
    reply with no text."""
    if not isinstance(response, str) or not response.strip():
        return None
    boxed = extract_boxed(response)
    if boxed:
        return _clean(_TEXT_WRAPPER.sub(r"\1", boxed)) or None
    phrases = list(_ANSWER_PHRASE.finditer(response))
    if phrases:
        after = response[phrases[-1].end() :].lstrip(" \t:*_")
        line = next((line for line in after.splitlines() if _clean(line)), "")
        span = _clean(_first_sentence(line))
        if span:
            return span
    lines = [line for line in response.splitlines() if _clean(line)]
    return _clean(lines[-1]) if lines else None


def _first_sentence(text: str) -> str:
    """`text` up to its first sentence break, not counting the period of an abbreviation ("St. Louis")."""
    for end in _SENTENCE_BREAK.finditer(text):
        words = text[max(0, end.start() - 32) : end.start()].split()  # the last word, without re-reading the line
        if end.group()[0] == "." and words and is_abbreviation(words[-1]):
            continue
        return text[: end.start() + 1]
    return text


def _clean(span: str) -> str:
    """Without markdown emphasis, quotes and a trailing period around it."""
    return span.lstrip(" \t*_`\"'“”").rstrip(" \t*_`\"'“”.")


# -------------------------------------------------------------------------------------------------------- reward


def _references(task: Any, verifier: str) -> list[str]:
    """`task["answer"]` as a non-empty list of strings (numbers read as text), or a refusal naming the fix."""
    row = task.get("id", "?") if isinstance(task, dict) else "?"
    answer = task.get("answer") if isinstance(task, dict) else None
    items = [answer] if isinstance(answer, (str, int, float)) and not isinstance(answer, bool) else answer
    if not isinstance(items, list) or not items or not all(_is_text(item) for item in items):
        raise refuse_reward(
            f"row {row} has no usable 'answer' for the {verifier} verifier (got {type(answer).__name__}): fix the row "
            "to hold the reference as a string or a non-empty list of strings"
        )
    return [str(item) for item in items]


def _is_text(item: Any) -> bool:
    return isinstance(item, (str, int, float)) and not isinstance(item, bool)


def _no_reply(response: Any) -> RewardOutput | None:
    """Reward 0 for a reply that is not a non-empty string (the model's failure, a legitimate 0)."""
    if not isinstance(response, str):
        return RewardOutput(0.0, is_correct=False, info={"reason": f"reply is {type(response).__name__}, not text"})
    if not response.strip():
        return RewardOutput(0.0, is_correct=False, info={"reason": "empty reply"})
    return None


def f1_reward(task: dict, response: str) -> RewardOutput:
    """Token F1 (0..1) of the reply's answer span against the best of `task["answer"]`; correct on exact match."""
    golds = _references(task, "f1")
    failed = _no_reply(response)
    if failed is not None:
        return failed
    span = extract_answer_span(response)
    f1, matched = token_f1(span, golds), exact_match(span, golds)
    return RewardOutput(f1, is_correct=matched, info={"extracted": span, "f1": f1, "exact_match": matched})


def exact_match_reward(task: dict, response: str) -> RewardOutput:
    """1.0 when the reply's answer span equals one of `task["answer"]` after `normalize_text`, else 0.0."""
    golds = _references(task, "exact_match")
    failed = _no_reply(response)
    if failed is not None:
        return failed
    span = extract_answer_span(response)
    matched = exact_match(span, golds)
    return RewardOutput(float(matched), is_correct=matched, info={"extracted": span, "exact_match": matched})


def chrf_reward(task: dict, response: str) -> RewardOutput:
    """chrF of the whole reply against `task["answer"]` (a reference translation or a list of them), as score/100;
    correct when chrF >= `task["chrf_threshold"]` (default 50, on sacrebleu's 0..100 scale)."""
    references = _references(task, "chrf")
    threshold = task.get("chrf_threshold", 50)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise refuse_reward(
            f"row {task.get('id', '?')} has a 'chrf_threshold' of {threshold!r}: fix it to a number from 0 to 100"
        )
    failed = _no_reply(response)
    if failed is not None:
        return failed
    score = _chrf().sentence_score(response.strip(), references).score
    return RewardOutput(score / 100, is_correct=score >= threshold, info={"chrf": score, "threshold": threshold})


@functools.cache
def _chrf() -> Any:
    try:
        from sacrebleu.metrics import CHRF
    except ImportError:
        raise refuse_reward("the chrf verifier needs sacrebleu: pip install 'rllm[tasks]' (sacrebleu==2.6.0)") from None
    return CHRF()
