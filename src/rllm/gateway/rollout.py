"""`@rllm.rollout`: train an agent written against the `openai` SDK, unchanged, through the gateway.

    @rllm.rollout(reward_fn=my_reward)
    def solve(task: dict, base_url: str) -> str:
        client = openai.OpenAI(base_url=base_url, api_key="none")
        reply = client.chat.completions.create(model="policy", messages=[...])
        return reply.choices[0].message.content            # the answer, scored by my_reward(task, answer)

`base_url` serves OpenAI chat completions, the Responses API and the Anthropic Messages API (`rllm.gateway.server`),
so `client.responses.create(...)` or `anthropic.Anthropic(base_url=base_url).messages.create(...)` work the same.

    AgentTrainer(workflow_class=solve, config=...)          # or `workflow: module:solve` in a config
    solve.fn(task, "https://api.openai.com/v1")            # the plain function, against any endpoint

The decorator turns `fn(task, base_url) -> answer` (a sync or an async function) into a `RolloutWorkflow` subclass,
usable wherever a workflow class is. Each episode:

1. opens a session on the running loop's shared gateway (`shared_gateway`) whose handler is this
   workflow's `generate` (conversation "main"): gateway calls go through the same rendering, length budget, seeds and
   mismatch counting as native rollouts, and the gateway restores its own replies to their sampled text so the
   turns merge into one training row;
2. runs `fn(task, session_url)` on a worker thread (a coroutine function in its own event loop there), so a
   synchronous `openai.OpenAI` client never blocks the loop that serves it; threads come from a pool of this module
   that grows with the number of rollouts in flight;
3. builds the trajectory `name`: one Step per call (`chat_completions` = the messages the model saw, `model_output`,
   `action` = the content returned to the agent), then the reward on the last step.

Choices:

- Reward: `reward_fn(task, answer)` (run by `call_reward`), where `reward_fn` is, first to last: the workflow
  argument `reward_fn` given explicitly (`workflow_args`), the decorator's, the built-in task's (handed over by the
  resolver only when the decorator has none). With none of them, fn may return the reward itself (a float or a
  `RewardOutput`); anything else is an error that names the fix. That is `RolloutWorkflow.score`, the one hook for
  a subclass that scores otherwise (a harness on a workspace task: its environment's grade).
- Sampling: in training the trainer's temperature/top_p/seed win (the on-policy loss assumes them); a request's own
  values are ignored and counted in `episode.info["ignored_sampling_overrides"]`. `honor_sampling=True` applies
  them (evaluation of an agent that sets its own). A request's `max_tokens` and `stop` always apply, within the
  trainer's `max_tokens`.
- Failures: a spent length budget, an infra error or any other failure while serving a call is kept by the session
  and re-raised when fn returns (or instead of the error fn raised because of it), so the episode ends with the
  right termination reason (`max_response_length`, `infra_error` retried by the engine, ...); the steps so far are
  committed. An episode whose client also carried another concurrent episode's calls (one HTTP connection serving
  two open sessions: a client shared between episodes, `rllm.gateway.server`) is an error naming that cause, never
  a silently mixed trajectory. fn's own exceptions propagate (`error`), except one raised right after a reply cut
  at `max_tokens`: agents that refuse a truncated reply (the Agents SDK raises on an "incomplete" response) end
  the episode as `max_response_length`, as a truncated native rollout does, not as a bug. A run with no model call
  is an error (usually a client that was not given `base_url`). An episode whose last reply tried a tool call that
  did not parse (so the agent got it back as text and ended on it) is scored, then ends as `policy_error`: the
  model's mistake, rewarded as `algorithm.policy_error_reward` says.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rllm.errors import PolicyError, RllmError
from rllm.gateway.server import CLOSED_SESSION_WORDS, SHARED_CLIENT_ADVICE, UNKNOWN_SESSION_WORDS, shared_gateway
from rllm.rewards.base import RewardOutput, to_reward_output
from rllm.tools.base import is_json_value
from rllm.types import Step, TerminationReason, Trajectory
from rllm.workflows.base import Workflow
from rllm.workflows.runtime import TerminationEvent

__all__ = ["RolloutFunctionError", "RolloutWorkflow", "rollout", "run_in_thread"]

_MAX_WORKER_THREADS = 1024  # threads are made on demand: this is a ceiling, not a cost


class RolloutFunctionError(RllmError):
    """The rollout function was used in a way that cannot produce a trainable episode."""


class RolloutWorkflow(Workflow):
    """The workflow `@rollout` makes of a function; subclasses set `fn` (and the decorator's defaults)."""

    fn: Callable[[dict, str], Any]
    default_reward_fn: Callable[[dict, Any], Any] | None = None
    default_name: str = "agent"
    default_honor_sampling: bool = False

    def __init__(
        self, reward_fn: Callable | None = None, *, name: str | None = None, honor_sampling: bool | None = None
    ) -> None:
        self.reward_fn = reward_fn if reward_fn is not None else self.default_reward_fn
        self.name = name or self.default_name
        self.honor_sampling = self.default_honor_sampling if honor_sampling is None else honor_sampling
        self._gateway: Any = None
        self._session: Any = None

    async def run(self, task: dict, uid: str) -> None:
        self._gateway = gateway = await shared_gateway()
        session = gateway.open_session(
            self._complete,
            tokenizer=getattr(self.model, "tokenizer", None),
            sampling=self.sampling,
            honor_sampling=self.honor_sampling,
        )
        self._session = session
        try:
            answer = await self.play(task, gateway.session_url(session.sid))
        except Exception as exc:
            self._finish(session)
            if session.failure is not None:  # the root cause, e.g. the budget behind an HTTP 400 in fn
                raise session.failure from exc
            if session.shared_with:  # e.g. its calls went to another episode's session, since closed
                raise _shared_client_error(self, session) from exc
            if isinstance(exc, TerminationEvent):
                raise
            if not session.records and any(
                words in str(exc) for words in (CLOSED_SESSION_WORDS, UNKNOWN_SESSION_WORDS)
            ):
                raise _elsewhere_error(self, exc) from exc
            if session.records and session.records[-1].finish_reason == "length":
                raise TerminationEvent(
                    TerminationReason.MAX_RESPONSE_LENGTH,
                    f"the agent stopped on a reply cut at max_tokens ({type(exc).__name__}: {exc})",
                ) from exc
            raise
        trajectory = self._finish(session)
        if session.failure is not None:
            raise session.failure
        if session.shared_with:
            raise _shared_client_error(self, session)
        if not trajectory.steps:
            raise RolloutFunctionError(
                f"{type(self).__name__} returned without calling the model through the base_url it was given: pass "
                "it to the client (openai.OpenAI(base_url=base_url, api_key=...), anthropic.Anthropic(base_url="
                f"base_url, ...)); {SHARED_CLIENT_ADVICE}"
            )
        await self._score(trajectory, task, answer)
        malformed = _malformed_last_call(trajectory)
        if malformed is not None:
            raise PolicyError(
                f"the model's last reply held a malformed tool call ({malformed}); the agent took its text as the "
                f"answer (scored {trajectory.steps[-1].reward:g}; algorithm.policy_error_reward replaces it if set)"
            )

    async def play(self, task: dict, base_url: str) -> Any:
        """Run the agent program for one episode against its session URL and return its answer: `fn` on a worker
        thread (module docstring). Subclasses that run something else (a harness) override this."""
        return await run_in_thread(type(self).fn, task, base_url)

    async def cleanup(self) -> None:
        if self._session is not None:  # an attempt that timed out or was cancelled: keep what it recorded
            self._finish(self._session)

    async def _complete(self, messages: list[dict], tools: list[dict] | None, overrides: dict[str, Any]):
        return await self.generate(messages, conversation="main", tools=tools, **overrides)

    def _finish(self, session: Any) -> Trajectory:
        """Close the session and commit its calls as a trajectory (also when the episode fails)."""
        self._gateway.close_session(session.sid)
        self._session = None
        steps = [
            Step(
                chat_completions=record.rendered_messages,
                model_output=record.output,
                action=record.content,
                info=_step_info(record),
            )
            for record in session.records
        ]
        trajectory = Trajectory(name=self.name, steps=steps)
        self.commit(trajectory)
        ignored = sum(session.ignored.values())
        self.episode_info.update(gateway_calls=len(steps), ignored_sampling_overrides=ignored)
        if ignored:
            self.episode_info["ignored_sampling_fields"] = sorted(session.ignored)
        return trajectory

    async def score(self, task: dict, answer: Any) -> RewardOutput:
        """The reward of the episode's answer: `reward_fn(task, answer)`, or the answer itself when it is a reward
        (module docstring). Subclasses whose reward comes from elsewhere override this: a harness on a workspace
        task returns its environment's grade (`rllm.harnesses.base`)."""
        if self.reward_fn is not None:
            return to_reward_output(await self.call_reward(self.reward_fn, task, answer), self.reward_fn)
        if isinstance(answer, RewardOutput) or (isinstance(answer, (int, float)) and not isinstance(answer, bool)):
            return to_reward_output(answer)
        raise RolloutFunctionError(
            f"{type(self).__name__} returned {type(answer).__name__} {_short(answer)} and has no reward "
            "function: give one with @rllm.rollout(reward_fn=fn(task, answer) -> float), or "
            "workflow_args={'reward_fn': ...}, or train on a built-in task that has one (countdown, math, code), "
            "or return the reward itself (a float or rllm.rewards.RewardOutput)"
        )

    async def _score(self, trajectory: Trajectory, task: dict, answer: Any) -> None:
        result = await self.score(task, answer)
        last = trajectory.steps[-1]
        last.reward, last.done = result.reward, True
        last.info.update(result.info, is_correct=result.correct)
        trajectory.is_correct = result.correct
        trajectory.info["answer"] = answer if is_json_value(answer) else repr(answer)


def rollout(
    fn: Callable | None = None,
    *,
    reward_fn: Callable[[dict, Any], float | RewardOutput] | None = None,
    name: str = "agent",
    honor_sampling: bool = False,
) -> Any:
    """Turn `fn(task, base_url) -> answer` into a `RolloutWorkflow` subclass; use bare (`@rollout`) or with
    arguments (`@rollout(reward_fn=...)`). See the module docstring."""

    def decorate(function: Callable) -> type[RolloutWorkflow]:
        _check_signature(function)
        attrs: dict[str, Any] = {
            "fn": staticmethod(function),
            "default_reward_fn": staticmethod(reward_fn) if reward_fn is not None else None,
            "default_name": name,
            "default_honor_sampling": honor_sampling,
            "__module__": function.__module__,
            "__qualname__": function.__qualname__,
            "__doc__": function.__doc__,
            "__wrapped__": function,
        }
        if reward_fn is not None:
            # No `reward_fn` in the signature: the resolver then hands over no task reward, so the decorator's
            # wins over it; an explicit workflow_args["reward_fn"] still reaches __init__ and wins over both.
            def __init__(self, **kwargs: Any) -> None:
                RolloutWorkflow.__init__(self, **kwargs)

            attrs["__init__"] = __init__
        return type(function.__name__, (RolloutWorkflow,), attrs)

    if fn is not None:
        return decorate(fn)
    return decorate


def _check_signature(function: Any) -> None:
    if not callable(function) or isinstance(function, type):
        raise TypeError(f"@rollout decorates a function fn(task, base_url), not {function!r}")
    try:
        inspect.signature(function).bind({}, "http://")
    except TypeError as exc:
        raise TypeError(
            f"@rollout needs fn(task, base_url); {getattr(function, '__qualname__', function)} "
            f"cannot take those two arguments ({exc})"
        ) from None
    except ValueError:  # builtins without a signature: let the call decide
        pass


# ---- running the user's function --------------------------------------------------------------------------------

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


async def run_in_thread(fn: Callable, *args: Any) -> Any:
    """fn(*args) on a worker thread; a coroutine it returns runs to completion in that thread's own loop."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(_MAX_WORKER_THREADS, thread_name_prefix="rllm-rollout")
    return await asyncio.get_running_loop().run_in_executor(_executor, _call, fn, *args)


def _call(fn: Callable, *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        return asyncio.run(_wait(result))
    return result


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def _malformed_last_call(trajectory: Trajectory) -> str | None:
    """The parse error of a tool call the last reply tried and failed to make (none parsed), as "kind: message"."""
    info = trajectory.steps[-1].info
    errors = [e for e in info.get("tool_call_errors", []) if e.get("kind") != "unsupported_family"]
    if not errors or info.get("tool_calls"):
        return None
    return f"{errors[0]['kind']}: {errors[0]['message']}"


def _elsewhere_error(workflow: Any, exc: Exception) -> RolloutFunctionError:
    """An agent whose call reached another episode's (closed) session before any reached its own."""
    return RolloutFunctionError(
        f"{type(workflow).__name__}: its client called another episode's session before any call reached this "
        f"episode's: {SHARED_CLIENT_ADVICE} ({type(exc).__name__}: {exc})"
    )


def _shared_client_error(workflow: Any, session: Any) -> RolloutFunctionError:
    return RolloutFunctionError(
        f"{type(workflow).__name__}: this episode's client also carried the calls of {len(session.shared_with)} "
        f"other concurrent episode(s) over one HTTP connection, so their conversations mixed: {SHARED_CLIENT_ADVICE}"
    )


def _step_info(record: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"finish_reason": record.finish_reason}
    if record.tool_calls:
        info["tool_calls"] = record.tool_calls
    if record.tool_call_errors:
        info["tool_call_errors"] = record.tool_call_errors
    if record.ignored_sampling:
        info["ignored_sampling"] = record.ignored_sampling
    return info


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
