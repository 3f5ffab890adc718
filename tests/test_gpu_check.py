"""`make gpu-check` on a machine without CUDA: one line, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu-check runs")
def test_gpu_check_without_cuda_says_so_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "figures"
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "gpu-check.sh")],
        env={**os.environ, "PYTHON": sys.executable, "GPU_CHECK_OUT": str(out)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("gpu-check: no CUDA device here")
    assert len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()
