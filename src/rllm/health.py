"""Alarms for reward hacking and instability: stated rules over what a training run already logs.

    signals = episode_signals(episodes)            # health/* of one step's episodes, logged with its metrics
    alarms = check_step(history)                   # the rules at the newest step of the history (train steps' metrics)
    alarms = replay(history)                       # every step's alarms, as `rllm audit` and `rllm view` compute them

A run that goes wrong shows first in numbers the trainer writes anyway; each detector below is one rule with its
threshold over `metrics.jsonl`'s training lines (`DETECTORS`, also printed by `rllm audit --rules`). The trainer
checks them after every step: an alarm is the metric `alarm/<name>` = 1 of that step, one line on the console where
it starts, a mark on the viewer's curves and a line of `rllm audit`. The same function gives all four, and `replay`
recomputes them from the logs of any run, older ones included.

Choices:
- Thresholds sit where the clean runs measured stay well inside them: `make demo` (GRPO on Qwen2.5-Coder-0.5B, 15
  steps, 2-core Intel Xeon) had entropy 0.17-1.17 nats per token, at most 7 of 8 groups with all-equal rewards,
  response lengths 4.7-6.1 tokens, 8 of 576 replies cut at `max_tokens`, and log-prob differences of ~2e-6.
- Rules over a rate hold for `SUSTAIN` steps in a row, so one unlucky batch raises nothing; a spike is relative to
  the median of the steps before it and above an absolute floor, so a metric that is always ~0 never spikes on
  noise; the protected-test rule fires on the first attempt: there is no honest reason to edit a task's tests.
- Episode signals are per episode, so an alarm links to the episodes that show it (`flagged_episodes`): replies
  that are empty or repeat themselves, replies cut by the token limit, grades that found protected tests edited.
- One reward component paying without correctness (a format or length reward) is read from the two numbers every
  run has, the mean reward and the success rate: the reward rises and the success rate does not. Rewards that
  report no components are covered, and so is a bug that pays every reply.

Imports only `rllm.types`: the trainer, `rllm audit` and the viewer use it, and it reads no file.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rllm.types import Episode, TerminationReason

__all__ = [
    "ALARM_PREFIX",
    "DETECTORS",
    "Alarm",
    "Detector",
    "HealthMonitor",
    "check_step",
    "episode_flags",
    "episode_signals",
    "flagged_episodes",
    "is_train_step",
    "replay",
]

ALARM_PREFIX = "alarm/"
SUSTAIN = 2  # steps in a row a rate rule must hold
NGRAM = 4  # a reply repeats itself when most of its 4-grams of tokens are repeats
REPEAT_SHARE = 0.5
MIN_REPEAT_TOKENS = 16
PROTECTED_GRADES = ("protected_path", "tampering")  # the SWE grader's reasons for an edit of protected tests
_LENGTH_ENDS = (TerminationReason.MAX_RESPONSE_LENGTH.value, TerminationReason.MAX_PROMPT_LENGTH.value)

Metrics = dict[str, Any]


@dataclass(frozen=True)
class Alarm:
    """Detector `name` fired at `step`; `message` is its one line (the value, the threshold, what to try)."""

    name: str
    step: int
    message: str


@dataclass(frozen=True)
class Detector:
    """One rule: `check(history)` returns the message when it holds at the newest step, else None. `signal` names
    the episode flag whose episodes show it (`episode_flags`), if any."""

    name: str
    rule: str
    check: Callable[[Sequence[Metrics]], str | None]
    signal: str | None = None


# ---- episode signals -------------------------------------------------------------------------------------------


def episode_flags(episode: Episode) -> set[str]:
    """Which signals one episode shows: `empty` (a reply with no text and no tool call), `repetitive` (a reply of
    16+ tokens most of whose 4-grams are repeats), `truncated` (its last reply hit the token limit, or it ended at a
    length limit), `protected` (its grade found protected tests edited)."""
    flags: set[str] = set()
    for trajectory in episode.trajectories:
        outputs = [step.model_output for step in trajectory.steps if step.model_output is not None]
        if any(
            not (out.content if out.content is not None else out.text).strip() and not out.tool_calls for out in outputs
        ):
            flags.add("empty")
        if any(_repeats_itself(out.completion_ids or (out.text or "").split()) for out in outputs):
            flags.add("repetitive")
        if outputs and outputs[-1].finish_reason == "length":
            flags.add("truncated")
        if any(step.info.get("grade") in PROTECTED_GRADES for step in trajectory.steps):
            flags.add("protected")
    reason = episode.termination_reason.value if episode.termination_reason else None
    if reason in _LENGTH_ENDS:
        flags.add("truncated")
    return flags


def _repeats_itself(tokens: Sequence[Any]) -> bool:
    if len(tokens) < MIN_REPEAT_TOKENS:
        return False
    grams = [tuple(tokens[i : i + NGRAM]) for i in range(len(tokens) - NGRAM + 1)]
    return 1 - len(set(grams)) / len(grams) >= REPEAT_SHARE


def episode_signals(episodes: Sequence[Episode]) -> dict[str, float]:
    """`health/<flag>_rate` (share of the episodes that show it) and `health/protected_edits` (how many)."""
    flags = [episode_flags(episode) for episode in episodes]
    n = max(1, len(flags))
    out = {f"health/{flag}_rate": sum(flag in f for f in flags) / n for flag in ("empty", "repetitive", "truncated")}
    out["health/protected_edits"] = sum("protected" in f for f in flags)
    return out


def flagged_episodes(detector: Detector, episodes: Iterable[Episode]) -> list[Episode]:
    """The episodes that show `detector`'s signal (none for a detector of step metrics only)."""
    if detector.signal is None:
        return []
    return [episode for episode in episodes if detector.signal in episode_flags(episode)]


