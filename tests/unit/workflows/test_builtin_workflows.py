"""Built-in workflows (single_turn, solver_judge) through AgentWorkflowEngine with a scripted model; workflow
resolution; reward-function results."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.errors import InfraError
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.rewards.base import RewardOutput, to_reward_output
from rllm.tasks import UnknownTaskError, get_task
from rllm.tasks.countdown import countdown_prompt, countdown_reward
from rllm.types import TerminationReason
from rllm.workflows import get_workflow
from rllm.workflows.agent_env import AgentEnvWorkflow
from rllm.workflows.base import Workflow
from rllm.workflows.resolve import WorkflowArgsError, resolve_workflow
from rllm.workflows.single_turn import SingleTurnWorkflow
from rllm.workflows.solver_judge import SolverJudgeWorkflow, parse_choice

R = TerminationReason
TASK = {"id": "cd", "numbers": [3, 5, 7], "target": 22}  # 3 * 5 + 7 = 22
RIGHT = "<answer>3 * 5 + 7</answer>"
WRONG = "<answer>3 + 5 + 7</answer>"  # 15
QUESTION = {"id": "q1", "question": "What is 2 + 2?"}


def engine_for(workflow_class: type[Workflow], model: FakeModel, **kwargs: Any) -> AgentWorkflowEngine:
    kwargs.setdefault("retry_backoff", 0.0)
    kwargs.setdefault("n_parallel", 4)
    return AgentWorkflowEngine(workflow_class=workflow_class, model=model, **kwargs)


def ask(task: dict) -> str:
    return task["question"]


def four(task: dict, response: str) -> float:
    return 1.0 if "4" in response else 0.0


def run_single(model: FakeModel, **workflow_args: Any):
    workflow_args.setdefault("prompt_fn", ask)
    workflow_args.setdefault("reward_fn", four)
    retry_limit = workflow_args.pop("retry_limit", 2)
    engine = engine_for(SingleTurnWorkflow, model, workflow_args=workflow_args, retry_limit=retry_limit)
    [episode] = engine.execute_tasks([QUESTION])
    return episode


# ---- 1. SingleTurnWorkflow -------------------------------------------------------------------------------------


def test_single_turn_one_step_with_prompt_action_and_reward():
    model = FakeModel("It is 4.")
    episode = run_single(model)
    assert episode.id == "q1:0" and episode.termination_reason is R.ENV_DONE and episode.is_correct is True
    [trajectory] = episode.trajectories
    assert trajectory.name == "agent" and trajectory.is_correct is True and trajectory.reward == 1.0
    [step] = trajectory.steps
    assert step.chat_completions == [{"role": "user", "content": "What is 2 + 2?"}]
    assert step.action == "It is 4." and step.reward == 1.0 and step.done is True
    assert step.info["is_correct"] is True
    assert [call.prompt for call in model.calls] == [[{"role": "user", "content": "What is 2 + 2?"}]]
    assert episode.metrics["role/agent/reward_mean"] == 1.0 and episode.metrics["role/agent/count"] == 1


def test_single_turn_system_prompt_and_name():
    episode = run_single(FakeModel("5"), system_prompt="Be brief.", name="solver")
    [trajectory] = episode.trajectories
    assert trajectory.name == "solver" and trajectory.reward == 0.0 and trajectory.is_correct is False
    system, user = {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}
    assert trajectory.steps[0].chat_completions == [system, user]
    assert episode.is_correct is False and episode.metrics["role/solver/success_rate"] == 0.0


def test_single_turn_message_list_prompt_is_used_as_is():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    model = FakeModel("4")
    episode = run_single(model, prompt_fn=lambda task: messages)
    assert episode.trajectories[0].steps[0].chat_completions == messages
    assert model.calls[0].prompt == messages


def test_reward_output_correctness_beats_positive_reward():
    episode = run_single(FakeModel("4"), reward_fn=lambda t, r: RewardOutput(0.1, is_correct=False, info={"k": 1}))
    [trajectory] = episode.trajectories
    assert trajectory.reward == pytest.approx(0.1) and trajectory.is_correct is False
    assert trajectory.steps[0].info == {"k": 1, "is_correct": False}
    assert episode.is_correct is False and episode.termination_reason is R.ENV_DONE
    assert episode.metrics["role/agent/reward_mean"] == pytest.approx(0.1)
    assert episode.metrics["role/agent/success_rate"] == 0.0

    episode = run_single(FakeModel("4"), reward_fn=lambda t, r: 1.0)
    assert episode.trajectories[0].is_correct is True and episode.is_correct is True


@pytest.mark.parametrize("bad", [None, "1", True])
def test_reward_fn_returning_non_number_is_an_error_not_zero(bad):
    def reward_fn(task, response):
        return bad

    episode = run_single(FakeModel("4"), reward_fn=reward_fn)
    assert episode.termination_reason is R.ERROR and episode.is_correct is False
    assert "TypeError" in episode.info["traceback"] and "reward_fn returned" in episode.info["error"]
    assert episode.metrics["retries"] == 0  # a bug is not retried


def test_reward_fn_infra_error_is_retried_then_infra_error():
    calls = []

    def flaky(task, response):
        calls.append(response)
        raise InfraError("grader down")

    model = FakeModel("4")
    episode = run_single(model, reward_fn=flaky, retry_limit=2)
    assert len(calls) == 3 and len(model.calls) == 3  # 1 attempt + 2 retries, each from scratch
    assert episode.termination_reason is R.INFRA_ERROR and episode.is_correct is False
    assert episode.info["error"] == "InfraError: grader down" and episode.info["error_site"] == "reward"
    assert episode.info["retry_errors"] == ["InfraError: grader down"] * 2
    assert episode.metrics["retries"] == 2 and episode.metrics["infra_errors"] == 3


def test_reward_fn_infra_error_then_success():
    calls = []

    def flaky_once(task, response):
        calls.append(response)
        if len(calls) == 1:
            raise InfraError("blip")
        return 1.0

    episode = run_single(FakeModel("4"), reward_fn=flaky_once)
    assert episode.termination_reason is R.ENV_DONE and episode.is_correct is True
    assert episode.metrics["retries"] == 1 and episode.metrics["infra_errors"] == 1
    assert len(episode.trajectories) == 1 and len(episode.trajectories[0].steps) == 1  # the retry starts clean


def test_time_reward_metric_counts_reward_time():
    def slow(task, response):
        time.sleep(0.02)
        return 1.0

    episode = run_single(FakeModel("4"), reward_fn=slow)
    assert episode.metrics["time_reward"] >= 0.02
    assert episode.metrics["time_total"] >= episode.metrics["time_reward"]


# ---- 2. SolverJudgeWorkflow on countdown -----------------------------------------------------------------------


def text_of(prompt: Any) -> str:
    if prompt and isinstance(prompt[0], dict):
        return prompt[-1]["content"]
    return FakeTokenizer().decode(prompt)


class Scripted:
    """Solver calls get `solver_replies` in call order; judge calls get `judge(prompt_text)`."""

    def __init__(self, solver_replies: list[str], judge: Any) -> None:
        self.solver_replies, self.judge = solver_replies, judge
        self.solver_calls = 0
        self.judge_prompts: list[str] = []

    def __call__(self, prompt: Any, sampling: SamplingParams) -> str:
        text = text_of(prompt)
        if "candidate" in text:
            self.judge_prompts.append(text)
            return self.judge(text) if callable(self.judge) else self.judge
        assert "using each of the numbers" in text
        reply = self.solver_replies[self.solver_calls % len(self.solver_replies)]
        self.solver_calls += 1
        return reply


def pick(reply: str):
    """A judge that reads the numbered candidates and answers with the number of the one that is `reply`."""

    def judge(text: str) -> str:
        blocks = text.split("Candidate ")[1:]
        return f"I pick <answer>{next(i for i, block in enumerate(blocks, 1) if reply in block)}</answer>"

    return judge


pick_right, pick_wrong = pick(RIGHT), pick(WRONG)


def run_judge(script: Scripted, n_solutions: int = 2, **kwargs: Any):
    model = FakeModel(script, tokenizer=kwargs.pop("tokenizer", None), delay=kwargs.pop("delay", 0.0))
    n_rollouts = kwargs.pop("n_rollouts", 1)
    args = {"prompt_fn": countdown_prompt, "reward_fn": countdown_reward, "n_solutions": n_solutions}
    engine = engine_for(SolverJudgeWorkflow, model, workflow_args=args, **kwargs)
    return engine, model, engine.execute_tasks([TASK], n_rollouts=n_rollouts)


def test_judge_picks_correct_candidate():
    script = Scripted([WRONG, RIGHT], pick_right)
    _, model, [episode] = run_judge(script)
    assert [t.name for t in episode.trajectories] == ["solver", "solver", "judge"]
    solvers, judge = episode.trajectories[:2], episode.trajectories[2]
    assert [t.steps[0].action for t in solvers] == [WRONG, RIGHT]  # solver{i} got the i-th model call
    assert [t.reward for t in solvers] == [0.0, 1.0] and [t.is_correct for t in solvers] == [False, True]
    assert solvers[1].steps[0].info == {"answer": "3 * 5 + 7", "is_correct": True}
    assert judge.steps[0].action == 1 and judge.reward == 1.0 and judge.is_correct is True
    assert judge.steps[0].info == {"choice": 1, "picked_correct": True}
    assert episode.is_correct is True and episode.termination_reason is R.ENV_DONE
    assert "judge_parse_error" not in episode.info
    assert len(model.calls) == 3
    # the judge saw the problem and every candidate's reply, numbered in commit order
    [judge_prompt] = script.judge_prompts
    assert judge_prompt.startswith(countdown_prompt(TASK))
    assert f"Candidate 1:\n{WRONG}" in judge_prompt and f"Candidate 2:\n{RIGHT}" in judge_prompt
    assert "Here are 2 candidate answers." in judge_prompt
    assert judge.steps[0].chat_completions == [{"role": "user", "content": judge_prompt}]


def test_judge_picks_wrong_candidate():
    _, _, [episode] = run_judge(Scripted([RIGHT, WRONG], pick_wrong))
    judge = episode.trajectories[-1]
    assert judge.steps[0].action == 1 and judge.reward == 0.0 and judge.is_correct is False
    assert [t.reward for t in episode.trajectories[:2]] == [1.0, 0.0]
    assert episode.is_correct is False and episode.termination_reason is R.ENV_DONE
    assert "judge_parse_error" not in episode.info


@pytest.mark.parametrize("reply", ["the first one", "<answer>3</answer>", "<answer>0</answer>", ""])
def test_unreadable_or_out_of_range_choice(reply):
    _, _, [episode] = run_judge(Scripted([RIGHT, RIGHT], reply))
    judge = episode.trajectories[-1]
    assert judge.steps[0].action is None and judge.reward == 0.0 and judge.is_correct is False
    assert episode.info["judge_parse_error"] is True
    assert episode.is_correct is False and episode.termination_reason is R.ENV_DONE


def test_three_solvers_rewards_and_role_metrics():
    replies = [RIGHT, WRONG, "no idea"]
    engine, model, [episode] = run_judge(Scripted(replies, pick_right), n_solutions=3)
    assert [t.name for t in episode.trajectories] == ["solver"] * 3 + ["judge"]
    solvers = episode.trajectories[:3]
    assert [t.steps[0].action for t in solvers] == replies
    assert [t.reward for t in solvers] == [countdown_reward(TASK, r).reward for r in replies] == [1.0, 0.0, 0.0]
    assert episode.trajectories[-1].steps[0].action == 0 and episode.is_correct is True
    assert "Here are 3 candidate answers." in text_of(model.calls[-1].prompt)
    metrics = episode.metrics
    assert metrics["role/solver/reward_mean"] == pytest.approx(1 / 3)
    assert metrics["role/solver/success_rate"] == pytest.approx(1 / 3) and metrics["role/solver/count"] == 3
    assert metrics["role/judge/reward_mean"] == 1.0 and metrics["role/judge/success_rate"] == 1.0
    assert metrics["role/judge/count"] == 1
    assert metrics["steps"] == 4

    def roles(summary):
        return {key: value for key, value in summary.items() if key.startswith("role/")}

    assert roles(engine.metrics) == roles(metrics)  # one episode: the engine's summary is the episode's
    assert engine.metrics["success_rate"] == 1.0 and engine.metrics["episodes"] == 1


def test_each_call_gets_its_own_reproducible_seed():
    runs = []
    for _ in range(2):
        _, model, episodes = run_judge(
            Scripted([RIGHT, WRONG, RIGHT], pick_right),
            n_solutions=3,
            sampling=SamplingParams(seed=3),
            n_rollouts=2,
            n_parallel=1,
            delay=0.002,
        )
        assert len(model.calls) == 8 and [e.id for e in episodes] == ["cd:0", "cd:1"]
        runs.append([call.sampling.seed for call in model.calls])
    first, second = runs
    # one pooled instance: episode 0's calls, then episode 1's; the delay makes the 3 solver calls overlap, so
    # distinct seeds need distinct threads (one shared thread would give them all call number 0)
    for episode_seeds in (first[:4], first[4:]):
        assert len(set(episode_seeds)) == 4 and 3 not in episode_seeds
    assert set(first[:4]).isdisjoint(first[4:])  # rollouts of one task differ
    assert first == second  # a rerun replays the same seeds


def test_too_long_solver_prompt_ends_episode_without_model_call():
    script = Scripted([RIGHT], pick_right)
    _, model, [episode] = run_judge(script, tokenizer=FakeTokenizer(), max_prompt_length=50)
    assert episode.termination_reason is R.MAX_PROMPT_LENGTH and episode.is_correct is False
    assert model.calls == [] and script.solver_calls == 0
    assert episode.info["termination_message"].startswith("prompt of ")
    assert all(t.steps == [] for t in episode.trajectories)
    with pytest.raises(ValueError, match="n_solutions must be >= 1"):
        SolverJudgeWorkflow(countdown_prompt, countdown_reward, n_solutions=0)


def test_solver_judge_with_tokenizer_fits_and_records_tokens():
    _, _, [episode] = run_judge(Scripted([WRONG, RIGHT], pick_right), tokenizer=FakeTokenizer())
    assert episode.termination_reason is R.ENV_DONE and episode.is_correct is True
    assert all(t.steps[0].model_output.has_token_ids for t in episode.trajectories)
    completion = FakeTokenizer().encode(RIGHT) + [FakeTokenizer().eos_token_id]
    assert episode.trajectories[1].steps[0].model_output.completion_ids == completion


# ---- 3. parse_choice -------------------------------------------------------------------------------------------


# fmt: off
CHOICES = [
    ("<answer>2</answer>", 2, 1), ("<answer> 1 </answer>", 2, 0), ("<answer>1</answer> no, <answer>2</answer>", 2, 1),
    ("<answer>2</answer> then <answer>9</answer>", 2, None),  # the last tag counts even when out of range
    ("<answer>0</answer>", 2, None), ("<answer>3</answer>", 2, None), ("<answer>3</answer>", 3, 2),
    ("2", 2, None), ("", 2, None), ("<answer>one</answer>", 2, None),
]
# fmt: on


@pytest.mark.parametrize("text, k, expected", CHOICES)
def test_parse_choice(text, k, expected):
    assert parse_choice(text, k) == expected


# ---- 4. resolve_workflow / get_workflow ------------------------------------------------------------------------


class RewardOnly(Workflow):
    def __init__(self, reward_fn) -> None:
        self.reward_fn = reward_fn


DummyAgent, DummyEnv = type("DummyAgent", (), {}), type("DummyEnv", (), {})


def test_resolve_countdown_defaults_and_explicit_args_win():
    countdown = get_task("countdown")
    inputs = {"prompt_fn": countdown_prompt, "reward_fn": countdown_reward}
    assert resolve_workflow(countdown) == (SingleTurnWorkflow, inputs)
    explicit = {"n_solutions": 4, "reward_fn": four}
    cls, args = resolve_workflow(countdown, workflow="solver_judge", workflow_args=explicit)
    assert cls is SolverJudgeWorkflow
    assert args == {"prompt_fn": countdown_prompt, "reward_fn": four, "n_solutions": 4}


def test_resolve_frozenlake_default_is_agent_env():
    from rllm.tasks.frozenlake import FrozenLakeAgent, FrozenLakeEnv

    cls, args = resolve_workflow(get_task("frozenlake"), max_steps=7, step_timeout=3.0, env_args={"a": 1})
    assert cls is AgentEnvWorkflow
    assert args == {
        "agent_class": FrozenLakeAgent,
        "env_class": FrozenLakeEnv,
        "agent_args": {},
        "env_args": {"a": 1},
        "max_steps": 7,
        "step_timeout": 3.0,
    }


def test_resolve_custom_workflow_gets_only_declared_inputs():
    cls, args = resolve_workflow(get_task("countdown"), workflow=RewardOnly)
    assert cls is RewardOnly and args == {"reward_fn": countdown_reward}
    cls, args = resolve_workflow(None, workflow=RewardOnly, workflow_args={"reward_fn": four})
    assert cls is RewardOnly and args == {"reward_fn": four}


def test_resolve_explicit_agent_and_env_choose_agent_env():
    cls, args = resolve_workflow(get_task("countdown"), agent_class=DummyAgent, env_class=DummyEnv)
    assert cls is AgentEnvWorkflow
    assert args["agent_class"] is DummyAgent and args["env_class"] is DummyEnv and args["max_steps"] == 10
    with pytest.raises(ValueError, match="nothing plays the task"):
        resolve_workflow(None)


def test_countdown_task_has_no_agent():
    countdown = get_task("countdown")
    with pytest.raises(UnknownTaskError, match=r"'countdown' has no .*agent.*workflow: single_turn"):
        _ = countdown.agent_class
    with pytest.raises(UnknownTaskError, match="environment"):
        _ = countdown.env_class
    with pytest.raises(UnknownTaskError, match="agent"):
        resolve_workflow(countdown, workflow="agent_env")


def test_get_workflow():
    assert get_workflow("single_turn") is SingleTurnWorkflow
    assert get_workflow("solver_judge") is SolverJudgeWorkflow
    assert get_workflow("agent_env") is AgentEnvWorkflow
    assert get_workflow("rllm.workflows.single_turn:SingleTurnWorkflow") is SingleTurnWorkflow
    with pytest.raises(ValueError, match=r"unknown workflow 'nope'.*agent_env, single_turn, solver_judge"):
        get_workflow("nope")
    with pytest.raises(TypeError, match="'rllm.types:Episode' is not a subclass of rllm.workflows.Workflow"):
        get_workflow("rllm.types:Episode")
    with pytest.raises(ValueError, match="cannot import Missing from rllm.workflows.single_turn"):
        get_workflow("rllm.workflows.single_turn:Missing")
    with pytest.raises(ValueError, match="cannot import X from no_such_package"):
        get_workflow("no_such_package:X")


# ---- 5. to_reward_output / RewardOutput ------------------------------------------------------------------------


def test_to_reward_output_accepts_numbers_and_reward_outputs():
    assert to_reward_output(1) == RewardOutput(1.0) and type(to_reward_output(1).reward) is float
    assert to_reward_output(0.25) == RewardOutput(0.25)
    kept = RewardOutput(0.5, is_correct=False, info={"x": 1})
    assert to_reward_output(kept) is kept


@pytest.mark.parametrize("value", [True, False, None, "1", [1.0]])
def test_to_reward_output_refuses_non_numbers(value):
    def my_reward(task, response):
        return value

    with pytest.raises(TypeError, match="my_reward returned"):
        to_reward_output(value, my_reward)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, RewardOutput(math.nan), RewardOutput(math.inf)])
def test_to_reward_output_refuses_non_finite(value):
    with pytest.raises(ValueError, match="non-finite"):
        to_reward_output(value)


def test_reward_output_correct():
    assert RewardOutput(0.1).correct is True
    assert RewardOutput(0.0).correct is False
    assert RewardOutput(-1.0).correct is False
    assert RewardOutput(0.1, is_correct=False).correct is False
    assert RewardOutput(0.0, is_correct=True).correct is True
    assert countdown_reward(TASK, RIGHT) == RewardOutput(1.0, is_correct=True, info={"answer": "3 * 5 + 7"})
    assert countdown_reward(TASK, WRONG, format_reward=0.1).correct is False


def test_resolve_refuses_workflow_args_the_workflow_does_not_take():
    # math_grpo.yaml's single-turn system_prompt, kept when a user switches to workflow=agent_env
    with pytest.raises(WorkflowArgsError, match=r"\['system_prompt'\].*AgentEnvWorkflow.*workflow_args=\{\}"):
        resolve_workflow(get_task("math"), workflow="agent_env", workflow_args={"system_prompt": "Be brief."})
    with pytest.raises(WorkflowArgsError, match=r"\['n_solution'\].*SolverJudgeWorkflow.*'n_solutions'"):
        resolve_workflow(get_task("countdown"), workflow="solver_judge", workflow_args={"n_solution": 2})
    cls, args = resolve_workflow(get_task("math"), workflow="single_turn", workflow_args={"system_prompt": "Be brief."})
    assert cls is SingleTurnWorkflow and args["system_prompt"] == "Be brief."
