"""Reward shaping helpers (`rllm.rewards.shaping`) against numbers computed by hand."""

import pytest

from rllm.rewards.shaping import format_reward, soft_overlong_penalty


@pytest.mark.parametrize(("length", "expected"), [(0, 0.0), (3584, 0.0), (3840, -0.5), (4096, -1.0), (5000, -1.0)])
def test_soft_overlong_penalty_falls_linearly_over_the_buffer(length, expected):
    # DAPO: max 4096, buffer 512 -> free up to 3584; 3840 is half-way into the buffer
    assert soft_overlong_penalty(length, 4096, 512) == expected
    assert soft_overlong_penalty(length, 4096, 512, factor=0.5) == expected / 2


def test_soft_overlong_penalty_refuses_a_buffer_without_room():
    with pytest.raises(ValueError, match="overlong buffer must be in"):
        soft_overlong_penalty(10, 100, 100)


def test_format_reward_matches_across_lines():
    assert format_reward("so\n\\boxed{42}", r"\\boxed\{.+\}") == 0.0
    assert format_reward("42", r"\\boxed\{.+\}") == -1.0
    assert format_reward("<think>a\nb</think>", r"<think>.*</think>", matched=0.1, unmatched=0.0) == 0.1
