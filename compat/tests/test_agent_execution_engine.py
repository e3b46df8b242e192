"""rLLM v0.2 agent/env code through rLLM's `AgentExecutionEngine` constructor, against a local OpenAI-compatible
server that speaks token ids (the fake server, answering with a real tokenizer's ids): the imports, classes and
calls below are written as rLLM's docs and examples write them."""

from __future__ import annotations

import asyncio
import copy
import re

import pytest

from rllm.agents.agent import Action, BaseAgent, Step, Trajectory
from rllm.engine.agent_execution_engine import AgentExecutionEngine
from rllm.environments.base.base_env import BaseEnv
from rllm.environments.base.single_turn_env import SingleTurnEnvironment
from rllm.rewards.base import RewardOutput
from rllm.testing.fake_openai_server import FakeOpenAIServer, FakeReply, run_fake_server

# ---- rLLM-style user code -----------------------------------------------------------------------------------------


class MathAgent(BaseAgent):
    """Creates its step in update_from_env and fills it in update_from_model, like rLLM's MathAgent."""

    def __init__(self, accumulate_thinking=True):
        self._trajectory = Trajectory()
        self.messages = []
        self.accumulate_thinking = accumulate_thinking

    def update_from_env(self, observation, reward, done, info, **kwargs):
        if not observation:  # the final {} of a single-turn env: score the last step
            if self.trajectory.steps:
                cur_step = self.get_current_state()
                cur_step.reward, cur_step.done, cur_step.info = reward, done, info
            return
        question = observation["question"] if isinstance(observation, dict) else observation
        self.messages.append({"role": "user", "content": question})
        self._trajectory.steps.append(Step(observation=question))

    def update_from_model(self, response: str, **kwargs) -> Action:
        self.messages.append({"role": "assistant", "content": response})
        cur_step = self.get_current_state()
        cur_step.chat_completions = self.chat_completions
        cur_step.model_response = response
        thought, _, answer = response.rpartition("</think>")
        cur_step.thought = thought + "</think>" if thought else None
        cur_step.action = Action(answer.strip())
        return cur_step.action

    def reset(self):
        self._trajectory = Trajectory()
        self.messages = []

    @property
    def chat_completions(self):
        return copy.deepcopy(self.messages)

    @property
    def trajectory(self):
        return self._trajectory


def exact_match_reward(task_info, action):
    action = action.action if isinstance(action, Action) else action
    correct = str(task_info["ground_truth"]) in str(action)
    return RewardOutput(reward=1.0 if correct else 0.0, is_correct=correct)


class CounterEnv(BaseEnv):
    """Multi-turn: the agent must count up to `target`; a staticmethod from_dict, as rLLM writes it."""

    def __init__(self, target=3, start=0):
        self.target, self.value, self.start = target, start, start

    def reset(self):
        self.value = self.start
        return f"Count from {self.start} to {self.target}.", {}

    def step(self, action):
        if str(action).strip() == str(self.value + 1):
            self.value += 1
        done = self.value >= self.target
        return f"Now at {self.value}.", 1.0 if done else 0.0, done, {"value": self.value}

    @staticmethod
    def from_dict(info):
        return CounterEnv(target=info["target"], start=info.get("start", 0))


class CounterAgent(BaseAgent):
    """Creates its step in update_from_model, with Action positional, like rLLM's FrozenLakeAgent."""

    def __init__(self):
        self.reset()

    def reset(self):
        self._trajectory = Trajectory()
        self.messages = [{"role": "system", "content": "Answer with the next number only."}]
        self.current_observation = None

    def update_from_env(self, observation, reward, done, info, **kwargs):
        if self._trajectory.steps:
            prior = self.get_current_state()
            prior.reward, prior.done, prior.info = reward, done, info
        self.messages.append({"role": "user", "content": str(observation)})
        self.current_observation = observation

    def update_from_model(self, response, **kwargs):
        self.messages.append({"role": "assistant", "content": response})
        numbers = re.findall(r"\d+", response)
        action = numbers[-1] if numbers else "0"
        self._trajectory.steps.append(
            Step(
                chat_completions=copy.deepcopy(self.messages),
                action=action,
                model_response=response,
                observation=self.current_observation,
            )
        )
        return Action(action)

    @property
    def chat_completions(self):
        return self.messages

    @property
    def trajectory(self):
        return self._trajectory