# ---- the rules -------------------------------------------------------------------------------------------------


def is_train_step(line: Metrics) -> bool:
    """Whether a `metrics.jsonl` line is a training step's (validation lines hold only `val/` keys)."""
    return "reward_mean" in line


def _values(history: Sequence[Metrics], key: str) -> list[float]:
    return [float(m[key]) for m in history if _finite(m.get(key))]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sustained(history: Sequence[Metrics], key: str, holds: Callable[[float], bool]) -> list[float] | None:
    """The last `SUSTAIN` steps' values of `key` when each has it and `holds` for all, else None."""
    last = history[-SUSTAIN:]
    if len(last) < SUSTAIN or not all(_finite(m.get(key)) for m in last):
        return None
    values = [float(m[key]) for m in last]
    return values if all(holds(v) for v in values) else None


def _spike(history: Sequence[Metrics], key: str, ceiling: float, floor: float, factor: float) -> float | None:
    """The newest value of `key` when it is above `ceiling`, or above `floor` and `factor` x the median of 3+
    earlier steps."""
    if not history or not _finite(history[-1].get(key)):
        return None
    value, before = float(history[-1][key]), _values(history[:-1], key)
    if value > ceiling:
        return value
    if len(before) >= 3 and value > floor and value > factor * statistics.median(before):
        return value
    return None


def entropy_collapse(history: Sequence[Metrics]) -> str | None:
    values = _sustained(history, "entropy", lambda v: v < 0.03)
    if values is None:
        return None
    return (
        f"entropy {values[-1]:.3g} nats per token, under 0.03 for {SUSTAIN} steps: the policy samples (almost) one "
        "reply, so groups stop differing; raise rollout.temperature, set algorithm.entropy_coef, or lower optim.lr"
    )


def kl_spike(history: Sequence[Metrics]) -> str | None:
    for key in ("approx_kl", "kl"):
        value = _spike(history, key, ceiling=0.1, floor=0.02, factor=10)
        if value is not None:
            return (
                f"{key} {value:.3g}, above 0.1 (or 10x its median and 0.02): one update moved the policy far; lower "
                "optim.lr, tighten algorithm.clip_low/clip_high, or use fewer algorithm.ppo_epochs"
            )
    return None


def clip_spike(history: Sequence[Metrics]) -> str | None:
    value = _spike(history, "clip_fraction", ceiling=0.3, floor=0.1, factor=5)
    if value is None:
        return None
    return (
        f"clip_fraction {value:.3g}, above 0.3 (or 5x its median and 0.1): most of the update is clipped; lower "
        "optim.lr or use fewer algorithm.ppo_epochs / algorithm.mini_batches"
    )


