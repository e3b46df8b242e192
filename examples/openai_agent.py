"""An agent written only with the `openai` SDK, trained with rllm through the OpenAI-compatible gateway.

    rllm train configs/openai_agent_grpo.yaml                                   # train it (embedded model, CPU)
    python examples/openai_agent.py --base-url http://localhost:8000/v1 --model NAME   # run it against any endpoint

The agent (`solve`) is plain OpenAI-client code: it never imports rllm. Two turns on the built-in `arithmetic`
task: it asks the question, then asks for only the final number; its answer is the last reply. `@rllm.rollout`
(at module level, outside the agent) turns it into a workflow: during training each episode gets its own session
URL as `base_url`, and the gateway records the exact sampled tokens of both turns, which train as one row.
"""

from __future__ import annotations

import argparse
import os

import openai

import rllm
from rllm.tasks.arithmetic import parse_last_integer

SYSTEM_PROMPT = "You are good at mental arithmetic."


def arithmetic_reward(task: dict, answer: str) -> float:
    """1 when the last integer of the answer is the task's answer (the arithmetic env's rule)."""
    return float(parse_last_integer(answer) == task["answer"])


@rllm.rollout(reward_fn=arithmetic_reward)
def solve(task: dict, base_url: str) -> str:
    model = os.environ.get("AGENT_MODEL", "policy")  # the gateway serves the model it trains, whatever the name
    with openai.OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "none")) as client:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task["question"]}]
        first = client.chat.completions.create(model=model, messages=messages)
        messages.append({"role": "assistant", "content": first.choices[0].message.content})
        messages.append({"role": "user", "content": "Reply with only the final number."})
        second = client.chat.completions.create(model=model, messages=messages)
        return second.choices[0].message.content or ""


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the agent on a few arithmetic questions against an endpoint.")
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. http://host:8000/v1")
    parser.add_argument("--model", required=True, help="the served model's name")
    parser.add_argument("--n", type=int, default=4, help="number of questions")
    args = parser.parse_args()
    os.environ["AGENT_MODEL"] = args.model
    from rllm.tasks.arithmetic import make_arithmetic_tasks

    for task in make_arithmetic_tasks(args.n, seed=0):
        answer = solve.fn(task, args.base_url)  # the plain function: no rllm in the loop
        print(f"{task['question']} -> {answer!r} (reward {arithmetic_reward(task, answer)})")


if __name__ == "__main__":
    main()
