"""IFEval (Zhou et al. 2023): verifiable instructions ("answer in fewer than 3 sentences", "no commas"), checked.

`ifeval_reward(task, response)` checks each instruction of an IFEval row (`instruction_id_list`, with one dict of
arguments per instruction in `kwargs`) against the reply, with IFEval's strict rules (the reply as written, no
loose variants): the reward is the fraction of instructions followed and the reply is correct only when it follows
all of them (the benchmark's prompt-level strict accuracy; the mean reward is its instruction-level accuracy).
`info["followed"]` holds each instruction's verdict.

Each checker here follows Google's reference implementation (`instruction_following_eval/instructions.py`): the
relations "less than" (count < N) and "at least" (count >= N), paragraphs split on `***` (number_paragraphs) or on
blank lines (nth_paragraph_first_word), bullets as lines starting with `*` or `-`, and so on; the docstring of each
checker says what it counts. Differences, all for lack of the reference's dependencies (nltk):
- Words are runs of `\\w` characters, as the reference's `RegexpTokenizer(r"\\w+")` counts them (exact).
- Sentences are counted by `count_sentences`, a small splitter in place of nltk's punkt: a sentence ends at `.`,
  `!` or `?` (closing quotes and brackets included) followed by whitespace or the end, except after an
  abbreviation (Mr. Dr. e.g. U.S.) or a one-letter initial (J. K. Rowling). Decimals never split (no whitespace).
- All-capital words (capital_word_frequency) are `\\w+` runs joined by `-` or `'` ("STATE-OF-THE-ART" is one);
  punctuation is never a word. nltk splits "DON'T" in two; here it is one.
- `language:response_language`, and the English part of `change_case:english_capital`/`english_lowercase`, need
  `langdetect` (in rllm's `tasks` extra): without it the language instruction is refused (RewardError, never a
  guess), and the case instructions check the case alone. With it, an undetectable text counts as followed, as in
  the reference; its detector is seeded (the reference's is not), so one reply always gets one reward.
Keyword arguments the hub's rows fill with None are ignored; an instruction id outside the 25 of IFEval, or one
missing an argument it needs, is refused: a row that cannot be checked is not a zero reward.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from rllm.rewards.base import RewardOutput, refuse_reward
from rllm.rewards.text import is_abbreviation

__all__ = ["INSTRUCTIONS", "count_sentences", "count_words", "ifeval_reward"]


class _Args:
    """One instruction's keyword arguments (None values dropped), read with the type each checker needs; a missing
    or ill-typed one is refused with the instruction's id."""

    def __init__(self, instruction: str, kwargs: dict) -> None:
        self.instruction = instruction
        self.values = {key: value for key, value in kwargs.items() if value is not None}

    def _get(self, name: str, kind: type | tuple[type, ...], what: str) -> Any:
        value = self.values.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            got = "missing" if value is None else repr(value)
            raise refuse_reward(
                f"IFEval instruction {self.instruction!r} needs kwargs {name!r} ({what}), got {got}: fix the row"
            )
        return value

    def text(self, name: str) -> str:
        return self._get(name, str, "a string")

    def number(self, name: str) -> int:
        value = self._get(name, (int, float), "a whole number")
        if isinstance(value, float) and not value.is_integer():  # the hub's nullable ints may arrive as 3.0
            raise refuse_reward(
                f"IFEval instruction {self.instruction!r} needs a whole number in {name!r}, not {value}"
            )
        return int(value)

    def words(self, name: str) -> list[str]:
        value = self._get(name, list, "a list of strings")
        if not all(isinstance(word, str) for word in value):
            raise refuse_reward(f"IFEval instruction {self.instruction!r} needs a list of strings in {name!r}")
        return value

    def compare(self, count: int, relation_key: str, threshold_key: str) -> bool:
        """IFEval's two relations: "less than" is count < N, "at least" is count >= N."""
        relation, threshold = self.text(relation_key), self.number(threshold_key)
        if relation == "less than":
            return count < threshold
        if relation == "at least":
            return count >= threshold
        raise refuse_reward(
            f"IFEval instruction {self.instruction!r} has {relation_key}={relation!r}: "
            "fix it to 'less than' or 'at least'"
        )


# ------------------------------------------------------------------------------------------------------ counting

_WORD = re.compile(r"\w+")
_CAPITAL_WORD = re.compile(r"\w+(?:[-'’]\w+)*")
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")


def count_words(text: str) -> int:
    """Runs of word characters (`\\w+`), as IFEval counts words."""
    return len(_WORD.findall(text))