# ---- the server -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(qwen_tokenizer):
    """Answers like a model would, with the real tokenizer's ids for its text (+ <|im_end|>)."""
    tokenizer = qwen_tokenizer

    def reply(endpoint, body):
        prompt = tokenizer.decode(body["prompt"])
        if "What is" in prompt:
            a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)", prompt)[0])
            answer = f"\\boxed{{{a + b}}}" if "boxed" in prompt else str(a + b)
            text = f"<think>I add {a} and {b}.</think> {answer}"
        else:
            text = f"{prompt.count('Now at') + 1}"
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        return FakeReply(text=text, token_ids=ids, logprobs=[-0.25] * len(ids))

    with run_fake_server(FakeOpenAIServer(model="policy", reply_fn=reply)) as running:
        yield running


def engine_for(server, tokenizer, **kwargs):
    return AgentExecutionEngine(
        engine_name="openai",
        tokenizer=tokenizer,
        sampling_params={"temperature": 0.6, "top_p": 0.95, "model": "policy"},
        rollout_engine_args={"base_url": server.base_url, "api_key": "None"},
        max_response_length=512,
        max_prompt_length=1024,
        n_parallel_agents=4,
        **kwargs,
    )


def single_turn_engine(server, tokenizer, agent_class=None, reward_fn=None):
    """`engine_for` with rLLM's SingleTurnEnvironment scoring each answer by `reward_fn` (exact match)."""
    reward_fn = reward_fn or exact_match_reward
    env = {"env_class": SingleTurnEnvironment, "env_args": {"reward_fn": reward_fn}}
    return engine_for(server, tokenizer, agent_class=agent_class or MathAgent, **env)


MATH_TASKS = [
    {"question": f"What is {a} + {b}?", "ground_truth": a + b, "data_source": "math"}
    for a, b in [(2, 3), (10, 7), (1, 1)]
]


# ---- tests ------------------------------------------------------------------------------------------------------


def test_single_turn_math_agent_returns_trajectories_in_task_order_with_exact_tokens(server, qwen_tokenizer):
    engine = single_turn_engine(server, qwen_tokenizer)
    results = asyncio.run(engine.execute_tasks(MATH_TASKS))
    assert [r.task for r in results] == MATH_TASKS
    for trajectory, task in zip(results, MATH_TASKS, strict=True):
        assert isinstance(trajectory, Trajectory) and len(trajectory.steps) == 1
        (step,) = trajectory.steps
        assert trajectory.reward == step.reward == 1.0 and step.done and step.mc_return == 1.0
        assert step.action.action == str(task["ground_truth"]) and step.thought.endswith("</think>")
        # the exact ids: the prompt the chat template rendered, the completion the server sampled
        expected_prompt = qwen_tokenizer.apply_chat_template(
            [{"role": "user", "content": task["question"]}], add_generation_prompt=True, tokenize=False
        )
        assert qwen_tokenizer.decode(step.prompt_ids) == expected_prompt
        assert step.response_ids == qwen_tokenizer.encode(step.model_response, add_special_tokens=False) + [151645]
        assert step.logprobs == [-0.25] * len(step.response_ids)
        assert step.model_output.text == step.model_response
    assert [e.termination_reason.value for e in engine.episodes] == ["env_done"] * 3


def test_multi_turn_agent_with_staticmethod_from_dict_and_env_args_that_win(server, qwen_tokenizer):
    """rLLM builds each env from {**task, **env_args}: env_args override a row's values."""
    engine = engine_for(
        server,
        qwen_tokenizer,
        agent_class=CounterAgent,
        env_class=CounterEnv,
        env_args={"target": 2},
        max_steps=5,
        gamma=0.5,
    )
    tasks = [{"target": 9, "start": 0}, {"target": 9, "start": 1}]

    async def main():  # the docs' form: awaited inside the user's own coroutine
        return await engine.execute_tasks(tasks)

    results = asyncio.run(main())
    assert [r.task for r in results] == tasks  # the task as given, not merged
    first, second = results
    assert [s.action for s in first.steps] == ["1", "2"] and [s.reward for s in first.steps] == [0.0, 1.0]
    assert [s.mc_return for s in first.steps] == [0.5, 1.0]  # r + gamma * G, gamma as given
    assert [s.action for s in second.steps] == ["1", "2"]  # "1" is not start + 1: no move, then "2" reaches 2
    assert second.reward == 1.0 and first.reward == 1.0
    # one training row per trajectory: every prompt extends the previous prompt + sampled completion
    for trajectory in results:
        for previous, step in zip(trajectory.steps, trajectory.steps[1:], strict=False):
            context = previous.prompt_ids + previous.response_ids
            assert step.prompt_ids[: len(context)] == context
    assert all(e.metrics["token_mismatch"] == 0 for e in engine.episodes)


