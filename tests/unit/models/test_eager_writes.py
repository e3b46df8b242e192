"""Eagerly started request-body writers (`rllm.models.eager_writes`): the factory's task semantics on any Python,
and on 3.11 that a real aiohttp request's body is on the wire before callbacks already queued on the loop run, that
the private aiohttp coroutine it picks is the one that writes a posted body, and that nothing is installed unless
rllm.runtime enables it (the tests here run with it on, `tuned_runtime`, but for that one)."""

from __future__ import annotations

import asyncio
import contextvars
import sys

import aiohttp
import pytest

from rllm import runtime
from rllm.models import eager_writes
from rllm.models.eager_writes import EagerTaskFactory
from rllm.models.openai import OpenAIClient

seen = contextvars.ContextVar("seen", default="unset")
# The factory is installed on Python 3.11 only, and written to 3.11's factory protocol (3.12 and later pass more).
only_311 = pytest.mark.skipif(sys.version_info >= (3, 12), reason="from Python 3.12 aiohttp starts its writers eagerly")
pytestmark = pytest.mark.usefixtures("tuned_runtime")


async def writer(log: list, gate: asyncio.Future | None = None, fail: str | None = None, bare_yield: bool = False):
    """Stands in for aiohttp's `write_bytes`: logs, maybe waits, maybe fails."""
    log.append(f"started, seen {seen.get()}")
    seen.set("set by the writer")
    if fail == "before":
        raise ValueError("failed before waiting")
    if bare_yield:
        await asyncio.sleep(0)
    if gate is not None:
        try:
            log.append(f"gate gave {await gate}")
        except asyncio.CancelledError:
            log.append("cancelled while waiting")
            raise
    if fail == "after":
        raise ValueError("failed after waiting")
    log.append(f"finished, seen {seen.get()}")
    return "written"


def eager_loop(previous=None) -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    loop.set_task_factory(EagerTaskFactory(lambda coro: coro.cr_code is writer.__code__, previous))
    return loop


def run_on(loop: asyncio.AbstractEventLoop, main):
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


@only_311
def test_a_writer_that_never_waits_runs_in_the_callers_turn_and_comes_back_finished():
    log: list = []

    async def main():
        seen.set("set by the caller")
        asyncio.get_running_loop().call_soon(log.append, "a callback queued before")
        task = asyncio.create_task(writer(log))
        assert log == ["started, seen set by the caller", "finished, seen set by the writer"]
        assert task.done() and task.result() == "written"
        assert seen.get() == "set by the caller"  # the writer ran in a copy of the caller's context
        await asyncio.sleep(0)
        assert log[-1] == "a callback queued before"

    run_on(eager_loop(), main)


@only_311
def test_a_writer_that_waits_continues_in_a_task_with_its_own_context():
    log: list = []

    async def main():
        gate = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(writer(log, gate))
        assert log == ["started, seen unset"] and not task.done()
        asyncio.get_running_loop().call_soon(gate.set_result, "go")
        assert await task == "written"
        assert log == ["started, seen unset", "gate gave go", "finished, seen set by the writer"]
        assert seen.get() == "unset"

    run_on(eager_loop(), main)


@only_311
def test_a_bare_yield_resumes_the_writer():
    log: list = []

    async def main():
        task = asyncio.create_task(writer(log, bare_yield=True))
        assert not task.done()
        assert await task == "written"
        assert log[-1] == "finished, seen set by the writer"

    run_on(eager_loop(), main)


@only_311
def test_cancelling_the_task_cancels_the_writer_where_it_waits():
    log: list = []

    async def main():
        gate = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(writer(log, gate))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled() and gate.cancelled()
        assert log == ["started, seen unset", "cancelled while waiting"]

    run_on(eager_loop(), main)


@only_311
def test_errors_before_and_after_the_first_wait_reach_whoever_awaits_the_task():
    async def main():
        early = asyncio.create_task(writer([], fail="before"))
        assert early.done()
        with pytest.raises(ValueError, match="before waiting"):
            await early
        gate = asyncio.get_running_loop().create_future()
        late = asyncio.create_task(writer([], gate, fail="after"))
        gate.set_result("go")
        with pytest.raises(ValueError, match="after waiting"):
            await late

    run_on(eager_loop(), main)


@only_311
def test_other_coroutines_go_to_the_previous_factory_and_are_not_started_early():
    made: list = []

    def previous(loop, coro, **kwargs):
        made.append(coro.cr_code.co_name)
        return asyncio.Task(coro, loop=loop, **kwargs)

    log: list = []

    async def other():
        log.append("other ran")

    async def main():
        task = asyncio.create_task(other())
        assert log == []  # not started in the caller's turn
        await task
        assert asyncio.create_task(writer(log)).done()

    run_on(eager_loop(previous), main)
    assert made == ["main", "other"]  # run_until_complete makes its task through the factory too; not the writer
    assert log[0] == "other ran" and log[-1] == "finished, seen set by the writer"


