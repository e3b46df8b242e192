"""One gateway session = one conversation with the model (one rollout): the history it restores, the calls it
records, the first failure it saw.

Token exactness is kept here. An OpenAI client sends the whole history with every request, with the gateway's own
replies as the client saw them: stop strings cut off, tool calls moved out of the text into `tool_calls`, possibly
re-serialised by the SDK. Rendering that would not give back the ids the model sampled. So the session remembers
the raw sampled text of every reply it produced, and puts it back: an incoming assistant message that carries a
tool-call id this session generated, or whose content equals the content this session returned, becomes
`{"role": "assistant", "content": <raw sampled text>}` before rendering. Replies are matched in order (so two equal
replies are told apart), and tool-call ids are unique within a session. Then `ChatRenderer` sees a history that
extends its previous prompt + completion, and the turns of the session merge into one training row.

Replies a client strips: an assistant message whose content equals a reply's content once surrounding whitespace is
removed is that reply (smolagents keeps `content.strip()`, so a reply cut by max_tokens after a newline came back
one character short and the turn did not extend).

Tool calls a client re-sends as text: some agents replay a tool-calling turn without `tool_calls`, writing the calls
into the content instead (smolagents' ToolCallingAgent sends "I will add.\nCalling tools:\n[{'id': 'call_..', ...}]").
An assistant message without `tool_calls` whose content names every tool-call id of a reply this session produced
is that reply. The ids must appear whole (not inside a longer word: `call_x_1` is not found in `call_x_10`), and only
ids this session produced count, so ordinary text that mentions some other id is rendered as it is.

Templates that ignore `tools=` (SmolLM2's) get the tools described in the system message instead, by the renderer
(`rllm.models.chat.describe_ignored_tools`), the same way on every call, so prompts still extend; the session hands
the handler the messages and tools as they are, and records what was rendered (the description included). Such a
template prints only a message's content, so an assistant tool-call turn this session did not sample (another
model's, or one the agent wrote) gets its calls written into its content in the Hermes `<tool_call>` format the
model was told to use (as Qwen2.5's template prints them), instead of vanishing from the prompt.

Calls of one session are served one at a time (a lock): a conversation's prompt must render after the previous
reply was recorded. Independent conversations belong in separate sessions.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import RllmError
from rllm.gateway.openai_format import (
    ChatRequest,
    Reply,
    finish_reason,
    logprob_entries,
    sampling_overrides,
    token_pieces,
)
from rllm.models.base import SamplingParams
from rllm.models.chat import chat_template_renders_tools, describe_ignored_tools
from rllm.types import ModelOutput

__all__ = ["CallRecord", "GatewaySession", "Handler", "SessionClosedError"]

# `complete(messages, tools, sampling_overrides) -> ModelOutput`: renders and samples one reply.
Handler = Callable[[list[dict], list[dict] | None, dict[str, Any]], Awaitable[ModelOutput]]


class SessionClosedError(RllmError):
    """A call reached a session after its rollout ended (timed out, or finished while the agent was still talking)."""


@dataclass
class CallRecord:
    """One served call: what came in, what the model saw and sampled, what the client got back."""

    messages: list[Any]  # as received
    rendered_messages: list[dict]  # what was rendered: the session's own replies restored to their sampled text
    tools: list[dict] | None
    output: ModelOutput
    content: str | None  # the message content returned to the client
    tool_calls: list[dict] = field(default_factory=list)  # returned to the client, OpenAI format
    finish_reason: str = "stop"
    ignored_sampling: list[str] = field(default_factory=list)
    tool_call_errors: list[dict] = field(default_factory=list)

    @property
    def prompt_ids(self) -> list[int] | None:
        return self.output.prompt_ids

    @property
    def completion_ids(self) -> list[int] | None:
        return self.output.completion_ids

    @property
    def logprobs(self) -> list[float] | None:
        return self.output.logprobs

    @property
    def text(self) -> str:
        return self.output.text

    @property
    def weight_version(self) -> int:
        return self.output.weight_version

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "rendered_messages": self.rendered_messages,
            "tools": self.tools,
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": self.logprobs,
            "text": self.text,
            "content": self.content,
            "tool_calls": self.tool_calls,
            "finish_reason": self.finish_reason,
            "weight_version": self.weight_version,
            "ignored_sampling": self.ignored_sampling,
            "tool_call_errors": self.tool_call_errors,
            "output": self.output.model_dump(mode="json"),
        }


@dataclass
class _Produced:
    raw: str  # the sampled text
    content: str | None  # what the client got as content
    call_ids: set[str]


class GatewaySession:
    """State of one session. `complete(request)` serves one call; `records`, `failure`, `ignored` are read by the
    rollout workflow (or `GET /sessions/{sid}/calls`) afterwards."""

    def __init__(
        self,
        sid: str,
        handler: Handler,
        *,
        tokenizer: Any = None,
        sampling: SamplingParams | None = None,
        honor_sampling: bool = True,
    ) -> None:
        self.sid = sid
        self.handler = handler
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingParams()
        self.honor_sampling = honor_sampling
        self.records: list[CallRecord] = []
        self.failure: BaseException | None = None  # the first exception of the handler (budget, infra, bug)
        self.ignored: Counter[str] = Counter()  # request sampling fields that were not applied
        self.responses: dict[str, list[dict]] = {}  # Responses API: response id -> its conversation (chat messages)
        self.shared_with: set[str] = set()  # open sessions whose calls came over one HTTP connection with ours
        self.closed = False
        self._produced: list[_Produced] = []
        self._next_call_id = 0
        self._lock = asyncio.Lock()
        self._inflight: set[asyncio.Future] = set()

    # ---- serving ----------------------------------------------------------------------------------------------

    async def complete(self, request: ChatRequest) -> Reply:
        """Render (history restored), sample through the handler, record, and build the reply."""
        async with self._lock:
            messages = self.restore_history(request.messages)
            overrides, ignored = sampling_overrides(request, self.sampling, self.honor_sampling)
            self.ignored.update(ignored)
            output = await self._call_handler(messages, request.tools, overrides)
            reply, errors = self._reply(output, request)
            rendered = messages
            if request.tools and self.tokenizer is not None:  # the handler's renderer described them the same way
                rendered = describe_ignored_tools(self.tokenizer, messages, request.tools)
            self.records.append(
                CallRecord(
                    messages=request.raw_messages,
                    rendered_messages=rendered,
                    tools=request.tools,
                    output=output,
                    content=reply.content,
                    tool_calls=reply.tool_calls,
                    finish_reason=reply.finish_reason,
                    ignored_sampling=ignored,
                    tool_call_errors=errors,
                )
            )
            self._produced.append(_Produced(output.text, reply.content, {c["id"] for c in reply.tool_calls}))
            return reply

    async def _call_handler(self, messages: list[dict], tools: list[dict] | None, overrides: dict) -> ModelOutput:
        if self.closed:
            raise SessionClosedError(f"session {self.sid} is closed")
        task = asyncio.ensure_future(self.handler(messages, tools, overrides))
        self._inflight.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            if self.closed and asyncio.current_task().cancelling() == 0:  # we cancelled it in close(), not the server
                raise SessionClosedError(f"session {self.sid} was closed while the call was sampling") from None
            raise
        except Exception as exc:
            if self.failure is None and not self.closed:
                self.failure = exc
            raise
        finally:
            self._inflight.discard(task)

    def close(self) -> None:
        """No more calls; a call still sampling is cancelled (its rollout is over: timed out or abandoned)."""
        self.closed = True
        for task in list(self._inflight):
            task.cancel()

    # ---- token exactness ----------------------------------------------------------------------------------------

    def restore_history(self, messages: list[dict]) -> list[dict]:
        """The messages with this session's own replies put back as sampled (module docstring)."""
        out, position = [], 0
        for message in messages:
            if message["role"] == "assistant":
                found = self._match(message, position)
                if found is not None:
                    position = found + 1
                    out.append({"role": "assistant", "content": self._produced[found].raw})
                    continue
                if message.get("tool_calls") and not self._template_prints_tool_calls():
                    message = _tool_calls_as_text(message)
            out.append(message)
        return out

    def _template_prints_tool_calls(self) -> bool:
        """Whether the chat template renders structured tool calls (judged by whether it renders `tools`: the
        templates that print one print the other). Without a tokenizer the handler renders: leave them be."""
        return self.tokenizer is None or chat_template_renders_tools(self.tokenizer)

    def _match(self, message: dict, start: int) -> int | None:
        ids = {call.get("id") for call in message.get("tool_calls") or []} - {None}
        content = message.get("content")
        for index in range(start, len(self._produced)):
            produced = self._produced[index]
            if ids and ids & produced.call_ids:
                return index
            if not ids and not produced.call_ids and _same_text(content, produced.content):
                return index
            if not ids and isinstance(content, str) and _names_all_calls(content, produced.call_ids):
                return index  # its tool calls re-sent as text (module docstring)
        return None

    # ---- replies ----------------------------------------------------------------------------------------------

    def _reply(self, output: ModelOutput, request: ChatRequest) -> tuple[Reply, list[dict]]:
        content = output.content if output.content is not None else output.text
        content, stop_sequence = _cut_at_stop(content, request.stop)
        tool_calls, errors = [], []
        if request.tools:
            content, tool_calls, errors = self._tool_calls(output, content)
        reply = Reply(
            content=content if content or not tool_calls else None,
            tool_calls=tool_calls,
            finish_reason=finish_reason(output.finish_reason, bool(tool_calls)),
            prompt_tokens=output.prompt_length,
            completion_tokens=output.completion_length,
            stop_sequence=stop_sequence,
        )
        if request.stream or request.logprobs:
            self._add_tokens(reply, output)
        return reply, errors

    def _tool_calls(self, output: ModelOutput, content: str) -> tuple[str, list[dict], list[dict]]:
        """(content, OpenAI tool calls, parse errors). Calls a chat-mode server parsed are used as they are; else
        the text is parsed for the template's family. A reply whose blocks are all malformed keeps its whole text
        as content, so the agent sees what the model wrote."""
        if output.tool_calls:
            calls = [(call.name, call.arguments) for call in output.tool_calls]
            return content, [self._openai_call(name, args) for name, args in calls], []
        from rllm.tools.parsing import FAMILIES, detect_family, parse_tool_calls

        family = detect_family(self.tokenizer)
        if family not in FAMILIES:  # recognised but not parsed (llama3, mistral): the text stays content
            return content, [], [{"kind": "unsupported_family", "message": f"{family} tool calls are not parsed"}]
        parsed = parse_tool_calls(content, family=family)
        errors = [{"kind": e.kind, "message": e.message} for e in parsed.errors]
        if not parsed.calls:
            return content, [], errors
        return parsed.content, [self._openai_call(c.name, c.arguments) for c in parsed.calls], errors

    def _openai_call(self, name: str, arguments: Any) -> dict[str, Any]:
        self._next_call_id += 1
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        call_id = f"call_{self.sid[:12]}_{self._next_call_id}"
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}

    def _add_tokens(self, reply: Reply, output: ModelOutput) -> None:
        """Per-token pieces (streaming) and logprob entries; only computed when the request needs them."""
        ids, logprobs = output.completion_ids, output.logprobs
        if self.tokenizer is None or ids is None:
            return
        pieces = token_pieces(self.tokenizer, ids)
        if "".join(pieces) == (reply.content or "") and not reply.tool_calls:
            reply.pieces = pieces
        if logprobs is not None and len(logprobs) == len(ids):
            reply.token_entries = logprob_entries(self.tokenizer, ids, logprobs, pieces)

    # ---- summaries --------------------------------------------------------------------------------------------

    def token_mismatches(self) -> int:
        """Calls whose prompt did not extend the previous prompt + completion (they start a new training row)."""
        count, context = 0, None
        for record in self.records:
            prompt, completion = record.prompt_ids, record.completion_ids
            if prompt is None or completion is None:
                continue
            if context is not None and prompt[: len(context)] != context:
                count += 1
            context = list(prompt) + list(completion)
        return count

    def to_json(self) -> dict[str, Any]:
        failure = None if self.failure is None else f"{type(self.failure).__name__}: {self.failure}"
        return {
            "session": self.sid,
            "calls": [record.to_json() for record in self.records],
            "token_mismatch": self.token_mismatches(),
            "ignored_sampling": dict(self.ignored),
            "failure": failure,
        }


