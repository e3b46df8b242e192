"""`raise_if_all_failed(episodes, what)`: a batch in which no episode got through is not a result. An eval or a
training step whose every episode ended in an infrastructure error (a server down, an endpoint failing every
request; the engine already retried each one) or in an error of the agent's code (a harness whose every model call
fails, e.g. an agent calling an API the endpoint does not serve) would otherwise report a success rate of 0 that
looks like a real score, or train on nothing, and exit 0. `rllm eval` and `AgentTrainer` call this after their
rollouts and stop with the first episode's error."""

from __future__ import annotations

from collections.abc import Sequence

from rllm.errors import InfraError
from rllm.types import Episode, TerminationReason

__all__ = ["AllEpisodesFailedError", "raise_if_all_failed"]

_CAUSE_CHARS = 400


class AllEpisodesFailedError(InfraError):
    """Every episode of an eval or a training step ended in an error; the message has the first one's cause."""


_FAILED = frozenset({TerminationReason.INFRA_ERROR, TerminationReason.ERROR})


def raise_if_all_failed(episodes: Sequence[Episode], what: str, *, kept_in: str | None = None) -> None:
    """`AllEpisodesFailedError` when `episodes` is non-empty and every one ended in `INFRA_ERROR` or `ERROR`; `what`
    names the batch ("this eval", "training step 3") and `kept_in` where its episodes were written, in the one-line
    message."""
    if not episodes or any(ep.termination_reason not in _FAILED for ep in episodes):
        return
    cause = " ".join(str(episodes[0].info.get("error") or "no error recorded").split())
    if len(cause) > _CAUSE_CHARS:
        cause = cause[:_CAUSE_CHARS] + "..."
    if all(ep.termination_reason is TerminationReason.INFRA_ERROR for ep in episodes):
        retries = episodes[0].metrics.get("retries", 0)
        how = f"an infrastructure error (retried {retries} times each, rollout.retry_limit)"
    else:
        how = "an error (of the agent's code, or of the infrastructure)"
    raise AllEpisodesFailedError(
        f"all {len(episodes)} episodes of {what} ended in {how}, so there is nothing to score or train on; the first "
        f"one's error: {cause}" + (f"; the episodes are in {kept_in}" if kept_in else "")
    )
