"""Token accounting under adversarial chat templates and agents (issue 15, items 1 and 2).

Templates that strip earlier `<think>` blocks (Qwen3 style) or `| trim` message content, agents that store
structured `tool_calls` or rewrite history, on the Qwen2.5 and SmolLM2 tokenizers, through the agent/env engine,
the workflow engine and the gateway. The oracle is independent of rllm's renderer: every prompt the model was sent
must be exactly `apply_chat_template(messages)`'s ids (the scripted model samples canonical ids, so the sampled ids
and the re-render agree wherever a turn truly extends); a turn truly cannot extend when those ids do not start with
the previous prompt + completion; `token_mismatch` and `rows_split` must both equal the number of such turns, the
rows `build_rows` makes must be the oracle's (ids and loss masks), and no sampled token may be dropped, also under a
tight `max_response_length`.
"""

from __future__ import annotations

import copy
import json
import re

import pytest

from rllm.agents.base import BaseAgent
from rllm.engine import AgentExecutionEngine, AgentWorkflowEngine
from rllm.envs.base import BaseEnv
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel
from rllm.training.batch import build_rows
from rllm.types import Action, Step, Trajectory
from rllm.workflows.base import Workflow
from tests.support.chat import CALC_TOOLS

TURNS = 4
REPLIES = [
    "<think>\nLet me look.\n</think>\n\nAction: Right",  # a reasoning block that a stripping template drops later
    "Action: Down  ",  # whitespace that `| trim` removes (trailing: leading spaces would merge with the header)
    '<tool_call>\n{"name": "calc", "arguments": {"expr": "1+1"}}\n</tool_call>',  # Qwen2.5's tool-call format
    "The answer is 2.",
]

# A ChatML template with the two adversarial habits, switched on by `{strip}` and `{trim}`.
_CHATML = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}{%- set content = m.content or '' -%}"
    "{%- if {strip} and m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}"
    "{%- if {trim} -%}{%- set content = content | trim -%}{%- endif -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
TEMPLATES = {
    "shipped": None,
    "think_stripping": _CHATML.replace("{strip}", "true").replace("{trim}", "false"),
    "trimming": _CHATML.replace("{strip}", "false").replace("{trim}", "true"),
}
BEHAVIOURS = ("verbatim", "structured_tool_calls", "history_edit")
# Turns that truly cannot extend, with a generous budget: what the oracle must find (so that a renderer and an
# oracle that both saw nothing would still fail).
EXPECTED_BREAKS = {
    ("shipped", "verbatim"): 0,
    ("shipped", "structured_tool_calls"): {"qwen": 0, "smollm2": 1},  # SmolLM2's template drops tool_calls
    ("shipped", "history_edit"): 1,
    ("think_stripping", "verbatim"): 1,
    ("think_stripping", "structured_tool_calls"): 2,
    ("think_stripping", "history_edit"): 2,
    ("trimming", "verbatim"): 1,
    ("trimming", "structured_tool_calls"): 2,
    ("trimming", "history_edit"): 1,  # the edit and the trim break the same turn
}
GENEROUS = 4096
CUT = 24  # every rollout runs out of budget in its first row
TIGHT = 72  # a row of the shipped Qwen2.5 template with tool calls outgrows it if the budget restarts mid-row


@pytest.fixture(scope="module", params=["qwen", "smollm2"])
def tokenizer_name(request):
    return request.param


@pytest.fixture(scope="module", params=list(TEMPLATES))
def template(request, tokenizer_name, qwen_tokenizer, smollm2_tokenizer):
    base = {"qwen": qwen_tokenizer, "smollm2": smollm2_tokenizer}[tokenizer_name]
    tokenizer = copy.deepcopy(base)
    if TEMPLATES[request.param] is not None:
        tokenizer.chat_template = TEMPLATES[request.param]
    return request.param, tokenizer


def scripted_model(tokenizer) -> FakeModel:
    """Replies by turn: the number of assistant headers in the prompt, the generation prompt's included."""

    def reply(prompt, _sampling):
        return REPLIES[tokenizer.decode(prompt).count("<|im_start|>assistant") - 1]

    return FakeModel(reply, tokenizer=tokenizer)


# ---- the agent behaviours, shared by the three paths -------------------------------------------------------------


def assistant_message(text: str, behaviour: str) -> dict:
    match = re.fullmatch(r"<tool_call>\n(.*)\n</tool_call>", text, re.S)
    if behaviour == "structured_tool_calls" and match:
        call = json.loads(match.group(1))
        return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]}
    return {"role": "assistant", "content": text}