def count_sentences(text: str) -> int:
    """Sentences: text up to `.`, `!` or `?` (with any closing quotes or brackets) followed by whitespace or the
    end, not counting the period of an abbreviation or a one-letter initial; a last sentence without an end mark
    counts too. A simple stand-in for nltk's punkt, which IFEval uses."""
    count, start = 0, 0
    for end in _SENTENCE_END.finditer(text):
        if end.group()[0] == "." and is_abbreviation(_last_word(text, start, end.start())):
            continue
        if _WORD.search(text, start, end.start()):
            count += 1
        start = end.end()
    return count + (1 if _WORD.search(text, start) else 0)


def _last_word(text: str, start: int, end: int) -> str:
    """The word of `text[start:end]` that ends at `end`, read backwards and at most 32 characters (an abbreviation
    is short; reading whole sentences again at every period would be quadratic in a reply of "A. A. A. ...")."""
    begin = end
    while begin > start and end - begin <= 32 and not text[begin - 1].isspace():
        begin -= 1
    return text[begin:end]


# ------------------------------------------------------------------------------------------------------ checkers


def _keywords_existence(text: str, args: _Args) -> bool:
    """Every keyword occurs, as a case-insensitive substring."""
    return all(keyword.lower() in text.lower() for keyword in args.words("keywords"))


def _keywords_frequency(text: str, args: _Args) -> bool:
    """The keyword's case-insensitive occurrences (non-overlapping, substrings too) compared with `frequency`."""
    count = len(re.findall(re.escape(args.text("keyword").strip()), text, flags=re.IGNORECASE))
    return args.compare(count, "relation", "frequency")


def _forbidden_words(text: str, args: _Args) -> bool:
    """None of the words occurs as a whole word, in any case."""
    words = args.words("forbidden_words")
    return not any(re.search(rf"\b{re.escape(word)}\b", text, flags=re.IGNORECASE) for word in words)


def _letter_frequency(text: str, args: _Args) -> bool:
    """The letter's occurrences in any case compared with `let_frequency`."""
    letter = args.text("letter").strip().lower()
    if len(letter) != 1:
        raise refuse_reward(f"IFEval instruction {args.instruction!r} needs one letter in 'letter', not {letter!r}")
    return args.compare(text.lower().count(letter), "let_relation", "let_frequency")


def _response_language(text: str, args: _Args) -> bool:
    """The language langdetect sees is `language` (an ISO 639-1 code); undetectable text counts as followed."""
    detected = _detect_language(text, required=f"IFEval instruction {args.instruction!r}")
    return detected is None or detected == args.text("language")


def _detect_language(text: str, required: str | None = None) -> str | None:
    """langdetect's ISO 639-1 code for `text`; None when it cannot tell, or when langdetect is not installed and no
    instruction `required` it (then a refusal naming that instruction)."""
    try:
        import langdetect
    except ImportError:
        if required is None:
            return None
        raise refuse_reward(
            f"{required} needs langdetect to detect the reply's language: pip install 'rllm[tasks]', or leave "
            "IFEval's language instructions out"
        ) from None
    try:
        langdetect.DetectorFactory.seed = 0  # its sampling is random otherwise: one reply, two rewards
        return langdetect.detect(text)
    except langdetect.LangDetectException:
        return None


def _number_sentences(text: str, args: _Args) -> bool:
    """`count_sentences` compared with `num_sentences`."""
    return args.compare(count_sentences(text), "relation", "num_sentences")


