"""rLLM v0.2's SDK (`rllm.sdk`) over rllm's gateway: sessions whose OpenAI calls come back as StepViews with the
exact token ids, nested sessions and their metadata, `@trajectory`, streaming, and the parts that are not here."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("openai")

from rllm.gateway import Gateway
from rllm.inference import InferenceOptions
from rllm.models.base import SamplingParams
from rllm.sdk import (
    StepView,
    TrajectoryView,
    get_chat_client,
    get_chat_client_async,
    get_current_metadata,
    session,
    trajectory,
)
from rllm.sdk.data_process import trajectory_view_to_trajectory
from rllm.training.batch import build_rows
from rllm.types import Episode

QUESTION = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def gateway_url(smollm2_tokenizer):
    """A real gateway over a tiny LocalModel, on a background loop (a sync client must not block the loop that
    serves it)."""
    from rllm.inference.model import LocalModel
    from rllm.models.registry import build_tiny_model

    local = LocalModel(
        build_tiny_model(smollm2_tokenizer, seed=1), smollm2_tokenizer, InferenceOptions(max_batch_size=2)
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    gateway = Gateway(local, sampling=SamplingParams(max_tokens=6))
    try:
        asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(10)
        yield f"{gateway.base_url}/v1"
    finally:
        asyncio.run_coroutine_threadsafe(gateway.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        local.close()


def test_a_sessions_calls_come_back_with_their_exact_token_ids(gateway_url, smollm2_tokenizer):
    client = get_chat_client(base_url=gateway_url, api_key="none", max_retries=0)
    with session(task_id="t1") as outer:
        first = client.chat.completions.create(model="policy", messages=QUESTION, seed=1)
        follow_up = [
            *QUESTION,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "More."},
        ]
        with session(turn=2) as inner:
            assert get_current_metadata() == {"task_id": "t1", "turn": 2}
            client.chat.completions.create(model="policy", messages=follow_up, seed=2)
    assert get_current_metadata() == {}
    assert len(outer.llm_calls) == 2 and len(inner.llm_calls) == 1 and inner.name == outer.name  # inherited
    step = outer.steps[0]
    assert isinstance(step, StepView) and step.metadata["task_id"] == "t1"
    prompt, completion = step.input["prompt_token_ids"], step.output["output_token_ids"]
    assert prompt and completion and len(step.output["rollout_logprobs"]) == len(completion)
    assert smollm2_tokenizer.decode(completion, skip_special_tokens=True) == first.choices[0].message.content
    assert inner.steps[0].metadata == {
        "task_id": "t1",
        "turn": 2,
        "token_ids": {
            "prompt": inner.steps[0].input["prompt_token_ids"],
            "completion": inner.steps[0].output["output_token_ids"],
        },
    }


def test_trajectory_decorator_returns_a_view_that_trains_token_exactly(gateway_url):
    client = get_chat_client_async(base_url=gateway_url, api_key="none", max_retries=0)

    @trajectory(name="solver", kind="demo")
    async def solve(question: str, turns: int = 2) -> str:
        messages = [{"role": "user", "content": question}]
        for _ in range(turns):
            reply = await client.chat.completions.create(model="policy", messages=messages, seed=3)
            messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Go."}]
        return reply.choices[0].message.content

    async def run() -> TrajectoryView:
        try:
            return await solve("Say something.")
        finally:
            await client.close()

    view = asyncio.run(run())
    assert isinstance(view, TrajectoryView) and view.name == "solver" and view.reward == 0.0
    assert view.input == {"question": "Say something.", "turns": 2} and view.metadata == {"kind": "demo"}
    assert len(view.steps) == 2 and view.output == view.steps[1].output["message"]["content"]
    assert view.steps[1].metadata["trajectory_name"] == "solver"
    view.steps[-1].reward = view.reward = 1.0
    trajectory_ = trajectory_view_to_trajectory(view)
    rows, stats = build_rows(
        [(Episode(id="t:0"), trajectory_)],
        step_advantages=[[1.0, 1.0]],
        max_prompt_length=4096,
        max_response_length=4096,
    )
    assert len(rows) == 1 and stats["rows_split"] == 0  # the gateway kept the turns token-exact: one row


def test_streamed_and_raw_response_calls_are_recorded(gateway_url):
    client = get_chat_client(base_url=gateway_url, api_key="none", max_retries=0)
    with session() as sess:
        chunks = client.chat.completions.create(model="policy", messages=QUESTION, stream=True, seed=4)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        raw = client.with_raw_response.create(model="policy", messages=QUESTION, seed=5)  # LangChain's way in
    streamed, parsed = sess.steps
    assert streamed.output["message"]["content"] == text and streamed.output["output_token_ids"]
    assert parsed.output["message"]["content"] == raw.parse().choices[0].message.content


def test_what_rllm_does_not_have_imports_and_names_the_gateway_on_use():
    from rllm.errors import RllmError
    from rllm.sdk.proxy.proxy_manager import ProxyManager
    from rllm.sdk.session.base import _ensure_tracer_initialized
    from rllm.sdk.store import SqliteTraceStore

    _ensure_tracer_initialized("agent")  # a no-op with the contextvar backend, as in rLLM
    for unavailable in (ProxyManager, SqliteTraceStore):
        with pytest.raises(RllmError, match="rllm serve gateway"):
            unavailable()
    with pytest.raises(ValueError, match="generated"):
        session(name="mine")


def test_an_sdk_agent_trains_as_a_rollout_function_through_the_same_gateway_session():
    from rllm.engine.workflow_engine import AgentWorkflowEngine
    from rllm.gateway.rollout import rollout
    from rllm.models.fake import FakeModel, FakeTokenizer

    seen = []

    @rollout(reward_fn=lambda task, answer: float(answer == "42"))
    def solve(task: dict, base_url: str) -> str:
        client = get_chat_client(base_url=base_url, api_key="none", max_retries=0)  # a session URL: used as it is
        with session(task_id=task["id"]) as sess:
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "6 * 7?"}])
        seen.append(sess)
        return reply.choices[0].message.content

    engine = AgentWorkflowEngine(workflow_class=solve, model=FakeModel(["42"], tokenizer=FakeTokenizer()))
    [episode] = engine.execute_tasks([{"id": "q"}])
    [step] = episode.trajectories[0].steps
    assert episode.is_correct and step.model_output.completion_ids
    assert seen[0].steps[0].output["output_token_ids"] == step.model_output.completion_ids
    assert seen[0].steps[0].input["prompt_token_ids"] == step.model_output.prompt_ids
