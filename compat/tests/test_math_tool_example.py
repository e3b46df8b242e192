"""Our tool-using math evaluation script (tests/compat/scripts/math_tool/eval_math_tool.py), written against rLLM's
public API (ToolAgent + ToolEnvironment + the python tool + math_reward_fn, AgentExecutionEngine, DatasetRegistry,
compute_pass_at_k) as an rLLM user would write it, run against a local OpenAI-compatible server that answers with a
real tokenizer's ids. The script fetches its data from the Hugging Face hub only when none is registered: a few local
rows are registered under the names it reads before it runs.

The scripted model: for the sum question it calls the python tool with a real `<tool_call>` and then boxes what the
tool printed (so a correct answer proves the code ran, in rllm's sandbox); for the product question it answers
directly, wrong every other time (so pass@1 and pass@k differ and the rewards must come from the math grader)."""

from __future__ import annotations

import json
import re
import runpy
import sys
import threading
from pathlib import Path

import pytest

from rllm.testing.fake_openai_server import FakeOpenAIServer, FakeReply, run_fake_server

SCRIPTS = Path(__file__).parent / "scripts" / "math_tool"
SUM_Q = "What is the sum of the integers from 1 to 100?"
PRODUCT_Q = "What is 6 times 7?"
ROWS = [  # math_tasks.py's row format
    {"question": SUM_Q, "ground_truth": "5050", "data_source": "math"},
    {"question": PRODUCT_Q, "ground_truth": "42", "data_source": "math"},
]
CODE = "import os\nprint(sum(range(1, 101)))\nos.getuid()"  # the last value is shown too, as rLLM's tool does
SANDBOX_UID = "65534"  # who runs code inside rllm's sandbox (nobody), never the test's own user
TOOL_CALL = (
    "<think>Python can add these.</think>\n<tool_call>\n"
    + json.dumps({"name": "python", "arguments": {"code": CODE}})
    + "\n</tool_call>"
)


@pytest.fixture
def math_server(qwen_tokenizer):
    tokenizer = qwen_tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    lock, product_calls = threading.Lock(), [0]

    def answer(prompt: str) -> str:
        if SUM_Q in prompt:
            outputs = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
            if not outputs:
                return TOOL_CALL
            return f"The tool printed the sum. The answer is \\boxed{{{outputs[-1].splitlines()[0]}}}."
        with lock:
            product_calls[0] += 1
            wrong = product_calls[0] % 2 == 0
        return f"6 times 7 is \\boxed{{{41 if wrong else 42}}}."

    def reply(endpoint, body):
        text = answer(tokenizer.decode(body["prompt"]))
        ids = tokenizer.encode(text, add_special_tokens=False) + [end]
        return FakeReply(text=text, token_ids=ids, logprobs=[-0.5] * len(ids))

    with run_fake_server(FakeOpenAIServer(model=tokenizer.name_or_path, reply_fn=reply)) as server:
        yield server


