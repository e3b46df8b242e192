"""`check_env`: drive an environment through a few random episodes and say, in plain words, what it does wrong.

Modelled on gymnasium's env checker, for rllm's text API (`BaseEnv`). It collects every problem it can find
instead of stopping at the first, then raises one `EnvCheckError` whose message is a numbered list; each item says
what is wrong and how to fix it. Things that may be fine on purpose (an episode that outlives the check, a
`from_dict` that is a staticmethod) are warnings (`EnvCheckWarning`), not errors.

Design choices:
- Where actions come from: `actions=[...]` when given (the check picks among them at random); else the env's own
  optional `sample_action()` method, the analogue of gymnasium's `action_space.sample()` for text envs (rllm has
  no action spaces); if that method takes an argument it is handed the check's `random.Random(seed)`, so episodes
  differ from each other yet are reproducible; else a few placeholder strings, with a warning that the check then
  mostly exercises the env's handling of unreadable actions.
- Each episode runs on a fresh env from `from_dict(task)`, as the engine does; the first observations of those
  episodes must be equal (reset is deterministic for a task, so a group of samples sees the same task and a
  rollout can be reproduced). When an instance is passed without a task, episodes reuse it and determinism is
  checked across its resets.
- Non-JSON values are reported with their path (`info["pos"]`) and type, because episodes are written to disk;
  PIL images in an observation are not one: the engine records them as image parts (`rllm.images`).
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import random
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rllm.errors import RllmError
from rllm.images import encode_pil_images

__all__ = ["EnvCheckError", "EnvCheckReport", "EnvCheckWarning", "check_env"]

_PLACEHOLDER_ACTIONS = ["0", "1", "a", "yes", "hello"]


class EnvCheckError(RllmError):
    """An environment breaks rllm's env contract; the message lists every problem found, numbered."""

    def __init__(self, message: str, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


class EnvCheckWarning(UserWarning):
    """Something that may be fine on purpose, or a problem reported with `warn_only=True`."""


@dataclass
class EnvCheckReport:
    """What `check_env` did. `problems` is non-empty only with `warn_only=True`."""

    env_name: str
    episodes: int = 0
    steps: int = 0
    episodes_done: int = 0
    mean_return: float = 0.0
    action_source: str = ""
    multithread_safe: bool | None = None
    determinism_checked: bool = False
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Findings:
    """Problems and warnings keyed by kind, so one mistake repeated on every step is reported once."""

    def __init__(self) -> None:
        self.problems: dict[str, str] = {}
        self.warnings: dict[str, str] = {}

    def problem(self, key: str, message: str) -> None:
        self.problems.setdefault(key, message)

    def warn(self, key: str, message: str) -> None:
        self.warnings.setdefault(key, message)


def _describe_exception(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [frame for frame in frames if Path(frame.filename).name != "checker.py"] or frames
    where = f" (at {Path(ours[-1].filename).name}:{ours[-1].lineno} in {ours[-1].name})" if ours else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _json_fix(value: Any) -> str:
    if hasattr(value, "tolist"):
        return "convert it with .tolist() (numpy) or int()/float()"
    if isinstance(value, (set, frozenset)):
        return "convert it to a sorted list"
    if isinstance(value, (bytes, bytearray)):
        return "decode it to a str"
    return "convert it to a str, number, bool, None, list or dict"


def _json_problems(value: Any, path: str, found: list[str]) -> None:
    """Append a description of each non-JSON value under `value` (a few at most) to `found`."""
    if len(found) >= 3 or value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            found.append(f"{path} is {value}, which JSON cannot represent; use None or a finite number")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _json_problems(item, f"{path}[{index}]", found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                found.append(f"{path} has the key {key!r} of type {_type_name(key)}; JSON keys must be str")
            _json_problems(item, f"{path}[{key!r}]", found)
    else:
        found.append(f"{path} is a {_type_name(value)} ({value!r:.60}); {_json_fix(value)}")


def _check_json(value: Any, path: str, where: str, findings: _Findings) -> None:
    if path == "observation":  # PIL images in observations are recorded as image parts (rllm.images)
        value = encode_pil_images(value)
    found: list[str] = []
    _json_problems(value, path, found)
    for description in found:
        findings.problem(f"json:{description}", f"{where}: {description}. Episodes are saved as JSON.")


def _reward_problem(reward: Any) -> str | None:
    if isinstance(reward, bool):
        return f"reward is a bool ({reward}); return a float such as 1.0 or 0.0"
    if reward is None:
        return "reward is None; return 0.0 when there is no reward"
    if not isinstance(reward, numbers.Real):
        return f"reward is a {_type_name(reward)} ({reward!r:.40}), not a number; return a float"
    if not math.isfinite(float(reward)):
        return f"reward is {reward}; return a finite float (check for a division by zero or a log of 0)"
    return None


def _done_problem(done: Any) -> str | None:
    if isinstance(done, bool):
        return None
    fix = "wrap it in bool(...)" if hasattr(done, "item") else "return True or False"
    return f"done is {done!r:.40} of type {_type_name(done)}, not a bool; {fix}"


def _check_class(env_class: type, findings: _Findings) -> None:
    name = env_class.__name__
    for method in ("reset", "step", "close"):
        if not callable(getattr(env_class, method, None)):
            findings.problem(
                f"missing:{method}", f"{name} has no {method}() method; subclass rllm.envs.BaseEnv and define it."
            )
    abstract = sorted(getattr(env_class, "__abstractmethods__", ()))
    if abstract:
        findings.problem(
            "abstract",
            f"{name} does not implement {', '.join(abstract)} (still abstract in BaseEnv), so it cannot be "
            "instantiated; define them.",
        )


def _check_from_dict(env_class: type, findings: _Findings) -> bool:
    """True when `env_class.from_dict` can be called as the engine calls it."""
    raw = inspect.getattr_static(env_class, "from_dict", None)
    name = env_class.__name__
    if raw is None:
        findings.problem(
            "from_dict",
            f"{name} has no from_dict(); add `@classmethod def from_dict(cls, task: dict)` that builds one env "
            "from a dataset row.",
        )
        return False
    if isinstance(raw, staticmethod):
        findings.warn(
            "from_dict-static",
            f"{name}.from_dict is a staticmethod; a @classmethod lets subclasses build their own type.",
        )
        return True
    if not isinstance(raw, classmethod):
        findings.problem(
            "from_dict",
            f"{name}.from_dict is a plain method, but the engine calls it on the class ({name}.from_dict(task)); "
            "add @classmethod and take `cls` first.",
        )
        return False
    return True


def _check_thread_flag(env_class: type, findings: _Findings) -> bool | None:
    # The engine asks the class, before building any env, whether envs may share threads.
    label = f"{env_class.__name__}.is_multithread_safe()"
    try:
        flag = env_class.is_multithread_safe()
    except Exception as exc:
        findings.problem(
            "thread-flag",
            f"{label} raised {_describe_exception(exc)}; make it a @staticmethod returning True or False.",
        )
        return None
    if not isinstance(flag, bool):
        findings.problem("thread-flag", f"{label} returned {flag!r} ({_type_name(flag)}); return True or False.")
        return None
    return flag


def _first_then(first: Any, make: Callable[[], Any]) -> Callable[[], Any]:
    """A factory that hands out an env already built (rather than building and dropping it), then calls `make`."""
    pending = [first]
    return lambda: pending.pop() if pending else make()


def _fallback_factory(env_class: type, given: Any) -> Callable[[], Any] | None:
    """When from_dict cannot build envs, keep checking the rest on the given instance or on `env_class()`."""
    if given is not None:
        return lambda: given
    try:
        probe = env_class()
    except Exception:
        return None
    return _first_then(probe, env_class)


def _env_factory(env_or_class: Any, task: dict | None, findings: _Findings) -> Callable[[], Any] | None:
    """A callable that returns the env for one episode (fresh when possible), or None when none can be built."""
    given = None if isinstance(env_or_class, type) else env_or_class
    env_class = env_or_class if given is None else type(given)
    if given is not None and task is None:
        return lambda: given
    name, row = env_class.__name__, ({} if task is None else task)
    if not _check_from_dict(env_class, findings) or "abstract" in findings.problems:
        return _fallback_factory(env_class, given)
    try:
        env = env_class.from_dict(row)
    except Exception as exc:
        hint = f" (no task was given, so it got {{}}; pass one: check_env({name}, task=...))" if task is None else ""
        findings.problem("from_dict-raises", f"{name}.from_dict(task) raised {_describe_exception(exc)}{hint}.")
        return _fallback_factory(env_class, given)
    if not isinstance(env, env_class):
        findings.problem(
            "from_dict-type",
            f"{name}.from_dict(task) returned {_type_name(env)} ({env!r:.40}), not a {name}; end it with "
            "`return cls(...)`.",
        )
        return _fallback_factory(env_class, given)
    return _first_then(env, lambda: env_class.from_dict(row))


def _call(findings: _Findings, key: str, label: str, function: Callable, *args: Any) -> tuple[bool, Any]:
    try:
        return True, function(*args)
    except Exception as exc:
        findings.problem(
            key,
            f"{label} raised {_describe_exception(exc)}; an env should only raise on misuse (e.g. step after done).",
        )
        return False, None


def _checked_reset(env: Any, findings: _Findings) -> tuple[bool, Any]:
    ok, result = _call(findings, "reset-raises", "reset()", env.reset)
    if not ok:
        return False, None
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        findings.problem(
            "reset-shape",
            f"reset() returned {_type_name(result)} ({result!r:.60}), not a pair (observation, info); "
            "return `observation, {}` when there is no info.",
        )
        _check_json(result, "observation", "reset()", findings)
        return True, result
    observation, info = result
    if not isinstance(info, dict):
        findings.problem(
            "reset-info",
            f"reset() returned info of type {_type_name(info)}; info must be a dict (return {{}} when empty).",
        )
    _check_json(observation, "observation", "reset()", findings)
    _check_json(info, "info", "reset()", findings)
    return True, observation


def _checked_step(env: Any, action: Any, findings: _Findings) -> tuple[bool, Any]:
    """Step once and check the result; returns (usable, reward-and-done) where usable is False to stop the episode."""
    ok, result = _call(findings, "step-raises", f"step({action!r:.30})", env.step, action)
    if not ok:
        return False, None
    if not (isinstance(result, (tuple, list)) and len(result) == 4):
        gym_hint = ""
        if isinstance(result, (tuple, list)) and len(result) == 5:
            gym_hint = (
                " It looks like gymnasium's (obs, reward, terminated, truncated, info); return "
                "(obs, reward, terminated or truncated, info) instead."
            )
        findings.problem(
            "step-shape",
            f"step() returned {_type_name(result)} ({result!r:.60}), not a 4-tuple (observation, reward, done, "
            f"info).{gym_hint}",
        )
        return False, None
    observation, reward, done, info = result
    for key, problem in (("reward", _reward_problem(reward)), ("done", _done_problem(done))):
        if problem:
            findings.problem(key, f"step(): {problem}.")
    if not isinstance(info, dict):
        findings.problem("step-info", f"step() returned info of type {_type_name(info)}; info must be a dict.")
    _check_json(observation, "observation", "step()", findings)
    _check_json(info, "info", "step()", findings)
    return True, (reward, bool(done))


def _run_episode(env: Any, pick_action: Callable[[Any], Any], max_steps: int, findings: _Findings) -> dict[str, Any]:
    ok, first_observation = _checked_reset(env, findings)
    stats = {"steps": 0, "return": 0.0, "done": False, "reset_ok": ok, "first_observation": first_observation}
    if not ok:
        return stats
    for _ in range(max_steps):
        try:
            action = pick_action(env)
        except Exception as exc:
            findings.problem(
                "sample-action", f"sample_action() raised {_describe_exception(exc)}; fix it or pass actions=[...]."
            )
            return stats
        usable, outcome = _checked_step(env, action, findings)
        if not usable:
            return stats
        reward, done = outcome
        stats["steps"] += 1
        if _reward_problem(reward) is None:
            stats["return"] += float(reward)
        if done:
            stats["done"] = True
            _check_step_after_done(env, action, findings)
            return stats
    findings.warn(
        "no-termination",
        f"an episode did not end within {max_steps} random steps; make sure the env ends episodes on its own "
        "(e.g. a step limit), or raise check_env's max_steps if yours are longer.",
    )
    return stats


def _check_step_after_done(env: Any, action: Any, findings: _Findings) -> None:
    try:
        env.step(action)
    except Exception:
        return
    findings.problem(
        "step-after-done",
        "step() after done=True was silently accepted; raise an error (e.g. RuntimeError('episode is over, "
        "call reset()')) so that a loop that ignores done fails loudly.",
    )


def _action_picker(env: Any, actions: list | None, rng: random.Random, findings: _Findings) -> tuple[str, Callable]:
    if actions is not None:
        choices = list(actions)
        if not choices:
            raise ValueError("check_env: actions must not be empty")
        return "actions", lambda _env: rng.choice(choices)
    sampler = getattr(env, "sample_action", None)
    if callable(sampler):
        if _takes_an_argument(sampler):
            return "sample_action", lambda current: current.sample_action(rng)
        return "sample_action", lambda current: current.sample_action()
    findings.warn(
        "placeholder-actions",
        f"no actions given and the env has no sample_action(), so it was driven with placeholder strings "
        f"{_PLACEHOLDER_ACTIONS}; pass check_env(..., actions=[...]) with real actions for a meaningful check.",
    )
    return "placeholder", lambda _env: rng.choice(_PLACEHOLDER_ACTIONS)


def _takes_an_argument(method: Callable) -> bool:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


def _first_observations_differ(observations: list[Any]) -> tuple[Any, Any] | None:
    def canonical(value: Any) -> str:
        try:
            return json.dumps(encode_pil_images(value), sort_keys=True)  # images compare by their PNG encoding
        except (TypeError, ValueError):
            return repr(value)

    for other in observations[1:]:
        if canonical(other) != canonical(observations[0]):
            return observations[0], other
    return None


def _close(env: Any, findings: _Findings) -> None:
    if callable(getattr(env, "close", None)):
        _call(findings, "close-raises", "close()", env.close)


def _run_episodes(
    make_env: Callable,
    report: EnvCheckReport,
    settings: dict[str, Any],
    reused: bool,
    findings: _Findings,
) -> None:
    n_episodes, rng = settings["n_episodes"], random.Random(settings["seed"])
    first_observations: list[Any] = []
    env, pick_action = None, None
    for _ in range(n_episodes):
        try:
            env = make_env()
        except Exception as exc:
            findings.problem(
                "from_dict-again",
                f"from_dict(task) raised {_describe_exception(exc)} when called again with the same task; it "
                "must not consume or mutate the task.",
            )
            break
        if pick_action is None:
            report.action_source, pick_action = _action_picker(env, settings["actions"], rng, findings)
        stats = _run_episode(env, pick_action, settings["max_steps"], findings)
        report.episodes += 1
        report.steps += stats["steps"]
        report.episodes_done += int(stats["done"])
        report.mean_return += stats["return"] / n_episodes
        if stats["reset_ok"]:
            first_observations.append(stats["first_observation"])
        if not reused:
            _close(env, findings)
    if reused and env is not None:
        _close(env, findings)
    report.determinism_checked = len(first_observations) >= 2
    differing = _first_observations_differ(first_observations)
    if differing:
        what = "successive resets of the same env" if reused else "two fresh envs built from the same task"
        findings.problem(
            "determinism",
            f"reset() gave different first observations for {what}: {differing[0]!r:.80} vs {differing[1]!r:.80}; "
            "seed every random choice from the task (e.g. task['seed']) so a group of samples sees the same task "
            "and a rollout can be reproduced.",
        )


def check_env(
    env_or_class: Any,
    task: dict | None = None,
    *,
    n_episodes: int = 3,
    max_steps: int = 20,
    actions: list | None = None,
    seed: int = 0,
    warn_only: bool = False,
) -> EnvCheckReport:
    """Check that an env class (or instance) follows rllm's env contract by running `n_episodes` random episodes of
    at most `max_steps` steps, each on a fresh `from_dict(task)` (`task=None` means `{}`; an instance passed
    without a task is reused instead). `actions`, `seed`: see the module docstring.

    Raises `EnvCheckError` listing every problem (or, with `warn_only=True`, warns and returns them in the report).
    Warnings go through `warnings.warn` as `EnvCheckWarning`. Returns an `EnvCheckReport`.
    """
    if n_episodes < 1 or max_steps < 1:
        raise ValueError(f"check_env: n_episodes and max_steps must be at least 1, got {n_episodes}, {max_steps}")
    findings = _Findings()
    env_class = env_or_class if isinstance(env_or_class, type) else type(env_or_class)
    report = EnvCheckReport(env_name=env_class.__name__)
    _check_class(env_class, findings)
    report.multithread_safe = _check_thread_flag(env_class, findings)
    make_env = _env_factory(env_or_class, task, findings)
    runnable = make_env is not None and not any(key.startswith("missing:") for key in findings.problems)
    if runnable:
        reused = not isinstance(env_or_class, type) and task is None
        settings = {"n_episodes": n_episodes, "max_steps": max_steps, "actions": actions, "seed": seed}
        _run_episodes(make_env, report, settings, reused, findings)
    return _finish(report, findings, warn_only)


def _finish(report: EnvCheckReport, findings: _Findings, warn_only: bool) -> EnvCheckReport:
    report.warnings = list(findings.warnings.values())
    for message in report.warnings:
        warnings.warn(f"{report.env_name}: {message}", EnvCheckWarning, stacklevel=3)
    problems = list(findings.problems.values())
    if not problems:
        return report
    if warn_only:
        report.problems = problems
        for message in problems:
            warnings.warn(f"{report.env_name}: {message}", EnvCheckWarning, stacklevel=3)
        return report
    numbered = "\n".join(f"  {index}. {message}" for index, message in enumerate(problems, 1))
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    raise EnvCheckError(f"{report.env_name} has {count} (found by rllm.envs.check_env):\n{numbered}", problems)
