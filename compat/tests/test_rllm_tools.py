"""rLLM v0.2's tools, tool parsers, `ToolAgent` and `ToolEnvironment` at rLLM's import paths: a custom rLLM `Tool`
subclass (forward/json) in an episode through rLLM's engine, the parsers on their formats, the registry, and the web
tools' error."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from rllm.agents.tool_agent import ToolAgent
from rllm.environments.tools.tool_env import ToolEnvironment
from rllm.errors import InfraError, RllmError
from rllm.parser import QwenToolParser, R1ToolParser, ToolParser, get_tool_parser
from rllm.rewards.base import RewardOutput
from rllm.tools.tool_base import Tool, ToolCall, ToolOutput

CAPITALS = {"France": "Paris", "Japan": "Tokyo"}


class CapitalTool(Tool):
    """A user's rLLM tool, written as rLLM's docs write one: json + forward."""

    def __init__(self, name: str = "capital", description: str = "The capital city of a country."):
        super().__init__(name=name, description=description)

    @property
    def json(self):
        parameters = {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    def forward(self, country: str) -> ToolOutput:
        if country not in CAPITALS:
            return ToolOutput(name=self.name, error=f"unknown country {country!r}")
        return ToolOutput(name=self.name, output={"capital": CAPITALS[country]})


def boxed_match(task_info, action):
    correct = f"\\boxed{{{task_info['ground_truth']}}}" in str(action)
    return RewardOutput(reward=1.0 if correct else 0.0, is_correct=correct)


# ---- an episode through rLLM's engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def capital_server(qwen_tokenizer):
    """Calls the capital tool first, then boxes the capital the tool answered."""
    from rllm.testing.fake_openai_server import FakeOpenAIServer, FakeReply, run_fake_server

    tokenizer = qwen_tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def reply(endpoint, body):
        prompt = tokenizer.decode(body["prompt"])
        answers = re.findall(r'\{"capital": "(\w+)"\}', prompt.rsplit("<|im_start|>system", 1)[-1])
        if answers:
            text = f"The tool says so: \\boxed{{{answers[-1]}}}"
        else:
            country = re.findall(r"capital of (\w+)\?", prompt)[-1]
            call = json.dumps({"name": "capital", "arguments": {"country": country}})
            text = f"I will look it up.\n<tool_call>\n{call}\n</tool_call>"
        ids = tokenizer.encode(text, add_special_tokens=False) + [end]
        return FakeReply(text=text, token_ids=ids, logprobs=[-0.5] * len(ids))

    with run_fake_server(FakeOpenAIServer(model="policy", reply_fn=reply)) as server:
        yield server


def test_a_custom_rllm_tool_runs_through_tool_agent_and_tool_environment(capital_server, qwen_tokenizer):
    from rllm.engine.agent_execution_engine import AgentExecutionEngine

    tool_map = {"capital": CapitalTool}
    engine = AgentExecutionEngine(
        agent_class=ToolAgent,
        agent_args={"tool_map": tool_map, "parser_name": "qwen", "system_prompt": "Answer questions."},
        env_class=ToolEnvironment,
        env_args={"tool_map": tool_map, "reward_fn": boxed_match},
        engine_name="openai",
        tokenizer=qwen_tokenizer,
        sampling_params={"model": "policy"},
        rollout_engine_args={"base_url": capital_server.base_url, "api_key": "None"},
        max_response_length=256,
        max_prompt_length=2048,
        n_parallel_agents=2,
    )
    tasks = [{"question": f"What is the capital of {c}?", "ground_truth": CAPITALS[c]} for c in CAPITALS]
    results = asyncio.run(engine.execute_tasks(tasks))

    for trajectory, task in zip(results, tasks, strict=True):
        call_step, answer_step = trajectory.steps
        (call,) = call_step.action
        country = task["question"].split()[-1].rstrip("?")
        assert call["function"] == {"name": "capital", "arguments": json.dumps({"country": country})}
        expected = json.dumps({"capital": task["ground_truth"]})  # forward()'s dict output, as JSON text
        assert answer_step.observation == {"tool_outputs": {call["id"]: expected}}
        assert answer_step.chat_completions[-2] == {"role": "tool", "content": expected, "tool_call_id": call["id"]}
        assert trajectory.reward == 1.0 and answer_step.info["is_correct"] is True
        # the tools are described in the system message only: the template itself renders none
        system = call_step.chat_completions[0]["content"]
        assert system.startswith("Answer questions.") and '"name": "capital"' in system
        rendered = qwen_tokenizer.apply_chat_template(
            call_step.chat_completions[:-1], add_generation_prompt=True, tokenize=False
        )
        assert qwen_tokenizer.decode(call_step.prompt_ids) == rendered


def test_tool_environment_runs_rllm_and_native_tools_and_reports_failures():
    from rllm.tools import tool

    @tool
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    class Broken(Tool):
        def __init__(self, name="broken"):
            super().__init__(name=name, description="Always fails.")
            self.parameters = {"type": "object", "properties": {}}

        def forward(self, **kwargs):
            raise KeyError("nothing here")

    class Echo(Tool):  # async only, as an MCP tool is
        def __init__(self, name="echo"):
            super().__init__(name=name, description="Echoes.")
            self.parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

        async def async_forward(self, text: str) -> ToolOutput:
            await asyncio.sleep(0)
            return ToolOutput(name=self.name, output=text)

    tool_map = {"capital": CapitalTool, "twice": double, "broken": Broken, "echo": Echo}
    env = ToolEnvironment(task={"ground_truth": "Tokyo"}, tool_map=tool_map, reward_fn=boxed_match)
    assert [t["function"]["name"] for t in env.tools.json] == ["capital", "twice", "broken", "echo"]
    calls = [
        {"id": "a", "function": {"name": "capital", "arguments": '{"country": "Japan"}'}},
        {"id": "b", "function": {"name": "twice", "arguments": '{"x": 4}'}},
        {"id": "c", "function": {"name": "twice", "arguments": '{"x": "4"}'}},  # rllm's schema check
        {"id": "d", "function": {"name": "broken", "arguments": "{}"}},
        {"id": "e", "function": {"name": "capital", "arguments": "{oops"}},
        {"id": "f", "function": {"name": "capital", "arguments": '{"country": "Mars"}'}},
        {"id": "g", "function": {"name": "search", "arguments": "{}"}},
        {"id": "h", "function": {"name": "echo", "arguments": '{"text": "hi"}'}},
    ]
    outputs, reward, done, _ = env.step(calls)
    outputs = outputs["tool_outputs"]
    assert (reward, done) == (0, False)
    assert outputs["a"] == '{"capital": "Tokyo"}' and outputs["b"] == "8"
    assert outputs["c"].startswith("Error: bad arguments for tool 'twice'")
    assert outputs["d"] == "Error: KeyError - 'nothing here'"
    assert "not valid JSON" in outputs["e"] and outputs["f"] == "Error: unknown country 'Mars'"
    assert outputs["g"] == "Error: no tool named 'search'; the tools are: capital, twice, broken, echo"
    assert outputs["h"] == "hi"

    finish = {"id": "z", "function": {"name": "finish", "arguments": {"response": "\\boxed{Tokyo}"}}}
    assert env.step(finish)[1:3] == (1.0, True)


def test_a_tool_the_machine_cannot_run_is_an_infra_error():
    class NoSandbox(Tool):
        def __init__(self, name="python"):
            super().__init__(name=name, description="d")
            self.parameters = {"type": "object"}

        def forward(self, **kwargs):
            return ToolOutput(name=self.name, error="no sandbox", metadata={"error_kind": "infra"})

    env = ToolEnvironment(tool_map={"python": NoSandbox}, reward_fn=boxed_match)
    with pytest.raises(InfraError, match="no sandbox"):
        env.step([{"id": "a", "function": {"name": "python", "arguments": "{}"}}])


def test_tool_agent_turns_parsed_calls_into_openai_calls_with_either_parser():
    r1 = R1ToolParser()
    reply = f'{r1.tool_call_begin}function{r1.tool_sep}capital\n```json\n{{"country": "France"}}\n```{r1.tool_call_end}'
    agent = ToolAgent(tool_map={"capital": CapitalTool}, parser_name="r1")
    assert isinstance(agent.tool_parser, R1ToolParser) and r1.tool_call_begin in agent.messages[0]["content"]
    agent.update_from_env({"question": "Capital of France?"}, 0.0, False, {})
    (call,) = agent.update_from_model(reply).action
    assert call["type"] == "function" and call["function"] == {"name": "capital", "arguments": '{"country": "France"}'}
    (finish,) = agent.update_from_model("Paris.").action  # no call: the reply is the final answer
    assert finish["function"] == {"name": "finish", "arguments": {"response": "Paris."}}
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant", "assistant"]


# ---- tool_base ----------------------------------------------------------------------------------------------------


def test_tool_output_text_and_tool_call():
    assert str(ToolOutput("t", output={"a": 1})) == '{"a": 1}' and ToolOutput("t", output=[1]).to_string() == "[1]"
    assert str(ToolOutput("t", output=3)) == "3" and str(ToolOutput("t")) == ""
    assert str(ToolOutput("t", output="x", error="bad")) == "Error: bad"
    assert ToolCall("f", {"a": 1}).to_dict() == {"name": "f", "arguments": {"a": 1}}


def test_a_function_becomes_a_tool_and_runs_sync_or_async():
    def add(a: int, b: int = 1) -> int:
        """Add two numbers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    add_tool = Tool(function=add)
    function = add_tool.json["function"]
    assert (add_tool.name, function["description"]) == ("add", "Add two numbers.")
    assert function["parameters"]["properties"]["a"] == {"type": "integer", "description": "the first"}
    assert function["parameters"]["required"] == ["a"]
    assert add_tool(2, 3).output == 5 and asyncio.run(add_tool(a=2, use_async=True)).output == 3
    assert add_tool(a="x").error.startswith("TypeError - ")
    with pytest.raises(RllmError, match="needs name= and description="):
        Tool(name="nameless")
    with pytest.raises(NotImplementedError):
        Tool(name="n", description="d", function=None).forward()


