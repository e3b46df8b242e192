"""rLLM v0.2's smolagents integration (`from rllm.integrations.smolagents import AsyncCodeAgent, RLLMOpenAIModel`):
smolagents agents whose model calls go through an rLLM rollout engine, and whose runs are recorded as rLLM
trajectories to train on.

- `RLLMOpenAIModel(rollout_engine, sampling_params=None, **model_kwargs)` is a smolagents `Model`. Each call renders
  the agent's memory as smolagents' own OpenAI models do (text messages; tool calls and observations as assistant and
  user turns), asks `rollout_engine.get_model_response` (with smolagents' stop sequences and, for tool-calling agents,
  its tool schemas), and answers with a `ChatMessage` whose `raw` is the sampled `ModelOutput` (exact token ids and
  logprobs when the engine has a tokenizer). Inside an rLLM workflow run by an engine or the trainer, the engine's
  call is the workflow's own, so the episode's turns are recorded for training as any rLLM workflow's are.
- `AsyncCodeAgent` and `AsyncToolCallingAgent` are smolagents' `CodeAgent` and `ToolCallingAgent` with `arun`, an
  awaitable `run`, and `trajectory`: one `Step` per model call of the latest run (planning and the final-answer call
  after `max_steps` included), holding the messages sent plus the reply (`chat_completions`), the reply's text
  (`model_response`) and the sampled `ModelOutput` (`model_output`, so `prompt_ids`/`response_ids`/`logprobs`); the
  step of an action also gets the code or tool calls (`action`), what they printed or returned (`observation`), any
  error (`info["error"]`), smolagents' step number (`info["smolagents_step"]`) and `done` on the final answer. Sync
  `run` records the same way.

`arun` runs smolagents' own loop unchanged (planning, final-answer checks, max steps, managed agents), in a thread of
its own, while the model calls are awaited on the caller's event loop. rLLM re-implemented that loop; running the
original keeps every smolagents behaviour and fix.

Model-written code: `AsyncCodeAgent` executes it as smolagents' `CodeAgent` does, by default in smolagents'
`LocalPythonExecutor`, a restricted AST interpreter inside this process (only `additional_authorized_imports` can be
imported, dunder attributes are refused, operations and loop iterations are capped). That is what rLLM does too. It
is a guard, not an isolation boundary: for untrusted models pass smolagents' `executor_type="docker"` (or "e2b",
"modal").

Differences from rLLM: tool observations reach the model as smolagents sends them to OpenAI servers (a user turn),
not as `role: tool` messages; `sampling_params` is applied (rLLM ignores it); `trajectory` restarts with each run
(`reset=True`) instead of growing across runs; `response_format` (structured code outputs) and `astep` are not
supported.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from functools import partial
from typing import Any

from rllm.errors import RllmError
from rllm.types import ModelOutput, Step, Trajectory

try:
    from smolagents import CodeAgent, Model, ToolCallingAgent
    from smolagents.memory import ActionStep
    from smolagents.models import (
        ChatMessage,
        ChatMessageStreamDelta,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        TokenUsage,
    )
except ImportError as error:  # the `compat` extra installs it
    raise ImportError("rllm.integrations.smolagents needs smolagents: pip install 'smolagents==1.26.0'") from error

__all__ = ["AsyncCodeAgent", "AsyncToolCallingAgent", "RLLMOpenAIModel", "SmolagentsIntegrationError"]

# The trajectory the model records its calls into: set per run by the agent, so one model shared by several agents
# (or by concurrent runs) records each call into the run that made it.
_RECORDING: contextvars.ContextVar[Trajectory | None] = contextvars.ContextVar("rllm_smolagents_run", default=None)
# The event loop `arun` was awaited on: smolagents' loop, in its thread, hands model calls back to it.
_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "rllm_smolagents_loop", default=None
)


class SmolagentsIntegrationError(RllmError, ValueError):
    """A smolagents feature or a call pattern this integration does not support."""


class RLLMOpenAIModel(Model):
    """A smolagents `Model` over an rLLM rollout engine (`OpenAIEngine`, or any `RolloutEngine`). See the module
    docstring. `sampling_params` (temperature, top_p, max_tokens, ...) go with every call; other keywords are
    smolagents' `Model` arguments (`model_id`, `flatten_messages_as_text`, ...)."""

    def __init__(
        self, rollout_engine: Any = None, sampling_params: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if rollout_engine is None:
            raise SmolagentsIntegrationError(
                "RLLMOpenAIModel needs rollout_engine=, e.g. rllm.engine.OpenAIEngine(...)"
            )
        kwargs.setdefault("model_id", getattr(rollout_engine, "model", None) or None)
        kwargs.setdefault("flatten_messages_as_text", True)  # rollout engines take text messages
        super().__init__(**kwargs)
        self.rollout_engine = rollout_engine
        self.sampling_params = dict(sampling_params or {})
        self.last_output: ModelOutput | None = None

    async def generate_async(
        self,
        messages: list[ChatMessage | dict],
        stop_sequences: list[str] | None = None,
        response_format: dict[str, str] | None = None,
        tools_to_call_from: list[Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """One model call through the rollout engine, recorded in the calling agent's run (if any)."""
        if response_format is not None:
            raise SmolagentsIntegrationError(
                "response_format (use_structured_outputs_internally=True) is not "
                "supported by rLLM rollout engines: leave it off"
            )
        request = self._prepare_completion_kwargs(
            messages, stop_sequences=stop_sequences, tools_to_call_from=tools_to_call_from, tool_choice=None, **kwargs
        )
        prompt = [{"role": MessageRole(m["role"]).value, "content": m["content"]} for m in request.pop("messages")]
        if not request.get("tools"):
            request.pop("tools", None)
        output = await self.rollout_engine.get_model_response(prompt, **{**self.sampling_params, **request})
        self.last_output = output
        _record(prompt, output)
        return _chat_message(output)

    def generate(
        self,
        messages: list[ChatMessage | dict],
        stop_sequences: list[str] | None = None,
        response_format: dict[str, str] | None = None,
        tools_to_call_from: list[Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """What smolagents' loop calls: `generate_async`, run on `arun`'s event loop when inside `arun`, else on a
        fresh one. Refused inside a running event loop (it would block it): await `generate_async` or `arun`."""
        return _wait(self.generate_async(messages, stop_sequences, response_format, tools_to_call_from, **kwargs))

    def generate_stream(self, messages: list[ChatMessage | dict], **kwargs: Any) -> Iterator[ChatMessageStreamDelta]:
        """For agents made with `stream_outputs=True`: the whole reply as one delta (rollout engines do not stream)."""
        reply = self.generate(messages, **kwargs)
        yield ChatMessageStreamDelta(content=reply.content, token_usage=reply.token_usage)

    @property
    def last_input_token_count(self) -> int:
        return self.last_output.prompt_length if self.last_output else 0

    @property
    def last_output_token_count(self) -> int:
        return self.last_output.completion_length if self.last_output else 0


def _chat_message(output: ModelOutput) -> ChatMessage:
    tool_calls = [
        ChatMessageToolCall(ChatMessageToolCallFunction(call.name, call.arguments), call.id or f"call_{i}", "function")
        for i, call in enumerate(output.tool_calls)
    ]
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content=output.text,
        tool_calls=tool_calls or None,  # None: smolagents' ToolCallingAgent then parses calls from the text
        raw=output,
        token_usage=TokenUsage(input_tokens=output.prompt_length, output_tokens=output.completion_length),
    )


def _record(prompt: list[dict[str, Any]], output: ModelOutput) -> None:
    trajectory = _RECORDING.get()
    if trajectory is None:  # a call made outside an agent's run
        return
    reply = {"role": "assistant", "content": output.text}
    trajectory.steps.append(
        Step(
            chat_completions=[*prompt, reply],
            model_response=output.text,
            model_output=output,
            thought=output.reasoning or "",
        )
    )


def _wait(call: Coroutine[Any, Any, ChatMessage]) -> ChatMessage:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        call.close()
        raise SmolagentsIntegrationError(
            "RLLMOpenAIModel.generate() blocks, and was called inside a running event "
            "loop: use `await agent.arun(task)` or `await model.generate_async(...)`"
        )
    loop = _LOOP.get()
    if loop is not None:
        return asyncio.run_coroutine_threadsafe(call, loop).result()
    return asyncio.run(call)


class _RecordsTrajectory:
    """`arun`, `trajectory` and the recording of each run, over a smolagents `MultiStepAgent` (the next base)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rllm_trajectory = Trajectory()
        self.step_callbacks.register(ActionStep, self._describe_action)

    @property
    def trajectory(self) -> Trajectory:
        """The latest run's steps, one per model call (see the module docstring)."""
        return self._rllm_trajectory

    def run(self, task: str, stream: bool = False, reset: bool = True, *args: Any, **kwargs: Any) -> Any:
        """smolagents' `run`, recording each model call into `trajectory` (a new one when `reset`)."""
        if reset:
            self._rllm_trajectory = Trajectory(task=task)
        recording = contextvars.copy_context()
        recording.run(_RECORDING.set, self._rllm_trajectory)
        result = recording.run(super().run, task, stream, reset, *args, **kwargs)
        if stream:
            return self._stepped_in(recording, result)
        self._mark_done()
        return result

    def _stepped_in(self, recording: contextvars.Context, steps: Iterator[Any]) -> Iterator[Any]:
        """A streamed run's steps, each advanced in the run's recording context."""
        while True:
            try:
                yield recording.run(next, steps)
            except StopIteration:
                self._mark_done()
                return

    async def arun(self, task: str, stream: bool = False, reset: bool = True, *args: Any, **kwargs: Any) -> Any:
        """`run`, awaitable: smolagents' loop runs in its own thread while the model calls are awaited here. With
        `stream=True`, an async iterator of the steps (as `run(stream=True)` yields them)."""
        run = partial(self.run, task, stream, reset, *args, **kwargs)
        if stream:
            return _stream_in_thread(run)
        try:
            return await _in_own_thread(run)
        except asyncio.CancelledError:
            self.interrupt()  # smolagents stops at its next step
            raise

    def _describe_action(self, memory_step: ActionStep, **_: Any) -> None:
        """After each action, put what the agent did and saw on the step of its model call."""
        steps = self._rllm_trajectory.steps
        if not steps or "smolagents_step" in steps[-1].info:
            return
        step = steps[-1]
        step.info["smolagents_step"] = memory_step.step_number
        step.action = memory_step.code_action or [call.dict() for call in memory_step.tool_calls or []] or None
        step.observation = memory_step.observations
        step.done = memory_step.is_final_answer
        if memory_step.error is not None:
            step.info["error"] = str(memory_step.error)

    def _mark_done(self) -> None:
        steps = self._rllm_trajectory.steps
        if steps:  # the run's last model call ended it (a final answer, or the answer after max_steps)
            steps[-1].done = True


class AsyncCodeAgent(_RecordsTrajectory, CodeAgent):
    """smolagents' `CodeAgent`, with `arun` and `trajectory` (see the module docstring)."""


class AsyncToolCallingAgent(_RecordsTrajectory, ToolCallingAgent):
    """smolagents' `ToolCallingAgent`, with `arun` and `trajectory` (see the module docstring)."""


async def _in_own_thread(function: Callable[[], Any]) -> Any:
    """`function()` in a new thread, its model calls served by this event loop. A thread per run, not
    `asyncio.to_thread`: a run holds its thread while it waits on the model, and the default pool (a few threads per
    core) would cap how many episodes a trainer runs at once."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    context = contextvars.copy_context()  # the caller's (an rLLM workflow's engine routing travels with it)
    context.run(_LOOP.set, loop)

    def settle(setter: Callable[[Any], None], value: Any) -> None:
        if not finished.done():  # cancelled meanwhile
            setter(value)

    def target() -> None:
        try:
            result = context.run(function)
        except BaseException as error:  # handed to the awaiting task (else it would wait forever)
            loop.call_soon_threadsafe(settle, finished.set_exception, error)
        else:
            loop.call_soon_threadsafe(settle, finished.set_result, result)

    threading.Thread(target=target, name="rllm-smolagents-run", daemon=True).start()
    return await finished


_END = object()


async def _stream_in_thread(steps: Callable[[], Iterator[Any]]) -> AsyncIterator[Any]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def pump() -> None:
        try:
            for item in steps():
                loop.call_soon_threadsafe(queue.put_nowait, item)
        except BaseException as error:  # raised in the consumer
            loop.call_soon_threadsafe(queue.put_nowait, _Failed(error))
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, _END)

    running = asyncio.ensure_future(_in_own_thread(pump))
    while (item := await queue.get()) is not _END:
        if isinstance(item, _Failed):
            raise item.error
        yield item
    await running


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error
