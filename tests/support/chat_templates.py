"""Chat templates of eight model families, written for the token-exactness golden tests (tests/contract/
test_exactness_report.py), and two broken ones.

Only the templates are the families': each is written here from the family's published format (its turn markers,
where it puts tools and tool calls, what it strips or trims), in compact Jinja, and is applied over the cached
Qwen2.5 tokenizer with the family's markers added as special tokens (`FamilyTokenizer`), because no other
vocabulary can be downloaded here. So the tests check what a template does to token exactness (does a turn extend
the sampled one, does a reply print back, do its tool calls parse), not a family's vocabulary: Mistral's real
template puts a space before a reply that SentencePiece's first token carries, which a BPE vocabulary does not, so
the fixture leaves the space out.

The templates hold no whitespace control (`{%-`): their source has no layout whitespace, and every newline in it is
one the family prints (one right after a tag is written `{{ '\n' }}`: transformers renders with `trim_blocks`, which
drops it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

_CHATML_TOOLS = (
    "{% if tools %}<|im_start|>system\n{{ messages[0].content + '\n\n' if messages[0].role == 'system' else '' }}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n<tools>"
    "{% for tool in tools %}{{ '\n' }}{{ tool | tojson }}{% endfor %}{{ '\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{"name": '
    '<function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
)

# Qwen2.5: ChatML; tools in the system turn; each call a <tool_call> JSON block; tool results as <tool_response>
# blocks in one user turn.
QWEN2_5 = (
    _CHATML_TOOLS + "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content or '' }}"
    "{% for call in m.tool_calls or [] %}{% set f = call.function if call.function is defined else call %}"
    "{{ '\n' if m.content or not loop.first else '' }}"
    '<tool_call>\n{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\n' }}<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen3 with thinking: ChatML; an assistant turn before the last user message loses its <think> block.
QWEN3_THINKING = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}"
    "{% endfor %}"
    "{% for m in messages %}{% set content = m.content or '' %}"
    "{% if m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip('\n') %}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Llama 3: header ids around the role, content trimmed, <|eot_id|> after each turn.
LLAMA3 = (
    "<|begin_of_text|>{% for m in messages %}"
    "<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

# Mistral (v0.3 style): [INST] around user turns (the system text joins the first one), </s> after a reply; no
# generation prompt of its own (the prompt ends at [/INST]).
MISTRAL = (
    "<s>{% set system = messages[0].content if messages[0].role == 'system' else '' %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}[INST] {{ system + '\n\n' if system and loop.index0 <= 1 else '' }}"
    "{{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' %}{{ m.content }}</s>{% endif %}"
    "{% endfor %}"
)

# Gemma: <start_of_turn>user / model, content trimmed, no system role (it joins the first user turn).
GEMMA = (
    "<bos>{% set system = messages[0].content if messages[0].role == 'system' else '' %}"
    "{% for m in messages if m.role != 'system' %}"
    "{% set role = 'model' if m.role == 'assistant' else m.role %}"
    "<start_of_turn>{{ role }}\n{{ (system + '\n\n' if system and loop.first else '') + (m.content | trim) }}"
    "<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# Phi-3 / Phi-4-mini: <|role|> then the content and <|end|>.
PHI = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% else %}<|endoftext|>{% endif %}"
)

# DeepSeek-R1: <｜User｜> / <｜Assistant｜>; every earlier reply is printed without its reasoning (the text up to
# </think> is dropped).
DEEPSEEK = (
    "<｜begin▁of▁sentence｜>{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<｜User｜>{{ m.content }}"
    "{% elif m.role == 'assistant' %}{% set content = m.content or '' %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "<｜Assistant｜>{{ content }}<｜end▁of▁sentence｜>"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"
)

# Hermes 2 Pro style, parallel tool calls: several <tool_call> blocks in one reply, and their results in one `tool`
# turn of <tool_response> blocks.
HERMES_PARALLEL = (
    _CHATML_TOOLS + "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
    "{% for call in m.tool_calls %}{{ '\n' if not loop.first else '' }}"
    '<tool_call>\n{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}"
    "{% if messages[loop.index0 - 1].role != 'tool' %}<|im_start|>tool{% endif %}"
    "{{ '\n' }}<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '\n' }}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Broken on purpose: parallel calls printed as one JSON list inside a single <tool_call> tag, a format rllm's
# parser reads as no call at all (the shape of rLLM's bug where rewards fell to ~0).
LISTED_CALLS = HERMES_PARALLEL.replace(
    "{% for call in m.tool_calls %}{{ '\n' if not loop.first else '' }}"
    '<tool_call>\n{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}",
    "<tool_call>\n[{% for call in m.tool_calls %}{{ ', ' if not loop.first else '' }}"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "{% endfor %}]\n</tool_call>",
)

# Broken on purpose: Mistral's [TOOL_CALLS] format, which rllm recognises but does not parse.
MISTRAL_TOOLS = (
    "<s>{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
    "{% elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS]["
    "{% for call in m.tool_calls %}{{ ', ' if not loop.first else '' }}"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "{% endfor %}]</s>"
    "{% elif m.role == 'assistant' %}{{ m.content }}</s>{% endif %}"
    "{% endfor %}"
)


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    end_of_turn: str  # the token a reply ends with (the tokenizer's eos in the tests)
    markers: tuple[str, ...] = ()  # the family's special tokens, added to the Qwen2.5 vocabulary


FAMILIES = {
    family.name: family
    for family in (
        Family("qwen2.5", QWEN2_5, "<|im_end|>"),
        Family("qwen3_thinking", QWEN3_THINKING, "<|im_end|>"),
        Family("llama3", LLAMA3, "<|eot_id|>", ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>")),
        Family("mistral", MISTRAL, "</s>", ("<s>", "[INST]", "[/INST]")),
        Family("gemma", GEMMA, "<end_of_turn>", ("<bos>", "<start_of_turn>")),
        Family("phi", PHI, "<|end|>", ("<|system|>", "<|user|>", "<|assistant|>")),
        Family(
            "deepseek", DEEPSEEK, "<｜end▁of▁sentence｜>", ("<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>")
        ),
        Family("hermes_parallel", HERMES_PARALLEL, "<|im_end|>"),
        Family("listed_calls", LISTED_CALLS, "<|im_end|>"),
        Family("mistral_tools", MISTRAL_TOOLS, "</s>", ("<s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]")),
    )
}


def with_markers(base):
    """One copy of `base` (the Qwen2.5 tokenizer) with every family's markers and end-of-turn tokens added as special
    tokens; `FamilyTokenizer`s share it (a copy of the tokenizer takes most of a second)."""
    tokenizer = copy.deepcopy(base)
    markers = {token for family in FAMILIES.values() for token in (*family.markers, family.end_of_turn)}
    tokenizer.add_tokens(sorted(markers), special_tokens=True)
    return tokenizer


class FamilyTokenizer:
    """`shared` (from `with_markers`) speaking `family`'s template, with its end-of-turn token as the eos, so a
    scripted reply ends the way the template ends a turn. Everything else is the shared tokenizer's."""

    def __init__(self, shared, family: Family) -> None:
        self._shared = shared
        self.chat_template = family.template
        self.eos_token = family.end_of_turn
        self.eos_token_id = shared.convert_tokens_to_ids(family.end_of_turn)

    def apply_chat_template(self, messages, **kwargs):
        return self._shared.apply_chat_template(messages, chat_template=self.chat_template, **kwargs)

    def __getattr__(self, name):
        return getattr(self._shared, name)
