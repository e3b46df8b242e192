"""The token-exactness report (`rllm.exactness`) over eight chat-template families and two broken tool formats
(tests/support/chat_templates.py), through rollouts (the workflow engine, a scripted model) and through the gateway
(an openai-SDK agent): its counts must be exactly the turns that break, by cause, and its findings exactly the
broken cases.

The scripted model samples canonical ids (`FakeModel`: the reply's encoding + the family's end-of-turn token), so
a turn extends wherever the template prints the reply back; what each case must count is written next to it, from
what its template does (the oracle is `apply_chat_template` through `build_rows`: its split rows must agree).
"""

from __future__ import annotations

import pytest

from rllm.engine import AgentWorkflowEngine
from rllm.exactness import PREFIX, exactness_findings, report, step_metrics
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel
from rllm.tools.parsing import parse_tool_calls
from rllm.training.batch import build_rows, episode_trajectories
from rllm.types import Step, Trajectory
from rllm.workflows.base import Workflow
from tests.support.chat import CALC_TOOLS
from tests.support.chat_templates import FAMILIES, FamilyTokenizer, with_markers

TURNS = 3
PLAIN = ["Action: Right", "Action: Down", "The answer is 2."]
THINKING = ["<think>\nLet me add.\n</think>\n\nIt is 2.", "Action: Down", "The answer is 2."]
_CALL = '<tool_call>\n{{"name": "calc", "arguments": {{"expr": "{}"}}}}\n</tool_call>'
PARALLEL_CALLS = [_CALL.format("1+1") + "\n" + _CALL.format("2+2"), "Both are small.", "The answer is 2."]
# a call the parser reads but the template prints with newlines: parsed, stored as tool_calls, it cannot print back
UNSPACED_CALL = ['<tool_call>{"name": "calc", "arguments": {"expr": "1+1"}}</tool_call>', *PLAIN[1:]]
LISTED = ['<tool_call>\n[{"name": "calc", "arguments": {"expr": "1+1"}}]\n</tool_call>', *PLAIN[1:]]
MISTRAL_CALL = ['[TOOL_CALLS][{"name": "calc", "arguments": {"expr": "1+1"}}]', *PLAIN[1:]]

EXACT = {"prefix_breaks": 0, "template_breaks": 0, "round_trip_failures": 0, "tool_format_failures": 0}
THINK_STRIPPED = {**EXACT, "prefix_breaks": 1, "template_breaks": 1, "retokenized": 1}  # turn 2 drops turn 1's think
TOOL_FORMAT = {**EXACT, "tool_format_failures": TURNS}  # every turn rendered with tools teaches the format
# (family, replies, tools?): the counts the report must show
CASES = {
    "qwen2.5": ("qwen2.5", PARALLEL_CALLS, True, EXACT),
    "qwen3_thinking": ("qwen3_thinking", THINKING, False, THINK_STRIPPED),
    "llama3": ("llama3", PLAIN, False, EXACT),
    "mistral": ("mistral", PLAIN, False, EXACT),
    "gemma": ("gemma", PLAIN, False, EXACT),
    "phi": ("phi", PLAIN, False, EXACT),
    "deepseek": ("deepseek", THINKING, False, THINK_STRIPPED),
    "hermes_parallel": ("hermes_parallel", PARALLEL_CALLS, True, EXACT),
    "broken_round_trip": ("qwen2.5", UNSPACED_CALL, True, {**EXACT, "prefix_breaks": 1, "round_trip_failures": 1}),
    "broken_listed_calls": ("listed_calls", LISTED, True, TOOL_FORMAT),
    "broken_mistral_tools": ("mistral_tools", MISTRAL_CALL, True, TOOL_FORMAT),
}
FINDING_WORDS = {"round_trip_failures": "round trip", "tool_format_failures": "parser reads as none"}


@pytest.fixture(scope="module")
def tokenizers(qwen_tokenizer):
    shared = with_markers(qwen_tokenizer)
    return {name: FamilyTokenizer(shared, family) for name, family in FAMILIES.items()}


def following(text: str, tools: bool) -> list[dict]:
    """The messages an agent adds after a reply: the parsed tool calls and their results, or the reply verbatim
    and the next observation."""
    parsed = parse_tool_calls(text) if tools else None
    if not parsed or not parsed.calls:
        return [{"role": "assistant", "content": text}, {"role": "user", "content": "obs"}]
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for i, c in enumerate(parsed.calls)
    ]
    results = [{"role": "tool", "tool_call_id": c["id"], "content": str(2 * (i + 1))} for i, c in enumerate(calls)]
    return [{"role": "assistant", "content": parsed.content, "tool_calls": calls}, *results]


