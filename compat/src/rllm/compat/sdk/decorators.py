"""rLLM v0.2's `@trajectory`: the decorated function (sync or async) runs in its own session and returns a
`TrajectoryView` instead of its value: one `StepView` per LLM call it made, `output` = what it returned, `input` =
its arguments, `reward` 0.0 until the caller sets it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from rllm.compat.sdk.protocol import TrajectoryView
from rllm.compat.sdk.shortcuts import session

__all__ = ["trajectory"]


def trajectory(name: str = "agent", **traj_metadata: Any) -> Callable[[Callable], Callable[..., Any]]:
    """`@trajectory(name="solver")`: see the module docstring. `traj_metadata` goes with every call recorded."""

    def decorate(func: Callable) -> Callable[..., Any]:
        signature = inspect.signature(func)

        def view(sess: Any, arguments: dict, result: Any) -> TrajectoryView:
            return TrajectoryView(
                name=name, steps=sess.steps, reward=0.0, input=arguments, output=result, metadata=traj_metadata or None
            )

        def arguments(args: tuple, kwargs: dict) -> dict:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> TrajectoryView:
                given = arguments(args, kwargs)
                with session(trajectory_name=name, **traj_metadata) as sess:
                    result = await func(*args, **kwargs)
                return view(sess, given, result)

            return run_async

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> TrajectoryView:
            given = arguments(args, kwargs)
            with session(trajectory_name=name, **traj_metadata) as sess:
                result = func(*args, **kwargs)
            return view(sess, given, result)

        return run

    return decorate
