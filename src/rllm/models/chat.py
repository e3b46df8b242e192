"""Chat rendering that keeps multi-turn prompts token-exact.

The prompt of turn k is the previous prompt ids + the previous completion ids (exactly as sampled) + the ids of
the text the chat template adds after the model's reply. So every turn extends the previous one, and a whole
multi-turn trajectory trains as one row `[prompt0, A0, obs1, A1, ...]` (docs/architecture.md, "Token exactness":
training uses the sampled ids, never re-tokenized text). Re-tokenizing the decoded history instead would silently
change the ids the model actually sampled.

How it is checked, for any chat template: the messages are rendered in full (one render per turn), and the turn
extends only if that text is the previous prompt's text + the reply exactly as sampled (its ids decoded, end-of-turn
token included) + new text. So whatever the template does to the reply (strip its `<think>` block, `| trim` it,
print structured `tool_calls` back as text) is seen at the turn where it happens. A turn whose text does not extend
is rendered in full; if those ids still start with the previous prompt + completion ids it extends all the same
(the rows merge), otherwise `mismatches` counts it and training starts a new row: an agent that rewrote history,
stored a reply that differs from the sample, or a template that prints earlier turns differently once later ones
exist. `extended` tells which happened to the last prompt, the same rule `training.batch.build_rows` merges by.
For the token-exactness report (`rllm.exactness`) it also counts each mismatch by its cause (`breaks`: the
template, the history, or a reply that does not round-trip: `rllm.models.exactness.break_kind`), the prompts
tokenized again from text after a sampled reply (`retokenized`: 0 on the exact path), and the prompts with tools
whose template writes calls rllm's parser does not read back (`tool_format_failures`).

Tools with a template that ignores them (SmolLM2-Instruct's prints only role and content, and drops `tools=`
silently): `describe_ignored_tools` writes the tools into the system message instead, as JSON schemas with the
Hermes `<tool_call>` call format that `rllm.tools.parsing` parses (word for word what Qwen2.5's template writes), and
warns once per model. Every text renderer goes through it (`render_text`, hence `ChatRenderer`, the local and
OpenAI clients, SFT data; `VisionProcessor.render_text`; the gateway's record of what was rendered), so a prompt
never describes its tools twice. The description is the same on every turn, so multi-turn prompts still extend.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections import Counter
from typing import Any

from rllm import runtime
from rllm.errors import ImageError, RllmError
from rllm.images import VLM_NEEDED, has_images
from rllm.models.exactness import break_kind, tool_format_round_trips
from rllm.types import ModelOutput

__all__ = [
    "ChatRenderer",
    "chat_template_renders_tools",
    "describe_ignored_tools",
    "encode_text",
    "render_messages",
    "render_text",
]


def render_text(
    tokenizer: Any, messages: list[dict], *, tools: list[dict] | None = None, add_generation_prompt: bool = True
) -> str:
    """The chat template applied to `messages`, as text: `tokenizer.apply_chat_template(..., tokenize=False)`.

    It runs on every model call of every rollout, on the engine's event loop, so plain inputs (dict messages of
    JSON values, no reasoning fields, a single string template) skip transformers' per-call conversions: its
    compiled template (the same sandboxed Jinja environment, cached by transformers) renders them directly with the
    same variables (`messages` without None-valued keys, `tools`, `add_generation_prompt`, the special tokens).
    Measured on SmolLM2's template: about half the per-call cost. It relies on transformers' private helpers, so it
    runs only where `rllm.runtime` enables `fast_chat_templates`. Anything else takes `apply_chat_template`; a
    test checks both give the same text on the shipped tokenizers, with tools and tool calls.

    `tools` the template ignores are described in the system message (`describe_ignored_tools`).

    A tokenizer renders text only: messages with an image are refused (`ImageError`, naming the model), not printed
    into the prompt as the template would print a list (a text-only model would then train on base64 noise)."""
    if has_images(messages):
        raise _text_only_error(tokenizer, messages)
    if tools:
        messages = describe_ignored_tools(tokenizer, messages, tools)
    template = _fast_template(tokenizer, tools) if runtime.options().fast_chat_templates else None
    if template is not None and _plain_messages(messages):
        plain = [_without_none(message) for message in messages]
        return template.render(
            messages=plain,
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **tokenizer.special_tokens_map,
        )
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
    )


def _text_only_error(tokenizer: Any, messages: list[dict]) -> ImageError:
    name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    index = next(i for i, m in enumerate(messages) if has_images([m]))
    return ImageError(
        f"messages[{index}] holds an image, but the model {name!r} is a text-only model (its prompts are "
        f"rendered by a tokenizer's chat template): {VLM_NEEDED} (to evaluate one, serve it behind an "
        "OpenAI-compatible server and give rllm's client no tokenizer)"
    )


# A tool no real conversation has: whether it shows up in a render says whether the template prints `tools`.
_PROBE_NAME = "rllm_probe_tool_5f3c9a"
_PROBE_FUNCTION = {"name": _PROBE_NAME, "description": "rllm probe", "parameters": {"type": "object", "properties": {}}}
_PROBE_TOOL = {"type": "function", "function": _PROBE_FUNCTION}
_renders_tools: dict[tuple, bool] = {}  # (renderer class, template, starts with a system message) -> answer
_warned: set[tuple] = set()  # (model name, template) already warned about
_warn_lock = threading.Lock()


def describe_ignored_tools(tokenizer: Any, messages: list[dict], tools: list[Any]) -> list[dict]:
    """`messages` to render with `tools`: unchanged when the chat template prints the tools itself; otherwise with the
    tools described in the system message (`rllm.tools.parsing.tools_system_prompt`: their JSON schemas and the
    `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` format that `parse_tool_calls` reads back).

    Choices: an existing system message keeps its text and gets the description appended after a blank line (an
    agent's instructions stay first); without one, a system message holding only the description is added (so a
    template's default system prompt, e.g. SmolLM2's "You are a helpful AI assistant named SmolLM", is replaced,
    as it is by any system message). The first time per model, a `UserWarning` says so. A template that ignores
    tools but writes calls in another format (Mistral's `[TOOL_CALLS]`, Llama 3's `<|python_tag|>`) is refused
    (`RllmError`): rllm could not parse the calls the model was told to write. `tokenizer` may also be a VLM's
    processor (anything with `apply_chat_template` and `chat_template`). Idempotent: messages whose system message
    already ends with the description are returned as they are, so the messages a step records (the description
    included) render with their tools to the prompt that was sampled from."""
    first = messages[0] if messages else None
    has_system = isinstance(first, dict) and first.get("role") == "system"
    if chat_template_renders_tools(tokenizer, with_system=has_system):
        return messages
    from rllm.tools.parsing import detect_family, tools_system_prompt

    name = _model_name(tokenizer)
    family = detect_family(tokenizer)
    if family != "hermes":
        raise RllmError(
            f"the chat template of {name!r} ignores `tools` and writes tool calls in the {family} format, which rllm "
            "cannot parse (it parses <tool_call> JSON): describe the tools in your system prompt yourself and parse "
            "the replies, or use a model whose template renders tools"
        )
    description = tools_system_prompt([_tool_schema(tool) for tool in tools])
    if has_system and _describes(first.get("content"), description):
        return messages  # already described (messages a step recorded, rendered again): the render is the same
    _warn_once(tokenizer, name, len(tools))
    if not has_system:
        return [{"role": "system", "content": description}, *messages]
    content = first.get("content")
    if isinstance(content, list):  # content parts: the description is one more text part
        content = [*content, {"type": "text", "text": "\n\n" + description}]
    else:
        content = f"{content}\n\n{description}" if content else description
    return [{**first, "content": content}, *messages[1:]]


def _describes(content: Any, description: str) -> bool:
    """Whether a system message's content already ends with the tools' description (`describe_ignored_tools`)."""
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        return content[-1].get("text") == "\n\n" + description
    return isinstance(content, str) and content.endswith(description)


def chat_template_renders_tools(tokenizer: Any, *, with_system: bool = False) -> bool:
    """Whether the chat template prints the `tools` it is given, for conversations that start (`with_system`) or do
    not start with a system message (a template may print them in the system block only). Found by rendering a
    probe tool with a unique name, once per template (cached); a template that fails on the probe falls back to
    `rllm.tools.parsing.template_renders_tools` (does the template text mention `tools`)."""
    key = (type(tokenizer), _template_key(tokenizer), with_system)
    answer = _renders_tools.get(key)
    if answer is None:
        answer = _renders_tools[key] = _probe_renders_tools(tokenizer, with_system)
    return answer


def _probe_renders_tools(tokenizer: Any, with_system: bool) -> bool:
    probe = [{"role": "user", "content": "rllm probe"}]
    if with_system:
        probe.insert(0, {"role": "system", "content": "rllm probe"})
    try:
        text = tokenizer.apply_chat_template(probe, tools=[_PROBE_TOOL], add_generation_prompt=True, tokenize=False)
    except Exception:  # a template with rules of its own: judge by its text
        from rllm.tools.parsing import template_renders_tools

        return template_renders_tools(tokenizer)
    return _PROBE_NAME in str(text)


def _template_key(tokenizer: Any) -> Any:
    template = getattr(tokenizer, "chat_template", None)
    return template if template is None or isinstance(template, str) else repr(template)


def _model_name(tokenizer: Any) -> str:
    inner = getattr(tokenizer, "tokenizer", None)  # a processor names its model through its tokenizer
    name = getattr(tokenizer, "name_or_path", None) or getattr(inner, "name_or_path", None)
    return str(name) if name else type(tokenizer).__name__


def _warn_once(tokenizer: Any, name: str, count: int) -> None:
    key = (name, _template_key(tokenizer))
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    tools = "the tool" if count == 1 else f"the {count} tools"
    message = (
        f"the chat template of {name!r} ignores `tools`, so rllm put {tools} in the system message, with the "
        "<tool_call> JSON call format rllm parses (docs/agents/tools-mcp.md)"
    )
    warnings.warn(message, UserWarning, stacklevel=4)


def _tool_schema(tool: Any) -> dict:
    """A tool as its JSON schema; a Python function (which `apply_chat_template` also takes) is converted the way
    transformers converts it."""
    if isinstance(tool, dict):
        return tool
    from transformers.utils import get_json_schema

    return get_json_schema(tool)


_REASONING_KEYS = frozenset({"reasoning_content", "thinking", "reasoning"})  # transformers aliases these: slow path
_PLAIN_SCALARS = (str, int, float, bool, type(None))


def _plain_messages(messages: list[dict]) -> bool:
    """Dict messages whose values are exact JSON types (what transformers' conversions would leave unchanged)."""
    for message in messages:
        if type(message) is not dict or not _REASONING_KEYS.isdisjoint(message):
            return False
        for value in message.values():
            if type(value) is not str and not _is_plain(value):  # most values are text: no call for those
                return False
    return True


def _without_none(message: dict) -> dict:
    """The message without its None-valued keys, as transformers passes it to the template (the same dict when it
    has none: no copy on every call of every rollout)."""
    if None not in message.values():
        return message
    return {key: value for key, value in message.items() if value is not None}


def _is_plain(value: Any) -> bool:
    if type(value) in _PLAIN_SCALARS:
        return True
    if type(value) is list:
        return all(map(_is_plain, value))
    if type(value) is dict:
        return all(type(k) is str for k in value) and all(map(_is_plain, value.values()))
    return False


def _fast_template(tokenizer: Any, tools: list[dict] | None) -> Any:
    """transformers' compiled template (`_flat_template`) for a transformers tokenizer whose chat template is one
    string, or None (dict of named templates, no template, tools that are not plain schemas, another tokenizer
    class). Nothing is stored on the tokenizer: it must stay copyable and picklable."""
    template = getattr(tokenizer, "chat_template", None)
    if type(template) is not str or (tools is not None and not _is_plain(tools)):
        return None
    if _template_compiler() is None:
        return None
    from transformers import PreTrainedTokenizerBase

    # only transformers' own tokenizers: others (fakes, wrappers) may render their template another way
    return _flat_template(template) if isinstance(tokenizer, PreTrainedTokenizerBase) else None


# transformers' private per-call conversions that `_plain_messages` and `_without_none` mirror (None-valued keys
# dropped, reasoning fields aliased, plain data): they exist from transformers 5.11 on
_MIRRORED_CONVERSIONS = ("_alias_reasoning_fields", "_normalize_chat_messages", "_plain_template_data")


@functools.cache
def _template_compiler() -> Any:
    """transformers' private `chat_template_utils._compile_jinja_template` (source -> its cached compiled template),
    or None where transformers lacks it or the conversions mirrored here: an older or newer one renders its own way,
    so it keeps `apply_chat_template`. The one place these private names are read; a unit test fails on a
    transformers without them."""
    try:
        from transformers.utils import chat_template_utils
    except ImportError:
        return None
    if not all(hasattr(chat_template_utils, name) for name in _MIRRORED_CONVERSIONS):
        return None
    return getattr(chat_template_utils, "_compile_jinja_template", None)


@functools.lru_cache(maxsize=64)
def _flat_template(source: str) -> Any:
    """transformers' compiled template (the same sandboxed environment, filters and globals), made again with its
    globals in one plain dict. Jinja copies a template's globals into the context of every render; transformers'
    template holds them as a ChainMap (its own over the environment's), and copying that took a fifth of a short
    chat's render (4 of 21 us, SmolLM2's template on 2 cores). The same values in one dict copy at C speed. They
    cannot go stale: transformers sets them before it compiles, and never after."""
    compiled = _template_compiler()(source)
    environment = compiled.environment
    code = environment.compile(source)
    return environment.template_class.from_code(environment, code, dict(compiled.globals), None)


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

    def __init__(self, tokenizer: Any, *, tools: list[dict] | None = None, vision: Any = None) -> None:
        """`vision` (a `rllm.models.vision.VisionProcessor`) renders every prompt with the VLM's processor, images
        expanded to their placeholder tokens; a prompt then extends the last only if its images do too."""
        self.tokenizer = tokenizer
        self.tools = tools
        self.vision = vision
        self.mismatches = 0  # prompts that could not extend the previous prompt + completion
        self.breaks: Counter[str] = Counter()  # the mismatches by cause (`rllm.models.exactness.break_kind`)
        self.retokenized = 0  # prompts tokenized again from their whole text after a sampled reply
        self.tool_format_failures = 0  # prompts with tools whose template's calls do not parse back
        self.extended = False  # whether the last prompt extended the previous prompt + completion
        self.images: list[str] = []  # the last prompt's images (data URLs), in the order of their placeholders
        self._context_images: list[str] = []  # the images of the context below
        self._text: str | None = None  # the last prompt as text
        self._pending_ids: list[int] | None = None  # the last prompt, until its output is recorded
        self._context_ids: list[int] | None = None  # last prompt + its sampled completion
        self._context_text: str | None = None  # the same as text: the last prompt's text + the reply as sampled
        self._messages: list[dict] = []  # the last prompt's messages, to tell why a later one did not extend
        self._reply = ""  # the last reply's sampled text

    def render(self, messages: list[dict]) -> list[int]:
        if self.vision is not None:
            text, images = self.vision.render_text(messages, tools=self.tools)
        else:
            text, images = render_text(self.tokenizer, messages, tools=self.tools), []
        context = self._context_ids
        # The same placeholder ids with other images behind them are another prompt.
        same_images = images[: len(self._context_images)] == self._context_images
        if context is not None and same_images and text.startswith(self._context_text):
            ids = context + encode_text(self.tokenizer, text[len(self._context_text) :])
            self.extended = True
        else:
            ids = encode_text(self.tokenizer, text)
            self.extended = context is not None and same_images and ids[: len(context)] == context
            self.retokenized += context is not None  # the sampled reply went back in as text, not as its ids
        self.images = images
        if context is not None and not self.extended:
            self.mismatches += 1
            self.breaks[break_kind(self._render, self._messages, messages, self._context_text, self._reply)] += 1
        if self.tools and not tool_format_round_trips(self.vision.processor if self.vision else self.tokenizer):
            self.tool_format_failures += 1
        self._messages = list(messages)
        self._text = text
        self._pending_ids = ids
        return ids

    def _render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        if self.vision is not None:
            return self.vision.render_text(messages, tools=self.tools, add_generation_prompt=add_generation_prompt)[0]
        return render_text(self.tokenizer, messages, tools=self.tools, add_generation_prompt=add_generation_prompt)

    def record(self, output: ModelOutput) -> None:
        """Remember what was sampled for the last rendered prompt."""
        if self._pending_ids is None:
            raise RuntimeError("ChatRenderer.record() called before render()")
        if output.completion_ids is None:
            raise ValueError("ChatRenderer needs completion ids; this model client returned none")
        prompt = output.prompt_ids if output.prompt_ids is not None else self._pending_ids
        self._context_ids = [*prompt, *output.completion_ids]
        self._context_images = self.images
        # Decoded with special tokens, so a sampled end-of-turn token must be the one the template prints.
        self._context_text = self._text + self.tokenizer.decode(output.completion_ids, skip_special_tokens=False)
        self._reply = output.text
        self._pending_ids = None