# ---- parsers ------------------------------------------------------------------------------------------------------


def test_qwen_parser_reads_tool_call_blocks_and_skips_broken_ones():
    parser = QwenToolParser()
    text = (
        'Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        "<tool_call>{not json}</tool_call>\n"
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    assert parser.parse(text) == [ToolCall("a", {"x": 1}), ToolCall("b", {})]
    assert parser.parse('<tool_call>{"name": "a", "arguments": {}}') == []  # no closing tag
    prompt = parser.get_tool_prompt('[{"name": "a"}]')
    assert '<tools>\n[{"name": "a"}]\n</tools>' in prompt and "<tool_call>" in prompt


def test_r1_parser_reads_deepseek_tool_tokens():
    parser = R1ToolParser()

    def block(body: str) -> str:
        return f"{parser.tool_call_begin}{body}{parser.tool_call_end}"

    text = (
        f"{parser.tool_calls_begin}"
        + block(f'function{parser.tool_sep}lookup\n```json\n{{"q": "x"}}\n```')
        + block(f"function{parser.tool_sep}no_fence\n{{}}")
        + block('lookup\n```json\n{"q": "y"}\n```')  # no "function" prefix
        + block(f'function{parser.tool_sep}second\n```json {{"n": 2}} ```')
        + f"{parser.tool_calls_end}"
    )
    assert parser.parse(text) == [ToolCall("lookup", {"q": "x"}), ToolCall("second", {"n": 2})]
    assert parser.parse("plain text") == [] and parser.parse(parser.tool_call_begin + "function") == []
    assert "<tools>\nSCHEMA\n</tools>" in parser.get_tool_prompt("SCHEMA")


def test_parsers_by_name_and_by_tokenizer():
    assert get_tool_parser("qwen") is QwenToolParser and get_tool_parser("r1") is R1ToolParser
    with pytest.raises(ValueError, match="Tool parser 'xml' not found; the parsers are: r1, qwen"):
        get_tool_parser("xml")

    class Tokenizer:
        def __init__(self, name):
            self.name_or_path = name

    assert isinstance(ToolParser.get_parser(Tokenizer("Qwen/Qwen3-4B")), QwenToolParser)
    with pytest.raises(RllmError, match="get_tool_parser"):
        ToolParser.get_parser(Tokenizer("gpt2"))


def test_chat_template_parser_renders_with_the_tokenizer_template(smollm2_tokenizer):
    from rllm.parser import ChatTemplateParser, QwenChatTemplateParser

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    parser = QwenChatTemplateParser.get_parser(smollm2_tokenizer)
    assert isinstance(parser, ChatTemplateParser)
    expected = smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert parser.parse(messages, add_generation_prompt=True, is_first_msg=True) == expected
    assert expected.endswith(parser.generation_prompt) and parser.generation_prompt
    with pytest.raises(RllmError, match="rllm.training.batch"):
        parser.tokenize_and_mask(messages)


# ---- registry, web tools, prompts ---------------------------------------------------------------------------------


def test_registry_of_tool_classes():
    import rllm.tools.base
    from rllm.tools import PythonInterpreter, ToolRegistry, tool_registry
    from rllm.tools.multi_tool import MultiTool
    from rllm.tools.registry import ToolRegistry as RllmV02Registry

    assert ToolRegistry is rllm.tools.base.ToolRegistry  # rllm's own name wins at package level
    assert RllmV02Registry() is tool_registry and tool_registry["python"] is PythonInterpreter
    assert {"python", "google_search", "firecrawl", "tavily-extract", "tavily-search"} <= set(tool_registry)
    tool_registry.register("capital", CapitalTool)
    try:
        multi = MultiTool(tools=["capital"])
        assert multi.forward(tool_name="capital", country="France").output == {"capital": "Paris"}
        assert isinstance(tool_registry.instantiate("capital"), CapitalTool)
    finally:
        assert tool_registry.unregister("capital")
    assert tool_registry.instantiate("capital") is None
    with pytest.raises(TypeError, match="subclass of Tool"):
        tool_registry.register("x", dict)
    with pytest.raises(ValueError, match="no tool named 'capital' in rllm.tools.tool_registry"):
        MultiTool(tools=["capital"])
    with pytest.raises(ValueError, match="Cannot specify both"):
        MultiTool(tools=[], tool_map={})


def test_python_tool_runs_in_rllms_sandbox():
    from rllm.tools import tool_registry

    python = tool_registry.instantiate("python")
    assert python.json["function"]["parameters"]["required"] == ["code"]
    result = python("print('hi')\n6 * 7")
    assert result.stdout == "hi\n42\n" and result.error is None and result.to_string() == "hi\n42"
    failed = asyncio.run(python(code="import sys\nprint('so far')\nsys.exit(2)", use_async=True))
    assert failed.to_string() == "so far\n[exit code 2]"
    with pytest.raises(RllmError, match='backend="local"'):
        type(python)(backend="e2b")


def test_web_tools_import_and_answer_with_what_to_use_instead():
    from rllm.tools.web_tools.firecrawl_tool import FirecrawlTool
    from rllm.tools.web_tools.gsearch_tool import GoogleSearchTool
    from rllm.tools.web_tools.tavily_tool import TavilyExtractTool, TavilySearchTool

    names = [
        cls().json["function"]["name"] for cls in (GoogleSearchTool, FirecrawlTool, TavilyExtractTool, TavilySearchTool)
    ]
    assert names == ["google_search", "firecrawl", "tavily-extract", "tavily-search"]
    with pytest.warns(UserWarning, match="DocumentSearch"):
        output = GoogleSearchTool()("What is Python?")
    assert output.error and "rllm does not call web APIs" in str(output) and "tool_map" in str(output)


def test_system_prompt_names():
    from rllm.agents import system_prompts

    for name in system_prompts.__all__:
        assert isinstance(getattr(system_prompts, name), str) and getattr(system_prompts, name).strip()
    issue = system_prompts.SWE_USER_PROMPT.format(problem_statement="the bug")
    assert "the bug" in issue and "the bug" in system_prompts.SWEAGENT_USER_PROMPT.format(problem_statement="the bug")
    assert "<function=" in system_prompts.SWE_SYSTEM_PROMPT and "\\boxed{" in system_prompts.SEARCH_SYSTEM_PROMPT
