"""Request bodies written at once on Python 3.11, as aiohttp writes them from Python 3.12 on.

aiohttp writes a request's body from a task of its own (`ClientRequest.write_bytes`). From Python 3.12 it starts
that task eagerly (`eager_start=True`): the body goes out before `session.post` first waits. On 3.11 the task is
queued behind every callback already ready on the event loop. Many rollouts make that matter:

- rollouts whose requests went out together come back together when the server takes about as long for each one
  (a server's batch, a fixed latency);
- their replies are processed one after the other, and on 3.11 each next request waits behind all of them;
- so the next requests go out together again, and the burst never spreads out.

Every step then waits for the whole burst. On the engine benchmark (64 rollouts, 50 ms a call, 2 cores) that added
7-10 ms to each step; with the body written at once it adds about 3.5 (docs/training/speed.md).

`install(loop)` gives 3.11 the 3.12 behaviour for that one coroutine. It sets a task factory that starts aiohttp's
`write_bytes` coroutines eagerly and hands every other coroutine to the loop's previous factory (or to `Task`).
Started eagerly, the coroutine runs up to its first suspension in the caller's turn: a small body on an idle
connection is written and the coroutine finishes there. A coroutine that does suspend continues in a real task
(`_Continue`), where cancellation and errors reach it as they would in the task it would have had.

The factory stays on the loop, so any other aiohttp session on it writes its bodies at once too, as on 3.12. It is
set only where `rllm.runtime` enables `eager_request_writes` (the loop may be the program's own, shared with code
that is not rllm's); otherwise, and from Python 3.12 on, `install` does nothing. The one private aiohttp name this
relies on, `ClientRequest.write_bytes`, is read in `_body_writer_code` (a unit test fails when aiohttp renames it).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from rllm import runtime

__all__ = ["EagerTaskFactory", "install"]

TaskFactory = Callable[..., "asyncio.Future[Any]"]


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Start aiohttp's request-body writers eagerly on `loop` (Python < 3.12, where `rllm.runtime` enables
    `eager_request_writes`; a no-op from 3.12, where aiohttp does it itself). Idempotent; a factory the loop
    already has keeps every other task."""
    if sys.version_info >= (3, 12) or not runtime.options().eager_request_writes:
        return
    if isinstance(loop.get_task_factory(), EagerTaskFactory):
        return
    code = _body_writer_code()
    loop.set_task_factory(
        EagerTaskFactory(lambda coro: getattr(coro, "cr_code", None) is code, loop.get_task_factory())
    )


def _body_writer_code() -> Any:
    """The code object of aiohttp's request-body writer coroutine (`ClientRequest.write_bytes`, a private method):
    the coroutines with this code are the ones started eagerly."""
    from aiohttp.client_reqrep import ClientRequest

    return ClientRequest.write_bytes.__code__


class EagerTaskFactory:
    """A task factory (`loop.set_task_factory`) that starts the coroutines `eager(coro)` picks at once, in the
    caller's turn, and makes a task as `previous` (or `asyncio.Task`) would for all others.

    What it returns for an eager coroutine: a finished future when the coroutine finished without waiting (its
    result or its exception), else a task that continues it from where it waited."""

    def __init__(self, eager: Callable[[Any], bool], previous: TaskFactory | None = None) -> None:
        self.eager, self.previous = eager, previous

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine, *, context: contextvars.Context | None = None
    ) -> asyncio.Future:
        # The factory signature of Python 3.11 (`install` sets it there only): no `name`, which 3.11 sets afterwards
        # and only when given (never, for aiohttp's writers).
        if not self.eager(coro):
            return self._task(loop, coro, context)
        context = contextvars.copy_context() if context is None else context
        try:
            waited_on = context.run(coro.send, None)
        except StopIteration as stop:
            return _finished(loop, result=stop.value)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # an error (or a cancellation) before the first wait belongs to the task
            return _finished(loop, exception=exc)
        return self._task(loop, _Continue(coro, waited_on).run(), context)

    def _task(self, loop: asyncio.AbstractEventLoop, coro: Coroutine, context: contextvars.Context | None):
        if self.previous is not None:
            return self.previous(loop, coro) if context is None else self.previous(loop, coro, context=context)
        return asyncio.Task(coro, loop=loop, context=context)


class _Continue:
    """Awaiting it drives a coroutine that was started elsewhere and is waiting on `waited_on` (what it yielded to
    the event loop: a future, or None for a bare yield): the awaiting task waits on that, then resumes the
    coroutine, and so on to its end. A cancellation or an error thrown in while it waits is thrown into it."""

    def __init__(self, coro: Coroutine, waited_on: Any) -> None:
        self.coro, self.waited_on = coro, waited_on

    async def run(self) -> Any:
        return await self

    def __await__(self) -> Generator[Any, None, Any]:
        waited_on = self.waited_on
        while True:
            try:
                yield waited_on
            except BaseException as exc:  # the awaiting task was cancelled, or something was thrown in
                resume = self.coro.throw
                argument: Any = exc
            else:
                resume, argument = self.coro.send, None
            try:
                waited_on = resume(argument)
            except StopIteration as stop:
                return stop.value


def _finished(loop: asyncio.AbstractEventLoop, *, result: Any = None, exception: BaseException | None = None):
    future = loop.create_future()
    if exception is None:
        future.set_result(result)
    elif isinstance(exception, asyncio.CancelledError):
        future.cancel()
    else:
        future.set_exception(exception)
    return future