def length_drift(history: Sequence[Metrics]) -> str | None:
    lengths = _values(history, "response_length_mean")
    if len(lengths) < 2 * SUSTAIN:
        return None
    start = statistics.fmean(lengths[:SUSTAIN])
    recent = lengths[-SUSTAIN:]
    moved = all(abs(v - start) >= 8 and (v > 2 * start or v < start / 2) for v in recent)
    if not moved:
        return None
    return (
        f"response length {recent[-1]:.1f} tokens against {start:.1f} at the start (more than 2x apart for "
        f"{SUSTAIN} steps): check that the reward does not pay for length (or brevity) and that replies still answer"
    )


def reward_without_success(history: Sequence[Metrics]) -> str | None:
    rewards, success = _values(history, "reward_mean"), _values(history, "success_rate")
    if len(rewards) < 2 * SUSTAIN or len(success) < 2 * SUSTAIN:
        return None
    gained = statistics.fmean(rewards[-SUSTAIN:]) - statistics.fmean(rewards[:SUSTAIN])
    solved = statistics.fmean(success[-SUSTAIN:]) - statistics.fmean(success[:SUSTAIN])
    if gained < 0.2 or solved > 0.02 or statistics.fmean(success[-SUSTAIN:]) >= 0.95:
        return None  # a success rate at its ceiling cannot rise: a reward above it is not evidence
    return (
        f"mean reward rose by {gained:.3g} while the success rate moved {solved:+.3g}: a part of the reward (format, "
        "length, a judge) pays without correctness; check the reward function and what is_correct measures"
    )


def no_signal(history: Sequence[Metrics]) -> str | None:
    last = history[-3:]
    shares = [_uniform_share(m) for m in last]
    if len(last) < 3 or any(s is None or s < 0.9 for s in shares):
        return None
    return (
        f"{min(shares):.0%}+ of the groups had all-equal rewards (or nothing trained) for 3 steps: group baselines "
        "give them zero advantage; use tasks the model solves sometimes, more rollout.n, or a partial-credit reward"
    )


def _uniform_share(m: Metrics) -> float | None:
    if m.get("skipped_update"):
        return 1.0
    groups, uniform = m.get("batch/groups"), m.get("batch/uniform_groups")
    return uniform / groups if _finite(groups) and groups and _finite(uniform) else None


def truncation(history: Sequence[Metrics]) -> str | None:
    values = _sustained(history, "health/truncated_rate", lambda v: v >= 0.3)
    if values is None:
        return None
    return (
        f"{values[-1]:.0%} of the episodes were cut by a length limit ({SUSTAIN} steps at 30 %+): cut replies train "
        "as failures; raise rollout.max_tokens / max_response_length, or reward brevity on purpose"
    )


def _degenerate(flag: str, what: str) -> Callable[[Sequence[Metrics]], str | None]:
    def check(history: Sequence[Metrics]) -> str | None:
        values = _sustained(history, f"health/{flag}_rate", lambda v: v >= 0.25)
        if values is None:
            return None
        return f"{values[-1]:.0%} of the episodes had {what} ({SUSTAIN} steps at 25 %+): look at them in rllm view"

    return check


def logprob_mismatch(history: Sequence[Metrics]) -> str | None:
    last = history[-1] if history else {}
    mean, beyond = last.get("mismatch/abs_diff_mean"), last.get("mismatch/frac_beyond")
    if (_finite(mean) and mean > 0.05) or (_finite(beyond) and beyond > 0.1):
        return (
            f"|logp_train - logp_sample| {mean} on average, {beyond} of the tokens beyond the threshold: the "
            "sampler and the trainer disagree (stale weights, another dtype or kernel); see mismatch/* and "
            "algorithm.off_policy"
        )
    grown = _spike(history, "mismatch/abs_diff_mean", ceiling=math.inf, floor=0.01, factor=5)
    if grown is not None:
        return f"|logp_train - logp_sample| {grown:.3g}, 5x its median so far: the mismatch is growing"
    return None


