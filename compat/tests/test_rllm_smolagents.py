"""rLLM v0.2's smolagents integration (`rllm.integrations.smolagents`): smolagents agents on an rLLM rollout engine,
each run recorded as an rLLM trajectory with the exact sampled token ids.

The main test is rLLM's own example (examples/smolagents/run_smolagents.py) against a real OpenAI-compatible HTTP
server that answers with the Qwen tokenizer's ids: a scripted model that first writes code, then answers with what
the code printed. The others use rllm's FakeModel behind `ClientRolloutEngine`: the tool-calling agent, the executor's
guard, a run inside an rLLM workflow (the trainer's path), and the errors."""

from __future__ import annotations

import asyncio
import re

import pytest

from rllm.engine.rollout import ClientRolloutEngine
from rllm.engine.rollout.openai_engine import OpenAIEngine
from rllm.integrations.smolagents import (
    AsyncCodeAgent,
    AsyncToolCallingAgent,
    RLLMOpenAIModel,
    SmolagentsIntegrationError,
)
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.testing.fake_openai_server import FakeOpenAIServer, FakeReply, run_fake_server

TASK = "Calculate the area of a circle with radius 5 using the math module and return the result"
# (No "(area": rllm.testing's fake server cannot send that Qwen token, id 55702, a UTF-16 surrogate code point.)
COMPUTE = "Thought: use math.pi.\n<code>\nimport math\nresult = math.pi * 5**2\nprint(round(result, 2))\n</code>"


def answer_from_printed(prompt: str) -> str:
    """The scripted model: code first; once the prompt shows what the code printed, answer with that number."""
    printed = re.findall(r"Execution logs:\n([0-9.]+)", prompt)
    if not printed:
        return COMPUTE
    return f"Thought: the code printed it.\n<code>\nfinal_answer({printed[-1]})\n</code>"


@pytest.fixture
def code_server(qwen_tokenizer):
    tokenizer = qwen_tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled: list[tuple[list[int], list[int]]] = []  # (prompt ids received, completion ids answered) per request

    def reply(endpoint, body):
        text = answer_from_printed(tokenizer.decode(body["prompt"]))
        ids = tokenizer.encode(text, add_special_tokens=False) + [end]
        sampled.append((list(body["prompt"]), ids))
        return FakeReply(text=text, token_ids=ids, logprobs=[-0.5] * len(ids))

    with run_fake_server(FakeOpenAIServer(model=tokenizer.name_or_path, reply_fn=reply)) as server:
        server.sampled = sampled
        yield server


def test_rllm_example_code_agent_runs_code_and_records_exact_tokens(code_server, qwen_tokenizer):
    engine = OpenAIEngine(
        model=qwen_tokenizer.name_or_path,
        tokenizer=qwen_tokenizer,
        base_url=code_server.base_url,
        api_key="None",
        sampling_params={"temperature": 0.6, "top_p": 0.95, "max_tokens": 2048},
    )
    model = RLLMOpenAIModel(rollout_engine=engine, sampling_params={"max_tokens": 1000})
    agent = AsyncCodeAgent(
        tools=[],
        model=model,
        max_steps=5,
        additional_authorized_imports=["math", "random", "json"],
        add_base_tools=False,
        verbosity_level=0,
    )

    async def run_then_close():
        try:
            return await agent.arun(TASK)
        finally:
            await engine.client.aclose()

    result = asyncio.run(run_then_close())

    assert result == 78.54  # computed by the code in smolagents' executor, read back by the model
    compute, final = agent.trajectory.steps
    assert agent.trajectory.task == TASK
    assert compute.action.startswith("import math") and "78.54" in compute.observation and not compute.done
    assert final.action == "final_answer(78.54)" and final.done
    for step, (prompt_ids, completion_ids) in zip(agent.trajectory.steps, code_server.sampled, strict=True):
        assert step.prompt_ids == prompt_ids and step.response_ids == completion_ids  # exactly what was sampled
        assert step.logprobs == [-0.5] * len(completion_ids)
        assert step.chat_completions[-1] == {"role": "assistant", "content": step.model_response}
    assert [m["role"] for m in final.chat_completions] == ["system", "user", "assistant", "user", "assistant"]
    assert "78.54" in final.chat_completions[3]["content"]  # the observation reached the model
    body = code_server.requests[-1][1]
    assert body["max_tokens"] == 1000 and "</code>" in body["stop"]  # sampling_params and smolagents' stops


def fake_engine(script: list[str]) -> tuple[ClientRolloutEngine, FakeModel]:
    model = FakeModel(script, tokenizer=FakeTokenizer())
    return ClientRolloutEngine(model, max_prompt_length=32768, max_response_length=256), model


