"""rLLM v0.2's `AppWorldEnv`: an AppWorld task (9 apps, ~450 APIs, a simulated user) played by writing Python.

It needs the `appworld` library and its data (`pip install appworld && appworld install && appworld download data`),
which this project does not depend on (it does not install here). The module imports without it; constructing the
env without it raises `AppWorldUnavailableError` saying so.

With it, the env behaves as rLLM's:
- `from_dict(row)`: the row is the task (`task_id`, optionally `instruction`); `max_turns` (default 10) is taken out.
- `reset()` opens `AppWorld(task_id=...)` and returns `{"instruction", "user_info", "app_descriptions", ...}`.
- `step(code)` runs the code in the task's shell: `{"success": True, "output": ...}`, or `{"success": False,
  "error": ...}` when it raised. A block that calls `complete_task` ends the episode, rewarded 1.0 when AppWorld's
  evaluation passes. The `max_turns`-th step ends it with reward 0.
AppWorld is not thread-safe: one process-wide lock serializes its calls (as rLLM does). Apply
`rllm.environments.appworld.signal_patch.apply_signal_patch()` before running it in the engine's threads.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.errors import RllmError

__all__ = ["AppWorldEnv", "AppWorldUnavailableError"]

_LOCK = threading.RLock()
_INSTALL = (
    "AppWorldEnv needs the appworld library and its data, which are not installed: pip install appworld && "
    "appworld install && appworld download data"
)
_DEFAULT_USER = {"first_name": "User", "last_name": "Test", "email": "user@example.com", "phone_number": "+1234567890"}
_HELPERS = {
    "show_app_descriptions": "apis.api_docs.show_app_descriptions()",
    "show_api_descriptions": "apis.api_docs.show_api_descriptions(app_name='app')",
    "show_api_doc": "apis.api_docs.show_api_doc(app_name='app', api_name='api')",
    "complete_task": "apis.supervisor.complete_task(answer='your_answer')",
}


class AppWorldUnavailableError(RllmError, ImportError):
    """The appworld library is not installed."""


class AppWorldEnv(BaseEnv):
    def __init__(self, task: dict | None = None, max_turns: int = 10, **kwargs: Any) -> None:
        if importlib.util.find_spec("appworld") is None:
            raise AppWorldUnavailableError(_INSTALL)
        self.task, self.max_turns = dict(task or {}), int(max_turns)
        self.current_turn, self.done = 0, False
        self.execution_history: list[dict] = []
        self.world: Any = None

    @staticmethod
    def from_dict(env_args: dict) -> AppWorldEnv:
        task = {key: value for key, value in env_args.items() if key != "max_turns"}
        return AppWorldEnv(task=task, max_turns=env_args.get("max_turns", 10))

    def reset(self) -> tuple[dict, dict]:
        from appworld import AppWorld

        self.current_turn, self.done, self.execution_history = 0, False, []
        task_id = self.task.get("task_id")
        if not task_id:
            raise ValueError("AppWorldEnv: the task row needs 'task_id' (appworld.load_task_ids(split) lists them)")
        with _LOCK:
            self.close()
            self.world = AppWorld(task_id=task_id)
            self.task.setdefault("instruction", self.world.task.instruction)
            supervisor = getattr(self.world.task, "supervisor", None)
            user = {key: getattr(supervisor, key, default) for key, default in _DEFAULT_USER.items()}
            apps = [{"name": name, "description": text} for name, text in self.world.task.app_descriptions.items()]
        observation = {
            "instruction": self.task["instruction"],
            "user_info": user,
            "available_apps": [app["name"] for app in apps],
            "helper_apis": dict(_HELPERS),
            "app_descriptions": json.dumps(apps, indent=1),
        }
        return observation, {}

    def step(self, action: Any) -> tuple[dict, float, bool, dict]:
        self.current_turn += 1
        if self.current_turn >= self.max_turns:
            self.done = True
            return {"error": "Reached maximum steps"}, 0.0, True, {"reason": "max_steps_reached"}
        if not isinstance(action, str):
            return (
                {"error": f"Invalid action type: {type(action).__name__}; expected a string of Python code"},
                0.0,
                False,
                {"reason": "invalid_action_type"},
            )
        if self.world is None:
            return {"error": "AppWorld not initialized: call reset()"}, 0.0, False, {"reason": "not_initialized"}
        try:
            with _LOCK:
                output = self.world.execute(action)
                reward = self._grade() if "complete_task" in action else 0.0
        except Exception as e:  # the code's own error: the agent sees it
            return {"error": str(e), "success": False}, 0.0, False, {"reason": "execution_error"}
        self.execution_history.append({"step": self.current_turn, "code": action, "output": output})
        observation = {"output": output, "stdout": "", "stderr": "", "success": True}
        return observation, reward, self.done, {"step": self.current_turn}

    def _grade(self) -> float:
        self.done = True
        if not self.world.task_completed():
            return 0.0
        evaluation = self.world.evaluate()
        return 1.0 if evaluation and evaluation.to_dict().get("success") else 0.0

    def close(self) -> None:
        world, self.world = self.world, None
        if world is not None and hasattr(world, "close"):
            world.close()
