"""rLLM v0.2's MCP names against real MCP servers over stdio: `MCPEnvironment` and `MCPConnectionManager`
(`rllm.environments.tools.mcp_env`), `MCPTool` (`rllm.tools.mcp_tool`) and `MCPToolAgent`
(`rllm.agents.tool_agent`), written the way rLLM's `examples/mcp/run_tool_mcp.py` uses them. The server is rllm's
example knowledge-base server (`python -m rllm.tasks.mcp_kb`)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys

import pytest

from rllm.environments.tools.mcp_env import MCPConnectionManager, MCPEnvironment
from rllm.errors import InfraError, RllmError
from rllm.rewards.reward_fn import RewardOutput
from rllm.tasks.mcp_kb import PLANETS, make_mcp_kb_tasks, mcp_kb_reward

pytest.importorskip("mcp")

KB_SERVER = {"mcp_server_command": sys.executable, "mcp_server_args": ["-m", "rllm.tasks.mcp_kb"]}
PLANET = sorted(PLANETS)[0]
MOONS = PLANETS[PLANET]["moons"]

# A server whose tool name has a dash (as tavily-mcp's "tavily-search"): rLLM lists it under "kb_lookup" too.
DASHED_SERVER = """
from mcp.server.mcpserver import MCPServer
from rllm.tasks.mcp_kb import lookup_fact

server = MCPServer("dashed", log_level="WARNING")

@server.tool(name="kb-lookup", description="Look up a fact.", structured_output=False)
def kb_lookup(entity: str, attribute: str) -> str:
    return lookup_fact(entity, attribute)

server.run("stdio")
"""


def kb_reward(task_info, action):
    """An rLLM reward function (`fn(task_info, action) -> RewardOutput`) over the task's own grader."""
    reward = mcp_kb_reward(task_info, action)
    return RewardOutput(reward=reward, is_correct=reward == 1.0, metadata={"graded": action})


