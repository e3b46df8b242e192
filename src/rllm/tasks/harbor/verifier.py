"""Harbor's verifier, run where the agent worked: `tests/` is put at /tests from the task folder (a pristine copy: the
agent never had it), the reward files of an earlier run are removed, `/tests/test.sh` runs in the working directory
with [verifier].env and the verifier's timeout, its output going to /logs/verifier/test-stdout.txt, and the reward
is read as Harbor reads it (`harbor.verifier.verifier.Verifier`): reward.json first (an object of finite numbers;
its "reward" key, or its only key), else reward.txt (one finite number). A test script that writes no reward, runs
past the timeout, or writes one that is not a number is a `HarborVerifierError` naming what happened: a refused
reward, never a 0 (the episode ends as an error and is not trained on).

`VERIFY_SCRIPT` is what runs inside the task's environment (sandbox or container): it reports back on its stdout in
lines `@@rllm-harbor <key> <base64>`, read by `read_report`; the test script's own output goes to the log file, so
nothing it prints can pass for the report.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import tag_site
from rllm.rewards.base import RewardError

__all__ = ["VERIFY_SCRIPT", "HarborGrade", "HarborVerifierError", "grade_report", "read_report"]

MARK = "@@rllm-harbor"
# $1: the timeout in seconds. RLLM_HARBOR_LOGS (the sandbox): /logs/* are links into that directory on /tmp, remade
# here so that nothing the agent left in it counts.
VERIFY_SCRIPT = f"""#!/bin/bash
t="$1"
if [ -n "${{RLLM_HARBOR_LOGS:-}}" ]; then
  chmod -R u+rwX "$RLLM_HARBOR_LOGS" 2>/dev/null
  if [ -L "$RLLM_HARBOR_LOGS" ] || [ ! -d "$RLLM_HARBOR_LOGS" ]; then rm -rf "$RLLM_HARBOR_LOGS"; fi
  rm -rf "$RLLM_HARBOR_LOGS/verifier"
  mkdir -p "$RLLM_HARBOR_LOGS/verifier" "$RLLM_HARBOR_LOGS/agent" "$RLLM_HARBOR_LOGS/artifacts"
else
  mkdir -p /logs/verifier /logs/agent /logs/artifacts && rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
fi
if [ ! -f /tests/test.sh ]; then echo "{MARK} error $(echo "no /tests/test.sh" | base64 | tr -d '\\n')"; exit 0; fi
if head -c 2 /tests/test.sh | grep -q '#!'; then chmod +x /tests/test.sh 2>/dev/null; run=/tests/test.sh
else run="bash /tests/test.sh"; fi
start=$(date +%s)
if command -v timeout >/dev/null; then
  timeout -k 5 "$t" $run > /logs/verifier/test-stdout.txt 2>&1 < /dev/null
else
  $run > /logs/verifier/test-stdout.txt 2>&1 < /dev/null
fi
code=$?
echo "{MARK} exit $(echo "$code" | base64 | tr -d '\\n')"
echo "{MARK} elapsed $(echo "$(( $(date +%s) - start ))" | base64 | tr -d '\\n')"
for name in reward.txt reward.json; do
  if [ -f "/logs/verifier/$name" ]; then
    echo "{MARK} $name $(head -c 65536 "/logs/verifier/$name" | base64 | tr -d '\\n')"
  fi
done
echo "{MARK} output $(tail -c 3000 /logs/verifier/test-stdout.txt 2>/dev/null | base64 | tr -d '\\n')"
"""


class HarborVerifierError(RewardError):
    """The verifier gave no reward: `kind` is verifier_no_reward, verifier_crashed, verifier_timeout,
    verifier_bad_reward or verifier_died. A refused reward (the episode is an error, never trained as 0)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        tag_site(self, "reward")