def observation_message(turn: int, messages: list[dict], behaviour: str) -> dict:
    if behaviour == "structured_tool_calls" and messages[-1].get("tool_calls"):
        return {"role": "tool", "content": "2"}
    return {"role": "user", "content": f"obs {turn}"}


def edit_history(messages: list[dict], turn: int, behaviour: str) -> list[dict]:
    """history_edit: before the third call the agent shortens its first observation (a new dict: earlier steps
    keep the messages they were sent)."""
    if behaviour != "history_edit" or turn != 2:
        return messages
    first = next(i for i, m in enumerate(messages) if m["role"] == "user")
    return [*messages[:first], {"role": "user", "content": "Solve it."}, *messages[first + 1 :]]


class TurnsEnv(BaseEnv):
    blocking = False

    def __init__(self) -> None:
        self.turn = 0

    @classmethod
    def from_dict(cls, task: dict) -> TurnsEnv:
        return cls()

    def reset(self):
        self.turn = 0
        return "Solve it, step by step.", {}

    def step(self, action):
        self.turn += 1
        return f"obs {self.turn}", 1.0, self.turn >= TURNS, {}


def agent_class(behaviour: str) -> type[BaseAgent]:
    class ScriptedAgent(BaseAgent):
        def update_from_env(self, observation, reward, done, info):
            turn = len(self.trajectory.steps)
            if self.trajectory.steps:
                step = self.trajectory.steps[-1]
                step.observation, step.reward, step.done = observation, float(reward), done
            if not done:
                message = observation_message(turn, self.messages, behaviour) if turn else None
                self.messages.append(message or {"role": "user", "content": observation})
                self.messages = edit_history(self.messages, turn, behaviour)

        def update_from_model(self, output):
            self.trajectory.steps.append(Step(chat_completions=list(self.messages), model_output=output))
            self.messages.append(assistant_message(output.text, behaviour))
            return Action(action=output.text)

    return ScriptedAgent


class ScriptedWorkflow(Workflow):
    async def run(self, task, uid):
        behaviour = task["behaviour"]
        messages, steps = [{"role": "user", "content": "Solve it, step by step."}], []
        try:
            for turn in range(TURNS):
                messages = edit_history(messages, turn, behaviour)
                output = await self.generate(messages)
                steps.append(Step(chat_completions=list(messages), model_output=output, reward=1.0))
                messages = [*messages, assistant_message(output.text, behaviour)]
                messages.append(observation_message(turn + 1, messages, behaviour))
        finally:
            self.commit(Trajectory(name="main", steps=steps))


def gateway_rollout(task: dict, base_url: str) -> str:
    """An openai-SDK agent: replies go back as the SDK holds them (tool calls structured by the gateway when tools
    were sent), so "verbatim" and "structured_tool_calls" are the same agent here."""
    import openai

    behaviour, tools = task["behaviour"], task["tools"]
    with openai.OpenAI(base_url=base_url, api_key="none", max_retries=0) as client:
        messages: list = [{"role": "user", "content": "Solve it, step by step."}]
        for turn in range(TURNS):
            messages = edit_history(messages, turn, behaviour)
            reply = client.chat.completions.create(model="m", messages=messages, **({"tools": tools} if tools else {}))
            message = reply.choices[0].message.model_dump(exclude_none=True)  # as the SDK holds it
            messages.append(message)
            if message.get("tool_calls"):
                messages.append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "2"})
            else:
                messages.append({"role": "user", "content": f"obs {turn + 1}"})
    return "2"


# ---- the oracle ---------------------------------------------------------------------------------------------------


def oracle_ids(tokenizer, messages: list[dict], tools) -> list[int]:
    return list(
        tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
    )


def check_trajectory(tokenizer, episode, trajectory, tools, max_response_length: int) -> int:
    """Asserts the oracle's view of one trajectory; returns the number of turns that truly cannot extend."""
    breaks, expected_rows, context = 0, [], None
    for k, step in enumerate(trajectory.steps):
        output = step.model_output
        full = oracle_ids(tokenizer, step.chat_completions, tools)
        assert output.prompt_ids == full, f"{episode.id} turn {k}: the prompt sent is not the template's render"
        if context is not None and full[: len(context)] == context:
            expected_rows[-1]["mask"].extend([0] * (len(full) - len(context)))
        else:
            breaks += context is not None
            expected_rows.append({"mask": [0] * len(full)})
        expected_rows[-1]["mask"].extend([1] * output.completion_length)
        context = full + output.completion_ids
        expected_rows[-1]["ids"] = context
    assert episode.metrics["token_mismatch"] == breaks, episode.id
    # the exactness report's causes partition the breaks, each re-tokenized; an edit of the history is one of them
    causes = {k: episode.metrics.get(f"exactness/{k}_breaks", 0) for k in ("template", "history")}
    causes["round_trip"] = episode.metrics.get("exactness/round_trip_failures", 0)
    assert sum(causes.values()) == breaks == episode.metrics.get("exactness/retokenized", 0), episode.id
    assert causes["history"] == (episode.task["behaviour"] == "history_edit" and len(trajectory.steps) > 2), episode.id
    advantages = [[1.0] * len(trajectory.steps)]
    rows, stats = build_rows(
        [(episode, trajectory)],
        step_advantages=advantages,
        max_prompt_length=8192,
        max_response_length=max_response_length,
    )
    assert stats["rows_split"] == breaks, episode.id
    assert [(row.input_ids, row.loss_mask) for row in rows] == [(r["ids"], r["mask"]) for r in expected_rows]
    # nothing sampled is dropped: the length budget agrees with how the rows are built
    assert stats["rows_truncated"] == 0, episode.id
    assert stats["loss_tokens"] == sum(step.model_output.completion_length for step in trajectory.steps)
    return breaks


