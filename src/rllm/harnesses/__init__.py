"""Harnesses: agent programs that play a task through the gateway, chosen by name (`agent: NAME` in a config,
`rllm eval TASK --agent NAME`, `rllm train TASK --agent NAME`).

A harness is a function `harness(job: HarnessJob) -> answer` (sync or async): it runs one episode of an agent
program, unchanged but for its base URL, against `job.base_url` (a gateway session, which records the exact tokens),
with the task's instruction and tools, and returns the answer the task's reward scores. `rllm.harnesses.base` turns
one into a `HarnessWorkflow`, a `RolloutWorkflow` (what `@rllm.rollout` makes), so training, evaluation, token
exactness and failure handling are those of every gateway rollout.

Built-in names (`HARNESSES`), each in its own module, imported only when named (each framework is an optional
dependency, in the `harnesses` extra, or an npm package for the CLI; a missing one is one line naming the install):

- `react`: the `openai` SDK's chat completions in a ReAct loop (call, run the tools asked for, call again);
- `openai-agents`: an OpenAI Agents SDK `Agent` with the task's tools, its default Responses model
  (`agent_args: {api: chat_completions}` for its chat-completions model);
- `anthropic`: the `anthropic` SDK's tool loop over the Messages API;
- `langgraph`: LangChain's prebuilt ReAct agent (a LangGraph graph) over `ChatOpenAI`;
- `smolagents`: a smolagents `ToolCallingAgent` over its `OpenAIServerModel`;
- `codex-cli`: OpenAI's Codex CLI (`codex exec`, from npm), a terminal coding agent, over the Responses API;
- `bash` and `mini-swe-agent` play workspace tasks (swe: `job.workspace`, a repository in rllm's sandbox; see
  `rllm.harnesses.base`): a ReAct loop with one `bash` tool, and mini-swe-agent's `DefaultAgent` unchanged, each
  command run in the workspace.

Anything else is `package.module:function`, a user's own harness.
"""

from __future__ import annotations

from rllm.harnesses.base import (
    HARNESSES,
    HarnessError,
    HarnessJob,
    HarnessWorkflow,
    get_harness,
    harness_workflow,
    workflow_for_config,
)

__all__ = [
    "HARNESSES",
    "HarnessError",
    "HarnessJob",
    "HarnessWorkflow",
    "get_harness",
    "harness_workflow",
    "workflow_for_config",
]