def test_model_written_code_runs_in_smolagents_restricted_executor(tmp_path):
    marker = tmp_path / "escaped"
    escape = f"<code>\nimport os\nos.system('touch {marker}')\n</code>"
    engine, _ = fake_engine([escape, "<code>\nfinal_answer('refused')\n</code>"])
    agent = AsyncCodeAgent(tools=[], model=RLLMOpenAIModel(engine), verbosity_level=0)
    assert asyncio.run(agent.arun("touch a file")) == "refused"
    refused = agent.trajectory.steps[0]
    assert "Import of os is not allowed" in refused.info["error"] and not marker.exists()


def test_streamed_and_sync_runs_record_the_same_trajectory():
    script = ["<code>\nx = 3\nprint(x)\n</code>", "<code>\nfinal_answer(x)\n</code>"]
    streamed = AsyncCodeAgent(tools=[], model=RLLMOpenAIModel(fake_engine(script)[0]), verbosity_level=0)

    async def stream():
        return [type(item).__name__ async for item in await streamed.arun("three", stream=True)]

    assert asyncio.run(stream())[-1] == "FinalAnswerStep"
    synced = AsyncCodeAgent(tools=[], model=RLLMOpenAIModel(fake_engine(script)[0]), verbosity_level=0)
    assert synced.run("three") == 3
    for agent in (streamed, synced):
        assert [(s.action, s.done) for s in agent.trajectory.steps] == [
            ("x = 3\nprint(x)", False),
            ("final_answer(x)", True),
        ]


def test_tool_calling_agent_calls_a_smolagents_tool_parsed_from_text():
    from smolagents import tool

    @tool
    def add(a: int, b: int) -> int:
        """Adds two integers.

        Args:
            a: the first integer
            b: the second integer
        """
        return a + b

    calls = ['{"name": "add", "arguments": {"a": 2, "b": 3}}', '{"name": "final_answer", "arguments": {"answer": 5}}']
    engine, model = fake_engine(calls)
    agent = AsyncToolCallingAgent(tools=[add], model=RLLMOpenAIModel(engine), verbosity_level=0)
    assert asyncio.run(agent.arun("What is 2 + 3?")) == 5
    added, final = agent.trajectory.steps
    assert added.action[0]["function"] == {"name": "add", "arguments": {"a": 2, "b": 3}} and added.observation == "5"
    assert final.done and final.response_ids[:-1] == FakeTokenizer().encode(calls[1])
    assert model.calls[0].sampling.tools[0]["function"]["name"] == "add"  # the tools' schemas reach the engine


def test_a_run_inside_an_rllm_workflow_goes_through_the_workflows_engine():
    from rllm.engine.agent_workflow_engine import AgentWorkflowEngine
    from rllm.workflows.workflow import Workflow

    class SmolagentsWorkflow(Workflow):
        async def run(self, task, uid, **kwargs):
            self.reset(task, uid)
            agent = AsyncCodeAgent(tools=[], model=RLLMOpenAIModel(self.rollout_engine), verbosity_level=0)
            answer = await agent.arun(task["question"])
            agent.trajectory.reward = float(answer == 4)
            self.commit(trajectory=agent.trajectory)

    engine, model = fake_engine(["<code>\nx = 2 + 2\nprint(x)\n</code>", "<code>\nfinal_answer(x)\n</code>"])
    workflows = AgentWorkflowEngine(workflow_cls=SmolagentsWorkflow, workflow_args={}, rollout_engine=engine)
    (episode,) = asyncio.run(workflows.execute_tasks([{"question": "2 + 2?"}], task_ids=["t"]))
    (trajectory,) = episode.trajectories
    assert trajectory.reward == 1.0 and [s.done for s in trajectory.steps] == [False, True]
    assert [s.response_ids for s in trajectory.steps] == [call.output.completion_ids for call in model.calls]


def test_errors_name_what_to_do():
    with pytest.raises(SmolagentsIntegrationError, match="rollout_engine="):
        RLLMOpenAIModel()
    engine, _ = fake_engine(["hi"])

    async def blocking_call_in_a_loop():
        RLLMOpenAIModel(engine).generate([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])

    with pytest.raises(SmolagentsIntegrationError, match="arun"):
        asyncio.run(blocking_call_in_a_loop())
    for name in ("strands", "terminal_terminus_1"):
        with pytest.raises(ImportError, match="rllm serve gateway"):
            __import__(f"rllm.integrations.{name}")
