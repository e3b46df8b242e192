"""rLLM v0.2's chat-template parsers (`rllm.parser.chat_template_parser`), over rllm's chat rendering.

rLLM renders each model family's template by hand (Qwen, DeepSeek-Qwen, Llama); rllm renders with the tokenizer's own
chat template (`rllm.models.chat.render_text`, which also describes tools to templates that ignore them), and keeps
multi-turn prompts token-exact by rendering each turn as a delta of the last (`rllm.models.chat.ChatRenderer`). So
every class here is the same renderer under rLLM's names: `parse(messages, add_generation_prompt=False,
tools=None)` gives the template's text for the whole conversation. `is_first_msg` and `accumulate_reasoning` are
accepted and ignored (the template decides, as it does at inference). Token ids and masks for training come from
rllm's engine (`Step.prompt_ids`/`response_ids`, `rllm.training.batch`), not from these classes:
`tokenize_and_mask` and `parse_completion` raise, naming that.
"""

from __future__ import annotations

from typing import Any

from rllm.errors import RllmError

__all__ = [
    "ChatTemplateParser",
    "DeepseekQwenChatTemplateParser",
    "LlamaChatTemplateParser",
    "QwenChatTemplateParser",
]


class ChatTemplateParser:
    """Renders messages with the tokenizer's chat template (rllm's `render_text`)."""

    def __init__(self, tokenizer: Any, processor: Any = None, disable_thinking: bool = False) -> None:
        self.tokenizer = tokenizer
        self.processor = processor
        self.disable_thinking = disable_thinking
        self.generation_prompt = self._generation_prompt()

    @classmethod
    def get_parser(cls, tokenizer: Any, processor: Any = None, disable_thinking: bool = False) -> ChatTemplateParser:
        return cls(tokenizer, processor=processor, disable_thinking=disable_thinking)

    def parse(
        self, messages: list[dict], add_generation_prompt: bool = False, is_first_msg: bool = False, **kwargs: Any
    ) -> str:
        from rllm.models.chat import render_text

        tools = [_schema(tool) for tool in kwargs.get("tools") or []] or None
        if self.processor is not None:
            return self.processor.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        return render_text(self.tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt)

    def verify_equivalence(self, messages: list[dict], verbose: bool = True) -> bool:
        """Whether rendering the messages together equals rendering each alone, concatenated."""
        together = self.parse(messages)
        equivalent = together == "".join(self.parse([message]) for message in messages)
        if verbose and not equivalent:
            raise AssertionError("rendering the messages together differs from rendering them one by one")
        return equivalent

    def parse_completion(self, completion_ids: list[int]) -> dict:
        raise RllmError(
            "ChatTemplateParser.parse_completion is not available in rllm: the engine parses each reply into "
            "ModelOutput.content/reasoning/tool_calls (rllm.types.ModelOutput)"
        )

    def tokenize_and_mask(self, messages: list[dict]) -> Any:
        raise RllmError(
            "ChatTemplateParser.tokenize_and_mask is not available in rllm: training rows and their masks come from "
            "the sampled token ids (rllm.training.batch.build_rows over the episodes' steps)"
        )

    tokenize_and_mask_cumulative = tokenize_and_mask

    def _generation_prompt(self) -> str:
        """What the template adds to open the assistant's turn."""
        messages = [{"role": "assistant", "content": ""}]
        try:
            with_prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            without = self.tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
        except Exception:  # a template that refuses a lone assistant message: no generation prompt to report
            return ""
        return with_prompt[len(without) :]


class QwenChatTemplateParser(ChatTemplateParser):
    """rLLM's name for Qwen models; rendering is the tokenizer's template."""


class DeepseekQwenChatTemplateParser(ChatTemplateParser):
    """rLLM's name for DeepSeek-R1-distilled Qwen models; rendering is the tokenizer's template."""


class LlamaChatTemplateParser(ChatTemplateParser):
    """rLLM's name for Llama models; rendering is the tokenizer's template."""


def _schema(tool: Any) -> Any:
    """An rLLM `Tool` as its JSON schema; dicts (and functions, which the template converts) as they are."""
    schema = getattr(tool, "json", None)
    return schema if isinstance(schema, dict) else tool
