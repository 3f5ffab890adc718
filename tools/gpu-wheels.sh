#!/usr/bin/env bash
# make gpu-wheels: the wheels `make gpu-check` installs on a GPU image that lacks them, for
# Python 3.12 on x86-64 Linux, into .whl/ (git-ignored). The image has torch, triton, onnx,
# onnxruntime (CPU), nvidia-ml-py, numpy, scipy, pandas, jinja2, filelock and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
get() {
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d .whl "$@"
}
get gitpython==3.2.1 gitdb smmap torchao==0.18.0
if [ "${GPU_WHEELS_ORT:-0}" = 1 ]; then get onnxruntime-gpu==1.31.1; fi
du -sh .whl