def check_episodes(tokenizer, template_name, tokenizer_name, episodes, tools, budget, behaviour=lambda b: b) -> None:
    """`behaviour` maps a task's behaviour to the one the agent really showed (see test_gateway)."""
    assert len(episodes) == len(BEHAVIOURS) and all(len(e.trajectories) == 1 for e in episodes)
    for episode in episodes:
        (trajectory,) = episode.trajectories
        breaks = check_trajectory(tokenizer, episode, trajectory, tools, budget)
        if budget == GENEROUS:
            assert len(trajectory.steps) == TURNS, (episode.id, episode.termination_reason)
            expected = EXPECTED_BREAKS[(template_name, behaviour(episode.task["behaviour"]))]
            expected = expected[tokenizer_name] if isinstance(expected, dict) else expected
            assert breaks == expected, (episode.id, template_name)
    if budget == CUT:
        assert all(e.termination_reason.value == "max_response_length" for e in episodes)


def tasks(**extra) -> list[dict]:
    return [{"id": behaviour, "behaviour": behaviour, **extra} for behaviour in BEHAVIOURS]


def engine_kwargs(budget: int) -> dict:
    return {
        "sampling": SamplingParams(max_tokens=64),
        "max_prompt_length": 8192,
        "max_response_length": budget,
        "n_parallel": 3,
        "retry_backoff": 0.0,
    }


# ---- the three paths ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [GENEROUS, TIGHT, CUT])
def test_agent_env_engine(template, tokenizer_name, budget):
    name, tokenizer = template
    episodes = []
    for task in tasks():
        agent = agent_class(task["behaviour"])
        engine = AgentExecutionEngine(
            agent_class=agent,
            env_class=TurnsEnv,
            model=scripted_model(tokenizer),
            max_steps=TURNS,
            **engine_kwargs(budget),
        )
        episodes += engine.execute_tasks([task])
    check_episodes(tokenizer, name, tokenizer_name, episodes, None, budget)


@pytest.mark.parametrize("budget", [GENEROUS, TIGHT, CUT])
def test_workflow_engine(template, tokenizer_name, budget):
    name, tokenizer = template
    engine = AgentWorkflowEngine(
        workflow_class=ScriptedWorkflow, model=scripted_model(tokenizer), **engine_kwargs(budget)
    )
    check_episodes(tokenizer, name, tokenizer_name, engine.execute_tasks(tasks()), None, budget)


@pytest.mark.parametrize("budget", [GENEROUS, TIGHT, CUT])
def test_gateway(template, tokenizer_name, budget):
    """Through the gateway the agent sends its history back as the SDK holds it; the gateway restores its own
    replies (tool calls included) to their sampled text. Tools go to the template on Qwen2.5 only: SmolLM2's
    template ignores them and the gateway describes them in a system message instead."""
    pytest.importorskip("openai")
    from rllm.gateway.rollout import rollout

    name, tokenizer = template
    tools = CALC_TOOLS if tokenizer_name == "qwen" and name == "shipped" else None
    workflow = rollout(reward_fn=lambda task, answer: 1.0)(gateway_rollout)
    engine = AgentWorkflowEngine(workflow_class=workflow, model=scripted_model(tokenizer), **engine_kwargs(budget))
    episodes = engine.execute_tasks(tasks(tools=tools))

    def shown(behaviour: str) -> str:  # the SDK's messages: tool calls structured exactly when tools were sent
        if behaviour in ("verbatim", "structured_tool_calls"):
            return "structured_tool_calls" if tools else "verbatim"
        return behaviour

    check_episodes(tokenizer, name, tokenizer_name, episodes, tools, budget, shown)