def _number_paragraphs(text: str, args: _Args) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by the markdown divider `***`; an empty paragraph is allowed
    only before the first divider or after the last."""
    paragraphs = re.split(r"\s?\*\*\*\s?", text)
    inner_empty = any(not part.strip() for part in paragraphs[1:-1])
    count = sum(1 for part in paragraphs if part.strip())
    return not inner_empty and count == args.number("num_paragraphs")


def _number_words(text: str, args: _Args) -> bool:
    """`count_words` compared with `num_words`."""
    return args.compare(count_words(text), "relation", "num_words")


def _nth_paragraph_first_word(text: str, args: _Args) -> bool:
    """Exactly `num_paragraphs` non-empty paragraphs separated by blank lines (`\\n\\n`), and paragraph
    `nth_paragraph` (counted among all the pieces, empty ones too, as the reference does) starts with `first_word`
    (case-insensitive, leading quotes and anything from the first punctuation mark on ignored)."""
    paragraphs = text.split("\n\n")
    count = sum(1 for part in paragraphs if part.strip())
    nth = args.number("nth_paragraph")
    wanted = args.text("first_word").lower()
    if count != args.number("num_paragraphs") or not 1 <= nth <= count or not paragraphs[nth - 1].strip():
        return False
    word = paragraphs[nth - 1].split()[0].lstrip("'\"")
    return re.split(r"[.,?!'\"]", word, maxsplit=1)[0].lower() == wanted


def _number_placeholders(text: str, args: _Args) -> bool:
    """At least `num_placeholders` placeholders in square brackets, such as [address]: IFEval's `\\[.*?\\]`, counted
    line by line without a regex (which is quadratic on a line of many `[` and no `]`)."""
    count = 0
    for line in text.split("\n"):
        opening = line.find("[")
        while opening >= 0 and (closing := line.find("]", opening + 1)) >= 0:
            count += 1
            opening = line.find("[", closing + 1)
    return count >= args.number("num_placeholders")


def _postscript(text: str, args: _Args) -> bool:
    """A postscript starting with `postscript_marker` (P.S. and P.P.S also match spaced or lower-case forms)."""
    marker = args.text("postscript_marker").strip()
    patterns = {"P.P.S": r"\s*p\.\s?p\.\s?s.*$", "P.S.": r"\s*p\.\s?s\..*$"}
    pattern = patterns.get(marker, r"\s*" + re.escape(marker.lower()) + r".*$")
    return re.search(pattern, text.lower(), flags=re.MULTILINE) is not None


def _number_bullet_lists(text: str, args: _Args) -> bool:
    """Exactly `num_bullets` markdown bullets: lines starting with `*` (not `**`) or `-`."""
    stars = re.findall(r"^\s*\*[^*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == args.number("num_bullets")


_CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def _constrained_response(text: str, args: _Args) -> bool:
    """The reply contains one of IFEval's fixed options ("My answer is yes." / "no." / "maybe.")."""
    return any(option in text.strip() for option in _CONSTRAINED_RESPONSES)


def _number_highlighted_sections(text: str, args: _Args) -> bool:
    """At least `num_highlights` non-empty *highlighted* or **highlighted** sections (each on one line)."""
    single = [part for part in re.findall(r"\*[^\n*]*\*", text) if part.strip("*").strip()]
    double = [part for part in re.findall(r"\*\*[^\n*]*\*\*", text) if part[2:-2].strip()]
    return len(single) + len(double) >= args.number("num_highlights")


def _multiple_sections(text: str, args: _Args) -> bool:
    """At least `num_sections` sections, each opened by `section_spliter` and a number ("SECTION 1")."""
    splitter = re.escape(args.text("section_spliter").strip())
    sections = re.split(r"\s?" + splitter + r"\s?\d+\s?", text)
    return len(sections) - 1 >= args.number("num_sections")


def _json_format(text: str, args: _Args) -> bool:
    """The whole reply parses as JSON, optionally inside one ``` / ```json fence."""
    body = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        body = body.removeprefix(fence)
    try:
        json.loads(body.removesuffix("```").strip())
    except ValueError:
        return False
    return True


