import sys
import types

import pytest

from rllm.rewards.base import RewardError
from rllm.rewards.ifeval import INSTRUCTIONS, count_sentences, count_words, ifeval_reward

PARAGRAPHS = "First part here.\n\nSecond part starts now.\n\nThird one."

# (instruction id, kwargs, a reply that follows it, a reply that does not)
CASES = [
    ("keywords:existence", {"keywords": ["banana", "Split"]}, "A BANANA split.", "Just a banana."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "Cat and cat.", "One cat."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "One cat.", "cat cat"),
    ("keywords:forbidden_words", {"forbidden_words": ["red"]}, "Redwood trees are tall.", "The Red car."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"}, "Zzz.", "Zz."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "less than"}, "Zz.", "zZz"),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "One. Two!",
        "One. Two. Three.",
    ),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "at least"}, "Dr. X left. Yes?", "Hi."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "One.\n***\nTwo.\n***", "One.\n***\n\n***\nTwo"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "It's three words", "Two words"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "less than"}, "Two words", "one two three"),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "second"},
        PARAGRAPHS,
        PARAGRAPHS.replace("Second", "Next"),
    ),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name] at [address]", "Dear [name]"),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\n\nP.S. Bye", "Hello. Bye"),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\np. p. s. more", "Hi.\nP.S. more"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n- two\n**bold**", "* one\n* two\n* three"),
    ("detectable_format:constrained_response", {}, "My answer is no.", "No, it is not."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and **two**", "*one* and **"),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nIntro\nSECTION 2\nBody",
        "SECTION 1\nIntro only",
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', '{"a": 1} and more'),
    ("detectable_format:title", {}, "<<Poem of Joy>>\nLines...", "<< >>\nNo title"),
    ("combination:two_responses", {}, "First take.\n******\nSecond take.", "Same.\n******\nSame."),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Write a haiku about rain."},
        "write a haiku about rain. Drops fall...",
        "Here is a haiku about rain.",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        'Done. Any other questions?"',
        "Any other questions? No.",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "BIG and LOUD",
        "BIG deal",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "STATE-OF-THE-ART",
        "A B",
    ),
    ("change_case:english_capital", {}, "THE WEATHER IS LOVELY TODAY, SO WE WALK TO THE PARK.", "ALL CAPS but one"),
    ("change_case:english_lowercase", {}, "all lower case, 100%!", "all lower but One"),
    ("punctuation:no_comma", {}, "No commas here.", "One, two."),
    ("startend:quotation", {}, '  "Wrapped in quotes."  ', '"Only at the start.'),
]


@pytest.mark.parametrize("instruction, kwargs, follows, breaks", CASES, ids=[case[0] for case in CASES])
def test_each_instruction_has_a_reply_that_follows_it_and_one_that_does_not(instruction, kwargs, follows, breaks):
    task = {"prompt": "...", "instruction_id_list": [instruction], "kwargs": [kwargs]}
    passed = ifeval_reward(task, follows)
    assert (passed.reward, passed.is_correct, passed.info["followed"]) == (1.0, True, {instruction: True})
    failed = ifeval_reward(task, breaks)
    assert (failed.reward, failed.is_correct, failed.info["followed"]) == (0.0, False, {instruction: False})


def test_every_ifeval_instruction_is_checked_and_tested():
    tested = {case[0] for case in CASES} | {"language:response_language"}
    assert tested == set(INSTRUCTIONS) and len(INSTRUCTIONS) == 25


def test_the_reward_is_the_fraction_followed_and_correct_only_when_all_are():
    task = {
        "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase", "startend:quotation"],
        # the hub's rows give every instruction every key, None where it does not apply
        "kwargs": [{"num_words": None, "relation": None}, {"keyword": None}, None],
    }
    out = ifeval_reward(task, '"no commas, but quoted"')
    assert out.reward == pytest.approx(2 / 3) and out.is_correct is False
    assert out.info["followed"] == {
        "punctuation:no_comma": False,
        "change_case:english_lowercase": True,
        "startend:quotation": True,
    }
    assert ifeval_reward(task, '"no commas and quoted"').is_correct


def test_a_repeated_instruction_is_reported_once_per_occurrence():
    kwargs = [{"keywords": ["cat"]}, {"keywords": ["dog"]}]
    out = ifeval_reward({"instruction_id_list": ["keywords:existence"] * 2, "kwargs": kwargs}, "a cat")
    assert out.reward == 0.5 and len(out.info["followed"]) == 2


def test_whole_number_kwargs_may_arrive_as_floats():
    task = {
        "instruction_id_list": ["length_constraints:number_words"],
        "kwargs": [{"num_words": 2.0, "relation": "at least"}],
    }
    assert ifeval_reward(task, "two words").reward == 1.0


def test_counting():
    assert count_words("It's a well-known fact: 3.5 > 2") == 9  # \w+ runs, as IFEval's tokenizer
    assert count_sentences("Hello world. Mr. Smith met J. K. Rowling in the U.S. today! Did he? Yes") == 4
    assert count_sentences("Pi is 3.14. Really.") == 2
    assert count_sentences('He said "stop." Then left.') == 2
    assert count_sentences("No end mark") == 1
    assert count_sentences("") == 0