def prefix_breaks(history: Sequence[Metrics]) -> str | None:
    if not history:
        return None
    m = history[-1]
    turns = (m.get("turns_mean") or 0) * (m.get("episodes") or 0)
    breaks = m.get("token_mismatch") or 0
    if not turns or breaks / turns <= 0.1:
        return None
    return (
        f"{breaks:g} of {turns:g} turns did not extend the previous turn's tokens (over 10 %): the chat template or "
        "the agent rewrites history, so those turns train as new rows without their context"
    )


def protected_tests(history: Sequence[Metrics]) -> str | None:
    edits = history[-1].get("health/protected_edits") if history else None
    if not _finite(edits) or edits <= 0:
        return None
    return f"{edits:g} episodes edited the task's protected tests (graded protected_path or tampering): reward hacking"


DETECTORS: tuple[Detector, ...] = (
    Detector("entropy_collapse", "entropy < 0.03 nats/token for 2 steps in a row", entropy_collapse),
    Detector("kl_spike", "approx_kl or kl > 0.1, or > 10x the median of earlier steps and > 0.02", kl_spike),
    Detector("clip_spike", "clip_fraction > 0.3, or > 5x the median of earlier steps and > 0.1", clip_spike),
    Detector(
        "length_drift",
        "mean response length more than 2x (and 8+ tokens) from the first 2 steps' for 2 steps in a row",
        length_drift,
    ),
    Detector(
        "reward_without_success",
        "mean reward of the last 2 steps 0.2+ above the first 2 steps' while the success rate (under 0.95) gained at "
        "most 0.02",
        reward_without_success,
    ),
    Detector("no_signal", "90 %+ of the groups with all-equal rewards (or no update) for 3 steps in a row", no_signal),
    Detector("truncation", "30 %+ of the episodes cut by a length limit for 2 steps in a row", truncation, "truncated"),
    Detector(
        "empty_replies",
        "25 %+ of the episodes with an empty reply for 2 steps in a row",
        _degenerate("empty", "an empty reply"),
        "empty",
    ),
    Detector(
        "repetitive_replies",
        "25 %+ of the episodes with a reply of 16+ tokens, half of whose 4-grams repeat, for 2 steps in a row",
        _degenerate("repetitive", "a reply that repeats itself"),
        "repetitive",
    ),
    Detector(
        "logprob_mismatch",
        "mean |logp_train - logp_sample| > 0.05 or > 10 % of tokens beyond the threshold, or 5x its median and > 0.01",
        logprob_mismatch,
    ),
    Detector("prefix_breaks", "over 10 % of a step's turns do not extend the previous turn's tokens", prefix_breaks),
    Detector("protected_tests", "any episode graded protected_path or tampering", protected_tests, "protected"),
)


class HealthMonitor:
    """The trainer's view: the run's training steps so far (a resumed run's from its log) and which alarms were on
    at the last step, so that the console says when one starts, not at every step it lasts."""

    def __init__(self, history: Iterable[Metrics] = ()) -> None:
        self.history = [m for m in history if is_train_step(m)]
        self.active: set[str] = {a.name for a in check_step(self.history)}

    def observe(self, metrics: Metrics) -> tuple[list[Alarm], list[Alarm]]:
        """(this step's alarms, those that were not on at the step before)."""
        self.history.append(metrics)
        alarms = check_step(self.history)
        started = [a for a in alarms if a.name not in self.active]
        self.active = {a.name for a in alarms}
        return alarms, started


def check_step(history: Sequence[Metrics]) -> list[Alarm]:
    """The alarms of the newest step of `history` (training steps' metrics, oldest first)."""
    if not history:
        return []
    step = int(history[-1].get("step", len(history)))
    found = ((detector, detector.check(history)) for detector in DETECTORS)
    return [Alarm(detector.name, step, message) for detector, message in found if message is not None]


def replay(history: Sequence[Metrics]) -> list[Alarm]:
    """Every step's alarms, from the start: what the trainer raised (or would have, for a run older than this)."""
    steps = [m for m in history if is_train_step(m)]
    return [alarm for i in range(len(steps)) for alarm in check_step(steps[: i + 1])]