def _title(text: str, args: _Args) -> bool:
    """A non-empty title in double angular brackets, such as <<poem of joy>>: IFEval's greedy `<<[^\\n]+>>` spans a
    line from its first `<<` to its last `>>`, found here without the regex's quadratic backtracking."""
    for line in text.split("\n"):
        opening, closing = line.find("<<"), line.rfind(">>")
        if opening >= 0 and closing >= opening + 3 and line[opening : closing + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


def _two_responses(text: str, args: _Args) -> bool:
    """Two different responses separated by six asterisks (`******`), nothing empty between dividers."""
    parts = text.split("******")
    if any(not part.strip() for part in parts[1:-1]):
        return False
    answers = [part.strip() for part in parts if part.strip()]
    return len(answers) == 2 and answers[0] != answers[1]


def _repeat_prompt(text: str, args: _Args) -> bool:
    """The reply starts with `prompt_to_repeat`, word for word (case-insensitive)."""
    return text.strip().lower().startswith(args.text("prompt_to_repeat").strip().lower())


def _end_checker(text: str, args: _Args) -> bool:
    """The reply ends with `end_phrase` (case-insensitive; surrounding double quotes ignored)."""
    return text.strip().strip('"').lower().endswith(args.text("end_phrase").strip().lower())


def _capital_word_frequency(text: str, args: _Args) -> bool:
    """Words in all capitals (see the module docstring for what a word is) compared with `capital_frequency`."""
    capitals = sum(1 for word in _CAPITAL_WORD.findall(text) if word.isupper())
    return args.compare(capitals, "capital_relation", "capital_frequency")


def _english_capital(text: str, args: _Args) -> bool:
    """All cased letters are capitals (and the language is English, when langdetect is installed)."""
    return text.isupper() and _detect_language(text) in (None, "en")


def _english_lowercase(text: str, args: _Args) -> bool:
    """All cased letters are lower case (and the language is English, when langdetect is installed)."""
    return text.islower() and _detect_language(text) in (None, "en")


def _no_comma(text: str, args: _Args) -> bool:
    """No comma anywhere."""
    return "," not in text


def _quotation(text: str, args: _Args) -> bool:
    """The whole reply is wrapped in double quotation marks."""
    text = text.strip()
    return len(text) > 1 and text[0] == '"' and text[-1] == '"'


INSTRUCTIONS: dict[str, Callable[[str, _Args], bool]] = {
    "keywords:existence": _keywords_existence,
    "keywords:frequency": _keywords_frequency,
    "keywords:forbidden_words": _forbidden_words,
    "keywords:letter_frequency": _letter_frequency,
    "language:response_language": _response_language,
    "length_constraints:number_sentences": _number_sentences,
    "length_constraints:number_paragraphs": _number_paragraphs,
    "length_constraints:number_words": _number_words,
    "length_constraints:nth_paragraph_first_word": _nth_paragraph_first_word,
    "detectable_content:number_placeholders": _number_placeholders,
    "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _number_bullet_lists,
    "detectable_format:constrained_response": _constrained_response,
    "detectable_format:number_highlighted_sections": _number_highlighted_sections,
    "detectable_format:multiple_sections": _multiple_sections,
    "detectable_format:json_format": _json_format,
    "detectable_format:title": _title,
    "combination:two_responses": _two_responses,
    "combination:repeat_prompt": _repeat_prompt,
    "startend:end_checker": _end_checker,
    "change_case:capital_word_frequency": _capital_word_frequency,
    "change_case:english_capital": _english_capital,
    "change_case:english_lowercase": _english_lowercase,
    "punctuation:no_comma": _no_comma,
    "startend:quotation": _quotation,
}


# -------------------------------------------------------------------------------------------------------- reward


def _instructions(task: Any) -> list[tuple[str, _Args]]:
    """The row's (instruction id, arguments) pairs; a refusal naming the fix for a row that cannot be checked."""
    row = task.get("id", task.get("key", "?")) if isinstance(task, dict) else "?"
    ids = task.get("instruction_id_list") if isinstance(task, dict) else None
    if not isinstance(ids, list) or not ids or not all(isinstance(item, str) for item in ids):
        raise refuse_reward(f"IFEval row {row} has no 'instruction_id_list' (a list of ids): fix the row")
    kwargs = task.get("kwargs")
    kwargs = [{}] * len(ids) if kwargs is None else kwargs
    if not isinstance(kwargs, list) or len(kwargs) != len(ids) or not all(isinstance(k, dict | None) for k in kwargs):
        raise refuse_reward(
            f"IFEval row {row} has 'kwargs' that are not one dict per instruction ({len(ids)}): fix the row"
        )
    unknown = [item for item in ids if item not in INSTRUCTIONS]
    if unknown:
        raise refuse_reward(
            f"IFEval row {row} has instruction ids this checker does not know: {unknown}; known: {sorted(INSTRUCTIONS)}"
        )
    return [(item, _Args(item, args or {})) for item, args in zip(ids, kwargs, strict=True)]


def ifeval_reward(task: dict, response: str) -> RewardOutput:
    """The fraction of the row's instructions the reply follows (strict); correct when it follows all of them."""
    instructions = _instructions(task)
    if not isinstance(response, str) or not response.strip():
        reason = "empty reply" if isinstance(response, str) else f"reply is {type(response).__name__}, not text"
        followed = {name: False for name, _ in instructions}
        return RewardOutput(0.0, is_correct=False, info={"followed": followed, "reason": reason})
    followed: dict[str, bool] = {}
    for name, args in instructions:
        key = name if name not in followed else f"{name}#{len(followed) + 1}"
        followed[key] = bool(INSTRUCTIONS[name](response, args))
    count = sum(followed.values())
    return RewardOutput(count / len(followed), is_correct=count == len(followed), info={"followed": followed})
