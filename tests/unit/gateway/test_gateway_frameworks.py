"""Third-party agent frameworks, unchanged but for their base URL and key, through the gateway: a multi-turn episode
with a tool call each, and the tokens it recorded (every turn extends the last, what a step records renders to the
prompt that was sampled from)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.gateway import CALL_TEXT, TOOLS, assert_one_exact_row, fake, serving


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_openai_agents_sdk_tool_loop(smollm2_tokenizer, api):
    agents = pytest.importorskip("agents")
    openai = pytest.importorskip("openai")

    @agents.function_tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    call = CALL_TEXT.replace('"a": 1, "b": 2', '"a": 1.5, "b": 2')
    model = fake([f"I will add.\n{call}", "The sum is 3.5."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway:

        async def run() -> str:
            client = openai.AsyncOpenAI(base_url=gateway.session_url("agent"), api_key="none", max_retries=0)
            kind = agents.OpenAIResponsesModel if api == "responses" else agents.OpenAIChatCompletionsModel
            agent = agents.Agent(name="adder", instructions="Add with the tool.", tools=[add], model=kind("m", client))
            config = agents.RunConfig(tracing_disabled=True)
            result = await agents.Runner.run(agent, "What is 1.5 + 2?", run_config=config)
            await client.close()
            return result.final_output

        answer = asyncio.run(run())
        session = gateway.sessions["agent"]
    assert answer == "The sum is 3.5."
    assert len(session.records) == 2 and session.records[0].tool_calls[0]["function"]["name"] == "add"
    tool_message = next(m for m in session.records[1].rendered_messages if m["role"] == "tool")
    assert tool_message["content"] == "3.5"  # the SDK ran the tool and sent its output back
    assert_one_exact_row(session, smollm2_tokenizer)


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")  # its successor needs `langchain` too
@pytest.mark.parametrize("use_responses_api", [False, True])
def test_langgraph_react_agent_tool_loop(smollm2_tokenizer, use_responses_api):
    prebuilt = pytest.importorskip("langgraph.prebuilt")
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    call = CALL_TEXT.replace('"a": 1, "b": 2', '"a": 1.5, "b": 2')
    model = fake([f"I will add.\n{call}", "The sum is 3.5."], tokenizer=smollm2_tokenizer)
    paths = []
    sent = httpx.Client(event_hooks={"request": [lambda request: paths.append(request.url.path)]})
    with serving(model) as gateway, sent:
        llm = langchain_openai.ChatOpenAI(
            base_url=gateway.session_url("graph"),
            api_key="none",
            model="m",
            max_retries=0,
            use_responses_api=use_responses_api,
            http_client=sent,
        )
        agent = prebuilt.create_react_agent(llm, [add], prompt="Add with the tool.")
        result = agent.invoke({"messages": [("user", "What is 1.5 + 2?")]})
        session = gateway.sessions["graph"]
    route = "/v1/responses" if use_responses_api else "/v1/chat/completions"
    assert paths == [f"/sessions/graph{route}"] * 2
    assert result["messages"][-1].text == "The sum is 3.5."
    assert len(session.records) == 2 and session.records[0].tool_calls[0]["function"]["name"] == "add"
    tool_message = next(m for m in session.records[1].rendered_messages if m["role"] == "tool")
    assert tool_message["content"] == "3.5"  # the graph ran the tool and sent its output back
    assert_one_exact_row(session, smollm2_tokenizer)


def _litellm(monkeypatch):
    # litellm fetches its model price list from GitHub on import, retrying for seconds when offline
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return pytest.importorskip("litellm")


@pytest.mark.parametrize("stream", [False, True])
def test_litellm_tool_loop(smollm2_tokenizer, monkeypatch, stream):
    litellm = _litellm(monkeypatch)
    model = fake([f"I will add.\n{CALL_TEXT}", "The sum is 3."], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway:
        messages = [{"role": "user", "content": "What is 1 + 2?"}]

        def ask():
            reply = litellm.completion(
                model="openai/m",
                api_base=gateway.session_url("lite"),
                api_key="none",
                messages=messages,
                tools=TOOLS,
                stream=stream,
            )
            if stream:
                reply = litellm.stream_chunk_builder(list(reply), messages=messages)
            return reply.choices[0].message

        first = ask()
        assert first.tool_calls[0].function.name == "add"
        messages += [first.model_dump(), {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "3"}]
        answer = ask().content
        session = gateway.sessions["lite"]
    assert answer == "The sum is 3."
    assert session.records[1].rendered_messages[-1] == {"role": "tool", "content": "3", "tool_call_id": "call_lite_1"}
    assert_one_exact_row(session, smollm2_tokenizer)


def test_litellm_recognises_a_spent_prompt_budget(monkeypatch):
    litellm = _litellm(monkeypatch)
    paths = []
    hooked = httpx.Client(event_hooks={"request": [lambda request: paths.append(request.url.path)]})
    with serving(fake(["never sampled"]), max_prompt_length=16) as gateway, hooked:
        # litellm's own OpenAI client, with the hook that counts the requests it sends
        client = litellm.OpenAI(base_url=gateway.session_url("long"), api_key="none", http_client=hooked)
        with pytest.raises(litellm.ContextWindowExceededError, match="maximum context length"):
            litellm.completion(
                model="openai/m",
                api_base=gateway.session_url("long"),
                api_key="none",
                messages=[{"role": "user", "content": "word " * 200}],
                client=client,
            )
    assert paths == ["/sessions/long/v1/chat/completions"]  # not retried


def test_smolagents_tool_calling_agent_tool_loop(smollm2_tokenizer):
    """smolagents replays its tool-calling turn as text, not `tool_calls`; the session still knows it by its call id."""
    smolagents = pytest.importorskip("smolagents")
    tool = smolagents.tool  # by this name: smolagents warns about any other decorator on a tool function

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b

    call = CALL_TEXT.replace('"a": 1, "b": 2', '"a": 1.5, "b": 2')
    final = '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "3.5"}}\n</tool_call>'
    model = fake([f"I will add.\n{call}", f"The sum is 3.5.\n{final}"], tokenizer=smollm2_tokenizer)
    with serving(model) as gateway:
        llm = smolagents.OpenAIServerModel(model_id="m", api_base=gateway.session_url("smol"), api_key="none")
        agent = smolagents.ToolCallingAgent(tools=[add], model=llm, max_steps=3, verbosity_level=0)
        answer = agent.run("What is 1.5 + 2?")
        session = gateway.sessions["smol"]
    assert answer == "3.5"
    [call_id] = [c["id"] for c in session.records[0].tool_calls]
    sent = session.records[1].messages[-2]  # as sent: "I will add.\nCalling tools:\n[{'id': 'call_smol_1', ...}]"
    assert sent["role"] == "assistant" and "tool_calls" not in sent
    assert sent["content"][0]["text"].startswith(f"I will add.\nCalling tools:\n[{{'id': '{call_id}'")
    assert session.records[1].rendered_messages[-2] == {"role": "assistant", "content": f"I will add.\n{call}"}
    assert session.records[1].rendered_messages[-1]["content"] == "Observation:\n3.5"  # the tool ran
    assert_one_exact_row(session, smollm2_tokenizer)


def _play_smolagents_harness(monkeypatch, script, tokenizer, max_turns: int):
    """The arithmetic task played by the smolagents harness with the calculator, as `agent: smolagents` would."""
    pytest.importorskip("smolagents")
    from rllm.engine.workflow_engine import AgentWorkflowEngine
    from rllm.harnesses import HARNESSES, harness_workflow
    from rllm.models.fake import FakeModel
    from rllm.tasks import get_task

    monkeypatch.setitem(HARNESSES, "smolagents", "rllm.harnesses.smolagents:smolagents_agent")
    workflow_class, workflow_args = harness_workflow(
        "smolagents",
        get_task("arithmetic"),
        agent_args={"tools": ["calculator"], "instructions": "Be exact."},
        max_turns=max_turns,
    )
    model = FakeModel(script, tokenizer=tokenizer)
    engine = AgentWorkflowEngine(workflow_class=workflow_class, workflow_args=workflow_args, model=model)
    [episode] = engine.execute_tasks([{"id": "q", "question": "What is 347 * 6?", "answer": 2082}])
    return episode, model


SMOL_CALCULATOR = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 6"}}\n</tool_call>'


def test_smolagents_harness_uses_the_tool_then_answers_in_one_token_exact_row(smollm2_tokenizer, monkeypatch):
    from rllm.types import TerminationReason

    final = '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "2082"}}\n</tool_call>'
    script = [f"Let me compute.\n{SMOL_CALCULATOR}", f"It is 2082.\n{final}"]
    episode, _ = _play_smolagents_harness(monkeypatch, script, smollm2_tokenizer, max_turns=4)
    assert episode.termination_reason is TerminationReason.ENV_DONE, episode.info.get("error")
    [trajectory] = episode.trajectories
    assert trajectory.reward == 1.0 and len(trajectory.steps) == 2
    assert episode.metrics["token_mismatch"] == 0
    seen = trajectory.steps[1].chat_completions
    assert seen[0]["role"] == "system" and "Be exact." in seen[0]["content"]  # in smolagents' own system prompt
    assert seen[-1] == {"role": "user", "content": "Observation:\n2082"}  # the calculator ran, its result came back


def test_smolagents_harness_past_its_turn_limit_ends_as_max_turns(smollm2_tokenizer, monkeypatch):
    from rllm.types import TerminationReason

    episode, model = _play_smolagents_harness(
        monkeypatch, lambda prompt, sampling: SMOL_CALCULATOR, smollm2_tokenizer, max_turns=2
    )
    assert episode.termination_reason is TerminationReason.MAX_TURNS, episode.info.get("error")
    assert len(model.calls) == 2  # not the extra call smolagents makes past max_steps to ask for a summary answer


def test_litellm_responses_with_previous_response_id(smollm2_tokenizer, monkeypatch):
    """`litellm.responses` (the Responses API through litellm): a tool call, then its output sent with
    previous_response_id, continue one token-exact conversation."""
    litellm = _litellm(monkeypatch)
    model = fake([f"I will add.\n{CALL_TEXT}", "The sum is 3."], tokenizer=smollm2_tokenizer)
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    with serving(model) as gateway:
        common = {"model": "openai/m", "api_base": gateway.session_url("lr"), "api_key": "none", "tools": tools}
        first = litellm.responses(input="What is 1 + 2?", **common)
        [call] = [item for item in first.output if item.type == "function_call"]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "3"}
        second = litellm.responses(input=[output], previous_response_id=first.id, **common)
        session = gateway.sessions["lr"]
    assert call.name == "add" and second.output_text == "The sum is 3."
    assert_one_exact_row(session, smollm2_tokenizer)
