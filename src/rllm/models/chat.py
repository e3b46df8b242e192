"""Chat rendering that keeps multi-turn prompts token-exact.

The prompt of turn k is the previous prompt ids + the previous completion ids (exactly as sampled) + the rendered
*delta* of the messages that came after the model's reply. So every turn extends the previous one by
construction, and a whole multi-turn trajectory trains as one row `[prompt0, A0, obs1, A1, ...]` (DESIGN.md, token
exactness). Re-tokenizing the decoded history instead would silently change the ids the model actually sampled.

How the delta is found, for any chat template: render the conversation with a unique placeholder as the model's
reply, then take the text after the placeholder. If the reply ended with an end-of-turn token that the template
would also print (ChatML's `<|im_end|>`), that text starts with it and it is dropped, since the sampled ids hold it.

A step does not extend (and `mismatches` counts it) when the agent rewrote history: earlier messages changed, its
stored reply differs from the sampled text, or the template renders earlier turns differently once later ones
exist (templates that strip old reasoning do). Then the prompt is rendered in full and training starts a new row.
"""

from __future__ import annotations

from typing import Any

from rllm.types import ModelOutput

__all__ = ["ChatRenderer", "encode_text", "render_messages", "render_text"]

_PLACEHOLDER = "\u2063rllm-reply-placeholder\u2063"


def render_text(
    tokenizer: Any, messages: list[dict], *, tools: list[dict] | None = None, add_generation_prompt: bool = True
) -> str:
    """The chat template applied to `messages`, as text."""
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
    )


def render_messages(
    tokenizer: Any, messages: list[dict], *, tools: list[dict] | None = None, add_generation_prompt: bool = True
) -> list[int]:
    """Token ids of the whole rendered conversation (the template already holds any BOS it wants)."""
    text = render_text(tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt)
    return encode_text(tokenizer, text)


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """`tokenizer.encode(text, add_special_tokens=False)`, through the Rust tokenizer directly when there is one:
    the same ids without transformers' per-call Python overhead (it is on every rollout step's path)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.encode(text, add_special_tokens=False).ids
    return tokenizer.encode(text, add_special_tokens=False)


class ChatRenderer:
    """Renders one rollout's successive prompts so that each extends the last. Use one per trajectory:

    ids = renderer.render(agent.chat_completions)
    output = await model.generate(ids, sampling)
    renderer.record(output)
    """

    def __init__(self, tokenizer: Any, *, tools: list[dict] | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = tools
        self.mismatches = 0  # prompts that could not extend the previous prompt + completion
        self._messages: list[dict] | None = None  # messages of the last prompt
        self._text: str | None = None  # the last prompt as text, with every reply printed as sampled
        self._pending_ids: list[int] | None = None  # the last prompt, until its output is recorded
        self._context_ids: list[int] | None = None  # last prompt + its sampled completion
        self._last_output: ModelOutput | None = None

    def render(self, messages: list[dict]) -> list[int]:
        delta = self._delta_ids(messages) if self._context_ids is not None else None
        if delta is not None:
            ids = self._context_ids + delta
        else:
            if self._context_ids is not None:
                self.mismatches += 1
            self._text = render_text(self.tokenizer, messages, tools=self.tools)
            ids = encode_text(self.tokenizer, self._text)
        self._messages = [dict(m) for m in messages]
        self._pending_ids = ids
        return ids

    def record(self, output: ModelOutput) -> None:
        """Remember what was sampled for the last rendered prompt."""
        if self._pending_ids is None:
            raise RuntimeError("ChatRenderer.record() called before render()")
        if output.completion_ids is None:
            raise ValueError("ChatRenderer needs completion ids; this model client returned none")
        prompt = output.prompt_ids if output.prompt_ids is not None else self._pending_ids
        self._context_ids = list(prompt) + list(output.completion_ids)
        self._last_output = output
        self._pending_ids = None

    def _delta_ids(self, messages: list[dict]) -> list[int] | None:
        previous, output = self._messages, self._last_output
        n = len(previous)
        if len(messages) <= n or messages[:n] != previous:
            return None
        reply = messages[n]
        if reply.get("role") != "assistant" or reply.get("content") not in (output.text, output.content):
            return None
        with_placeholder = [*previous, {**reply, "content": _PLACEHOLDER}, *messages[n + 1 :]]
        text = render_text(self.tokenizer, with_placeholder, tools=self.tools)
        cut = text.find(_PLACEHOLDER)
        # The template must print the earlier turns exactly as the previous prompt had them, replies as sampled.
        # (`self._text` is that prompt's text; comparing with it costs no second render.)
        if cut < 0 or text[:cut] != self._text:
            return None
        after = text[cut + len(_PLACEHOLDER) :]
        self._text = text[:cut] + reply["content"] + after
        end_of_turn = self._sampled_end_of_turn(output)
        if end_of_turn:
            if not after.startswith(end_of_turn):
                return None
            after = after[len(end_of_turn) :]
        return encode_text(self.tokenizer, after)

    def _sampled_end_of_turn(self, output: ModelOutput) -> str:
        """The text of the end-of-turn token the model sampled last, or "" if it stopped otherwise."""
        ids = output.completion_ids or []
        if not ids or ids[-1] not in _eos_ids(self.tokenizer):
            return ""
        return self.tokenizer.decode([ids[-1]], skip_special_tokens=False)


def _eos_ids(tokenizer: Any) -> set[int]:
    ids = tokenizer.eos_token_id
    found = set(ids) if isinstance(ids, (list, tuple, set)) else {ids}
    found.discard(None)
    return found
