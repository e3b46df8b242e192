#!/usr/bin/env bash
# The package as pip users get it (`make wheel-test`, part of `make test`): build the sdist and the wheel, install
# the wheel with the torch extra into a fresh venv outside the checkout (pip resolves every dependency from the
# wheel's metadata, so a dependency missing there fails here), then run the first commands a user types from a
# folder that has no configs/: fetch, configs, configs cp, and one tiny training step of a shipped config by name.
# The rllm-compat distribution (compat/) is built beside it: the core wheel holds none of it, an rLLM path fails
# with the line that names it until `rllm[compat]` (resolved from the built wheels) installs it.
#
#   scripts/wheel_test.sh [PYTHON]     PYTHON builds (needs `build`, the dev extra) and makes the venv; default .venv
#
# The embedded model is reused from $RLLM_HOME (`make models` fetched it); the fresh venv costs ~1 min and 1.3 GB
# (torch), removed at the end. WHEEL_TEST_KEEP=1 keeps the folder for inspection.
set -euo pipefail
checkout="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-$checkout/.venv/bin/python}"
case "$python" in /*) ;; */*) python="$PWD/$python" ;; esac  # absolute, the venv's symlink kept
work="$(mktemp -d "${TMPDIR:-/tmp}/rllm-wheel-test.XXXXXX")"
[ -n "${WHEEL_TEST_KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }

step "build the sdist and the wheel"
# from a copy of the checkout's files (tracked, and untracked but not ignored): a build writes its egg-info where it
# builds, and `make test` runs this beside the verl venv's editable install, which writes the checkout's
mkdir "$work/source"
git -C "$checkout" ls-files -z --cached --others --exclude-standard |
  tar -C "$checkout" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$work/source" -xf -
"$python" -m build --outdir "$work/dist" "$work/source" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$python" -m build --outdir "$work/dist" "$work/source/compat" >"$work/build-compat.log" 2>&1 ||
  { cat "$work/build-compat.log"; exit 1; }
wheel="$(ls "$work"/dist/rllm-0*.whl)"
ls "$work"/dist/rllm-0*.tar.gz "$work"/dist/rllm_compat-*.whl "$work"/dist/rllm_compat-*.tar.gz >/dev/null
"$python" -c 'import sys, zipfile; names = [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("rllm/compat/")]; sys.exit(f"the core wheel holds {names[:3]}" if names else 0)' "$wheel"
configs_in_wheel="$("$python" -c 'import sys, zipfile; print(sum(n.startswith("rllm/configs/") and n.endswith(".yaml") for n in zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")"
configs_in_checkout="$(ls "$checkout"/configs/*.yaml | wc -l)"
[ "$configs_in_wheel" = "$configs_in_checkout" ] || { echo "the wheel holds $configs_in_wheel configs, configs/ $configs_in_checkout"; exit 1; }

step "a fresh venv installs $(basename "$wheel")[torch]"
# --no-compile: the few commands below compile what they import (where bytecode may be written); compiling the
# whole venv first took longer than they do
"$python" -m venv "$work/venv"  # from a venv's Python too, the new venv has only the base interpreter's stdlib
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile "$wheel[torch]" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }

mkdir "$work/user" && cd "$work/user"  # no checkout here: every config comes from the installed wheel
rllm="$work/venv/bin/rllm"
"$work/venv/bin/python" -c 'import rllm, sys; sys.exit("rllm imported from the checkout" if sys.argv[1] in rllm.__file__ else 0)' "$checkout"

step "rllm fetch smollm2-135m-instruct"
"$rllm" fetch smollm2-135m-instruct

step "rllm configs"
"$rllm" configs | tee configs.txt
grep -q '^arithmetic_grpo  *rllm train  *The main job' configs.txt || { echo "rllm configs lacks arithmetic_grpo"; exit 1; }

step "rllm configs cp arithmetic_grpo my.yaml"
"$rllm" configs cp arithmetic_grpo my.yaml
cmp my.yaml "$checkout/configs/arithmetic_grpo.yaml"

step "the SWE task's data and the scripts it runs by path (in the sandbox) are in the wheel"
"$work/venv/bin/python" - <<'EOF'
from pathlib import Path

import rllm.tasks.swe as swe
from rllm.tasks.swe.build import load_default_tasks

scripts = ["workspace_server.py", "patches.py", "rllm_swe_harness.py", "rllm_swe_report.py", "rllm_swe_trace.py"]
missing = [name for name in scripts if not (Path(swe.__file__).parent / name).is_file()]
assert not missing, f"the wheel lacks these files of rllm/tasks/swe: {missing}"
print(len(load_default_tasks()), "shipped SWE tasks")
EOF

step "without rllm-compat an rLLM path names it; rllm[compat] installs it from the built wheels"
"$work/venv/bin/python" -c 'import rllm.environments' 2>compat.err && { echo "rllm.environments imported without rllm-compat"; exit 1; }
grep -q "pip install 'rllm\[compat\]'" compat.err || { cat compat.err; exit 1; }
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile --find-links "$work/dist" "$wheel[compat]" \
  >"$work/install-compat.log" 2>&1 || { cat "$work/install-compat.log"; exit 1; }
"$work/venv/bin/python" -c '
from rllm.agents import BaseAgent, ToolAgent
from rllm.environments.tools.tool_env import ToolEnvironment
assert BaseAgent.__module__ == "rllm.agents.base" and ToolAgent.__module__ == "rllm.compat.agents.tool_agent"
print("rLLM paths served:", ToolEnvironment.__module__)'

step "rllm train arithmetic_grpo trainer.total_steps=1 (the tiny model, tiny sizes)"
"$rllm" train arithmetic_grpo trainer.total_steps=1 model.name=smollm2-135m-instruct model.lora.rank=4 \
  rollout.n=2 rollout.max_tokens=4 trainer.tasks_per_step=2 data.train_size=4 data.val_size=0 optim.micro_batch_size=2 \
  trainer.tensorboard=false trainer.run_dir=runs trainer.name=wheel --no-progress
test -f runs/wheel/metrics.jsonl

step "the wheel works"