@only_311
def test_install_is_idempotent_and_keeps_a_factory_the_loop_had():
    loop = asyncio.new_event_loop()
    try:

        def mine(loop, coro, **kwargs):
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(mine)
        eager_writes.install(loop)
        factory = loop.get_task_factory()
        assert isinstance(factory, EagerTaskFactory) and factory.previous is mine
        eager_writes.install(loop)
        assert loop.get_task_factory() is factory
    finally:
        loop.close()


def test_a_posted_body_is_on_the_wire_before_callbacks_already_queued_run(server):
    """The property the module exists for, on a real aiohttp session and server: without it (Python 3.11, plain
    loop) the order is the other way round."""
    order: list = []

    async def chunk_sent(session, context, params):
        order.append("body sent")

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(chunk_sent)
    url = server.base_url + "/completions"
    body = {"model": server.model, "prompt": "Hi", "max_tokens": 2}

    async def main():
        eager_writes.install(asyncio.get_running_loop())
        async with aiohttp.ClientSession(trace_configs=[trace]) as session:
            async with session.post(url, json=body) as warm:  # the connection is open and pooled from here on
                await warm.read()
            order.clear()
            asyncio.get_running_loop().call_soon(order.append, "a callback queued before")
            async with session.post(url, json=body) as response:
                assert response.status == 200
                await response.read()

    asyncio.run(main())
    assert order == ["body sent", "a callback queued before"]


@only_311
def test_the_openai_client_installs_it_on_the_loop_it_posts_from(server):
    async def main():
        async with OpenAIClient(server.base_url, server.model) as client:
            await client.generate([1, 2, 3])
            return asyncio.get_running_loop().get_task_factory()

    assert isinstance(asyncio.run(main()), EagerTaskFactory)


@only_311
def test_a_posted_body_is_written_by_the_private_coroutine_install_picks(server):
    """`_body_writer_code` names aiohttp's `ClientRequest.write_bytes` (a private method): posting a request must
    make a task of a coroutine with that code, or an aiohttp upgrade has moved the writer and nothing is eager."""
    codes: list = []

    async def main():
        def recording(loop, coro, **kwargs):
            codes.append(getattr(coro, "cr_code", None))
            return asyncio.Task(coro, loop=loop, **kwargs)

        asyncio.get_running_loop().set_task_factory(recording)
        async with aiohttp.ClientSession() as session:
            body = {"model": server.model, "prompt": "Hi", "max_tokens": 2}
            async with session.post(server.base_url + "/completions", json=body) as response:
                await response.read()

    asyncio.run(main())
    assert eager_writes._body_writer_code() in codes


@only_311
def test_without_the_runtime_enabled_the_loop_keeps_its_task_factory(server):
    """A library user who did not opt in (rllm.runtime.enable) keeps the loop as it was: the loop may be the
    program's own, with its own tasks."""
    runtime.disable()

    async def main():
        async with OpenAIClient(server.base_url, server.model) as client:
            await client.generate([1, 2, 3])
            eager_writes.install(asyncio.get_running_loop())
            return asyncio.get_running_loop().get_task_factory()

    assert asyncio.run(main()) is None


def test_a_body_too_large_to_write_at_once_is_finished_by_its_task(server):
    """A body beyond the socket's buffer makes the writer wait for the transport to drain: it must go on in its
    task and deliver every byte (the server reads the whole JSON back)."""
    returned: list = []

    async def main():
        eager_writes.install(asyncio.get_running_loop())
        factory = asyncio.get_running_loop().get_task_factory()

        def recording(loop, coro, **kwargs):
            task = factory(loop, coro, **kwargs)
            if factory.eager(coro):
                returned.append(task.done())
            return task

        asyncio.get_running_loop().set_task_factory(recording)
        body = {"model": server.model, "prompt": "Hi", "max_tokens": 2, "padding": "x" * (48 * 1024**2)}
        async with aiohttp.ClientSession() as session:
            async with session.post(server.base_url + "/completions", json=body) as response:
                assert response.status == 200
                await response.read()

    asyncio.run(main())
    path, received = server.requests[-1]
    assert path == "/v1/completions" and len(received["padding"]) == 48 * 1024**2
    if sys.version_info < (3, 12):
        assert returned == [False]  # it waited for the transport, and its task finished the body
