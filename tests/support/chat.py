"""Chat inputs the template tests share: a tool spec to render."""

from __future__ import annotations

# One function tool in the OpenAI shape, as a chat template renders a request's tools.
CALC_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate arithmetic.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]
