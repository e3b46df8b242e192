"""Tool-call parsing: well-formed Hermes calls, a deterministic fuzz corpus of malformed ones (each must be classified,
none may raise), large inputs, and the shipped chat templates (family detection, tool rendering)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from rllm.tools import ToolRegistry, calculator, python_tool
from rllm.tools.parsing import (
    ERROR_KINDS,
    detect_family,
    parse_tool_calls,
    template_renders_tools,
    tools_system_prompt,
)

VALID_CALLS = [
    {"name": "calculator", "arguments": {"expression": "(3 + 4) * 2"}},
    {"name": "search", "arguments": {"query": "capital of France", "k": 2}},
    {"name": "python", "arguments": {"code": "print('hi')\nfor i in range(3):\n    print(i)"}},
    {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
    {"name": "no_args", "arguments": {}},
    {"name": "nested", "arguments": {"a": {"b": [1, 2, {"c": None}]}, "d": True}},
    {"name": "tool.with-dots_1", "arguments": {"x": 1.5, "y": -3}},
    {"name": "echo", "arguments": {"text": 'quotes " and \\ backslashes'}},
    {"name": "emoji", "arguments": {"s": "😀 ✓ \u2028"}},
    {"name": "list_args", "arguments": {"items": ["a", "b", "c"], "flag": False}},
]


def wrap(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def dumps(call) -> str:
    return json.dumps(call, ensure_ascii=False)


# ---- well-formed ----


def test_single_hermes_call_and_content_outside():
    text = "Let me compute that.\n" + wrap(dumps(VALID_CALLS[0]))
    parsed = parse_tool_calls(text)
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == [("calculator", {"expression": "(3 + 4) * 2"})]
    assert parsed.calls[0].id == "call_0"
    assert parsed.content == "Let me compute that."


def test_every_valid_call_round_trips_and_multiple_calls_keep_their_order():
    text = "before " + " middle ".join(wrap(dumps(c)) for c in VALID_CALLS[:8]) + " after"
    parsed = parse_tool_calls(text)
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c["name"], c["arguments"]) for c in VALID_CALLS[:8]]
    assert parsed.content == "before  middle  middle  middle  middle  middle  middle  middle  after"
    for call in VALID_CALLS:
        assert parse_tool_calls(wrap(dumps(call))).calls[0].arguments == call["arguments"]


def test_arguments_as_json_string_parameters_alias_and_openai_wrapper():
    as_string = wrap(json.dumps({"name": "calculator", "arguments": json.dumps({"expression": "1+1"})}))
    alias = wrap(json.dumps({"name": "calculator", "parameters": {"expression": "2+2"}}))
    wrapper = wrap(
        json.dumps({"type": "function", "function": {"name": "calculator", "arguments": {"expression": "3"}}})
    )
    no_args = wrap(json.dumps({"name": "no_args"})) + wrap(json.dumps({"name": "no_args", "arguments": None}))
    parsed = parse_tool_calls(as_string + alias + wrapper + no_args)
    assert parsed.errors == []
    assert [c.arguments for c in parsed.calls] == [
        {"expression": "1+1"},
        {"expression": "2+2"},
        {"expression": "3"},
        {},
        {},
    ]


def test_text_without_calls_is_all_content():
    parsed = parse_tool_calls('  The answer is 42. {"name": "x"} is just JSON.  ')
    assert parsed.calls == [] and parsed.errors == []
    assert parsed.content == 'The answer is 42. {"name": "x"} is just JSON.'


def test_unclosed_last_call_is_accepted_when_a_stop_string_ate_the_closing_tag():
    text = "<tool_call>\n" + dumps(VALID_CALLS[0]) + "\n"
    assert [e.kind for e in parse_tool_calls(text).errors] == ["truncated"]
    relaxed = parse_tool_calls(text, require_close=False)
    assert relaxed.errors == [] and relaxed.calls[0].name == "calculator"


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="not supported"):
        parse_tool_calls("", family="llama3")


# ---- fuzz corpus of malformed calls ----
# 427 cases; histogram of the first error's kind: truncated 220, invalid_json 157, bad_name 15, not_an_object 12,
# bad_arguments 10, unmatched_close 4, missing_name 3, too_large 3, too_many 3 (a fourth too_many case reports its
# first eight broken blocks first). `test_fuzz_corpus_histogram` re-derives it: it fails if the corpus changes size
# or a kind goes unexercised.

TRUNC = {"truncated"}
JSON_OR_TRUNC = {"truncated", "invalid_json"}


def malformed_corpus() -> list[tuple[str, str, set[str]]]:
    """(label, text, kinds any one of which the parser must report). Every input is malformed by construction."""
    rng = random.Random(1234)
    cases: list[tuple[str, str, set[str]]] = []
    for i, call in enumerate(VALID_CALLS):
        body = dumps(call)
        block = wrap(body)
        # the reply cut anywhere after the opening tag (max_tokens ran out)
        for cut in sorted({len("<tool_call>"), *rng.sample(range(len("<tool_call>"), len(block) - 1), 7)}):
            cases.append((f"cut-reply-{i}-{cut}", "prefix " + block[:cut], TRUNC))
        # the JSON cut inside closed tags
        for cut in sorted(rng.sample(range(1, len(body) - 1), 6)):
            cases.append((f"cut-json-{i}-{cut}", wrap(body[:cut]), JSON_OR_TRUNC))
        cases += [
            (f"drop-first-brace-{i}", wrap(body[1:]), {"invalid_json"}),
            (f"drop-last-brace-{i}", wrap(body[:-1]), TRUNC),
            (f"extra-close-brace-{i}", wrap(body + "}"), {"invalid_json"}),
            (f"extra-open-brace-{i}", wrap("{" + body), {"invalid_json"}),
            (f"drop-first-quote-{i}", wrap(body.replace('"', "", 1)), {"invalid_json"}),
            (f"python-repr-{i}", wrap(repr(call)), {"invalid_json"}),
            (f"two-objects-{i}", wrap(body + " " + body), {"invalid_json"}),
            (f"trailing-comma-{i}", wrap(body[:-1] + ", }"), {"invalid_json"}),
            (f"missing-close-tag-{i}", "<tool_call>\n" + body, TRUNC),
            (f"misspelled-close-tag-{i}", "<tool_call>\n" + body + "\n</tool_cal>", TRUNC),
            (f"nested-open-tag-{i}", "<tool_call>" + block, TRUNC),
        ]
        if i < 3:
            cases.append((f"missing-open-tag-{i}", body + "\n</tool_call>", {"unmatched_close"}))
    for name in [1, 2.5, None, [], {}, True, "", "has space", "x" * 200, "ünïcode", "../etc/passwd", "a\nb", "<b>"]:
        cases.append((f"bad-name-{name!r:.20}", wrap(json.dumps({"name": name, "arguments": {}})), {"bad_name"}))
    for obj in [{"arguments": {"x": 1}}, {"tool": "calculator", "arguments": {}}, {}]:
        cases.append((f"missing-name-{obj}", wrap(json.dumps(obj)), {"missing_name"}))
    for args in [[1, 2], 5, True, "not json", "[1]", "3", '"s"', "{bad", 1.5]:
        cases.append(
            (f"bad-args-{args!r}", wrap(json.dumps({"name": "calculator", "arguments": args})), {"bad_arguments"})
        )
    cases.append(("bad-parameters-alias", wrap(json.dumps({"name": "a", "parameters": [1]})), {"bad_arguments"}))
    for value in [[VALID_CALLS[0]], 42, "calculator", None, True, [], -1.5e300, "", [[]], 0, False, "{}"]:
        cases.append((f"not-object-{value!r:.20}", wrap(json.dumps(value)), {"not_an_object"}))
    big = {"name": "echo", "arguments": {"text": "a" * 100_000}}
    cases += [
        ("100kB-arguments", wrap(json.dumps(big)), {"too_large"}),
        ("100kB-garbage", wrap("x" * 100_000), {"too_large"}),
        ("100kB-arguments-unclosed", "<tool_call>" + json.dumps(big), TRUNC),
        ("deep-nesting-over-limit", wrap("[" * 30_000), {"too_large"}),
        ("nest-5000", wrap("[" * 5000 + "]" * 5000), {"invalid_json"}),
        (
            "nest-2000-in-args",
            wrap('{"name": "a", "arguments": ' + '{"a": ' * 2000 + "1" + "}" * 2001),
            {"invalid_json"},
        ),
        ("5000-digit-int", wrap('{"name": "a", "arguments": {"x": ' + "9" * 5000 + "}}"), {"invalid_json"}),
        ("empty-block", wrap(""), {"invalid_json"}),
        ("whitespace-block", "<tool_call>   \n\t </tool_call>", {"invalid_json"}),
        ("open-tag-only", "<tool_call>", TRUNC),
        ("open-tag-at-end", "Sure, calling now: <tool_call>", TRUNC),
        ("nan-literal-name", wrap('{"name": NaN}'), {"bad_name"}),
        ("lone-surrogate", wrap('{"name": "\\ud800", "arguments": {}}'), {"bad_name"}),
        ("stray-close-tags", "a</tool_call>b</tool_call>c", {"unmatched_close"}),
    ]
    many = "".join(wrap(dumps(VALID_CALLS[k % 10])) for k in range(20))
    cases += [
        ("20-calls", many, {"too_many"}),
        ("9-calls", "".join(wrap(dumps(VALID_CALLS[0])) for _ in range(9)), {"too_many"}),
        ("20-broken-calls", "".join(wrap("{") for _ in range(20)), {"too_many"}),
        ("3-calls-max-2", "".join(wrap(dumps(VALID_CALLS[0])) for _ in range(3)), {"too_many"}),
    ]
    for k in range(40):  # unicode garbage in a block
        garbage = "".join(chr(rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0xA0, 0x2FFF)])) for _ in range(60))
        cases.append((f"unicode-garbage-{k}", wrap("{" + garbage), {"invalid_json", "truncated"}))
    for k in range(40):  # random bytes, decoded with replacement characters
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).decode("utf-8", errors="replace")
        cases.append((f"random-bytes-{k}", wrap("{" + junk), {"invalid_json", "truncated"}))
        cases.append((f"random-bytes-unclosed-{k}", "<tool_call>" + junk.replace("</tool_call>", ""), TRUNC))
    return cases


CORPUS = malformed_corpus()


def _parse(label: str, text: str):
    return parse_tool_calls(text, max_calls=2 if label == "3-calls-max-2" else 8)


@pytest.mark.parametrize("label,text,expected", CORPUS, ids=[c[0] for c in CORPUS])
def test_malformed_call_is_classified(label, text, expected):
    parsed = _parse(label, text)
    assert parsed.errors, f"{label}: no error reported for {text[:200]!r}"
    assert {e.kind for e in parsed.errors} <= ERROR_KINDS
    assert {e.kind for e in parsed.errors} & expected, f"{label}: {[(e.kind, e.message) for e in parsed.errors]}"
    for error in parsed.errors:
        assert len(error.raw) <= 500 and error.message
    for call in parsed.calls:  # what did parse is well-formed
        assert isinstance(call.arguments, dict) and call.name


def test_fuzz_corpus_histogram():
    assert len(CORPUS) >= 200
    histogram = Counter(_parse(label, text).errors[0].kind for label, text, _ in CORPUS)
    assert set(histogram) == ERROR_KINDS, histogram
    assert len(CORPUS) == 427, (len(CORPUS), histogram)


def test_random_tag_soup_never_raises_and_yields_only_valid_calls():
    rng = random.Random(7)
    atoms = [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        "]",
        '"',
        ":",
        ",",
        '"name"',
        '"arguments"',
        '"parameters"',
        '"calculator"',
        "1",
        "null",
        "true",
        "\n",
        " ",
        "text",
        "é",
        "\\",
        "<tool_",
        "call>",
        '{"x": 1}',
    ]
    for _ in range(2000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randrange(0, 60)))
        parsed = parse_tool_calls(text, max_calls=rng.choice([0, 1, 8]))
        assert {e.kind for e in parsed.errors} <= ERROR_KINDS
        assert all(isinstance(c.arguments, dict) and c.name for c in parsed.calls)
        assert isinstance(parsed.content, str)


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>" * 100_000,
        "</tool_call>" * 100_000,
        "<tool_call>{" * 100_000,
        "<tool_call></tool_call>" * 50_000,
        "<tool_call>" + "[" * 1_000_000,
        wrap(dumps({"name": "echo", "arguments": {"text": "a" * 1_000_000}})),
        "plain text " * 100_000,
        "<tool_call>" + "x" * 1_000_000 + "</tool_call>" * 2,
    ],
    ids=["opens", "closes", "open-brace", "empty-blocks", "open-brackets", "one-huge-call", "plain", "huge-garbage"],
)
def test_a_megabyte_reply_parses(text):
    parsed = parse_tool_calls(text)  # linear scanning: well under a second each
    assert len(parsed.errors) <= 10


# ---- shipped templates ----


def test_detect_family_of_shipped_tokenizers(qwen_tokenizer, smollm2_tokenizer):
    assert detect_family(qwen_tokenizer) == "hermes"
    assert template_renders_tools(qwen_tokenizer)
    # SmolLM2's template ignores tools=: hermes is the fallback, with the instructions in the system prompt.
    assert detect_family(smollm2_tokenizer) == "hermes"
    assert not template_renders_tools(smollm2_tokenizer)
    assert detect_family("{{ '[TOOL_CALLS]' }}") == "mistral"
    assert detect_family("<|python_tag|>") == "llama3"
    assert detect_family(None) == "hermes"


def _registry():
    from rllm.tools import DocumentSearch

    return ToolRegistry([calculator, python_tool, DocumentSearch([{"id": "1", "title": "t", "text": "x"}])])


def test_qwen_template_renders_registry_schemas(qwen_tokenizer):
    registry = _registry()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 6*7?"}]
    text = qwen_tokenizer.apply_chat_template(messages, tools=registry.schemas(), tokenize=False)
    for name in registry.names():
        assert f'"name": "{name}"' in text
    assert "<tool_call>" in text and "</tool_call>" in text and "<tools>" in text
    # our system prompt for templates without tool support is word for word what Qwen's template writes
    assert tools_system_prompt(registry.schemas(), "Be brief.") in text


def test_qwen_renders_a_parsed_call_back_as_the_same_block(qwen_tokenizer):
    parsed = parse_tool_calls(wrap(dumps(VALID_CALLS[0])))
    call = parsed.calls[0]
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": call.name, "arguments": call.arguments}}],
        },
    ]
    text = qwen_tokenizer.apply_chat_template(messages, tools=_registry().schemas(), tokenize=False)
    reparsed = parse_tool_calls(text.split("<|im_start|>assistant")[-1])
    assert [(c.name, c.arguments) for c in reparsed.calls] == [(call.name, call.arguments)]


def test_smollm2_ignores_tools_so_the_system_prompt_carries_them(smollm2_tokenizer):
    schemas = _registry().schemas()
    messages = [{"role": "user", "content": "hi"}]
    with_tools = smollm2_tokenizer.apply_chat_template(messages, tools=schemas, tokenize=False)
    assert with_tools == smollm2_tokenizer.apply_chat_template(messages, tokenize=False)
    system = [{"role": "system", "content": tools_system_prompt(schemas)}, *messages]
    assert '"name": "calculator"' in smollm2_tokenizer.apply_chat_template(system, tokenize=False)
