"""The GPU table in one run: `perfguard calibrate` on the GPU-bound study model and the demo
suite (gpu-check's `calibrate` stage).

Run:  .venv/bin/python -m benchmarks.calibrate_gpu --device cuda [--rounds 40]
          [--canary 2,5,10] [--budget 1.0] --out DIR

A scratch folder holds the detection study's GPU-bound model (`gpu-linear`: each block a
2048 x 1024 x 1024 matmul, in eager and compile-reduce-overhead) and the demo suite's forward
items (examples/perf: the MLP, the CNN, the encoder at two batch sizes, in eager). `perfguard
calibrate` compares each with itself `--rounds` times and a quarter as many times at each
canary, on one pair of worker processes: on a GPU, 40 identical comparisons and 10 at each of
+2%, +5% and +10% per item. On CUDA the A/B bar is the GPU-bound suite's (3%, as the
detection study's GPU stage ran). It writes `calibrate.json` (the figures and every round),
`calibrate.md` (the table) and `time.txt` (the wall time) into `--out`.

`--device cpu` rehearses the same path on the CPU (how gpu-check's stage is checked without a
GPU): the GPU-bound model with 2 of its 100 blocks (a CPU takes seconds for all of them).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.detection import GPU_DEPTH, _study_models, _study_test

HERE = Path(__file__).resolve().parent
DEMO = HERE.parent / "examples" / "perf" / "test_models.py"
GPU_BAR = "3"
FORWARD_ITEMS = "test_model or test_mlp or test_convnet or test_encoder"
CPU_DEPTH = 2
"""The GPU-bound model's blocks in a CPU rehearsal (100 on a GPU: seconds a call on a CPU)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--canary", default="2,5,10")
    parser.add_argument("--budget", default="1.0", help="--perfguard-budget of each item")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfguard-calibrate-gpu-") as tmp:
        suite = Path(tmp)
        variants = ["eager", "compile-reduce-overhead"]
        (suite / "test_study.py").write_text(_study_test(["gpu-linear"], variants))
        models = _study_models(0)
        if not args.device.startswith("cuda"):  # a rehearsal: the same path, a CPU's size
            models = models.replace(f"GPU_DEPTH = {GPU_DEPTH}\n", f"GPU_DEPTH = {CPU_DEPTH}\n")
        (suite / "study_models.py").write_text(models)
        shutil.copy(DEMO, suite / "test_models.py")
        ini = "[pytest]\n" + (
            f"perfguard_ab_min_change = {GPU_BAR}\n" if args.device.startswith("cuda") else ""
        )
        (suite / "pytest.ini").write_text(ini)
        command = [
            sys.executable,
            "-m",
            "perfguard.cli",
            "calibrate",
            "--rounds",
            str(args.rounds),
            "--canary",
            args.canary,
            "--json",
            str(args.out / "calibrate.json"),
            "-o",
            str(args.out / "calibrate.md"),
            "--",
            "test_study.py",
            "test_models.py",
            "-k",
            FORWARD_ITEMS,
            f"--perfguard-device={args.device}",
            f"--perfguard-budget={args.budget}",
        ]
        started = time.monotonic()
        code = subprocess.run(command, cwd=suite, check=False).returncode
        wall = time.monotonic() - started
    (args.out / "time.txt").write_text(f"{wall:.0f} s wall, exit {code}\n")
    print(f"calibrate: {wall:.0f} s wall, exit {code}", flush=True)
    sys.exit(0 if code in (0, 1) else code)


if __name__ == "__main__":
    main()