def test_the_math_tool_script_runs_python_calls_and_grades_answers(
    tmp_path, monkeypatch, capsys, math_server, qwen_tokenizer
):
    from rllm.data.dataset import DatasetRegistry

    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "home"))  # after the tokenizer fixture resolved the model path
    DatasetRegistry.register_dataset("deepscaler_math", ROWS, "train")
    DatasetRegistry.register_dataset("aime2024", ROWS, "test")
    monkeypatch.setenv("RLLM_COMPAT_MODEL", qwen_tokenizer.name_or_path)
    monkeypatch.setenv("RLLM_COMPAT_BASE_URL", math_server.base_url)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # the script sets it; monkeypatch restores it
    monkeypatch.syspath_prepend(str(SCRIPTS))
    try:
        namespace = runpy.run_path(str(SCRIPTS / "eval_math_tool.py"), run_name="__main__")
    finally:
        sys.modules.pop("math_tasks", None)
    out = capsys.readouterr().out

    assert "fetching it" not in out  # never reached the Hugging Face download
    tasks, results = namespace["tasks"], namespace["results"]
    assert len(tasks) == 8 and [r.task for r in results] == list(tasks)  # 2 rows x 4 attempts, task order
    assert "Total unique problems: 2" in out
    assert "Average Pass@1 Accuracy: 0.75" in out and "Average Pass@k Accuracy: 1.0" in out

    end = qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
    product_rewards = []
    for trajectory in results:
        for step in trajectory.steps:  # exact ids: the template's render of the prompt, the server's completion
            prompt = step.chat_completions[:-1]  # rLLM records the messages after the reply
            rendered = qwen_tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            assert qwen_tokenizer.decode(step.prompt_ids) == rendered
            assert step.response_ids == qwen_tokenizer.encode(step.model_response, add_special_tokens=False) + [end]
            assert step.logprobs == [-0.5] * len(step.response_ids)
        if trajectory.task["question"] == PRODUCT_Q:
            (step,) = trajectory.steps
            assert step.action[0]["function"] == {"name": "finish", "arguments": {"response": step.model_response}}
            product_rewards.append(trajectory.reward)
            continue
        call_step, answer_step = trajectory.steps
        (call,) = call_step.action
        assert call["type"] == "function" and re.fullmatch(r"[0-9a-f-]{36}", call["id"])  # a uuid4, as rLLM's
        assert call["function"] == {"name": "python", "arguments": json.dumps({"code": CODE})}
        assert (call_step.reward, call_step.done) == (0.0, False)
        # the tool ran in the sandbox: its output (what it printed, then the last value) is the next observation
        assert answer_step.observation == {"tool_outputs": {call["id"]: f"5050\n{SANDBOX_UID}"}}
        tool_message = answer_step.chat_completions[-2]
        assert tool_message == {"role": "tool", "content": f"5050\n{SANDBOX_UID}", "tool_call_id": call["id"]}
        assert answer_step.model_response.endswith(r"\boxed{5050}.")
        assert (answer_step.reward, answer_step.done) == (1.0, True) and trajectory.reward == 1.0
        assert answer_step.info["is_correct"] is True and answer_step.info["metadata"] == {"extracted": "5050"}
        # one training row: the second prompt extends the first prompt + its sampled completion
        context = call_step.prompt_ids + call_step.response_ids
        assert answer_step.prompt_ids[: len(context)] == context
    assert sorted(product_rewards) == [0.0] * 2 + [1.0] * 2  # \boxed{41} is wrong, \boxed{42} right
    assert all(e.metrics["token_mismatch"] == 0 for e in namespace["engine"].episodes)


def test_the_system_prompt_is_rllms_tool_prompt_and_replies_parse_as_rllm_does():
    from rllm.agents.tool_agent import ToolAgent

    agent = ToolAgent(tools=["python"], parser_name="qwen", system_prompt="You are a math assistant.")
    schemas = json.dumps(agent.tools.json, indent=2)
    expected = (  # rLLM's system_prompt + QwenToolParser.get_tool_prompt(schemas)
        "You are a math assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
        "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{schemas}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call>"
    )
    assert agent.chat_completions == [{"role": "system", "content": expected}]
    assert json.loads(schemas)[0]["function"]["parameters"]["properties"]["timeout"]["default"] == 12

    agent.update_from_env({"question": "q?"}, 0.0, False, {})
    action = agent.update_from_model(
        '<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>'
        "<tool_call>not json</tool_call>"
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2"}}</tool_call>'
    )
    assert [c["function"] for c in action.action] == [
        {"name": "python", "arguments": '{"code": "1"}'},
        {"name": "calculator", "arguments": '{"expression": "2"}'},
    ]
    assert agent.messages[-1] == {"role": "assistant", "content": agent.trajectory.steps[-1].model_response}
    step = agent.get_current_state()
    assert step.observation == {"question": "q?"} and step.chat_completions == agent.messages
    agent.update_from_env({"tool_outputs": {"a": "1", "b": "2"}}, 0.0, False, {"x": 1})
    assert agent.messages[-2:] == [
        {"role": "tool", "content": "1", "tool_call_id": "a"},
        {"role": "tool", "content": "2", "tool_call_id": "b"},
    ]
    assert step.info == {"x": 1}
    with pytest.raises(ValueError, match="both 'tools' and 'tool_map'"):
        ToolAgent(tools=["python"], tool_map={})
    with pytest.raises(ValueError, match=r"no tool named 'calculator' in rllm.tools.tool_registry.*python"):
        ToolAgent(tools=["calculator"])
    with pytest.raises(ValueError, match="Tool parser 'xml' not found; the parsers are: r1, qwen"):
        ToolAgent(parser_name="xml")