def test_rllm_engine_arguments_we_do_not_have_name_the_nearest_thing(server, qwen_tokenizer):
    common = {"agent_class": MathAgent, "env_class": SingleTurnEnvironment}
    with pytest.raises(ValueError, match="engine_name='verl'.*trainer.backend=verl"):
        AgentExecutionEngine(engine_name="verl", **common)
    with pytest.raises(ValueError, match="chat_parser.*chat template"):
        AgentExecutionEngine(chat_parser=object(), **common)
    with pytest.raises(TypeError, match="model_path"):
        AgentExecutionEngine(model_path="x", **common)
    with pytest.raises(TypeError, match="frequency_penalty"):
        AgentExecutionEngine(sampling_params={"frequency_penalty": 1.0}, **common)


def test_an_agent_that_records_no_step_is_an_error_naming_it(server, qwen_tokenizer):
    class Forgetful(MathAgent):
        def update_from_env(self, observation, reward, done, info, **kwargs):
            if observation:
                self.messages.append({"role": "user", "content": observation["question"]})

        def update_from_model(self, response, **kwargs):
            return Action(response)

    engine = single_turn_engine(server, qwen_tokenizer, agent_class=Forgetful)
    (result,) = asyncio.run(engine.execute_tasks(MATH_TASKS[:1]))
    assert result.info["termination_reason"] == "error"
    (step,) = result.steps  # the engine keeps the sampled reply, as for any reply an agent fails on
    assert step.model_output.completion_ids and step.action is None
    assert "Forgetful.update_from_model recorded no step" in result.info["error"]


def test_compute_pass_at_k_groups_attempts_by_task(server, qwen_tokenizer, capsys):
    from rllm.utils import compute_pass_at_k

    engine = single_turn_engine(server, qwen_tokenizer)
    wrong = {**MATH_TASKS[0], "ground_truth": 6}  # the model answers 5
    results = asyncio.run(engine.execute_tasks([MATH_TASKS[0], MATH_TASKS[0], wrong, wrong, MATH_TASKS[1]]))
    summary = compute_pass_at_k(results)
    assert summary == {"problems": 3, "pass@1": 3 / 5, "pass@k": 2 / 3}
    assert "Total unique problems: 3" in capsys.readouterr().out


def test_rllms_math_agent_with_single_turn_environment_and_math_reward(server, qwen_tokenizer):
    """rLLM's deepscaler setup: MathAgent + SingleTurnEnvironment + math_reward_fn, as its examples wire them."""
    from rllm.agents.math_agent import MathAgent as RllmMathAgent
    from rllm.rewards.reward_fn import math_reward_fn

    engine = single_turn_engine(server, qwen_tokenizer, agent_class=RllmMathAgent, reward_fn=math_reward_fn)
    boxed = [
        {**task, "question": task["question"] + " Put it in \\boxed{}.", "ground_truth": str(task["ground_truth"])}
        for task in MATH_TASKS
    ]
    bare = [{**task, "ground_truth": str(task["ground_truth"])} for task in MATH_TASKS[:1]]
    results = asyncio.run(engine.execute_tasks(boxed + bare))
    for trajectory in results:
        (step,) = trajectory.steps
        assert step.thought.endswith("</think>") and isinstance(step.action, Action)
        assert step.response_ids and step.model_output.text == step.model_response
    assert [r.reward for r in results] == [1.0, 1.0, 1.0, 0.0]  # rLLM's math reward wants the boxed answer


def test_an_env_with_compute_final_reward_gives_the_last_steps_reward(server, qwen_tokenizer):
    """rLLM's optional env hook (its SWE env scores the patch when the episode is over)."""

    class ScoredAtTheEnd(CounterEnv):
        def compute_final_reward(self):
            return 10.0 * self.value

        @staticmethod
        def from_dict(info):
            return ScoredAtTheEnd(target=info["target"])

    engine = engine_for(server, qwen_tokenizer, agent_class=CounterAgent, env_class=ScoredAtTheEnd, max_steps=5)
    (trajectory,) = asyncio.run(engine.execute_tasks([{"target": 2}]))
    assert [s.reward for s in trajectory.steps] == [0.0, 20.0] and trajectory.reward == 20.0