def call(call_id: str, name: str, arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture
def shared_server():
    """The one MCP server that MCPEnvironments share, stopped after the test (as rLLM's examples do)."""
    MCPEnvironment.cleanup_global_resources()
    yield
    MCPEnvironment.cleanup_global_resources()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False


def test_an_episode_on_the_example_server_calls_its_tools_and_scores_the_answer(shared_server):
    task = {"question": f"How many moons does {PLANET} have?", "answer": MOONS}
    env = MCPEnvironment.from_dict({**task, **KB_SERVER, "reward_fn": kb_reward, "max_steps": 5})
    assert env.task == task and env.max_steps == 5
    manager = MCPEnvironment._connection_manager
    assert manager.running and sorted(manager.tool_map) == ["convert", "lookup"]

    observation, info = env.reset()
    assert observation == task and info == {}

    observation, reward, done, info = env.step(
        [
            call("a", "lookup", json.dumps({"entity": PLANET, "attribute": "moons"})),  # as ToolAgent writes them
            call("b", "convert", {"value": 1, "from_unit": "km", "to_unit": "m"}),  # a dict works too
            call("c", "lookup", {"entity": "Nowhere", "attribute": "moons"}),  # the server's own error
            call("d", "search", "{}"),  # no such tool
            call("e", "convert", '{"value": 1,'),  # truncated JSON
        ]
    )
    outputs = observation["tool_outputs"]
    assert outputs["a"] == f"{PLANET} moons = {MOONS}" and outputs["b"] == "1 km = 1000 m"
    assert "unknown entity 'Nowhere'" in outputs["c"]
    assert "unknown tool" in outputs["d"] and "lookup, convert" in outputs["d"]
    assert "not valid JSON" in outputs["e"]
    assert (reward, done, info["metadata"]) == (0.0, False, {})

    finish = call("f", "finish", {"response": f"<answer>{MOONS}</answer>"})  # rLLM's ToolAgent's final "call"
    observation, reward, done, info = env.step(finish)
    assert (observation, reward, done) == ({}, 1.0, True)
    assert info["response"] == [finish] and info["is_correct"] and info["metadata"]["graded"].startswith("<answer>")

    env.reset()
    assert env.step("no idea")[1:3] == (0.0, True)  # a plain string is the final answer too

    pid = manager.connection.pid
    env.close()  # the server is shared: still up
    assert _alive(pid)
    MCPEnvironment.cleanup_global_resources()
    assert not manager.running and not _alive(pid) and MCPEnvironment._connection_manager is None


def test_mcp_tools_from_the_manager_describe_and_call_the_servers_tools():
    manager = MCPConnectionManager(KB_SERVER["mcp_server_command"], KB_SERVER["mcp_server_args"])
    manager.start()
    try:
        lookup = manager.tool_map["lookup"]
        schema = lookup.json
        assert schema["type"] == "function" and schema["function"]["name"] == "lookup"
        assert schema["function"]["parameters"]["required"] == ["entity", "attribute"]
        assert lookup.forward(entity=PLANET, attribute="moons").to_string() == f"{PLANET} moons = {MOONS}"
        output = asyncio.run(lookup.async_forward(entity="Nowhere", attribute="moons"))
        assert output.error and output.to_string().startswith("Error: ") and "unknown entity" in output.error
        assert manager.execute_tool_calls([call("x", "lookup", {"entity": PLANET, "attribute": "moons"})]) == {
            "x": f"{PLANET} moons = {MOONS}"
        }
    finally:
        manager.stop()
    assert not manager.running
    with pytest.raises(InfraError, match="Connection manager not running"):
        manager.execute_tool_calls([])


def test_a_dashed_tool_name_is_also_served_under_its_underscore_alias_and_a_lost_server_is_an_infra_error(
    tmp_path, shared_server
):
    script = tmp_path / "dashed_server.py"
    script.write_text(DASHED_SERVER)
    env = MCPEnvironment(
        task={"question": "?", "answer": MOONS},
        mcp_server_command=sys.executable,
        mcp_server_args=[str(script)],
        reward_fn=kb_reward,
    )
    manager = MCPEnvironment._connection_manager
    assert set(manager.tool_map) == {"kb-lookup", "kb_lookup"}
    from rllm.agents.tool_agent import MCPToolAgent

    agent = MCPToolAgent(tool_map=manager.tool_map)  # the alias is not listed twice in the prompt
    assert set(agent.tool_map) == {"kb-lookup", "kb_lookup"}
    assert agent.chat_completions[0]["content"].count('"name": "kb-lookup"') == 1
    env.reset()
    arguments = {"entity": PLANET, "attribute": "moons"}
    observation, *_ = env.step([call("1", "kb-lookup", arguments), call("2", "kb_lookup", arguments)])
    assert observation == {"tool_outputs": {"1": f"{PLANET} moons = {MOONS}", "2": f"{PLANET} moons = {MOONS}"}}

    with pytest.raises(RllmError, match="one MCP server per process.*cleanup_global_resources"):
        MCPEnvironment(
            mcp_server_command=sys.executable, mcp_server_args=["-m", "rllm.tasks.mcp_kb"], reward_fn=kb_reward
        )

    os.kill(manager.connection.pid, 9)  # the server dies mid-episode: ours to retry, not the policy's to learn
    with pytest.raises(InfraError, match="Tool execution failed"):
        env.step([call("3", "kb-lookup", arguments)])


def test_mcp_tool_agent_and_environment_through_the_execution_engine(shared_server, qwen_tokenizer):
    """rLLM's run_tool_mcp.py with a scripted model: a lookup call, then the answer from the tool's output."""
    from rllm.agents.tool_agent import MCPToolAgent
    from rllm.engine.agent_execution_engine import AgentExecutionEngine
    from rllm.testing.fake_openai_server import FakeOpenAIServer, FakeReply, run_fake_server

    def reply(endpoint, body):
        prompt = qwen_tokenizer.decode(body["prompt"])
        fact = re.findall(r"moons = (\d+)", prompt)
        if fact:
            text = f"It has {fact[-1]}. <answer>{fact[-1]}</answer>"
        else:
            planet = re.findall(r"How many moons does (\w+) have", prompt)[-1]
            arguments = json.dumps({"entity": planet, "attribute": "moons"})
            text = f'<tool_call>\n{{"name": "lookup", "arguments": {arguments}}}\n</tool_call>'
        ids = qwen_tokenizer.encode(text, add_special_tokens=False) + [
            qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        return FakeReply(text=text, token_ids=ids, logprobs=[-0.5] * len(ids))

    probe = MCPConnectionManager(KB_SERVER["mcp_server_command"], KB_SERVER["mcp_server_args"])
    probe.start()  # as the example does: list the tools once, for the agent's prompt
    tool_map = probe.tool_map
    probe.stop()

    tasks = make_mcp_kb_tasks(2, seed=1, kinds=["moons"])
    with run_fake_server(FakeOpenAIServer(model="policy", reply_fn=reply)) as server:
        engine = AgentExecutionEngine(
            agent_class=MCPToolAgent,
            env_class=MCPEnvironment,
            agent_args={"parser_name": "qwen", "system_prompt": "Answer with the tools.", "tool_map": tool_map},
            env_args={**KB_SERVER, "reward_fn": kb_reward},
            engine_name="openai",
            rollout_engine_args={"base_url": server.base_url, "api_key": "None"},
            tokenizer=qwen_tokenizer,
            sampling_params={"temperature": 0.6, "model": "policy"},
            max_response_length=512,
            max_prompt_length=2048,
            n_parallel_agents=2,
        )
        results = asyncio.run(engine.execute_tasks(tasks))

    for trajectory, task in zip(results, tasks, strict=True):
        assert trajectory.reward == 1.0 and len(trajectory.steps) == 2
        first, last = trajectory.steps
        assert first.action[0]["function"]["name"] == "lookup" and first.reward == 0.0
        assert last.action[0]["function"]["name"] == "finish" and last.done
        system, *_, tool_message, _ = last.chat_completions
        assert system["content"].startswith("Answer with the tools.") and '"name": "lookup"' in system["content"]
        assert tool_message["role"] == "tool" and f"moons = {int(task['answer'])}" in tool_message["content"]
