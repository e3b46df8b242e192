"""Row converters: what a field mapping cannot say about a benchmark's rows.

A converter is `fn(task, row) -> task`: `task` holds the canonical fields the entry's `fields` mapped, `row` is the
source row as read (the source's own column names). It fills in the rest (the answer cut out of a worked
solution, the options lettered, the tests in rllm's format) and may add `reference`, a reply the verifier scores 1.
A row it cannot convert raises `RowError` with one line naming the field and the fix.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import pickle
import random
import re
import zlib
from typing import Any

__all__ = ["RowError"]


class RowError(ValueError):
    """A source row that cannot become a task."""


def _need(row: dict, column: str, kind: type | tuple[type, ...]) -> Any:
    """`row[column]`, which must be a `kind`."""
    value = row.get(column)
    if not isinstance(value, kind):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise RowError(f"field {column!r} is {got}: the source's schema has it; fix the row or pull the data again")
    return value


def gsm8k(task: dict, row: dict) -> dict:
    """GSM8K's `answer` is a worked solution ending "#### 72": the number after the marker is the answer."""
    solution = _need(row, "answer", str)
    head, marker, final = solution.rpartition("####")
    if not marker or not final.strip():
        raise RowError("field 'answer' has no '#### <number>' line, which every GSM8K solution ends with")
    answer = final.strip().replace(",", "")
    return {**task, "answer": answer, "reference": f"{head.strip()}\nThe answer is \\boxed{{{answer}}}."}


# ----------------------------------------------------------------------------------------------------- helpers

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _done(task: dict, **fields: Any) -> dict:
    """`task` with `fields`, its id as a string (sources number their rows with ints as often as with strings)."""
    out = {**task, **fields}
    out["id"] = str(out["id"])
    return out


def _text(value: Any, column: str) -> str:
    """A non-empty string answer from a str, int or float cell (floats with an integer value lose the `.0`)."""
    if isinstance(value, bool):
        raise RowError(f"field {column!r} is a bool, not an answer; fix the row or pull the data again")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    got = "empty" if isinstance(value, str) else ("missing" if value is None else f"a {type(value).__name__}")
    raise RowError(f"field {column!r} is {got}: the source's schema has an answer there; fix the row")


