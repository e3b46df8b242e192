"""The catalog's verifiers by name: one reward function per kind of answer, and the row fields each one reads.

Each name maps to "module:function" of a reward function `fn(task, response) -> RewardOutput`, imported when a
benchmark using it is scored (math-verify, sacrebleu and the sandbox load only when needed).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["REQUIRED_FIELDS", "VERIFIERS", "verifier_fn"]

VERIFIERS: dict[str, str] = {
    "math": "rllm.rewards.math:math_reward",
    "choice": "rllm.rewards.choice:choice_reward",
    "f1": "rllm.rewards.text:f1_reward",
    "exact_match": "rllm.rewards.text:exact_match_reward",
    "chrf": "rllm.rewards.text:chrf_reward",
    "code": "rllm.rewards.code:code_reward",
    "ifeval": "rllm.rewards.ifeval:ifeval_reward",
    "bfcl": "rllm.rewards.bfcl:bfcl_reward",
    "countdown": "rllm.tasks.countdown:countdown_reward",
    "judge": "rllm.tasks.catalog.judge:judge_reward",
    "swe": "",  # scored by the SWE environment's grader (rllm.tasks.swe), not by a reward function
}

# canonical row fields (besides `id` and `question`) each verifier reads, with the type each must have
REQUIRED_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "math": {"answer": (str, int, float)},
    "choice": {"answer": str, "choices": list},
    "f1": {"answer": (str, list)},
    "exact_match": {"answer": (str, list)},
    "chrf": {"answer": (str, list)},
    "code": {"tests": (dict, list, str)},
    "ifeval": {"instruction_id_list": list, "kwargs": list},
    "bfcl": {"ground_truth": list, "functions": list},
    "countdown": {"numbers": list, "target": int},
    "judge": {"answer": (str, list)},
    "swe": {"instance_id": str, "problem_statement": str},
}


def verifier_fn(name: str) -> Callable[[dict, Any], Any]:
    """The reward function of verifier `name`."""
    module, _, function = VERIFIERS[name].partition(":")
    return getattr(importlib.import_module(module), function)
