#!/usr/bin/env bash
# make gpu-check: everything perfguard checks on a GPU, every figure and log in one folder.
#
# On a CUDA machine with this tree (a GPU runner, or the device machine). It pins nothing: it
# uses the machine's own torch (a CUDA build), triton, onnx and nvidia-ml-py, and installs
# what that image lacks from wheels in .whl/ when they are there (`make gpu-wheels` fetches
# them on a machine with a registry: gitpython and what it needs, torchao; onnxruntime-gpu
# only with GPU_WHEELS_ORT=1, as it is large). Without CUDA it says so and exits 2.
#
# Writes to $GPU_CHECK_OUT (default: $OUT when set, else gpu-check/):
#   env.txt           nvidia-smi, torch, CUDA, NVML's view of the GPU and its compute mode
#   cuda-tests.log    the `cuda` tests, one item per variant and model (+ cuda-tests.xml)
#   timer.log         perfguard's median against torch.utils.benchmark.Timer and do_bench
#   variants.md/.json every variant of the demo models on CUDA (latency, memory, compile, drift)
#   ab-study.md       a short paired study: identical code and injected slowdowns, beside the base
#   summary.txt       what ran, and how each step ended
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "gpu-check: no CUDA device here ($PY cannot import a torch that sees one): run it on a GPU machine" >&2
  exit 2
fi
out=${GPU_CHECK_OUT:-${OUT:-gpu-check}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || { echo "gpu-check: the wheels in .whl/ did not install" >&2; exit 2; }
fi
# perfguard itself (with its pytest entry point), from this tree, without touching the image
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target "$site" . \
  || { echo "gpu-check: perfguard did not install from this tree" >&2; exit 2; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

status=0
step() {  # step NAME LOG COMMAND...: run, keep the log, remember a failure, go on
  local name=$1 log=$2; shift 2
  echo "== $name" | tee -a "$out/summary.txt"
  local started=$SECONDS
  "$@" >"$out/$log" 2>&1
  local code=$?
  echo "   exit $code after $((SECONDS - started)) s (log: $log)" | tee -a "$out/summary.txt"
  [ "$code" -eq 0 ] || status=1
}

: >"$out/summary.txt"
env_report() {
  nvidia-smi || true
  "$PY" - <<'PY'
import torch
from perfguard.environment import cuda_gpu_id
from perfguard.health import Monitor, compute_mode, gpu_handle, load_nvml
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
gpu = cuda_gpu_id(torch.cuda.current_device())
print("CUDA's device:", gpu)
nvml = load_nvml()
if nvml is None:
    print("NVML: not available")
else:
    handle = gpu_handle(nvml, gpu)
    name = nvml.nvmlDeviceGetName(handle)
    print("NVML's GPU for it:", name.decode() if isinstance(name, bytes) else name)
    print("compute mode:", compute_mode(gpu))
monitor = Monitor("cuda", gpu=gpu)
monitor.start()
print("runner health:", monitor.stop().to_json())
PY
}
step "environment and NVML" env.txt env_report
step "cuda tests" cuda-tests.log "$PY" -m pytest tests/test_cuda.py tests/test_health.py tests/test_ort.py \
  -v -rs -p no:cacheprovider --junitxml="$out/cuda-tests.xml"
step "timer accuracy (Timer, do_bench)" timer.log "$PY" benchmarks/timer_accuracy.py --device cuda --rounds 5
variants=$("$PY" -c 'from perfguard.variants.spec import BASE_VARIANTS; print(",".join(BASE_VARIANTS))')
step "every variant of the demo models" variants.log "$PY" -m pytest examples/perf -p no:cacheprovider \
  --perfguard --perfguard-device=cuda --perfguard-variants="$variants" --perfguard-compare=none \
  --perfguard-json="$out/variants.json" --perfguard-report="$out/variants.md"
step "paired study (same-job A/B)" ab-study.log "$PY" benchmarks/detection.py run-ab \
  --dir "$(mktemp -d)/ab" --plan "${GPU_CHECK_PLAN:-0:8,5:8,20:4}"
grep -A20 "^| injected" "$out/ab-study.log" >"$out/ab-study.md" 2>/dev/null || true
echo "gpu-check: $([ $status -eq 0 ] && echo 'every step passed' || echo 'some steps failed'); figures in $out"
exit $status