class FamilyWorkflow(Workflow):
    async def run(self, task, uid):
        tools = CALC_TOOLS if task["tools"] else None
        messages, steps = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}], []
        try:
            for _ in range(TURNS):
                output = await self.generate(messages, tools=tools)
                steps.append(Step(chat_completions=list(messages), model_output=output, reward=1.0))
                messages = [*messages, *following(output.text, tools is not None)]
        finally:
            self.commit(Trajectory(name="main", steps=steps))


def gateway_agent(task: dict, base_url: str) -> str:
    """An openai-SDK agent: it sends its history back as the SDK holds it (tool calls structured by the gateway)."""
    import openai

    tools = {"tools": CALC_TOOLS} if task["tools"] else {}
    with openai.OpenAI(base_url=base_url, api_key="none", max_retries=0) as client:
        messages: list = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
        for _ in range(TURNS):
            message = client.chat.completions.create(model="m", messages=messages, **tools).choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            calls = message.tool_calls or []
            messages += [{"role": "tool", "tool_call_id": c.id, "content": "2"} for c in calls]
            if not calls:
                messages.append({"role": "user", "content": "obs"})
    return "2"


def run_case(tokenizers, case: str, workflow_class) -> tuple[list, dict]:
    family, replies, tools, _ = CASES[case]
    engine = AgentWorkflowEngine(
        workflow_class=workflow_class,
        model=FakeModel(list(replies), tokenizer=tokenizers[family]),
        sampling=SamplingParams(max_tokens=96),
        max_prompt_length=4096,
        max_response_length=4096,
        n_parallel=1,
    )
    episodes = engine.execute_tasks([{"id": case, "tools": tools}])
    assert [len(t.steps) for e in episodes for t in e.trajectories] == [TURNS], episodes[0].info
    return episodes, step_metrics(episodes)


def check_report(case: str, episodes: list, metrics: dict, expected: dict) -> None:
    counts = {key[len(PREFIX) :]: value for key, value in metrics.items()}
    assert counts["turns"] == TURNS
    assert {key: counts[key] for key in expected} == expected, case
    # the oracle: build_rows, which merges by the ids alone, splits exactly where the report counts a break
    pairs = episode_trajectories(episodes)
    _, stats = build_rows(pairs, step_advantages=[[1.0] * TURNS], max_prompt_length=4096, max_response_length=4096)
    assert stats["rows_split"] == counts["prefix_breaks"], case
    findings = exactness_findings(report("train", [{"step": 1, **counts, "rows_split": stats["rows_split"]}]))
    failing = [key for key, words in FINDING_WORDS.items() if expected[key]]
    assert len(findings) == len(failing), findings
    for key, line in zip(failing, findings, strict=True):
        assert FINDING_WORDS[key] in line and line.startswith(f"{expected[key]} "), line


@pytest.mark.parametrize("case", list(CASES))
def test_rollouts_report_each_family_exactly(tokenizers, case):
    episodes, metrics = run_case(tokenizers, case, FamilyWorkflow)
    check_report(case, episodes, metrics, CASES[case][3])


# Through the gateway the session restores its replies to their sampled text, so the parsed-call round trip of the
# native agent above cannot fail there: the unspaced call extends.
GATEWAY = {
    "qwen2.5": EXACT,
    "qwen3_thinking": THINK_STRIPPED,
    "gemma": EXACT,
    "broken_round_trip": EXACT,
    "broken_mistral_tools": TOOL_FORMAT,
}


@pytest.mark.parametrize("case", list(GATEWAY))
def test_gateway_reports_each_family_exactly(tokenizers, case):
    pytest.importorskip("openai")
    from rllm.gateway.rollout import rollout

    workflow = rollout(reward_fn=lambda task, answer: 1.0)(gateway_agent)
    episodes, metrics = run_case(tokenizers, case, workflow)
    check_report(case, episodes, metrics, GATEWAY[case])
    if case == "qwen2.5":  # the parallel calls reached the agent as two structured calls
        assert len(episodes[0].trajectories[0].steps[0].info["tool_calls"]) == 2
