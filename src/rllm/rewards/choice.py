"""Multiple choice (MMLU, MMLU-Pro, GPQA, SuperGPQA, ARC): find the letter a reply chose and compare it.

`choice_reward(task, response)` scores 1.0 when the reply's chosen option is `task["answer"]` (a letter). The
options are `task["choices"]` (their texts, lettered A, B, C, ... in order; MMLU-Pro has ten), so the valid letters
are the first `len(choices)` of the alphabet.

`extract_choice` reads the reply in three passes and stops at the first that finds a letter:
1. Explicit statements, the LAST one in the reply wins (a model that changes its mind says so at the end):
   `\\boxed{C}`, "The answer is (C)", "Answer: C", "**Answer:** C", "the correct option is C", "I choose C".
2. The last non-empty line, when it is only a letter ("C", "(C)", "**C**", "C.") or starts with one as an option
   label ("C. Paris", "(C) Paris", "C) Paris").
3. The last letter in parentheses or bold anywhere ("... so (C)", "... is **C**").
The article "A" and the pronoun "I" are never read from prose: a letter counts only inside one of those forms, so
"A possible answer is ..." gives nothing, and a bare capital letter must stand alone (not "Albert"). A lower-case
letter counts when it is bracketed or ends its statement ("answer: c"), never as a word ("the answer is a city").
`choice_reward` also accepts the exact text of an option in place of its letter ("Answer: Paris") when it names
exactly one option after `rllm.rewards.text.normalize_text`; that check runs first, so an option whose text starts
with "A " is not misread as the letter A.
"""

from __future__ import annotations

import re
import string
from typing import Any

from rllm.rewards.base import RewardOutput, refuse_reward
from rllm.rewards.math import extract_boxed
from rllm.rewards.text import extract_answer_span, normalize_text

__all__ = ["choice_reward", "extract_choice"]

_LETTER = r"(?P<open>[(\[])?\s*(?P<letter>[A-Za-z])\s*(?P<close>[)\]])?(?![\w'’])"
_STATEMENT = re.compile(
    r"(?:\banswer\b|\b(?:correct|right|best|final)\s+(?:option|choice)\b)"
    r"(?:\s+(?:is|would\s+be|should\s+be|must\s+be|will\s+be))?[\s*_:=$\-]*"
    r"(?:\b(?:option|choice|letter)\b\s*)?[*_]*" + _LETTER,
    re.IGNORECASE,
)
_CHOOSE = re.compile(
    r"\bI(?:\s+would|'d|\s+will|'ll)?\s+(?:choose|select|pick|go\s+with)\s+(?:(?:option|choice)\s+)?[*_]*" + _LETTER,
    re.IGNORECASE,
)
_AFTER_STATEMENT = re.compile(r"\s*(?:[.,;:!?*_)\]]\s*)?$")  # what may follow a bare lower-case letter
_NEXT_WORD = re.compile(r"\s+([a-z]+)")
# words that may follow a bare "A" or "I" that is an option ("A because ..."); any other lower-case word after it
# makes it the article or the pronoun ("A possible ...", "I think ...")
_CONNECTIVES = frozenset("because since as and or is was which with for given due from so but".split())
_LINE_LETTER = re.compile(r"[*_]*[(\[]?\s*([A-Za-z])\s*[)\]]?[*_]*[.:)]?[*_]*")
_LINE_LABEL = re.compile(r"[*_]*(?:\(([A-Za-z])\)|([A-Z])[.)])[*_]*\s+\S")
_MARKED = re.compile(r"\(([A-Z])\)|\*\*\s*\(?([A-Z])\)?\s*\*\*")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\{([^{}]*)\}")


def extract_choice(response: Any, letters: str = "ABCD") -> str | None:
    """The upper-case letter (one of `letters`) that the reply chose, or None. See the module docstring."""
    if not isinstance(response, str) or not response.strip():
        return None
    letters = letters.upper()
    for find in (_stated_choice, _last_line_choice, _marked_choice):
        letter = find(response, letters)
        if letter is not None:
            return letter
    return None


def _stated_choice(response: str, letters: str) -> str | None:
    """The letter of the last explicit statement: a boxed letter or an answer phrase."""
    found: list[tuple[int, str]] = []
    for pattern in (_STATEMENT, _CHOOSE):
        for match in pattern.finditer(response):
            letter = _statement_letter(match, response, letters)
            if letter is not None:
                found.append((match.start(), letter))
    box = response.rfind("\\boxed")
    boxed = _boxed_letter(response, letters) if box >= 0 else None
    if boxed is not None:
        found.append((box, boxed))
    return max(found)[1] if found else None


