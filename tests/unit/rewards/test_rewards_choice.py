import pytest

from rllm.rewards.base import RewardError, to_reward_output
from rllm.rewards.choice import choice_reward, extract_choice

CAPITALS = ["London", "Paris", "Rome", "Berlin"]
MMLU_PRO = [f"option {n}" for n in range(10)]  # ten options, A-J


@pytest.mark.parametrize(
    "reply, letter",
    [
        ("The answer is (C)", "C"),
        ("Answer: C", "C"),
        ("**Answer:** C", "C"),
        ("The answer is: **(C)**", "C"),
        ("**C**", "C"),
        ("\\boxed{C}", "C"),
        ("Therefore, the final answer is $\\boxed{\\text{C}}$.", "C"),
        ("so the final answer is $C$.", "C"),
        ("(c)", "C"),
        ("The answer is (c).", "C"),
        ("answer: c", "C"),
        ("the answer is c.", "C"),
        ("C. Paris", "C"),
        ("(C) Paris", "C"),
        ("Let me think about the options.\nParis is the capital.\nC", "C"),
        ("The correct option is C.", "C"),
        ("So the answer is option B.", "B"),
        ("I choose D", "D"),
        ("I'd go with (B) here.", "B"),
        ("The answer is A because the others are wrong.", "A"),
        ("Options (A) and (B) fail, so (D).", "D"),
    ],
)
def test_extract_choice_reads_the_usual_ways_of_naming_a_letter(reply, letter):
    assert extract_choice(reply) == letter


@pytest.mark.parametrize(
    "reply, letter",
    [
        ("First I thought the answer is A, but on reflection the answer is D.", "D"),  # the last statement wins
        ("\\boxed{B}\nWait, that is wrong. The answer is C.", "C"),
        ("The answer is (B).\n\nWhy not the others: (A) is too small, (C) too big.", "B"),  # a statement beats marks
        ("A possible answer is that the sky is blue, so the answer is (B).", "B"),
    ],
)
def test_when_several_letters_appear_the_last_explicit_answer_wins(reply, letter):
    assert extract_choice(reply) == letter


@pytest.mark.parametrize(
    "reply",
    [
        "A possible answer is that the reaction is exothermic.",  # the article, not option A
        "Answer: I think the question is ambiguous.",  # the pronoun, not option I
        "The answer: A cat is a mammal.",
        "the answer is a city in France",  # a word, not option (a)
        "Albert Einstein was right.",
        "The answer is not A.",  # no statement of a letter
        "I cannot decide.",
        "",
        "   \n ",
    ],
)
def test_extract_choice_does_not_read_letters_out_of_prose(reply):
    assert extract_choice(reply, "ABCDEFGHIJ") is None


def test_extract_choice_only_returns_valid_letters():
    assert extract_choice("The answer is (E).") is None  # A-D by default
    assert extract_choice("The answer is (E).", "ABCDE") == "E"
    assert extract_choice("The answer is (J).", "ABCDEFGHIJ") == "J"
    assert extract_choice("The answer is (I).", "ABCDEFGHIJ") == "I"  # bracketed, option I is meant
    assert extract_choice(None) is None
    assert extract_choice(42) is None


def test_choice_reward_scores_the_answer_letter():
    task = {"id": "q1", "answer": "B", "choices": CAPITALS}
    right = choice_reward(task, "Paris is the capital of France. The answer is (B).")
    assert (right.reward, right.is_correct, right.info["extracted"]) == (1.0, True, "B")
    wrong = choice_reward(task, "The answer is (C).")
    assert (wrong.reward, wrong.is_correct, wrong.info["extracted"], wrong.info["reason"]) == (0.0, False, "C", "wrong")
    none = choice_reward(task, "I am not sure.")
    assert (none.reward, none.info["extracted"], none.info["reason"]) == (0.0, None, "no_answer")
    assert to_reward_output(right).correct


def test_choice_reward_takes_letters_from_the_number_of_choices():
    task = {"answer": "J", "choices": MMLU_PRO}
    assert choice_reward(task, "The answer is (J)").reward == 1.0
    assert choice_reward({"answer": "C", "choices": CAPITALS[:3]}, "Answer: C").reward == 1.0
    # without choices: A-D, widened to the answer's letter
    assert choice_reward({"answer": "F"}, "Answer: F").reward == 1.0
    assert choice_reward({"answer": "b"}, "answer: (b)").reward == 1.0  # a lower-case or bracketed answer field


def test_choice_reward_accepts_the_exact_text_of_one_option():
    task = {"answer": "B", "choices": CAPITALS}
    out = choice_reward(task, "The capital of France is Paris.\nAnswer: paris.")
    assert (out.reward, out.info["extracted"], out.info["by"]) == (1.0, "B", "option text")
    assert choice_reward(task, "Answer: Rome").info["extracted"] == "C"
    # an option whose text starts with the article "A" is its text, not the letter A
    books = {"answer": "B", "choices": ["Hamlet", "A Tale of Two Cities", "Emma", "Ulysses"]}
    assert choice_reward(books, "The answer is A Tale of Two Cities").reward == 1.0
    # text naming two options (after normalisation) is no answer by text
    twins = {"answer": "A", "choices": ["The Nile", "Nile", "Amazon", "Congo"]}
    assert choice_reward(twins, "Answer: the Nile").info["extracted"] is None


def test_a_labelled_option_is_read_by_its_letter_not_its_text():
    task = {"answer": "A", "choices": ["True", "False"]}
    assert choice_reward(task, "Answer: (A) True").info["extracted"] == "A"
    assert choice_reward(task, "Answer: (B) False").info["extracted"] == "B"


@pytest.mark.parametrize("reply", ["", "   ", None, 3, ["A"]])
def test_a_reply_that_is_not_text_scores_zero(reply):
    out = choice_reward({"answer": "A", "choices": CAPITALS}, reply)
    assert (out.reward, out.is_correct, out.info["extracted"]) == (0.0, False, None)
    assert "reply" in out.info["reason"]


@pytest.mark.parametrize(
    "task, message",
    [
        ({"id": "r7", "choices": CAPITALS}, "row r7 has no 'answer' letter"),
        ({"answer": 2, "choices": CAPITALS}, "no 'answer' letter"),
        ({"answer": "Paris", "choices": CAPITALS}, "no 'answer' letter"),
        ({"answer": "E", "choices": CAPITALS}, "only 4 'choices'"),
        ({"answer": "A", "choices": "A. x B. y"}, "'choices' that are not a list"),
        ({"answer": "A", "choices": ["only one"]}, "'choices' that are not a list"),
        ({"answer": "A", "choices": ["x", 2]}, "'choices' that are not a list"),
    ],
)
def test_a_malformed_row_is_refused_not_scored_zero(task, message):
    with pytest.raises(RewardError, match=message):
        choice_reward(task, "The answer is (A).")
