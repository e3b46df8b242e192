#!/usr/bin/env bash
# Every GPU figure of the project in one prepared run, for a GPU that is lent for a few minutes and has no internet.
#
#   bash benchmarks/gpu_run.sh pack      # here, once: what the GPU machine lacks goes into .gpu/ (git-ignored)
#   bash benchmarks/gpu_run.sh           # there, from the repository root; logs to $OUT (or .gpu/out)
#   bash benchmarks/gpu_run.sh sizes     # there, a second call if the lease has time left (~3 min)
#   bash benchmarks/gpu_run.sh generation  # there: steps 1 and 2 alone (~3 min)
#
# `pack` copies the embedded models' config, tokenizer and manifest files (no weights: 18 MB with the wheels) into
# .gpu/home (an RLLM_HOME the tests and benchmarks read on the GPU) and downloads the pure-Python wheels the GPU
# image lacks into .gpu/whl. With the device tool: carry [".gpu"], timeout_s 590 for the run (each step has its
# own limit, so one hang cannot eat the lease; together ~9.7 minutes at most):
#   1. tests/gpu: CUDA graphs replay what eager steps compute, only ids and log-probs reach the host, the on-device
#      sampler's distribution (limit 90 s);
#   2. benchmarks/local_generation.py --device cuda: LocalModel vs transformers `generate` on random weights of
#      Qwen2.5-0.5B's shape, 64 prompts x 256 tokens, bf16 with the operator counts, then fp32 (230 s);
#   3. benchmarks/gpu_step.py: a GPU-sized GRPO step (rollout vs update), fp32 and bf16 rollouts (260 s).
# `sizes`: gpu_step.py --sizes, the largest Qwen2.5 shape that trains with LoRA in 80 GB (limit 170 s).
# 2 and 3 run through write_results.py; back here `python benchmarks/write_results.py --merge <files_at>/RESULTS.json`
# puts their figures, with the GPU's name, into benchmarks/RESULTS.md.
set -u
cd "$(dirname "$0")/.."
GPU=.gpu

if [ "${1:-run}" = pack ]; then
  PY=${PYTHON:-.venv/bin/python}
  HOME_MODELS=$($PY -c "from rllm.models.registry import rllm_home; print(rllm_home() / 'models')")
  for name in smollm2-135m-instruct qwen2.5-coder-0.5b-instruct; do
    mkdir -p "$GPU/home/models/$name"
    find "$HOME_MODELS/$name" -maxdepth 1 -type f ! -name '*.safetensors' -exec cp {} "$GPU/home/models/$name/" \;
  done
  rm -rf "$GPU/whl" && mkdir -p "$GPU/whl"
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$GPU/whl" pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0 gymnasium==1.4.0 farama-notifications==0.0.4 orjson==3.13.0
  grep -qx "/$GPU/" .git/info/exclude 2>/dev/null || echo "/$GPU/" >> .git/info/exclude
  du -sh "$GPU"
  exit 0
fi

OUTDIR=${OUT:-$GPU/out}
mkdir -p "$OUTDIR"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$GPU"/whl/*.whl
export PYTHONPATH="$PWD/src:$PWD:/tmp/site" RLLM_HOME="$PWD/$GPU/home" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
step() {  # step NAME SECONDS COMMAND...: run it under a timeout, keep its log, say how it ended
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s): $*"
  local started=$SECONDS
  timeout "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  grep -v -E "it/s\]|Loading weights" "$OUTDIR/$name.log" | tail -n 40
  echo "=== $name: exit $rc after $((SECONDS - started)) s"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
RESULTS=(benchmarks/write_results.py --out "$OUTDIR/RESULTS.md" --only)  # each figure also into $OUTDIR/RESULTS.json
if [ "${1:-run}" = sizes ]; then
  step gpu-sizes 170 python3 "${RESULTS[@]}" gpu-sizes
  exit 0
fi
step gpu-tests 90 python3 -m pytest -q -p no:cacheprovider tests/gpu
step gpu-generation 230 python3 "${RESULTS[@]}" gpu-generation-bf16 gpu-generation-fp32
[ "${1:-run}" = generation ] || step gpu-step 260 python3 "${RESULTS[@]}" gpu-step