@pytest.mark.parametrize("reply", ["", "  ", None, 5])
def test_a_reply_that_is_not_text_scores_zero(reply):
    task = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    out = ifeval_reward(task, reply)
    assert (out.reward, out.is_correct, out.info["followed"]) == (0.0, False, {"punctuation:no_comma": False})
    assert "reply" in out.info["reason"]


def test_response_language_without_langdetect_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "langdetect", None)  # import fails
    task = {"instruction_id_list": ["language:response_language"], "kwargs": [{"language": "fr"}]}
    with pytest.raises(RewardError, match="needs langdetect"):
        ifeval_reward(task, "Bonjour tout le monde")
    # the case instructions check the case alone without it
    assert ifeval_reward({"instruction_id_list": ["change_case:english_capital"]}, "HELLO").reward == 1.0


def test_response_language_with_langdetect(monkeypatch):
    class LangDetectException(Exception):
        pass

    def detect(text):
        if not text.strip("!? "):
            raise LangDetectException("no features")
        return "fr" if "bonjour" in text.lower() else "en"

    factory = types.SimpleNamespace(seed=None)
    fake = types.SimpleNamespace(detect=detect, LangDetectException=LangDetectException, DetectorFactory=factory)
    monkeypatch.setitem(sys.modules, "langdetect", fake)
    task = {"instruction_id_list": ["language:response_language"], "kwargs": [{"language": "fr"}]}
    assert ifeval_reward(task, "Bonjour tout le monde").reward == 1.0
    assert ifeval_reward(task, "Hello everyone").reward == 0.0
    assert ifeval_reward(task, "?!").reward == 1.0  # undetectable counts as followed, as in IFEval
    capital = {"instruction_id_list": ["change_case:english_capital"], "kwargs": [{}]}
    assert ifeval_reward(capital, "BONJOUR TOUT LE MONDE").reward == 0.0  # capitals, but not English


@pytest.mark.parametrize(
    "task, message",
    [
        ({"id": "k1", "instruction_id_list": ["detectable_format:rhyme"], "kwargs": [{}]}, "'detectable_format:rhyme'"),
        ({"id": "k1", "kwargs": [{}]}, "no 'instruction_id_list'"),
        ({"instruction_id_list": [], "kwargs": []}, "no 'instruction_id_list'"),
        ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}, "one dict per instruction"),
        ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": ["x"]}, "one dict per instruction"),
        ({"instruction_id_list": ["keywords:existence"], "kwargs": [{"keywords": None}]}, "needs kwargs 'keywords'"),
        ({"instruction_id_list": ["keywords:existence"], "kwargs": [{"keywords": "cat"}]}, "needs kwargs 'keywords'"),
        (
            {
                "instruction_id_list": ["length_constraints:number_words"],
                "kwargs": [{"num_words": 5, "relation": "at most"}],
            },
            "'less than' or 'at least'",
        ),
        (
            {
                "instruction_id_list": ["length_constraints:number_words"],
                "kwargs": [{"num_words": 2.5, "relation": "at least"}],
            },
            "whole number",
        ),
        (
            {
                "instruction_id_list": ["keywords:letter_frequency"],
                "kwargs": [{"letter": "ab", "let_frequency": 1, "let_relation": "at least"}],
            },
            "one letter",
        ),
    ],
)
def test_a_row_that_cannot_be_checked_is_refused(task, message):
    with pytest.raises(RewardError, match=message):
        ifeval_reward(task, "some reply")


def test_an_unknown_instruction_names_the_known_ones():
    task = {"instruction_id_list": ["keywords:existence", "made:up"], "kwargs": [{"keywords": ["x"]}, {}]}
    with pytest.raises(RewardError) as error:
        ifeval_reward(task, "x")
    assert "made:up" in str(error.value) and "punctuation:no_comma" in str(error.value)


def test_degenerate_replies_are_checked_in_linear_time():
    # each of these took seconds with the reference's regexes or a re-read of the sentence at every period
    assert count_sentences("A. " * 20000) == 1  # initials all the way
    placeholders = {
        "instruction_id_list": ["detectable_content:number_placeholders"],
        "kwargs": [{"num_placeholders": 1}],
    }
    assert ifeval_reward(placeholders, "[x" * 20000).reward == 0.0
    title = {"instruction_id_list": ["detectable_format:title"], "kwargs": [{}]}
    assert ifeval_reward(title, "<<" * 50000).reward == 0.0


def test_response_language_with_the_real_langdetect():
    task = {"instruction_id_list": ["language:response_language"], "kwargs": [{"language": "fr"}]}
    french = "Bonjour à tous, nous allons parler aujourd'hui de la cuisine française et de ses traditions."
    assert [ifeval_reward(task, french).reward for _ in range(3)] == [1.0, 1.0, 1.0]
    assert ifeval_reward(task, "Good morning everyone, today we talk about the history of the city.").reward == 0.0