def _tool_calls_as_text(message: dict) -> dict:
    """An assistant message whose tool calls are written into its content as Hermes blocks (module docstring)."""
    blocks = [
        "<tool_call>\n"
        + json.dumps({"name": call["function"]["name"], "arguments": call["function"]["arguments"]}, ensure_ascii=False)
        + "\n</tool_call>"
        for call in message["tool_calls"]
    ]
    content = message.get("content") or ""
    text = "\n".join([content, *blocks] if content else blocks)
    return {key: value for key, value in message.items() if key != "tool_calls"} | {"content": text}


def _same_text(content: Any, produced: str | None) -> bool:
    """Whether an echoed content is the content returned, up to surrounding whitespace (agents strip replies:
    smolagents keeps `content.strip()` in its memory). Empty text matches only empty text."""
    if not isinstance(content, str) or produced is None:
        return False
    return content == produced or (content.strip() == produced.strip() and content.strip() != "")


def _names_all_calls(text: str, call_ids: set[str]) -> bool:
    """Whether `text` contains each of `call_ids` as a whole word: not preceded or followed by a character that could
    continue an id, so one id is never found inside a longer one."""
    return bool(call_ids) and all(
        re.search(rf"(?<![\w-]){re.escape(call_id)}(?![\w-])", text) is not None for call_id in call_ids
    )


def _cut_at_stop(text: str, stop: list[str]) -> tuple[str, str | None]:
    """(the text before the first stop string, that stop string or None): OpenAI returns the text before it (and
    Anthropic names it); the sampled text (and ids) keep it."""
    cuts = [(i, s) for s in stop if (i := text.find(s)) >= 0]
    if not cuts:
        return text, None
    index, string = min(cuts)
    return text[:index], string
