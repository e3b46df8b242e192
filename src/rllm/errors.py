"""Error types that cross layers. The engine classifies failures by these types:

- `InfraError`: our fault (a server down, a timeout talking to it, an environment crash). Retried with backoff,
  then the episode is marked `TerminationReason.INFRA_ERROR` and kept out of the loss and of group baselines.
- `PolicyError`: the model's fault (bad format, bad tool call). It gets the configured reward.

Any other exception is classified by where it was raised (`rllm.workflows.runtime.classify_error`): `tag_site` writes
that site on the exception. It lives here, at the bottom, so that reward code can tag its own errors without
importing the workflows above it.
"""

from __future__ import annotations

__all__ = [
    "ImageError",
    "InfraError",
    "ModelNotAvailableError",
    "PolicyError",
    "RllmError",
    "SandboxUnavailableError",
    "error_site",
    "tag_site",
]


class RllmError(Exception):
    """Base class of the errors rllm raises on purpose."""


class InfraError(RllmError):
    """Something outside the policy failed: retry it. `retry_after` (seconds) is the server's own delay (HTTP
    Retry-After) when it gave one: every retry above honours it."""

    def __init__(self, *args: object, retry_after: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after = retry_after


class PolicyError(RllmError):
    """The model produced something unusable."""


class ModelNotAvailableError(RllmError):
    """A model's weights are not on this machine; the message names the command or package that fetches them."""


class ImageError(RllmError, ValueError):
    """An image that cannot be used: a file that cannot be read (the message names it), bytes that are not an image,
    a stored image missing from its run, or an image sent to a text-only model (the message names the model)."""


class SandboxUnavailableError(RllmError):
    """This machine cannot sandbox code; the message names what is missing and how to fix it."""


_SITE_ATTR = "_rllm_site"


def tag_site(exc: BaseException, site: str) -> None:
    """Record where `exc` was raised ("env", "model", "workflow", "agent", "reward", "render"), unless an inner helper
    already did."""
    if not hasattr(exc, _SITE_ATTR):
        try:
            setattr(exc, _SITE_ATTR, site)
        except AttributeError:  # an exception type with __slots__: it stays "workflow"
            pass


def error_site(exc: BaseException) -> str:
    return getattr(exc, _SITE_ATTR, "workflow")