def _drop_none(value: Any) -> Any:
    """`value` without the None entries `datasets` adds when rows of one column have differently keyed dicts."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _json(row: dict, column: str) -> Any:
    text = _need(row, column, str)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise RowError(f"field {column!r} is not JSON ({error.msg}); the source stores JSON text there") from None


def _boxed_reference(answer: str, solution: Any = None) -> str:
    """A worked solution (when the source has one) ending in the answer boxed, as a model is asked to reply."""
    final = f"The final answer is \\boxed{{{answer}}}."
    return f"{solution.strip()}\n\n{final}" if isinstance(solution, str) and solution.strip() else final


# -------------------------------------------------------------------------------------------------------- math


def math_answer(task: dict, row: dict) -> dict:
    """A problem with its final answer in a column (`answer`, str or number) and, when mapped, a worked `solution`."""
    answer = _text(task.get("answer"), "answer")
    solution = task.pop("solution", None)
    return _done(task, answer=answer, reference=_boxed_reference(answer, solution))


def boxed_solution(task: dict, row: dict) -> dict:
    """MATH-style rows: no answer column; the answer is the last `\\boxed{}` of the worked `solution`."""
    from rllm.rewards.math import extract_boxed

    solution = _need(row, "solution", str)
    answer = extract_boxed(solution)
    if not answer:
        raise RowError("field 'solution' has no \\boxed{...} answer, which every MATH solution ends with")
    return _done(task, answer=answer, reference=solution.strip())


def gsm_plus(task: dict, row: dict) -> dict:
    """GSM-Plus: its 'critical thinking' variants ask for no number (answer "None"); they cannot be scored."""
    if str(task.get("answer")).strip() == "None":
        raise RowError("field 'answer' is 'None': a 'critical thinking' variant with no numeric answer; it is skipped")
    return math_answer(task, row)


# -------------------------------------------------------------------------------------------------- multiple choice


def _mcq(task: dict, options: list, correct: int, explanation: Any = None) -> dict:
    """The options lettered A, B, ... in `options` (the text the template shows), `choices` (their texts) and
    `answer` (the letter), with a reference reply naming the letter (after the source's explanation, if any)."""
    if not options or len(options) > len(LETTERS):
        raise RowError(f"the row has {len(options)} options; a multiple-choice row has 2 to {len(LETTERS)}")
    if not all(isinstance(o, (str, int, float)) and not isinstance(o, bool) for o in options):
        raise RowError("an option is not text; fix the row or pull the data again")
    if not 0 <= correct < len(options):
        raise RowError(f"the answer points at option {correct}, but the row has {len(options)} options")
    choices = [str(o).strip() for o in options]
    letter = LETTERS[correct]
    reference = f"The answer is ({letter})."
    if isinstance(explanation, str) and explanation.strip():
        reference = f"{explanation.strip()}\n\n{reference}"
    lettered = "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(choices))
    return _done(task, choices=choices, options=lettered, answer=letter, reference=reference)


def _letter_index(letter: Any, n: int, column: str) -> int:
    if not isinstance(letter, str) or letter.strip().upper() not in LETTERS[:n]:
        raise RowError(f"field {column!r} is {letter!r}, not one of the letters {LETTERS[0]}-{LETTERS[n - 1]}")
    return LETTERS.index(letter.strip().upper())


def _int_index(value: Any, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().lstrip("-").isdigit():
        raise RowError(f"field {column!r} is {value!r}, not an option number")
    return int(value)


def _shuffled(correct: str, wrong: list, seed_text: str) -> tuple[list, int]:
    """The options in an order fixed by `seed_text` (a row's id or question), and where the correct one went.
    Sources that list the correct answer first would otherwise always have the answer (A)."""
    seed = int.from_bytes(hashlib.sha256(seed_text.encode("utf-8")).digest()[:8], "big")
    options = [correct, *wrong]
    order = list(range(len(options)))
    random.Random(seed).shuffle(order)
    return [options[i] for i in order], order.index(0)


def choices_index(task: dict, row: dict) -> dict:
    """`choices`: the option texts; `answer`: the correct one's index (an int, or a class label read as one)."""
    choices = task.get("choices")
    if not isinstance(choices, list):
        raise RowError("field 'choices' is not a list of options; fix the row or pull the data again")
    return _mcq(task, choices, _int_index(task.get("answer"), "answer"))


def choices_letter(task: dict, row: dict) -> dict:
    """`choices`: the option texts; `answer`: the correct one's letter."""
    choices = task.get("choices")
    if not isinstance(choices, list):
        raise RowError("field 'choices' is not a list of options; fix the row or pull the data again")
    return _mcq(task, choices, _letter_index(task.get("answer"), len(choices), "answer"))


def choices_labeled(task: dict, row: dict) -> dict:
    """ARC / CommonsenseQA / OpenBookQA: `choices` is {text: [...], label: [...]} and `answer` (answerKey) one of
    the labels, which are letters or, in some ARC rows, digits; the options are re-lettered A, B, ... in order."""
    choices = task.get("choices")
    if not isinstance(choices, dict) or not isinstance(choices.get("text"), list):
        raise RowError("field 'choices' is not {text: [...], label: [...]}; fix the row or pull the data again")
    labels = [str(label).strip() for label in choices.get("label") or []]
    key = str(task.get("answer") or "").strip()
    if key not in labels:
        raise RowError(f"field 'answerKey' is {key!r}, not one of the labels {labels}")
    return _mcq(task, choices["text"], labels.index(key))


def gpqa(task: dict, row: dict) -> dict:
    """GPQA: the correct answer and three incorrect ones in their own columns, shuffled per row (seeded by the
    row's Record ID), with the source's explanation before the letter in the reference."""
    correct = _need(row, "Correct Answer", str)
    wrong = [_need(row, f"Incorrect Answer {i}", str) for i in (1, 2, 3)]
    options, index = _shuffled(correct, wrong, str(row.get("Record ID") or task["question"]))
    return _mcq(task, options, index, row.get("Explanation"))


def sciq(task: dict, row: dict) -> dict:
    """SciQ: `correct_answer` and `distractor1..3`, shuffled per row; the `support` paragraph, when present, is
    shown before the question."""
    correct = _need(row, "correct_answer", str)
    wrong = [_need(row, f"distractor{i}", str) for i in (1, 2, 3)]
    options, index = _shuffled(correct, wrong, task["question"])
    support = row.get("support")
    if isinstance(support, str) and support.strip():
        task = {**task, "question": f"{support.strip()}\n\n{task['question']}"}
    return _mcq(task, options, index)


def truthfulqa_mc1(task: dict, row: dict) -> dict:
    """TruthfulQA mc1: `mc1_targets` {choices, labels} with exactly one label 1 (always listed first in the
    source), so the options are shuffled per row."""
    targets = _need(row, "mc1_targets", dict)
    choices, labels = targets.get("choices"), targets.get("labels")
    if not isinstance(choices, list) or not isinstance(labels, list) or labels.count(1) != 1:
        raise RowError("field 'mc1_targets' needs choices and labels with exactly one label 1")
    correct = labels.index(1)
    options, index = _shuffled(choices[correct], [c for i, c in enumerate(choices) if i != correct], task["question"])
    return _mcq(task, options, index)


def medqa(task: dict, row: dict) -> dict:
    """MedQA (4 options): `ending0..3` and `label`, the correct ending's index."""
    return _mcq(task, [_need(row, f"ending{i}", str) for i in range(4)], _int_index(row.get("label"), "label"))


def medmcqa(task: dict, row: dict) -> dict:
    """MedMCQA: options `opa..opd`, `cop` the correct one's index (0-3), `exp` an explanation (may be empty)."""
    options = [_need(row, f"op{c}", str) for c in "abcd"]
    return _mcq(task, options, _int_index(row.get("cop"), "cop"), row.get("exp"))


def piqa(task: dict, row: dict) -> dict:
    """PIQA: a goal and two solutions `sol1`, `sol2`; `label` is 0 or 1."""
    return _mcq(task, [_need(row, "sol1", str), _need(row, "sol2", str)], _int_index(row.get("label"), "label"))


def winogrande(task: dict, row: dict) -> dict:
    """WinoGrande: a sentence with a blank `_`, `option1`/`option2`, `answer` "1" or "2" (empty in the test split)."""
    options = [_need(row, "option1", str), _need(row, "option2", str)]
    return _mcq(task, options, _int_index(row.get("answer"), "answer") - 1)


def social_iqa(task: dict, row: dict) -> dict:
    """Social IQa: `context` and `question`, options `answerA..C`, `label` "1"-"3"."""
    options = [_need(row, f"answer{c}", str) for c in "ABC"]
    question = f"{_need(row, 'context', str).strip()}\n{task['question']}"
    return _mcq({**task, "question": question}, options, _int_index(row.get("label"), "label") - 1)


def aqua_rat(task: dict, row: dict) -> dict:
    """AQuA-RAT: `options` like "A)21", `correct` the letter, `rationale` the worked solution."""
    options = [re.sub(r"^\s*[A-E]\s*\)\s*", "", str(o)) for o in _need(row, "options", list)]
    return _mcq(task, options, _letter_index(row.get("correct"), len(options), "correct"), row.get("rationale"))


# --------------------------------------------------------------------------------------------- question answering


def short_answer(task: dict, row: dict) -> dict:
    """A short answer (str) or its accepted variants (a list of str, e.g. SQuAD's annotators, NQ's aliases)."""
    answer = task.get("answer")
    if isinstance(answer, list):
        answer = [a.strip() for a in answer if isinstance(a, str) and a.strip()]
        if not answer:
            raise RowError("field 'answer' has no non-empty answer; the source lists at least one per row")
        first = answer[0]
    else:
        first = answer = _text(answer, "answer")
    return _done(task, answer=answer, reference=f"Answer: {first}")


def hotpotqa(task: dict, row: dict) -> dict:
    """HotpotQA (distractor): `context` {title: [...], sentences: [[...], ...]}, ten paragraphs shown with titles."""
    context = _need(row, "context", dict)
    titles, sentences = context.get("title"), context.get("sentences")
    if not isinstance(titles, list) or not isinstance(sentences, list) or len(titles) != len(sentences):
        raise RowError("field 'context' needs title and sentences lists of the same length")
    paragraphs = "\n\n".join(f"{title}: {''.join(sents)}" for title, sents in zip(titles, sentences, strict=True))
    return short_answer({**task, "context": paragraphs}, row)


def yes_no(task: dict, row: dict) -> dict:
    """BoolQ: `answer` is a bool; the reply says yes or no."""
    answer = task.get("answer")
    if not isinstance(answer, bool):
        raise RowError(f"field 'answer' is {answer!r}, not true/false")
    word = "yes" if answer else "no"
    return _done(task, answer=word, reference=f"Answer: {word}")


# ----------------------------------------------------------------------------------------- instruction following


def ifeval(task: dict, row: dict) -> dict:
    """IFEval: `kwargs` is one dict per instruction; `datasets` gives every dict every key seen in the column
    (None where absent), which the checkers would take as arguments, so the None entries are dropped."""
    ids, kwargs = task.get("instruction_id_list"), task.get("kwargs")
    if not isinstance(ids, list) or not isinstance(kwargs, list) or len(ids) != len(kwargs):
        raise RowError("fields 'instruction_id_list' and 'kwargs' must be lists of the same length")
    return _done(task, kwargs=[_drop_none(k or {}) for k in kwargs])


def multi_if(task: dict, row: dict) -> dict:
    """Multi-IF, first turn: `turn_1_prompt` is a JSON message {role, content}, `turn_1_instruction_id_list` a JSON
    list of IFEval instruction ids and `turn_1_kwargs` a JSON list of JSON objects, one per instruction (as the
    benchmark's own evaluation code reads them)."""
    message = _json(row, "turn_1_prompt")
    ids = _json(row, "turn_1_instruction_id_list")
    raw_kwargs = _json(row, "turn_1_kwargs")
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        raise RowError("field 'turn_1_prompt' is not a JSON message with a 'content' string")
    if not isinstance(ids, list) or not isinstance(raw_kwargs, list) or len(ids) != len(raw_kwargs):
        raise RowError("fields 'turn_1_instruction_id_list' and 'turn_1_kwargs' must be JSON lists of one length")
    kwargs = [_drop_none(json.loads(k) if isinstance(k, str) else (k or {})) for k in raw_kwargs]
    return _done(task, question=message["content"], instruction_id_list=ids, kwargs=kwargs)


# ------------------------------------------------------------------------------------------------ function calling


def bfcl(task: dict, row: dict) -> dict:
    """BFCL: `question` is a list of turns, each a list of messages (one user turn in the single-call categories);
    `function` the callable functions' schemas; `ground_truth` the expected call(s) in Python syntax."""
    turns = _need(row, "question", list)
    messages = [m for turn in turns if isinstance(turn, list) for m in turn if isinstance(m, dict)]
    user = [m.get("content") for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)]
    if not user:
        raise RowError("field 'question' has no user message")
    functions = _drop_none(_need(row, "function", list))
    truth = _need(row, "ground_truth", list)
    if not truth or not all(isinstance(t, str) for t in truth):
        raise RowError("field 'ground_truth' must list the expected call(s) as strings")
    return _done(
        task,
        question=user[-1],
        functions=functions,
        functions_json=json.dumps(functions, indent=2, ensure_ascii=False),
        ground_truth=truth,
        reference=truth[0],
    )


# ---------------------------------------------------------------------------------------------------- translation

LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech", "da": "Danish",
    "de": "German", "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fa": "Persian",
    "fi": "Finnish", "fil": "Filipino", "fr": "French", "gu": "Gujarati", "he": "Hebrew", "hi": "Hindi",
    "hr": "Croatian", "hu": "Hungarian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese",
    "kn": "Kannada", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ml": "Malayalam", "mr": "Marathi",
    "nl": "Dutch", "no": "Norwegian", "pa": "Punjabi", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sr": "Serbian", "sv": "Swedish", "sw": "Swahili",
    "ta": "Tamil", "te": "Telugu", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu",
    "vi": "Vietnamese", "zh": "Chinese", "zu": "Zulu",
}  # fmt: skip