def test_tool_environment_steps_as_rllms_and_reports_what_rllm_loses():
    from rllm.environments.tools.tool_env import ToolEnvironment
    from rllm.rewards.reward_fn import math_reward_fn
    from rllm.tools import tool

    @tool
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    task = {"question": "q", "ground_truth": "8", "tool_map": {"twice": double}, "reward_fn": math_reward_fn}
    env = ToolEnvironment.from_dict({**task, "max_steps": 3})
    assert env.reset() == ({"question": "q", "ground_truth": "8"}, {})
    calls = [
        {"id": "ok", "function": {"name": "twice", "arguments": '{"x": 4}'}},
        {"id": "bad", "function": {"name": "twice", "arguments": "{x: 4"}},
        {"id": "nope", "function": {"name": "google_search", "arguments": "{}"}},
    ]
    observation, reward, done, info = env.step(calls)
    outputs = observation["tool_outputs"]
    assert (
        outputs["ok"] == "8"
        and "not valid JSON" in outputs["bad"]
        and "no tool named 'google_search'" in outputs["nope"]
    )
    assert (reward, done, info) == (0.0, False, {"response": calls, "metadata": {}})
    # a finish call the model wrote itself carries its arguments as JSON text
    finish = {"id": "f", "function": {"name": "finish", "arguments": json.dumps({"response": r"\boxed{8}"})}}
    assert env.step(finish) == (
        {},
        1.0,
        True,
        {"response": [finish], "metadata": {"extracted": "8"}, "is_correct": True},
    )
    env.reset()
    env.step([])
    env.step([])
    assert env.step([])[1:3] == (0.0, True)  # max_steps: scored on str(action)
    assert env.step(r"\boxed{8}")[1] == 1.0  # a string action is a final answer

    with pytest.warns(UserWarning, match="No reward function"):
        zero = ToolEnvironment(task={"ground_truth": "8"})
    assert zero.step(r"\boxed{8}")[1:] == (0.0, True, {"response": r"\boxed{8}", "metadata": {}, "is_correct": None})


def test_rllm_reward_output_fields_and_math_reward_fn():
    from rllm.rewards import RewardOutput
    from rllm.rewards.reward_fn import math_reward_fn
    from rllm.types import Action

    output = RewardOutput(reward=1.0, metadata={"k": 1}, is_correct=True)  # rLLM's keywords
    assert output == RewardOutput(1.0, True, {"k": 1}) and output.metadata is output.info
    with pytest.raises(TypeError, match="info= or metadata="):
        RewardOutput(1.0, info={}, metadata={})
    assert math_reward_fn({"ground_truth": ["1/2", "x"]}, r"<think>\boxed{3}</think> so \boxed{0.5}").reward == 1.0
    assert math_reward_fn({"ground_truth": 7, "has_toolcall": True}, Action(r"\boxed{7}")).reward == 1.5
    assert math_reward_fn(task_info={"ground_truth": r"\boxed{7}"}, action="<|begin_of_box|>7<|end_of_box|>").is_correct
    assert math_reward_fn({"ground_truth": 7}, "The final answer is 7").reward == 0.0  # rLLM reads boxes only
    assert math_reward_fn({"ground_truth": 7}, "") == RewardOutput(0.0, is_correct=False)
    from rllm.rewards.reward_fn import code_reward_fn  # DeepCoder's: tests/compat/test_rllm_rewards.py grades it

    assert callable(code_reward_fn)
