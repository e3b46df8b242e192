"""ToolAgent + ToolEnvironment through the engine: tool calls parsed from the text, results as tool messages, a final
answer scored by the reward function, malformed calls as error observations that are counted, never crashes; and
token exactness with the real Qwen template rendering the tool schemas."""

from __future__ import annotations

import json
import os

from rllm.agents.tool import ToolAgent
from rllm.engine import AgentExecutionEngine
from rllm.envs.tool import ToolEnvironment
from rllm.metrics import summarize_episodes
from rllm.models.fake import FakeModel
from rllm.tools import tool
from rllm.types import TerminationReason


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


class AddEnv(ToolEnvironment):
    reward_fn = staticmethod(lambda task, answer: float(answer.strip() == task["answer"]))

    def make_tools(self):
        return [add]


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def run(script, *, max_steps=4, tokenizer=None, env_workers=None, **env_args):
    workers = {} if env_workers is None else {"env_workers": env_workers}
    engine = AgentExecutionEngine(
        agent_class=ToolAgent,
        env_class=AddEnv,
        model=FakeModel(script, tokenizer=tokenizer),
        env_args=env_args,
        max_steps=max_steps,
        **workers,
    )
    (episode,) = engine.execute_tasks([{"id": "t", "question": "What is 2 + 40?", "answer": "42"}])
    return episode


def test_a_tool_call_then_the_final_answer():
    episode = run([call("add", a=2, b=40), "42"])
    steps = episode.trajectories[0].steps
    assert episode.termination_reason is TerminationReason.ENV_DONE and episode.is_correct
    assert steps[0].action["tool_calls"] == [{"id": "call_0", "name": "add", "arguments": {"a": 2, "b": 40}}]
    tool_message = steps[1].chat_completions[-1]
    assert tool_message == {"role": "tool", "name": "add", "content": "42", "tool_call_id": "call_0"}  # the result
    assert episode.trajectories[0].reward == 1.0 and steps[-1].info["tool_errors"] == 0


def test_tools_run_with_the_env_inline_on_the_event_loop():
    """env_workers=0 runs env code on the engine's own loop, where asyncio.run() refuses: the tool still runs."""
    episode = run([call("add", a=2, b=40), "42"], env_workers=0)
    assert episode.termination_reason is TerminationReason.ENV_DONE and episode.is_correct
    assert episode.trajectories[0].steps[1].chat_completions[-1]["content"] == "42"


def test_the_finish_tool_gives_the_final_answer():
    episode = run([call("finish", answer="42")])
    assert episode.is_correct and episode.trajectories[0].steps[0].info["answer"] == "42"


def test_malformed_calls_become_error_observations_and_are_counted():
    truncated = '<tool_call>\n{"name": "add", "arguments": {"a": 2'
    episode = run([truncated, call("nope", x=1), call("add", a="two", b=40), "42"], malformed_reward=-0.1)
    steps = episode.trajectories[0].steps
    assert episode.termination_reason is TerminationReason.ENV_DONE and episode.is_correct
    assert [s.reward for s in steps] == [-0.1, -0.1, -0.1, 1.0]
    assert steps[-1].info["tool_errors"] == 3
    assert set(steps[-1].info["tool_error_kinds"]) == {"truncated", "unknown_tool", "bad_arguments"}
    # per tool: the bad-argument call to add failed; the unknown tool is no tool of the registry, so not listed
    assert steps[-1].info["tool_call_counts"] == {"add": {"calls": 1, "ok": 0}}
    summary = summarize_episodes([episode])
    assert summary["tool/add/calls_mean"] == 1 and summary["tool/add/success_rate"] == 0
    assert not any(key.startswith("tool/nope") for key in summary)
    truncated_note, unknown_note, bad_arguments_note = (steps[i].chat_completions[-1]["content"] for i in (1, 2, 3))
    assert "no closing </tool_call>" in truncated_note  # each error says what was wrong, in plain words
    assert "the available tools are: add" in unknown_note
    assert "argument 'a': expected integer" in bad_arguments_note


def test_tools_are_rendered_by_the_template_and_turns_stay_token_exact(qwen_tokenizer):
    episode = run([call("add", a=2, b=40), "42"], tokenizer=qwen_tokenizer)
    steps = episode.trajectories[0].steps
    assert episode.metrics["token_mismatch"] == 0 and episode.is_correct
    first_prompt = qwen_tokenizer.decode(steps[0].model_output.prompt_ids)
    assert '"name": "add"' in first_prompt and "<tool_call>" in first_prompt  # the schema, in Qwen's tool format
    second = steps[1].model_output.prompt_ids
    context = steps[0].model_output.prompt_ids + steps[0].model_output.completion_ids
    assert second[: len(context)] == context and "<tool_response>" in qwen_tokenizer.decode(second[len(context) :])


