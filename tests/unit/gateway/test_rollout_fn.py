"""`@rllm.rollout`: functions that only know the `openai` SDK, run as workflows through the gateway."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")

import rllm
from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.errors import InfraError
from rllm.gateway import server
from rllm.gateway.rollout import RolloutWorkflow, rollout
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.rewards.base import RewardOutput
from rllm.tasks import get_task
from rllm.types import TerminationReason
from rllm.workflows import get_workflow
from rllm.workflows.resolve import resolve_workflow

R = TerminationReason
ROOT = Path(__file__).resolve().parents[3]
TASK = {"id": "q", "question": "What is 6 * 7?", "answer": 42}


def exact(task: dict, answer: str) -> float:
    return float(str(task["answer"]) in str(answer))


def two_turns(task: dict, base_url: str, **create) -> str:
    with openai.OpenAI(base_url=base_url, api_key="none", max_retries=0) as client:
        messages = [{"role": "user", "content": task["question"]}]
        first = client.chat.completions.create(model="m", messages=messages, **create)
        messages += [first.choices[0].message, {"role": "user", "content": "Only the number."}]
        return client.chat.completions.create(model="m", messages=messages, **create).choices[0].message.content


def run(workflow_class, script, *, tasks=(TASK,), n=1, **engine_kwargs):
    model = FakeModel(script, tokenizer=FakeTokenizer())
    engine_kwargs.setdefault("retry_backoff", 0.0)
    engine = AgentWorkflowEngine(workflow_class=workflow_class, model=model, **engine_kwargs)
    return engine.execute_tasks(list(tasks), n_rollouts=n), model


def test_decorator_forms_make_workflow_classes():
    bare = rollout(two_turns)
    configured = rollout(reward_fn=exact, name="solver", honor_sampling=True)(two_turns)
    for cls in (bare, configured):
        assert issubclass(cls, RolloutWorkflow) and cls.__name__ == "two_turns" and cls.__wrapped__ is two_turns
    assert rllm.rollout is rollout and bare.fn is two_turns
    assert configured().reward_fn is exact and configured().name == "solver" and configured().honor_sampling
    assert bare().reward_fn is None and bare().honor_sampling is False
    with pytest.raises(TypeError, match="fn\\(task, base_url\\)"):
        rollout(lambda task: task)
    with pytest.raises(TypeError, match="decorates a function"):
        rollout(42)


def test_sync_function_two_turns_one_row_scored():
    solve = rollout(reward_fn=exact)(two_turns)
    [episode], _ = run(solve, ["Let me think: 42.", "42"])
    assert episode.termination_reason is R.ENV_DONE and episode.is_correct
    [trajectory] = episode.trajectories
    assert trajectory.name == "agent" and trajectory.reward == 1.0 and trajectory.is_correct
    first, second = trajectory.steps
    assert (first.action, second.action, second.reward, second.done) == ("Let me think: 42.", "42", 1.0, True)
    assert second.chat_completions[1] == {"role": "assistant", "content": "Let me think: 42."}
    assert second.model_output.prompt_ids[: first.model_output.prompt_length] == first.model_output.prompt_ids
    assert episode.metrics["token_mismatch"] == 0 and episode.info["gateway_calls"] == 2
    assert trajectory.info["answer"] == "42"
    assert not server._SHARED  # the loop's gateway was stopped with its asyncio.run


def test_async_function_concurrent_rollouts():
    @rllm.rollout
    async def solve(task: dict, base_url: str) -> float:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0) as client:
            reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            return 1.0 if reply.choices[0].message.content == "yes" else 0.0

    tasks = [{"id": f"t{i}"} for i in range(3)]
    episodes, model = run(solve, "yes", tasks=tasks, n=2, n_parallel=6)
    assert [e.id for e in episodes] == ["t0:0", "t0:1", "t1:0", "t1:1", "t2:0", "t2:1"]
    assert all(e.is_correct and e.trajectories[0].reward == 1.0 for e in episodes)
    assert len(model.calls) == 6


def test_reward_from_the_return_value_and_the_missing_reward_error():
    @rollout
    def graded(task, base_url):
        two_turns(task, base_url)
        return RewardOutput(0.5, is_correct=False, info={"why": "half"})

    [episode], _ = run(graded, ["a", "b"])
    trajectory = episode.trajectories[0]
    assert trajectory.reward == 0.5 and trajectory.is_correct is False and trajectory.steps[-1].info["why"] == "half"

    [episode], _ = run(rollout(two_turns), ["a", "b"])
    assert episode.termination_reason is R.ERROR
    assert "no reward function" in episode.info["error"] and "reward_fn" in episode.info["error"]
    assert len(episode.trajectories[0].steps) == 2  # what was sampled is kept


def test_reward_precedence_explicit_then_decorator_then_task():
    countdown = get_task("countdown")
    task_reward = countdown.workflow_inputs()["reward_fn"]

    def mine(task, answer):
        return 0.0

    bare_class, args = resolve_workflow(countdown, workflow=rollout(two_turns))
    assert bare_class(**args).reward_fn is task_reward
    decorated, args = resolve_workflow(countdown, workflow=rollout(reward_fn=exact)(two_turns))
    assert decorated(**args).reward_fn is exact
    _, args = resolve_workflow(countdown, workflow=decorated, workflow_args={"reward_fn": mine})
    assert decorated(**args).reward_fn is mine


def test_no_model_call_is_a_clear_error():
    [episode], _ = run(rollout(reward_fn=exact)(lambda task, base_url: "42"), [])
    assert episode.termination_reason is R.ERROR and "base_url" in episode.info["error"]


def test_function_exceptions_are_errors_with_a_traceback():
    def broken(task, base_url):
        two_turns(task, base_url)
        raise ValueError("agent bug")

    [episode], _ = run(rollout(reward_fn=exact)(broken), ["a", "b"])
    assert episode.termination_reason is R.ERROR and "agent bug" in episode.info["traceback"]


def test_spent_budget_ends_the_episode_with_its_reason():
    [episode], _ = run(rollout(reward_fn=exact)(two_turns), ["x" * 40, "never"], max_response_length=45)
    assert episode.termination_reason is R.MAX_RESPONSE_LENGTH
    assert len(episode.trajectories[0].steps) == 1


def test_infra_error_is_reraised_and_retried():
    [episode], _ = run(rollout(reward_fn=exact)(two_turns), [InfraError("down"), "6*7", "42"], retry_limit=1)
    assert episode.termination_reason is R.ENV_DONE and episode.is_correct
    assert episode.metrics["retries"] == 1 and "down" in episode.info["retry_errors"][0]


def test_infra_error_swallowed_by_the_agent_still_ends_the_episode():
    def forgiving(task, base_url):
        try:
            two_turns(task, base_url)
        except openai.APIError:
            return "gave up"

    [episode], _ = run(rollout(reward_fn=exact)(forgiving), [InfraError("down")], retry_limit=0)
    assert episode.termination_reason is R.INFRA_ERROR


def test_request_sampling_is_ignored_in_training_and_counted():
    solve = rollout(reward_fn=exact)(lambda task, url: two_turns(task, url, temperature=0.1))
    [episode], model = run(solve, ["a", "42"], sampling=SamplingParams(temperature=1.0, max_tokens=64))
    assert [call.sampling.temperature for call in model.calls] == [1.0, 1.0]
    assert episode.info["ignored_sampling_overrides"] == 2
    assert episode.info["ignored_sampling_fields"] == ["temperature"]

    honoring = rollout(reward_fn=exact, honor_sampling=True)(lambda task, url: two_turns(task, url, temperature=0.1))
    [episode], model = run(honoring, ["a", "42"])
    assert [call.sampling.temperature for call in model.calls] == [0.1, 0.1]
    assert episode.info["ignored_sampling_overrides"] == 0


def test_timeout_keeps_the_calls_made_and_closes_the_session():
    def slow(task, base_url):
        with openai.OpenAI(base_url=base_url, api_key="none", max_retries=0) as client:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            time.sleep(0.6)
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])  # 404 now

    [episode], model = run(rollout(reward_fn=exact)(slow), ["a", "b"], episode_timeout=0.3)
    assert episode.termination_reason is R.TIMEOUT and len(episode.trajectories[0].steps) == 1
    time.sleep(0.5)  # the abandoned thread finishes (its second call fails): no model call was made for it
    assert len(model.calls) == 1


def test_workflow_by_file_path(monkeypatch):
    absolute = get_workflow(f"{ROOT}/examples/openai_agent.py:solve")
    monkeypatch.chdir(ROOT)
    assert get_workflow("examples/openai_agent.py:solve") is absolute
    assert issubclass(absolute, RolloutWorkflow) and absolute().reward_fn.__name__ == "arithmetic_reward"
    with pytest.raises(ValueError, match="no file"):
        get_workflow("examples/missing.py:solve")
    with pytest.raises(ValueError, match="path/to/file.py:Class"):
        get_workflow("nothing_here")


def test_an_agent_calling_an_api_the_gateway_does_not_serve_errors_every_episode_and_the_batch_stops():
    """Every call 404s (legacy completions): each episode is an error naming what is served, never a 0 reward, and
    an eval or training step of only such episodes stops with that error instead of reporting a score."""
    from rllm.engine.failures import AllEpisodesFailedError, raise_if_all_failed

    def legacy(task: dict, base_url: str) -> str:
        with openai.OpenAI(base_url=base_url, api_key="none", max_retries=0) as client:
            return client.completions.create(model="m", prompt=task["question"]).choices[0].text

    episodes, model = run(rollout(reward_fn=exact)(legacy), "unused", n=2)
    assert [ep.termination_reason for ep in episodes] == [R.ERROR, R.ERROR] and not model.calls
    assert "/v1/responses and /v1/messages" in episodes[0].info["error"]
    with pytest.raises(AllEpisodesFailedError, match=r"all 2 episodes of this eval ended in an error .* NotFound"):
        raise_if_all_failed(episodes, "this eval")
    raise_if_all_failed([*episodes, *run(rollout(reward_fn=exact)(two_turns), ["42", "42"])[0]], "a mixed batch")


SHARED = openai.OpenAI(base_url="http://127.0.0.1:9/unset", api_key="none", max_retries=0)  # one for the process


def with_a_process_global_client(task: dict, base_url: str) -> str:
    """The usual mistake: one module-level client, its base_url set by each episode as it starts."""
    SHARED.base_url = base_url
    messages = [{"role": "user", "content": task["question"]}]
    first = SHARED.chat.completions.create(model="m", messages=messages)
    time.sleep(0.2)  # the other episodes start meanwhile and move the client to their sessions
    messages += [first.choices[0].message, {"role": "user", "content": "Only the number."}]
    return SHARED.chat.completions.create(model="m", messages=messages).choices[0].message.content


def test_a_client_shared_by_concurrent_episodes_is_named():
    """Where the calls went depends on the threads' timing. Whatever it was, the batch says so: every failed episode
    names the process-global client (its calls went elsewhere, to a closed session, or over a connection that also
    carried another open session's), and the batch is not silent: an episode failed that way, or one counts the
    calls it received from another as token mismatches."""
    tasks = [{**TASK, "id": f"q{i}"} for i in range(3)]
    episodes, _ = run(rollout(reward_fn=exact)(with_a_process_global_client), "42", tasks=tasks, retry_limit=0)
    failed = [ep for ep in episodes if ep.termination_reason is R.ERROR]
    assert failed or any(ep.metrics["token_mismatch"] > 0 for ep in episodes), episodes
    assert all("process-global client" in ep.info["error"] for ep in failed), [ep.info["error"] for ep in failed]
