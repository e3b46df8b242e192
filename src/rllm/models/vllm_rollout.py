"""`VLLMRolloutClient`: rollouts from a vLLM server (token-in/token-out), with weights the trainer syncs into it.

    server = VLLMServer.launch(model_dir, dtype="float32")
    client = VLLMRolloutClient(server, tokenizer, sync="reload", workdir=run_dir / "vllm")
    output = await client.generate(prompt_ids, sampling)     # exact ids + sampling logprobs, weight_version stamped
    client.sync_weights(source)                               # after each update; returns the new version

It is an `OpenAIClient` (the same request fields, retries and parsing) that also knows the server's admin API:
`sync_weights` pushes the source's weights with the chosen strategy (`rllm.models.weight_sync`), checks the
server's logprobs against the trainer's on a fixed probe, and records the version every later output carries
(`ModelOutput.weight_version`; the trainer alternates rollouts and updates, so an output's version is the one it was
sampled with). `sync_metrics` holds the last sync's seconds and logprob difference for the step's metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rllm.models.base import Prompt, SamplingParams
from rllm.models.chat import encode_text, render_messages
from rllm.models.openai import OpenAIClient
from rllm.models.vllm_server import VLLMServer
from rllm.models.weight_sync import check_logprobs, make_sync, timed_push
from rllm.types import ModelOutput

__all__ = ["PROBE_MESSAGES", "VLLMRolloutClient"]

# The fixed sequence whose logprobs are compared after every sync: a chat prompt and a reply, so both the template's
# special tokens and ordinary text are covered.
PROBE_MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow, then count from one to five."}]
_PROBE_REPLY = "Red, green and blue. One, two, three, four, five."


class VLLMRolloutClient(OpenAIClient):
    def __init__(
        self,
        server: VLLMServer,
        tokenizer: Any,
        *,
        sync: str = "reload",
        workdir: str | Path,
        logprob_tolerance: float = 0.02,
        owns_server: bool = True,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(server.base_url, server.served_name, tokenizer=tokenizer, **client_kwargs)
        self.server = server
        self.sync = make_sync(sync, workdir)
        self.logprob_tolerance = logprob_tolerance
        self.owns_server = owns_server
        self.weight_version = 0
        self.sync_metrics: dict[str, float] = {}
        self._probe_ids: list[int] | None = None

    async def generate(self, prompt: Prompt, sampling: SamplingParams | None = None) -> ModelOutput:
        version = self.weight_version
        output = await super().generate(prompt, sampling)
        output.weight_version = version
        return output

    def sync_weights(self, source: Any, version: int | None = None) -> int:
        """Push `source`'s weights as `version` (default: the next one), check them, and return the version."""
        version = self.weight_version + 1 if version is None else int(version)
        self.model, seconds = timed_push(self.sync, self.server, source, version)
        diff = check_logprobs(self.server, source, self.model, self.probe_ids(), self.logprob_tolerance)
        self.weight_version = version
        self.sync_metrics = {"weight_sync_s": seconds, "weight_sync_logprob_max_diff": diff}
        return version

    def probe_ids(self) -> list[int]:
        if self._probe_ids is None:
            prompt = render_messages(self.tokenizer, PROBE_MESSAGES)
            self._probe_ids = prompt + encode_text(self.tokenizer, _PROBE_REPLY)
        return self._probe_ids

    def close(self) -> None:
        """Stop the server if this client started it (the trainer calls this at the end of a run)."""
        if self.owns_server:
            self.server.stop()