def _language(code: str) -> str:
    """The language (and the region the references were written for) of a code: de_DE -> German (DE)."""
    language, _, region = code.partition("_")
    name = LANGUAGE_NAMES.get(language.lower(), language)
    return f"{name} ({region})" if region else name


def wmt24pp(task: dict, row: dict) -> dict:
    """WMT24++: `lp` names the pair ("en-de_DE"), `source` the English segment, `target` the post-edited reference.
    Rows flagged `is_bad_source` are kept (they are in the benchmark); the flag stays on the row."""
    pair = _need(row, "lp", str)
    source, _, target = pair.partition("-")
    if not target:
        raise RowError(f"field 'lp' is {pair!r}, not a language pair like 'en-de_DE'")
    answer = _text(task.get("answer"), "target")
    if row.get("segment_id") is not None:  # segment ids restart in every pair's file
        task = {**task, "id": f"{pair}/{row['segment_id']}"}
    return _done(
        task,
        answer=answer,
        source_language=_language(source),
        target_language=_language(target),
        is_bad_source=bool(row.get("is_bad_source")),
        reference=answer,
    )


# ----------------------------------------------------------------------------------------------------- reasoning


def countdown(task: dict, row: dict) -> dict:
    """Countdown (TinyZero): `nums` and `target`; the source has no solutions, so there is no reference."""
    nums, target = task.get("nums"), task.get("target")
    if not isinstance(nums, list) or not nums or not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
        raise RowError("field 'nums' must be a non-empty list of whole numbers")
    if isinstance(target, bool) or not isinstance(target, int):
        raise RowError(f"field 'target' is {target!r}, not a whole number")
    shown = ", ".join(str(n) for n in nums)
    question = f"Using the numbers [{shown}], write an expression that equals {target}."
    # the source's `nums` is rllm.tasks.countdown's `numbers`
    return _done(task, question=question, numbers=list(nums))


