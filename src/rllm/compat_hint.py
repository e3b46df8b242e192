"""Where the rllm-compat distribution is not installed: an import of an rLLM v0.2 path fails with one line naming it.

rLLM's paths (`rllm.environments.tools.tool_env`, `rllm.agents.tool_agent`, `rllm.trainer.agent_trainer`, ...) are
served by `rllm.compat`, a distribution of its own (`pip install 'rllm[compat]'`). Without it Python would say only
"No module named 'rllm.environments'"; this finder, last on `sys.meta_path`, is asked only about an `rllm.` module
that no other finder found, and raises the error that says what to install. It finds nothing itself.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

__all__ = ["COMPAT_HINT", "install_compat_hint"]

COMPAT_HINT = "rLLM v0.2's modules are in the rllm-compat distribution: pip install 'rllm[compat]'"


class _CompatHint(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.startswith("rllm.") and not fullname.startswith("rllm.compat_hint"):
            raise ModuleNotFoundError(f"No module named {fullname!r} ({COMPAT_HINT})", name=fullname)
        return None


_HINT = _CompatHint()


def install_compat_hint() -> None:
    if _HINT not in sys.meta_path:
        sys.meta_path.append(_HINT)
