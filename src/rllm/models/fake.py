"""`FakeModel`: a scripted `ModelClient` for tests, and `FakeTokenizer`, a tiny deterministic tokenizer with a
ChatML-like chat template, so engine tests exercise the token-exact `ChatRenderer` path without transformers.

Design choices:

- The script is either a list consumed in order (running past its end raises `IndexError`, so a test that makes
  more calls than it scripted fails loudly), a single string (the reply to every call), or a callable
  `(prompt, sampling) -> str | ModelOutput | Exception` that can branch on the prompt. A returned (or raised)
  exception is raised from `generate`; raising `rllm.errors.InfraError` simulates a server failure.
- With a tokenizer the model behaves like a token-in/token-out server: `prompt_ids` are the ids it was given (or
  the rendered messages), `completion_ids = encode(reply) + [eos]`, and every logprob is `logprob` (-0.5 by default),
  so tests can check exact values. `sampling.max_tokens` truncates the completion ids (then the eos is usually gone,
  `text` is the decoded kept part and `finish_reason` is "length"), as a real server does.
- Without a tokenizer it returns text only (`prompt_ids`/`completion_ids`/`logprobs` None), like an
  OpenAI-compatible server that cannot give token ids; `max_tokens` is then not applied (there are no tokens).
- A `ModelOutput` returned by the script is passed through untouched: the test controls every field.
- Every call is recorded in `calls` (prompt, sampling, output or error) for assertions.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rllm.models.base import Prompt, SamplingParams
from rllm.types import ModelOutput

__all__ = ["FakeCall", "FakeModel", "FakeTokenizer"]

ScriptItem = str | ModelOutput | BaseException
Script = str | Sequence[ScriptItem] | Callable[[Prompt, SamplingParams], ScriptItem]
Delay = float | Callable[[Prompt, SamplingParams], float]


class FakeTokenizer:
    """One token per character (id = code point + offset) plus three special tokens, with a ChatML-like template:

        <|im_start|>{role}\\n{content}<|im_end|>\\n ... <|im_start|>assistant\\n

    Encoding is lossless and stateless, so `decode(encode(s)) == s` for any string and two instances agree. The eos
    token is `<|im_end|>` (the end of an assistant turn), which is what makes multi-turn rendering extend exactly.
    It implements the subset of the transformers tokenizer interface the project uses.
    """

    special_tokens = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    _offset = 16  # ids below this are reserved for special tokens
    chat_template = "fake-chatml"  # a marker, for code that checks that a template exists

    def __init__(self) -> None:
        self._special_ids = {tok: i for i, tok in enumerate(self.special_tokens)}
        self._special_by_id = {i: tok for tok, i in self._special_ids.items()}
        self._split = re.compile("(" + "|".join(re.escape(t) for t in self.special_tokens) + ")")
        self.pad_token_id = self._special_ids["<|endoftext|>"]
        self.eos_token_id = self._special_ids["<|im_end|>"]
        self.bos_token_id = None
        self.pad_token, self.eos_token = "<|endoftext|>", "<|im_end|>"
        self.vocab_size = 0x110000 + self._offset

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        offset = self._offset
        for piece in self._split.split(text):
            special = self._special_ids.get(piece)
            if special is not None:
                ids.append(special)
            else:
                ids.extend([ord(ch) + offset for ch in piece])
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False, **_: Any) -> str:
        parts = []
        for i in ids:
            if i < self._offset:
                if not skip_special_tokens:
                    parts.append(self._special_by_id.get(i, ""))
            else:
                parts.append(chr(i - self._offset))
        return "".join(parts)

    def apply_chat_template(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        **_: Any,
    ) -> str | list[int]:
        chunks = []
        if tools:
            chunks.append(f"<|im_start|>system\n# Tools\n{json.dumps(tools, sort_keys=True)}<|im_end|>\n")
        for message in messages:
            chunks.append(f"<|im_start|>{message['role']}\n{_content_text(message.get('content'))}<|im_end|>\n")
        if add_generation_prompt:
            chunks.append("<|im_start|>assistant\n")
        text = "".join(chunks)
        return self.encode(text) if tokenize else text


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


@dataclass
class FakeCall:
    """One recorded `generate` call: what was asked and what came back (or was raised)."""

    prompt: Prompt
    sampling: SamplingParams
    output: ModelOutput | None = None
    error: BaseException | None = None


class FakeModel:
    """A `ModelClient` that replies from a script. See the module docstring for the behaviour in detail."""

    def __init__(
        self,
        script: Script,
        *,
        delay: Delay = 0.0,
        tokenizer: Any = None,
        logprob: float = -0.5,
        weight_version: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        self.delay = delay
        self.logprob = logprob
        self.weight_version = weight_version
        self.calls: list[FakeCall] = []
        self._script = script
        self._next = 0  # index into a list script

    async def generate(self, prompt: Prompt, sampling: SamplingParams | None = None) -> ModelOutput:
        sampling = sampling or SamplingParams()
        call = FakeCall(prompt=prompt, sampling=sampling)
        self.calls.append(call)
        try:
            delay = self.delay(prompt, sampling) if callable(self.delay) else self.delay
            if delay > 0:
                await asyncio.sleep(delay)
            item = self._scripted(prompt, sampling)
            if isinstance(item, BaseException):
                raise item
            call.output = item if isinstance(item, ModelOutput) else self._output(prompt, item, sampling)
            return call.output
        except BaseException as exc:  # record cancellations (timeouts) too, then re-raise
            call.error = exc
            raise

    def _scripted(self, prompt: Prompt, sampling: SamplingParams) -> ScriptItem:
        script = self._script
        if isinstance(script, str):
            return script
        if callable(script):
            return script(prompt, sampling)
        if self._next >= len(script):
            raise IndexError(f"FakeModel script exhausted: {len(script)} replies scripted, call {self._next + 1} made")
        item = script[self._next]
        self._next += 1
        return item

    def _output(self, prompt: Prompt, reply: str, sampling: SamplingParams) -> ModelOutput:
        if not isinstance(reply, str):
            raise TypeError(f"FakeModel script must give str, ModelOutput or Exception, not {type(reply).__name__}")
        tokenizer = self.tokenizer
        if tokenizer is None:
            return ModelOutput(text=reply, content=reply, finish_reason="stop", weight_version=self.weight_version)
        prompt_ids = self._prompt_ids(prompt)
        completion_ids = tokenizer.encode(reply, add_special_tokens=False) + [_first_eos(tokenizer)]
        finish_reason, text = "stop", reply
        if len(completion_ids) > sampling.max_tokens:
            completion_ids = completion_ids[: sampling.max_tokens]
            finish_reason = "length"
            text = tokenizer.decode(completion_ids, skip_special_tokens=True)
        return ModelOutput(
            text=text,
            content=text,
            prompt_ids=prompt_ids,
            completion_ids=completion_ids,
            logprobs=[float(self.logprob)] * len(completion_ids),
            finish_reason=finish_reason,
            weight_version=self.weight_version,
        )

    def _prompt_ids(self, prompt: Prompt) -> list[int]:
        if prompt and isinstance(prompt[0], dict):  # messages: render them as a server with this tokenizer would
            text = self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            return self.tokenizer.encode(text, add_special_tokens=False)
        return list(prompt)


def _first_eos(tokenizer: Any) -> int:
    eos = tokenizer.eos_token_id
    return eos[0] if isinstance(eos, (list, tuple)) else eos