# ------------------------------------------------------------------------------------------------------------ code


def _python_block(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def humaneval(task: dict, row: dict) -> dict:
    """HumanEval / HumanEval+: `prompt` (signature and docstring), `test` (`def check(candidate)`), `entry_point`;
    the reference is the prompt completed by `canonical_solution`."""
    prompt = _need(row, "prompt", str)
    tests = {
        "format": "humaneval",
        "prompt": prompt,
        "test": _need(row, "test", str),
        "entry_point": _need(row, "entry_point", str),
    }
    solution = row.get("canonical_solution")
    extra = {"reference": _python_block(prompt + solution)} if isinstance(solution, str) and solution.strip() else {}
    return _done(task, tests=tests, **extra)


def mbpp(task: dict, row: dict) -> dict:
    """MBPP: `test_list` holds assert statements calling the function by name; they become the body of a
    HumanEval-style `check(candidate)` (the runner binds the name to the checked candidate too), after
    `test_setup_code`. The entry point is the function the asserts call that the reference `code` defines."""
    code = _need(row, "code", str)
    asserts = [a for a in _need(row, "test_list", list) if isinstance(a, str) and a.strip()]
    if not asserts:
        raise RowError("field 'test_list' has no assert statements")
    called = re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*\(", " ".join(asserts))
    try:
        tree = ast.parse(code)
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    except SyntaxError:
        defined = re.findall(r"^def\s+([A-Za-z_]\w*)", code, re.MULTILINE)
    entry = next((name for name in called if name in defined), None)
    if entry is None:
        raise RowError(f"the asserts in 'test_list' call none of the functions 'code' defines ({defined})")
    setup = row.get("test_setup_code") or ""
    body = "\n".join(f"    {a.strip()}" for a in asserts)
    test = f"{setup.strip()}\n\n\ndef check(candidate):\n{body}\n".lstrip()
    tests = {"format": "humaneval", "prompt": "", "test": test, "entry_point": entry}
    return _done(
        task,
        tests=tests,
        entry_point=entry,
        test_examples="\n".join(a.strip() for a in asserts),
        reference=_python_block(code.replace("\r\n", "\n")),
    )


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickles plain data only (str, list, dict, numbers: pickle's own opcodes); any class or function reference
    (`find_class`) or persistent id is refused, so no code can run."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only plain data is accepted")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id: only plain data is accepted")


def _lcb_cases(text: str, column: str) -> list:
    """LiveCodeBench test cases: a JSON list, or (the private cases of every release) the same JSON text pickled,
    zlib-compressed and base64-encoded, which is decoded here without running any pickled code."""
    try:
        cases = json.loads(text)
    except json.JSONDecodeError:
        try:
            raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
            cases = json.loads(_NoGlobalsUnpickler(io.BytesIO(raw)).load())
        except (ValueError, TypeError, zlib.error, pickle.UnpicklingError, EOFError, UnicodeError) as error:
            raise RowError(f"field {column!r} is neither JSON nor encoded JSON ({type(error).__name__})") from None
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "input" in c and "output" in c for c in cases):
        raise RowError(f"field {column!r} is not a list of {{input, output, testtype}} cases")
    return cases


def livecodebench(task: dict, row: dict) -> dict:
    """LiveCodeBench code generation: public and private tests (both used), stdin programs (`testtype` "stdin")
    or LeetCode-style functions (`functional`: one JSON argument per input line, `metadata.func_name` the method of
    the starter code's `Solution` class). The source ships no solutions, so there is no reference."""
    cases = _lcb_cases(_need(row, "public_test_cases", str), "public_test_cases")
    cases += _lcb_cases(_need(row, "private_test_cases", str), "private_test_cases")
    if not cases:
        raise RowError("the row has no test cases")
    starter = row.get("starter_code") or ""
    if cases[0].get("testtype") == "functional":
        metadata = _json(row, "metadata")
        fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
        if not isinstance(fn_name, str) or not fn_name:
            raise RowError("field 'metadata' has no func_name, which every functional LiveCodeBench row has")
        try:
            calls = [
                {"args": [json.loads(line) for line in c["input"].split("\n") if line.strip()],
                 "output": json.loads(c["output"])}
                for c in cases
            ]  # fmt: skip
        except (json.JSONDecodeError, AttributeError, TypeError):
            raise RowError("a functional test's input or output is not JSON, one argument per line") from None
        tests: dict = {"format": "call", "fn_name": fn_name, "cases": calls}
        how = f"Complete this starter code (keep the class and method names):\n{_python_block(starter)}"
    else:
        tests = {"format": "stdio", "cases": [{"input": str(c["input"]), "output": str(c["output"])} for c in cases]}
        how = "Your program reads the input from standard input and writes the answer to standard output."
        if starter.strip():
            how += f"\nStart from this code:\n{_python_block(starter)}"
    return _done(task, tests=tests, instructions=how)


# -------------------------------------------------------------------------------------------------------- vision
# A vision row's images go in `images`, in order, as PNG data URLs (`rllm.images.image_part`): the task rows are
# logged as JSON, and `catalog_prompt` puts them before the text of the user message. `datasets` decodes an image
# column to a PIL image; a copy read without decoding gives {"bytes", "path"}, read the same way.


def _image_urls(values: list, columns: str) -> list[str]:
    """The data URLs of the images among `values` (None entries dropped); at least one."""
    from rllm.errors import ImageError
    from rllm.images import image_part

    urls = []
    for value in values:
        if isinstance(value, dict):  # an image cell that was not decoded
            value = value.get("bytes") or value.get("path")
        if value is None:
            continue
        try:
            urls.append(image_part(value)["image_url"]["url"])
        except ImageError as error:
            raise RowError(f"an image of field {columns} cannot be read ({error}); pull the data again") from None
    if not urls:
        raise RowError(f"field {columns} holds no image, which every row of this benchmark has; pull the data again")
    return urls


def _boxed_choice(task: dict, question: str, options: list, correct: int, images: list[str]) -> dict:
    """A multiple-choice row scored by the math verifier: the lettered options after the question, the letter as
    `answer`, boxed in the reference."""
    mcq = _mcq(task, options, correct)
    letter = mcq["answer"]
    return _done(mcq, question=f"{question}\n\n{mcq['options']}", images=images, reference=_boxed_reference(letter))


def mmmu(task: dict, row: dict) -> dict:
    """MMMU: up to seven images (`image_1`..`image_7`), `options` a Python list written as a string ("[]" for an
    open question), `answer` the option's letter or, for an open question, the answer text (some hold a list of
    accepted answers as a string: the first is the reference). `<image k>` in the text names the k-th image."""
    images = _image_urls([row.get(f"image_{k}") for k in range(1, 8)], "image_1..image_7")
    question = _need(row, "question", str).strip()
    options = _literal_list(_need(row, "options", str), "options")
    if options:
        return _boxed_choice(task, question, options, _letter_index(row.get("answer"), len(options), "answer"), images)
    answer = _text(row.get("answer"), "answer")
    if answer.startswith("["):
        accepted = _literal_list(answer, "answer")
        answer = _text(accepted[0] if accepted else None, "answer")
    return _done(task, question=question, answer=answer, images=images, reference=_boxed_reference(answer))


def _literal_list(text: str, column: str) -> list:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise RowError(f"field {column!r} is not a list written as Python ({text[:60]!r})") from None
    if not isinstance(value, list):
        raise RowError(f"field {column!r} is a {type(value).__name__}, not a list of options")
    return value


def mathvista(task: dict, row: dict) -> dict:
    """MathVista: `query` (mapped to `question`) is the question with its hint and, for a multiple-choice one, the
    options lettered (A), (B), ...; `answer` is the option's text there (the letter becomes the answer) or the
    value of a free-form one."""
    images = _image_urls([row.get("decoded_image")], "decoded_image")
    answer = _text(row.get("answer"), "answer")
    if row.get("question_type") == "multi_choice":
        choices = [str(c).strip() for c in _need(row, "choices", list)]
        if answer not in choices:
            raise RowError(f"field 'answer' is {answer!r}, not one of the row's choices {choices}")
        answer = LETTERS[choices.index(answer)]
    return _done(task, answer=answer, images=images, reference=_boxed_reference(answer))


def mathvision(task: dict, row: dict) -> dict:
    """MATH-Vision: `options` lettered A-E for a multiple-choice question (`answer` its letter), empty for a
    free-form one (`answer` the value)."""
    images = _image_urls([row.get("decoded_image")], "decoded_image")
    question = _need(row, "question", str).strip()
    options = row.get("options") or []
    if options:
        return _boxed_choice(task, question, options, _letter_index(row.get("answer"), len(options), "answer"), images)
    answer = _text(row.get("answer"), "answer")
    return _done(task, question=question, answer=answer, images=images, reference=_boxed_reference(answer))


def geometry3k(task: dict, row: dict) -> dict:
    """Geometry3K: the diagram in `images`, `problem` starting with an `<image>` marker (the image is shown before
    the text), `answer` the value of the correct choice."""
    images = _image_urls(_need(row, "images", list), "images")
    question = _need(row, "problem", str).replace("<image>", "").strip()
    answer = _text(row.get("answer"), "answer")
    return _done(task, question=question, answer=answer, images=images, reference=_boxed_reference(answer))


def ai2d(task: dict, row: dict) -> dict:
    """AI2D: `options` the option texts, `answer` the correct one's index as a string ("0".."3")."""
    images = _image_urls([row.get("image")], "image")
    return {**_mcq(task, _need(row, "options", list), _int_index(row.get("answer"), "answer")), "images": images}


def scienceqa_img(task: dict, row: dict) -> dict:
    """ScienceQA (its questions with an image): `choices` the option texts, `answer` the correct one's index; the
    `hint`, when there is one, is the context shown before the question."""
    images = _image_urls([row.get("image")], "image")
    hint = row.get("hint")
    if isinstance(hint, str) and hint.strip():
        task = {**task, "question": f"Context: {hint.strip()}\n{task['question']}"}
    mcq = _mcq(task, _need(row, "choices", list), _int_index(row.get("answer"), "answer"), row.get("solution"))
    return {**mcq, "images": images}


def _accepted(values: Any, column: str) -> list[str]:
    """A non-empty list of accepted answer texts."""
    if not isinstance(values, list) or not values:
        got = "missing" if values is None else ("empty" if isinstance(values, list) else f"a {type(values).__name__}")
        raise RowError(f"field {column!r} is {got}: a row needs its accepted answers (the hub's test split hides them)")
    return [_text(value, column) for value in values]


def vqa_answers(task: dict, row: dict) -> dict:
    """Short-answer VQA (ChartQA `label`, DocVQA `answers`, OCRBench `answer`, mapped to `answer`): a list of
    accepted answers; the image in `image`."""
    images = _image_urls([row.get("image")], "image")
    answers = _accepted(task.get("answer"), "answer")
    return _done(task, answer=answers, images=images, reference=f"Answer: {answers[0]}")


def countbenchqa(task: dict, row: dict) -> dict:
    """CountBenchQA: `number`, the count (an int)."""
    images = _image_urls([row.get("image")], "image")
    answer = _text(_need(row, "number", int), "number")
    return _done(task, answer=answer, images=images, reference=_boxed_reference(answer))


# ----------------------------------------------------------------------------------------------------------- swe


def swebench(task: dict, row: dict) -> dict:
    """SWE-bench (Verified, Lite, full) rows as the Docker-mode tasks rllm's SWE environment plays
    (`rllm.tasks.swe.swebench.normalize_swe_row`: FAIL_TO_PASS / PASS_TO_PASS decoded from their JSON strings,
    `image` by swebench's own naming rule, `backend: "docker"`); the issue is the question."""
    from rllm.tasks.swe.store import SWEDataError
    from rllm.tasks.swe.swebench import normalize_swe_row

    source = {key: value for key, value in row.items() if not key.startswith("_")}
    try:
        swe = normalize_swe_row(source, "the row", "swebench")
    except SWEDataError as error:
        raise RowError(str(error)) from None
    return _done(task, **swe, question=swe["problem_statement"])
