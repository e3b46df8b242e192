"""The environment hubs' test helpers: a refused task's message, rows through JSON, the catalog's fixtures, OpenEnv's
echo environment written by its own generator, and the verifiers environments (modules in verifiers' shape)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from rllm.tasks import UnknownTaskError, get_task


def hub_error(name: str) -> str:
    """The one-line message with which `get_task(name)` refuses a task."""
    with pytest.raises(UnknownTaskError) as caught:
        get_task(name)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def round_trip(rows: list[dict]) -> list[dict]:
    """`rows` stored as JSON and read back (tuples become lists), as a data file holds them."""
    return json.loads(json.dumps(rows))


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "catalog"


def forget_modules(*names: str) -> None:
    """Drop `names` (and their submodules) from sys.modules: each test writes its environments to its own tmp_path,
    and a module imported from an earlier test's folder would shadow them."""
    for module in [m for m in sys.modules if m in names or m.startswith(tuple(f"{name}." for name in names))]:
        del sys.modules[module]


def make_echo_env(parent: Path) -> Path:
    """The echo environment of `openenv init echo_env`, written by the package's own template generator (without
    its `uv lock`, which needs the network). openenv-core 0.2.0's template types its client `EnvClient[Action,
    Observation]` where its EnvClient takes three parameters (0.3.0's template adds `State`): that one line is fixed."""
    from openenv.cli.commands.init import _copy_template_directory, _create_template_replacements

    folder = parent / "echo_env"
    folder.mkdir()
    replacements = _create_template_replacements("echo_env")
    _copy_template_directory("openenv.cli.templates.openenv_env", "", folder, replacements, "echo_env")
    client = folder / "client.py"
    source = client.read_text()
    old = "EnvClient[EchoAction, EchoObservation]"
    if old in source:
        client.write_text(source.replace(old, "EnvClient[EchoAction, EchoObservation, State]"))
    return folder


VF_SUMS = '''
"""Single-digit sums, one reply each (rllm's test environment, in the shape of a verifiers environment package)."""

import verifiers as vf
from datasets import Dataset


def load_environment(num_train: int = 40, num_eval: int = 10, system_prompt: str = "Reply with the number only."):
    def rows(first, count):
        numbers = range(first, first + count)
        return [{"question": f"What is {i % 10} + {i // 10}?", "answer": str(i % 10 + i // 10)} for i in numbers]

    parser = vf.Parser()

    def exact_sum(completion, answer, **kwargs) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows(0, num_train)),
        eval_dataset=Dataset.from_list(rows(50, num_eval)),
        system_prompt=system_prompt,
        parser=parser,
        rubric=vf.Rubric(funcs=[exact_sum], parser=parser),
    )
'''


VF_TOOLS = '''
"""Sums with an `add` tool (rllm's test environment: a vf.ToolEnv); one dataset, no eval_dataset."""

import verifiers as vf
from datasets import Dataset


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def load_environment(max_turns: int = 4):
    question = "Use the add tool to compute {} + {}, then reply with the sum only."
    dataset = Dataset.from_list([{"question": question.format(i, 2 * i), "answer": str(3 * i)} for i in range(30)])
    parser = vf.Parser()

    def exact_sum(completion, answer, **kwargs) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[exact_sum], parser=parser)
    return vf.ToolEnv(dataset=dataset, tools=[add], max_turns=max_turns, parser=parser, rubric=rubric)
'''


VF_GUESS = '''
"""Guess a number from 1 to 20 with higher/lower hints (rllm's test environment: a vf.MultiTurnEnv)."""

import verifiers as vf
from datasets import Dataset


class GuessEnv(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        guess = (self.parser.parse_answer(messages) or "").strip()
        secret = int(state["answer"])
        if not guess.isdigit():
            return [{"role": "user", "content": "Reply with a number."}]
        return [{"role": "user", "content": "higher" if int(guess) < secret else "lower"}]

    @vf.stop
    async def guessed(self, state) -> bool:
        return bool(state["trajectory"]) and self._last_guess(state) == state["answer"]

    def _last_guess(self, state):
        return (self.parser.parse_answer(state["trajectory"][-1]["completion"]) or "").strip()


def load_environment(max_turns: int = 6):
    question = "Guess my number from 1 to 20. Reply with the number only."
    rows = [{"question": question, "answer": str(n), "info": {"n": n}} for n in range(1, 21)]
    parser = vf.Parser()

    def found(completion, answer, **kwargs) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    return GuessEnv(
        dataset=Dataset.from_list(rows[:16]),
        eval_dataset=Dataset.from_list(rows[16:]),
        max_turns=max_turns,
        parser=parser,
        rubric=vf.Rubric(funcs=[found], parser=parser),
    )
'''


VF_ENVIRONMENTS = {"vf_sums": VF_SUMS, "vf_tools": VF_TOOLS, "vf_guess": VF_GUESS}


def write_vf_environments(folder: Path) -> None:
    for name, source in VF_ENVIRONMENTS.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source).lstrip())


def importable_vf_environments(folder: Path, monkeypatch):
    """The three test environments written to `folder` and importable for one test (verifiers loads an environment
    by importing it): a generator for a fixture to yield from. Yields rllm's verifiers hub module."""
    pytest.importorskip("verifiers")
    from rllm.tasks.hubs import verifiers as hub

    write_vf_environments(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(hub, "_ENVS", {})
    forget_modules(*VF_ENVIRONMENTS)
    yield hub
    forget_modules(*VF_ENVIRONMENTS)
