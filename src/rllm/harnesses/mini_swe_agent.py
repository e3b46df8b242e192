"""`mini-swe-agent`: SWE-agent's minimal coding agent (the `mini-swe-agent` package, v2) in the task's workspace.

Its `DefaultAgent` runs unchanged, with mini-swe-agent's own SWE-bench config (`benchmarks/swebench.yaml`: its
prompts, its step loop, its observation and format-error templates; `agent_args.config` names another of its
tool-calling configs, e.g. `mini.yaml`, or a YAML file of yours). Two parts are rllm's:

- the model: its `LitellmModel` (chat completions with its one tool, `bash`) pointed at the session
  (`openai/<job.model>`, `api_base=job.base_url`). Costs are not tracked (the policy has no price; litellm's price
  list is read from its own copy, never fetched), and a failed call is not retried: the gateway is local, so its
  error is the episode's end, whose cause the session keeps.
- the environment: `WorkspaceEnvironment`, whose `execute` runs each command through `job.workspace.run_command`
  (the swe task: a fresh shell in /testbed in rllm's sandbox, no network), so the agent's shell reaches nothing but
  its workspace. The config's `environment` section (Docker, its cwd, its variables, its timeout) is not used: the
  workspace has its own.

The run ends as mini-swe-agent's does: a command whose output starts with `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
(exit code 0) submits the rest of it, which is the answer (the task grades the workspace, not the answer). Its step
limit is `job.max_turns`; past it the episode ends as `max_turns`. Any other exit (three format errors in a row) ends
the run with no submission, and the task grades the workspace as it is. The exit status is kept with the episode
(`harness_output`).
"""

from __future__ import annotations

import os
import platform
import re
from typing import Any

# Before litellm is first imported: it would fetch its model price list from GitHub at import time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on the trainer's console

import litellm
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_from_spec
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_model import LitellmModel
from minisweagent.utils.serialize import recursive_merge

from rllm.harnesses.base import HarnessJob, Workspace, turn_limit

__all__ = ["DEFAULT_CONFIG", "WorkspaceEnvironment", "mini_swe_agent"]

litellm.suppress_debug_info = True  # its help banner on every failed call: the episode keeps the error itself
DEFAULT_CONFIG = "swebench.yaml"  # mini-swe-agent's config for SWE-bench (its `mini-extra swebench` default)
_EXIT_CODE = re.compile(r"\n?\[exit code (-?\d+)\]\Z")  # how `Workspace.run_command` ends a failed command


class WorkspaceEnvironment(LocalEnvironment):
    """mini-swe-agent's environment over an rllm workspace. A `LocalEnvironment` but for where the command runs,
    so its own check of the submit command (`_check_finished`) decides when the run ends."""

    def __init__(self, workspace: Workspace, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workspace = workspace

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run the action's command in the workspace (`cwd` and `timeout` are the workspace's own)."""
        output = _result(self.workspace.run_command(action.get("command", "")))
        self._check_finished(output)  # raises Submitted on the submit command, as every environment of its does
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # the machine's description, as LocalEnvironment gives it, without this process's environment variables:
        # the agent's shell does not have them (and they may hold secrets)
        return recursive_merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)


class _GatewayModel(LitellmModel):
    # every failure aborts: mini-swe-agent retries other errors up to 10 times with 4-60 s waits, for a remote API
    abort_exceptions = [Exception]  # noqa: RUF012 - overrides the parent's class attribute

    def _calculate_cost(self, response: Any) -> dict[str, float]:
        return {"cost": 0.0}  # the policy has no price: litellm's lookup would fail (and print) on every call


def mini_swe_agent(job: HarnessJob) -> str:
    config = get_config_from_spec(job.args.get("config", DEFAULT_CONFIG))
    model = _GatewayModel(**_model_config(job, config.get("model", {})))
    environment = WorkspaceEnvironment(job.workspace)
    agent = DefaultAgent(model, environment, **{**config.get("agent", {}), "step_limit": job.max_turns})
    result = agent.run(job.instruction)
    status = str(result.get("exit_status", ""))
    job.output["exit_status"] = status
    if status == "LimitsExceeded":
        raise turn_limit(job, "mini-swe-agent")
    return str(result.get("submission", ""))


def _model_config(job: HarnessJob, model: dict) -> dict:
    """The config's model section, its model the session's (through litellm's OpenAI-compatible provider)."""
    model = {key: value for key, value in model.items() if key != "model_class"}  # ours is LitellmModel
    model_kwargs = {**model.get("model_kwargs", {}), "api_base": job.base_url, "api_key": "none"}
    return {**model, "model_name": f"openai/{job.model}", "model_kwargs": model_kwargs}


def _result(text: str) -> dict[str, Any]:
    """A command's output as mini-swe-agent's environments report it (its exit code read off the end)."""
    failed = _EXIT_CODE.search(text)
    if failed is None:
        return {"output": text, "returncode": 0, "exception_info": ""}
    return {"output": text[: failed.start()], "returncode": int(failed.group(1)), "exception_info": ""}
