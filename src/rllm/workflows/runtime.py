"""What every workflow's rollout runs on: a thread pool for blocking env code, one rendering + length-budget state
per conversation, the termination event, and the classification of failures.

Choices:

- Where an exception came from decides what it means, after its type: `InfraError` anywhere is an infra error
  (retried) and `PolicyError` anywhere is a policy error (the model's fault, never retried). Otherwise an exception
  from env code (`Workflow.call_env`) is an infra error (an env crash is ours, not the policy's), one from the model
  client is an infra error only if it is an `OSError` (connection refused, socket timeout: clients should raise
  `InfraError`, this catches the ones that let them through), and one from workflow, agent, reward or rendering code
  is `ERROR` (a bug; the traceback is kept). The site is written on the exception as it passes through a helper
  (innermost wins), so it survives `asyncio.gather` of concurrent calls inside one workflow.
- Length budget (only when the model has a tokenizer, i.e. prompts are token ids). A conversation trains as rows
  `[prompt, A0, obs1, A1, ...]` of the sampled ids (docs/architecture.md, "Token exactness"): `max_prompt_length`
  bounds a row's prompt and `max_response_length` everything after it (completions and the observation deltas
  between them). So each call gets `max_tokens = min(sampling.max_tokens, remaining)`, and a call with nothing
  remaining ends the episode with `MAX_RESPONSE_LENGTH`, which guarantees the merged row fits. A prompt whose ids do
  not start with the previous prompt + completion (`ChatRenderer.extended` is false, and it counts a mismatch) starts
  a new row, bounded by `max_prompt_length` again: the rule `build_rows` merges by, so the budget is kept for the rows
  that are built.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any

from rllm.errors import InfraError, PolicyError, error_site, tag_site  # re-exported next to classify_error
from rllm.exactness import EPISODE_KEYS, PREFIX
from rllm.models.base import ImagePrompt
from rllm.models.chat import ChatRenderer
from rllm.types import ModelOutput, TerminationReason

__all__ = [
    "Conversation",
    "EnvRunner",
    "TerminationEvent",
    "classify_error",
    "error_site",
    "exactness_metrics",
    "tag_site",
]

_Reason = TerminationReason


class TerminationEvent(Exception):
    """Raise inside `Workflow.run` to end the episode with `reason`; what was committed so far is kept."""

    def __init__(self, reason: TerminationReason | str, message: str | None = None) -> None:
        self.reason = TerminationReason(reason)
        self.message = message
        super().__init__(message or self.reason.value)


def exactness_metrics(conversations: Iterable[Conversation]) -> dict[str, int]:
    """An episode's `exactness/<key>` metrics, summed over its conversations; only those not 0, so the metrics of an
    exact episode are what they were before the report existed."""
    totals = dict.fromkeys(EPISODE_KEYS, 0)
    for conversation in conversations:
        for key, count in conversation.exactness_counts().items():
            totals[key] += count
    return {PREFIX + key: count for key, count in totals.items() if count}


def classify_error(exc: BaseException, site: str | None = None) -> TerminationReason:
    """What an exception raised at `site` ("env", "model", "workflow", "agent", "reward", "render") means."""
    site = site or error_site(exc)
    if isinstance(exc, InfraError):
        return _Reason.INFRA_ERROR
    if isinstance(exc, PolicyError):
        return _Reason.POLICY_ERROR
    if site == "env" or (site == "model" and isinstance(exc, OSError)):
        return _Reason.INFRA_ERROR
    return _Reason.ERROR


class EnvRunner:
    """Runs blocking env code on a thread pool so it never blocks the event loop. Envs that are not multithread
    safe take a lock *inside* the worker thread: a step abandoned by a timeout keeps the lock until it really
    returns, so two calls into such envs never overlap even then.

    With no executor the calls run inline on the event loop thread (the engine's `env_workers=0`): no thread hop
    (~50 us a call), for envs whose calls take microseconds; a slow call then stalls every rollout, and a step
    timeout cannot interrupt it."""

    def __init__(self, executor: Executor | None, serialize: bool) -> None:
        self._executor = executor
        self._lock = threading.Lock() if serialize else None

    async def call(self, fn: Callable[..., Any], *args: Any, serialize: bool = True) -> Any:
        if self._executor is None:
            return fn(*args)  # one thread, so calls never overlap: no lock needed
        loop = asyncio.get_running_loop()
        if self._lock is None or not serialize:
            return await loop.run_in_executor(self._executor, fn, *args)
        return await loop.run_in_executor(self._executor, self._locked, fn, args)

    def _locked(self, fn: Callable[..., Any], args: tuple) -> Any:
        with self._lock:
            return fn(*args)


class Conversation:
    """One conversation with the model: its prompts render so that each extends the last (ChatRenderer), and its
    length budget is kept (module docstring). A workflow has one per independent conversation, by name."""

    def __init__(
        self,
        tokenizer: Any,
        max_prompt_length: int,
        max_response_length: int,
        tools: list[dict] | None = None,
        vision: Any = None,
    ) -> None:
        self.renderer = ChatRenderer(tokenizer, tools=tools, vision=vision) if tokenizer is not None else None
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.calls = 0
        self.first_prompt_length = 0
        self.completion_tokens = 0
        self.response_tokens = 0  # of the row being filled
        self.row_full = False  # the last call used up the row's response budget
        self._row_prompt_length: int | None = None

    @property
    def mismatches(self) -> int:
        return self.renderer.mismatches if self.renderer is not None else 0

    def exactness_counts(self) -> dict[str, int]:
        """The renderer's counts for the token-exactness report (`rllm.exactness.EPISODE_KEYS`)."""
        renderer = self.renderer
        if renderer is None:
            return dict.fromkeys(EPISODE_KEYS, 0)
        return {
            "template_breaks": renderer.breaks["template"],
            "history_breaks": renderer.breaks["history"],
            "round_trip_failures": renderer.breaks["round_trip"],
            "tool_format_failures": renderer.tool_format_failures,
            "retokenized": renderer.retokenized,
        }

    def prompt(self, messages: list[dict]) -> tuple[Any, int | None]:
        """(the prompt to send: ids, or the messages when there is no tokenizer; the most tokens the reply may
        have, None for no limit). Raises TerminationEvent when the budget is spent."""
        if self.renderer is None:
            return messages, None
        ids = self.renderer.render(messages)  # image tokens count toward the limits like any other
        if self._row_prompt_length is None or not self.renderer.extended:
            self._row_prompt_length = len(ids)  # a new training row starts with this prompt
            if not self.first_prompt_length:
                self.first_prompt_length = len(ids)
            if len(ids) > self.max_prompt_length:
                raise TerminationEvent(
                    _Reason.MAX_PROMPT_LENGTH,
                    f"prompt of {len(ids)} tokens, over max_prompt_length {self.max_prompt_length}",
                )
        used = len(ids) - self._row_prompt_length
        remaining = self.max_response_length - used
        if remaining <= 0:
            raise TerminationEvent(
                _Reason.MAX_RESPONSE_LENGTH, f"{used} response tokens, max_response_length {self.max_response_length}"
            )
        if self.renderer.images:
            return ImagePrompt(ids, self.renderer.images, messages=messages), remaining
        return ids, remaining

    def record(self, prompt: Any, output: ModelOutput) -> None:
        """Count the reply's tokens (the next prompt extends it)."""
        self.calls += 1
        if self.renderer is None:
            return
        self.renderer.record(output)
        self.completion_tokens += output.completion_length
        self.response_tokens = len(prompt) - self._row_prompt_length + output.completion_length
        self.row_full = self.response_tokens >= self.max_response_length
