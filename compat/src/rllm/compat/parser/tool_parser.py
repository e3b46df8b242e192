"""rLLM v0.2's tool-call parsers (`rllm.parser.tool_parser`): text in, `ToolCall`s out, and the system-prompt text
that tells a model the format.

- `QwenToolParser`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Qwen2.5 / Hermes). This is
  rllm's own "hermes" format, so it parses with `rllm.tools.parsing.parse_tool_calls`. A block that is not valid JSON
  or has no closing tag is skipped, as in rLLM; where rLLM drops a call rllm's parser is lenient about (no
  "arguments": no arguments; "arguments" as a JSON string, or spelled "parameters"), the call is kept. The prompt is
  the one Qwen2.5's chat template writes (`rllm.tools.parsing.tools_system_prompt`).
- `R1ToolParser`: DeepSeek-R1's tool-call tokens, `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` then the arguments
  in a ```json fenced block, then `<｜tool▁call▁end｜>`. A block without the "function" prefix, the json fence, valid
  JSON arguments (an object) or its end token is skipped.
"""

from __future__ import annotations

import json
import re
import sys
from abc import ABC, abstractmethod
from typing import Any

from rllm.compat.tools.tool_base import ToolCall
from rllm.errors import RllmError

__all__ = ["QwenToolParser", "R1ToolParser", "ToolParser"]


class ToolParser(ABC):
    """Parses a reply's tool calls (`parse`) and describes the format to the model (`get_tool_prompt`)."""

    @abstractmethod
    def parse(self, model_response: str) -> list[ToolCall]:
        """The tool calls in `model_response`, in order; malformed ones are skipped."""

    @abstractmethod
    def get_tool_prompt(self, tools_schema: str) -> str:
        """The text that describes the tools (`tools_schema`, JSON text) and the call format."""

    @classmethod
    def get_parser(cls, tokenizer: Any) -> ToolParser:
        """The parser for a tokenizer's model family: R1's for DeepSeek-distilled Llama tokenizers, Qwen's for Qwen
        (and Qwen-based R2E/DeepSWE) models."""
        model = str(getattr(tokenizer, "name_or_path", "")).lower()
        tokenizer_class = type(tokenizer).__name__.lower()
        if any(name in model for name in ("deepseek", "deepscaler", "deepcoder")) and "llama" in tokenizer_class:
            return R1ToolParser()
        if any(name in model for name in ("qwen", "r2e", "deepswe")) or "qwen" in tokenizer_class:
            return QwenToolParser()
        raise RllmError(
            f"no tool parser for {getattr(tokenizer, 'name_or_path', tokenizer)!r}: pick one by name with "
            'rllm.parser.get_tool_parser("qwen") (<tool_call> JSON blocks) or get_tool_parser("r1")'
        )


class QwenToolParser(ToolParser):
    """`<tool_call>` JSON blocks, parsed by rllm's hermes parser."""

    def __init__(self) -> None:
        self.tool_call_begin = "<tool_call>"
        self.tool_call_end = "</tool_call>"
        self.tool_output_begin = "<tool_response>"
        self.tool_output_end = "</tool_response>"

    def parse(self, model_response: str) -> list[ToolCall]:
        from rllm.tools.parsing import parse_tool_calls

        text = model_response or ""
        parsed = parse_tool_calls(text, family="hermes", max_calls=sys.maxsize, max_chars=max(20_000, len(text)))
        return [ToolCall(name=c.name, arguments=c.arguments) for c in parsed.calls if isinstance(c.arguments, dict)]

    def get_tool_prompt(self, tools_schema: str) -> str:
        from rllm.tools.parsing import tools_system_prompt

        return "\n\n" + tools_system_prompt([], listing="\n" + tools_schema)


_R1_FENCE = re.compile(r"```json(.*?)```", re.S)


class R1ToolParser(ToolParser):
    """DeepSeek-R1's tool-call tokens."""

    def __init__(self) -> None:
        self.tool_calls_begin = "<｜tool▁calls▁begin｜>"
        self.tool_calls_end = "<｜tool▁calls▁end｜>"
        self.tool_call_begin = "<｜tool▁call▁begin｜>"
        self.tool_call_end = "<｜tool▁call▁end｜>"
        self.tool_sep = "<｜tool▁sep｜>"
        self.tool_output_begin = "<｜tool▁response▁begin｜>"
        self.tool_output_end = "<｜tool▁response▁end｜>"

    def parse(self, model_response: str) -> list[ToolCall]:
        text = model_response or ""
        calls: list[ToolCall] = []
        position = 0
        while (begin := text.find(self.tool_call_begin, position)) != -1:
            body_start = begin + len(self.tool_call_begin)
            end = text.find(self.tool_call_end, body_start)
            if end == -1:  # cut off before its end token: not a call
                break
            call = self._call(text[body_start:end])
            if call is not None:
                calls.append(call)
            position = end + len(self.tool_call_end)
        return calls

    def parse_r1_tool_calls(self, text: str) -> list[dict]:
        """rLLM's name for `parse` giving dicts."""
        return [call.to_dict() for call in self.parse(text)]

    def _call(self, body: str) -> ToolCall | None:
        prefix = "function" + self.tool_sep
        start = body.find(prefix)
        if start == -1:
            return None
        name = body[start + len(prefix) :].split("\n", 1)[0].strip()
        fence = _R1_FENCE.search(body, start + len(prefix))
        if not name or fence is None:
            return None
        try:
            arguments = json.loads(fence.group(1))
        except ValueError:
            return None
        return ToolCall(name=name, arguments=arguments) if isinstance(arguments, dict) else None

    def get_tool_prompt(self, tools_schema: str) -> str:
        return (
            "\n# Tools\n\nThese functions are available; call any of them when it helps with the user's request.\n"
            f"<tools>\n{tools_schema}\n</tools>\n\n"
            "To call functions, write them in this format (one call block per call):\n\n"
            f"{self.tool_calls_begin}\n{self.tool_call_begin}function{self.tool_sep}<function name>\n"
            '```json\n{"<argument>": <value>, ...}\n```\n'
            f"{self.tool_call_end}\n{self.tool_calls_end}\n"
        )