def _kb_processes() -> list[int]:
    """Live example-MCP-server processes started by this test process (its children; others may run elsewhere)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    cmdline = file.read()
                with open(f"/proc/{entry}/stat") as file:
                    parent = int(file.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"rllm.tasks.mcp_kb" in cmdline and parent == os.getpid():
                found.append(int(entry))
    return found


def test_mcp_episodes_against_the_real_example_server_and_no_server_left_after_the_engine():
    from rllm.tasks.mcp_kb import MCPKnowledgeBaseEnv, make_mcp_kb_tasks

    tasks = [t for t in make_mcp_kb_tasks(8, seed=1) if "discovered" in t["question"]][:2]
    planet = {t["id"]: t["question"].rsplit(" ", 1)[-1].rstrip("?") for t in tasks}

    def script(messages, sampling):
        if messages[-1]["role"] == "tool":  # the lookup's result came back: answer with it
            return f"<answer>{messages[-1]['content'].split('= ', 1)[-1]}</answer>"  # "Naxkel discoverer = Hale Dorsey"
        return call(
            "lookup", entity=next(p for p in planet.values() if p in messages[-1]["content"]), attribute="discoverer"
        )

    engine = AgentExecutionEngine(
        agent_class=ToolAgent, env_class=MCPKnowledgeBaseEnv, model=FakeModel(script), max_steps=3, n_parallel=2
    )
    episodes = engine.execute_tasks(tasks, n_rollouts=2)
    assert [ep.termination_reason for ep in episodes] == [TerminationReason.ENV_DONE] * 4
    assert all(ep.is_correct for ep in episodes), [ep.trajectories[0].steps[-1].info for ep in episodes]
    first = episodes[0].trajectories[0].steps
    assert first[0].action["tool_calls"][0]["name"] == "lookup" and first[1].chat_completions[-1]["role"] == "tool"
    assert _kb_processes() == []  # every episode's server was closed with its env


def test_the_process_scan_sees_a_live_server():
    from rllm.tasks.mcp_kb import mcp_kb_server_spec
    from rllm.tools.mcp import MCPConnection

    with MCPConnection(mcp_kb_server_spec()) as connection:
        connection.open()
        assert len(_kb_processes()) == 1
    assert _kb_processes() == []


def test_a_bare_json_call_without_tags_counts_as_a_call_but_prose_stays_an_answer():
    from rllm.tools.parsing import parse_bare_call

    bare = '{"name": "add", "arguments": {"a": 2, "b": 40}}'
    assert run([bare, "42"]).is_correct  # how the embedded 0.5B model writes calls
    assert parse_bare_call(f"```json\n{bare}\n```").name == "add"
    for not_a_call in ("The answer is 42.", '{"a": 1}', f"I will call {bare}", '{"name": 3}', "{", ""):
        assert parse_bare_call(not_a_call) is None, not_a_call


def test_a_repeated_call_is_answered_from_the_first_result_and_counted():
    episode = run([call("add", a=2, b=40), call("add", a=2, b=40), "42"])
    steps = episode.trajectories[0].steps
    repeated_note = steps[2].chat_completions[-1]["content"]
    assert repeated_note.startswith("42\n") and "already made this exact call" in repeated_note
    assert episode.is_correct and steps[-1].info["tool_error_kinds"] == {"repeated_call": 1}
    assert steps[-1].info["tool_call_counts"] == {"add": {"calls": 2, "ok": 1}}
    two = summarize_episodes([episode, run([call("add", a=2, b=40), "42"])])  # 3 calls over 2 episodes, 2 ran
    assert two["tool/add/calls_mean"] == 1.5 and two["tool/add/success_rate"] == 2 / 3


def test_a_result_hint_follows_each_successful_result_only():
    episode = run([call("add", a="two", b=40), call("add", a=2, b=40), "42"], result_hint="Now give the answer.")
    steps = episode.trajectories[0].steps
    assert "Now give the answer." not in steps[1].chat_completions[-1]["content"]  # an error result: no hint
    assert steps[2].chat_completions[-1]["content"] == "42\nNow give the answer."
    assert episode.is_correct
