"""rLLM v0.2's `rllm.parser`: tool-call parsers by name (`get_tool_parser("qwen" | "r1")`) and the chat-template
parsers, which render with rllm's chat rendering (`rllm.models.chat`)."""

from __future__ import annotations

from rllm.compat._lazy import lazy_names
from rllm.compat.parser.tool_parser import QwenToolParser, R1ToolParser, ToolParser
from rllm.errors import RllmError

_CHAT_PARSERS = {
    name: "chat_template_parser"
    for name in (
        "ChatTemplateParser",
        "DeepseekQwenChatTemplateParser",
        "LlamaChatTemplateParser",
        "QwenChatTemplateParser",
    )
}
__all__ = sorted(["PARSER_REGISTRY", "QwenToolParser", "R1ToolParser", "ToolParser", "get_tool_parser", *_CHAT_PARSERS])
__getattr__ = lazy_names(__name__, _CHAT_PARSERS)  # they import transformers-facing code: on first use

PARSER_REGISTRY: dict[str, type[ToolParser]] = {"r1": R1ToolParser, "qwen": QwenToolParser}


class UnknownParserError(RllmError, ValueError):
    """A tool-parser name that `PARSER_REGISTRY` does not hold."""


def get_tool_parser(parser_name: str) -> type[ToolParser]:
    """The tool-parser class registered as `parser_name` ("qwen" or "r1")."""
    if parser_name not in PARSER_REGISTRY:
        raise UnknownParserError(
            f"Tool parser {parser_name!r} not found; the parsers are: {', '.join(PARSER_REGISTRY)} "
            "(add yours to rllm.parser.PARSER_REGISTRY)"
        )
    return PARSER_REGISTRY[parser_name]
