"""The gateway tests' fakes and checks: a started Gateway over a scripted model, SDK clients for it, a tool and the
text that calls it, and the checks that a response holds only the SDK's fields and a session stays token-exact."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import typing

from pydantic import BaseModel

from rllm.gateway import Gateway
from rllm.models.chat import render_messages
from rllm.models.fake import FakeModel, FakeTokenizer

if typing.TYPE_CHECKING:
    import openai

LEAKS = ("token_ids", "prompt_logprobs", "kv_transfer_params", "stop_reason", "reasoning")


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        },
    }
]


CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


@contextlib.contextmanager
def serving(model=None, **kwargs):
    """A started Gateway on a background event loop, so sync SDK clients can call it from the test thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    gateway = Gateway(model, **kwargs)
    try:
        asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(10)
        yield gateway
    finally:
        asyncio.run_coroutine_threadsafe(gateway.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def client(gateway: Gateway, sid: str = "s1") -> openai.OpenAI:
    import openai  # only the tests that talk to the gateway through the SDK need it installed

    return openai.OpenAI(base_url=gateway.session_url(sid), api_key="none", max_retries=0)


def assert_strict(model: type[BaseModel], data: typing.Any, where: str = "") -> None:
    """Every key of `data` is a field of the SDK's pydantic model, recursively (the SDK itself allows extras). A
    field that is a union told apart by `type` (content blocks, output items, tools) holds each item to the members
    its `type` names, not to all of them."""
    if not isinstance(data, dict):
        return
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    assert set(data) <= set(fields), f"{where}: unknown fields {set(data) - set(fields)}"
    for key, value in data.items():
        for item in value if isinstance(value, list) else [value]:
            for inner in _members(_models(fields[key].annotation), item):
                assert_strict(inner, item, f"{where}.{key}")


def _members(models: list[type[BaseModel]], item: typing.Any) -> list[type[BaseModel]]:
    kind = item.get("type") if isinstance(item, dict) else None
    named = [m for m in models if kind in typing.get_args(getattr(m.model_fields.get("type"), "annotation", None))]
    return named or models


def _models(annotation: typing.Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def fake(script, tokenizer=None) -> FakeModel:
    return FakeModel(script, tokenizer=tokenizer or FakeTokenizer())


def assert_extends(records) -> None:
    for before, after in itertools.pairwise(records):
        context = before.prompt_ids + before.completion_ids
        assert after.prompt_ids[: len(context)] == context


def assert_recorded_prompts_render(session, tokenizer) -> None:
    """What a step records is what the model saw: its messages, rendered with its tools, are its prompt ids."""
    for record in session.records:
        assert render_messages(tokenizer, record.rendered_messages, tools=record.tools) == record.prompt_ids


def assert_one_exact_row(session, tokenizer) -> None:
    """The session's calls train as one row of exactly the sampled ids: no mismatch, every prompt extends the last
    prompt + completion, and what each step records renders to the prompt it sampled from."""
    assert session.token_mismatches() == 0
    assert_extends(session.records)
    assert_recorded_prompts_render(session, tokenizer)