def _statement_letter(match: re.Match, response: str, letters: str) -> str | None:
    letter = match.group("letter")
    if letter.upper() not in letters:
        return None
    if match.group("open") is not None and match.group("close") is not None:
        return letter.upper()  # "(c)", "[C]": a letter whatever follows
    rest = response[match.end() :].split("\n", 1)[0]
    if letter.islower() and not _AFTER_STATEMENT.match(rest):
        return None  # "the answer is a city": a word, not option (a)
    word = _NEXT_WORD.match(rest)
    if letter in "AI" and word is not None and word.group(1) not in _CONNECTIVES:
        return None  # "Answer: I think ...", "The answer: A cat ...": a word, not option A or I
    return letter.upper()


def _boxed_letter(response: str, letters: str) -> str | None:
    content = _TEXT_WRAPPER.sub(r"\1", extract_boxed(response) or "").strip()
    match = _LINE_LETTER.fullmatch(content) or _LINE_LABEL.match(content + " ")
    letter = _first_group(match)
    return letter.upper() if letter is not None and letter.upper() in letters else None


def _last_line_choice(response: str, letters: str) -> str | None:
    """The last non-empty line as a lone letter ("C", "(C)", "**C**") or an option label ("C. Paris")."""
    line = next(line.strip() for line in reversed(response.splitlines()) if line.strip())
    label = _first_group(_LINE_LETTER.fullmatch(line) or _LINE_LABEL.match(line))
    return label.upper() if label is not None and label.upper() in letters else None


def _marked_choice(response: str, letters: str) -> str | None:
    """The last letter written "(C)" or "**C**" anywhere in the reply."""
    marked = [_first_group(match) for match in _MARKED.finditer(response)]
    marked = [letter for letter in marked if letter in letters]
    return marked[-1] if marked else None


def _first_group(match: re.Match | None) -> str | None:
    if match is None:
        return None
    return next((group for group in match.groups() if group), None)


def _text_choice(response: str, choices: list[str], letters: str) -> str | None:
    """The letter of the one option whose text the reply's answer span states, or None."""
    span = extract_answer_span(response)
    normal = normalize_text(span)
    if not normal or _LINE_LETTER.fullmatch(span) or _LINE_LABEL.match(span):
        return None  # a letter or a labelled option ("(A) Paris") is read as a letter, never as an option's text
    named = [letters[index] for index, choice in enumerate(choices) if normalize_text(choice) == normal]
    return named[0] if len(named) == 1 else None


# -------------------------------------------------------------------------------------------------------- reward


def _task_options(task: Any) -> tuple[str, list[str] | None, str]:
    """The reference letter, the option texts (None when absent) and the valid letters; a refusal naming the fix
    for a row that does not hold them."""
    row = task.get("id", "?") if isinstance(task, dict) else "?"
    answer = task.get("answer") if isinstance(task, dict) else None
    choices = task.get("choices") if isinstance(task, dict) else None
    if choices is not None and (
        not isinstance(choices, list) or not 2 <= len(choices) <= 26 or not all(isinstance(c, str) for c in choices)
    ):
        raise refuse_reward(
            f"row {row} has 'choices' that are not a list of 2 to 26 option texts: fix the row's options"
        )
    reference = answer.strip().strip("()").strip().upper() if isinstance(answer, str) else ""
    if len(reference) != 1 or reference not in string.ascii_uppercase:
        raise refuse_reward(
            f"row {row} has no 'answer' letter (got {answer!r}): fix the row to hold the correct option's letter, "
            "e.g. 'C' (an option index i is the letter 'ABCDEFGHIJ'[i])"
        )
    count = len(choices) if choices is not None else max(4, string.ascii_uppercase.index(reference) + 1)
    letters = string.ascii_uppercase[:count]
    if reference not in letters:
        raise refuse_reward(f"row {row} has the answer {reference!r} but only {count} 'choices': fix the row")
    return reference, choices, letters


def choice_reward(task: dict, response: str) -> RewardOutput:
    """1.0 when the reply chose `task["answer"]` among `task["choices"]` (letters A.. of as many options; A-D when
    the row has no `choices`). `info` holds the `extracted` letter, how it was found and the `reason`."""
    reference, choices, letters = _task_options(task)
    if not isinstance(response, str) or not response.strip():
        reason = "empty reply" if isinstance(response, str) else f"reply is {type(response).__name__}, not text"
        return RewardOutput(0.0, is_correct=False, info={"extracted": None, "reason": reason})
    letter, method = (_text_choice(response, choices, letters) if choices else None), "option text"
    if letter is None:
        letter, method = extract_choice(response, letters), "letter"
    if letter is None:
        return RewardOutput(0.0, is_correct=False, info={"extracted": None, "reason": "no_answer"})
    correct = letter == reference
    reason = "correct" if correct else "wrong"
    return RewardOutput(float(correct), is_correct=correct, info={"extracted": letter, "by": method, "reason": reason})