@dataclass
class HarborGrade:
    """A verifier's result: `reward` (Harbor's primary reward), every reward it wrote, and whether it is full credit
    (`resolved`: reward >= 1)."""

    reward: float
    rewards: dict[str, float] = field(default_factory=dict)
    reason: str = "graded"
    detail: str = ""

    @property
    def resolved(self) -> bool:
        return self.reward >= 1.0


def read_report(output: str) -> dict[str, str]:
    """The report lines of VERIFY_SCRIPT's output, decoded (the last line of each key wins)."""
    report = {}
    for line in output.splitlines():
        if line.startswith(MARK + " "):
            parts = line.split(" ")
            if len(parts) >= 2:
                try:
                    report[parts[1]] = base64.b64decode(parts[2] if len(parts) > 2 else "").decode(errors="replace")
                except ValueError:
                    continue
    return report


def grade_report(report: dict[str, str], timeout_s: float) -> HarborGrade:
    """The grade a report says, or `HarborVerifierError`."""
    tail = report.get("output", "").strip()
    detail = f"; its output ends: {tail[-500:]!r}" if tail else ""
    if "error" in report:
        raise HarborVerifierError("verifier_no_reward", report["error"].strip())
    if "exit" not in report:
        raise HarborVerifierError("verifier_died", "the verifier's script did not finish")
    code, elapsed = report["exit"].strip(), report.get("elapsed", "0").strip()
    if code == "124" or (code == "137" and elapsed.isdigit() and int(elapsed) >= timeout_s - 1):
        raise HarborVerifierError(
            "verifier_timeout",
            f"tests/test.sh ran past the verifier's timeout, {timeout_s:g} s ([verifier].timeout_sec)",
        )
    if "reward.json" in report:
        rewards = _json_rewards(report["reward.json"])
    elif "reward.txt" in report:
        rewards = {"reward": _text_reward(report["reward.txt"])}
    elif code != "0":
        raise HarborVerifierError(
            "verifier_crashed", f"tests/test.sh exited {code} and wrote no /logs/verifier/reward.txt{detail}"
        )
    else:
        raise HarborVerifierError(
            "verifier_no_reward",
            f"tests/test.sh wrote neither /logs/verifier/reward.txt nor reward.json (it exited 0){detail}",
        )
    primary = (
        rewards.get("reward") if "reward" in rewards else (next(iter(rewards.values())) if len(rewards) == 1 else None)
    )
    if primary is None:
        raise HarborVerifierError(
            "verifier_bad_reward", f"reward.json has the keys {sorted(rewards)} and none is 'reward'"
        )
    return HarborGrade(float(primary), {k: float(v) for k, v in rewards.items()}, detail=tail[-2000:])


def _text_reward(text: str) -> float:
    if not text.strip():
        raise HarborVerifierError("verifier_bad_reward", "/logs/verifier/reward.txt is empty")
    try:
        value = float(text)
    except ValueError:
        raise HarborVerifierError(
            "verifier_bad_reward", f"/logs/verifier/reward.txt holds {text.strip()[:100]!r}, not a number"
        ) from None
    if not math.isfinite(value):
        raise HarborVerifierError("verifier_bad_reward", f"/logs/verifier/reward.txt holds {value!r}")
    return value


def _json_rewards(text: str) -> dict[str, Any]:
    if not text.strip():
        raise HarborVerifierError("verifier_bad_reward", "/logs/verifier/reward.json is empty")
    try:
        rewards = json.loads(text)
    except ValueError as e:
        raise HarborVerifierError("verifier_bad_reward", f"/logs/verifier/reward.json is not JSON ({e})") from None
    if not isinstance(rewards, dict) or not rewards:
        raise HarborVerifierError(
            "verifier_bad_reward",
            f"/logs/verifier/reward.json must be an object of numbers, got {text.strip()[:100]!r}",
        )
    for key, value in rewards.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise HarborVerifierError(
                "verifier_bad_reward", f"/logs/verifier/reward.json: {key!r} is {value!r}, not a finite number"
            )
    return rewards
