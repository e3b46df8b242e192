"""Third-party agent frameworks, unchanged but for their base URL and key, through the gateway: a multi-turn episode
with a tool call each, and the tokens it recorded (every turn extends the last, what a step records renders to the
prompt that was sampled from)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.unit.test_gateway import CALL_TEXT, TOOLS, assert_extends, fake, serving
from tests.unit.test_gateway_flavours import assert_recorded_prompts_render


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
    assert session.token_mismatches() == 0
    assert_extends(session.records)
    assert_recorded_prompts_render(session, smollm2_tokenizer)


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
    assert session.token_mismatches() == 0
    assert_extends(session.records)
    assert_recorded_prompts_render(session, smollm2_tokenizer)


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
    assert session.token_mismatches() == 0
    assert_extends(session.records)
    assert_recorded_prompts_render(session, smollm2_tokenizer)


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
