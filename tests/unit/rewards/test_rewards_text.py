import pytest

from rllm.rewards.base import RewardError
from rllm.rewards.text import (
    chrf_reward,
    exact_match,
    exact_match_reward,
    extract_answer_span,
    f1_reward,
    is_abbreviation,
    normalize_text,
    token_f1,
)


@pytest.mark.parametrize(
    "text, normal",
    [
        ("The Eiffel Tower.", "eiffel tower"),
        ("  an   Apple, a day! ", "apple day"),
        ("Theatre", "theatre"),  # "the" inside a word stays
        ("U.S.A.", "usa"),
        (None, ""),
        (1984, "1984"),
    ],
)
def test_normalize_text_is_squads(text, normal):
    assert normalize_text(text) == normal


def test_exact_match_and_token_f1_take_the_best_reference():
    assert exact_match("the eiffel tower", ["Eiffel Tower", "La tour Eiffel"])
    assert not exact_match("Eiffel", "Eiffel Tower")
    assert token_f1("Eiffel", "Eiffel Tower") == pytest.approx(2 / 3)
    assert token_f1("Eiffel Tower in Paris", ["Paris", "Eiffel Tower"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("dog dog", "dog") == pytest.approx(2 / 3)  # repeats count once per reference token
    assert token_f1("London", "Paris") == 0.0
    assert token_f1("", "") == 1.0  # SQuAD: both empty agree
    assert token_f1("the", "Paris") == 0.0  # only an article: no tokens


@pytest.mark.parametrize(
    "reply, span",
    [
        ("Paris", "Paris"),
        ("Let me think.\nThe capital is in France.\nAnswer: Paris", "Paris"),
        ("**Answer:** *Paris*.", "Paris"),
        ("So the answer is Barack Obama. He was born in Hawaii.", "Barack Obama"),
        ("The answer is St. Louis. It is in Missouri.", "St. Louis"),  # an abbreviation does not end the span
        ("Answer: Yes. The passage says so.", "Yes"),
        ("Answer: No. Mr. Smith left.", "No"),
        ("The answer is Bob. He won.", "Bob"),
        ("Final answer:\nMarie Curie", "Marie Curie"),
        ("I think \\boxed{\\text{Marie Curie}} is right.", "Marie Curie"),
        ("Reasoning...\n\nMarie Curie\n\n", "Marie Curie"),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer_span(reply, span):
    assert extract_answer_span(reply) == span


def test_f1_reward_is_partial_credit_and_correct_only_on_exact_match():
    task = {"answer": ["Barack Obama", "Obama"]}
    full = f1_reward(task, "The answer is Barack Obama.")
    assert (full.reward, full.is_correct, full.info["extracted"]) == (1.0, True, "Barack Obama")
    part = f1_reward({"answer": "Barack Hussein Obama"}, "Answer: Barack Obama")
    assert part.reward == pytest.approx(0.8) and part.is_correct is False
    assert f1_reward(task, "Answer: George Bush").reward == 0.0


def test_exact_match_reward():
    task = {"answer": "yes"}
    assert exact_match_reward(task, "Answer: Yes.").reward == 1.0
    out = exact_match_reward(task, "Answer: no")
    assert (out.reward, out.is_correct, out.info["extracted"]) == (0.0, False, "no")
    assert exact_match_reward({"answer": 1984}, "It was published in\n1984").reward == 1.0  # a number as text


def test_chrf_reward_scores_the_whole_reply_against_the_best_reference():
    task = {"answer": ["Das ist ein kleiner Test.", "Dies ist ein Test."]}
    same = chrf_reward(task, "Das ist ein kleiner Test.")
    assert (same.reward, same.is_correct, same.info["chrf"]) == (1.0, True, 100.0)
    close = chrf_reward(task, "Das ist ein Test.")
    assert 0.5 < close.reward < 1.0 and close.is_correct
    far = chrf_reward(task, "Bonjour tout le monde.")
    assert far.reward < 0.2 and not far.is_correct
    strict = chrf_reward({**task, "chrf_threshold": 99}, "Das ist ein Test.")
    assert strict.reward == close.reward and strict.is_correct is False


@pytest.mark.parametrize("reward_fn", [f1_reward, exact_match_reward, chrf_reward])
@pytest.mark.parametrize("reply", ["", "  \n", None, 7, ["Paris"]])
def test_a_reply_that_is_not_text_scores_zero(reward_fn, reply):
    out = reward_fn({"answer": "Paris"}, reply)
    assert (out.reward, out.is_correct) == (0.0, False)
    assert "reply" in out.info["reason"]


@pytest.mark.parametrize("reward_fn", [f1_reward, exact_match_reward, chrf_reward])
@pytest.mark.parametrize("answer", [None, [], {"text": "x"}, ["a", None], True])
def test_a_row_without_a_usable_answer_is_refused(reward_fn, answer):
    task = {"id": "h3"} if answer is None else {"id": "h3", "answer": answer}
    with pytest.raises(RewardError, match=r"row h3 has no usable 'answer'.*fix the row"):
        reward_fn(task, "Answer: Paris")


def test_a_bad_chrf_threshold_is_refused():
    with pytest.raises(RewardError, match="chrf_threshold"):
        chrf_reward({"answer": "Hallo", "chrf_threshold": "high"}, "Hallo")


def test_is_abbreviation():
    assert all(is_abbreviation(word) for word in ["Dr", "st", "J", "U.S", "e.g", "(etc", "Ph.D"])
    assert not any(is_abbreviation(word) for word in ["No", "Yes", "Bob", "3.14", "", "a"])
