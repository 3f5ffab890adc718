"""The GPU table in one run: `perfguard calibrate` on the GPU-bound study model and the demo
suite (gpu-check's `calibrate` stage).

Run:  .venv/bin/python -m benchmarks.calibrate_gpu --device cuda [--rounds 40]
          [--canary 2,5,10] [--budget 0.25] [--part forward|compiled] [--pairs N] --out DIR

A scratch folder holds the detection study's GPU-bound model (`gpu-linear`: each block a
2048 x 1024 x 1024 matmul) and the demo suite's forward items (examples/perf: the MLP, the
CNN and the encoder), in eager: 4 items (`--part compiled`: the study model alone, in
compile-reduce-overhead). `perfguard calibrate` compares each with itself `--rounds` times and
a quarter as many times at each canary, on its pairs of worker processes (eight by default):
on a GPU, 40 identical comparisons and 10 at each of +2%, +5% and +10% per item, 280 in all.
On CUDA the A/B bar is the GPU-bound suite's (3%, as the detection study's GPU stage ran).
It writes `calibrate.json` (the figures and every round), `calibrate.md` (the table) and
`time.txt` (the wall time) into `--out`.

`--device cpu` rehearses the same path on the CPU (how gpu-check's stage is checked without a
GPU): the GPU-bound model with 2 of its 100 blocks and 64 rows of input (a CPU takes
seconds for all of it).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.detection import GPU_DEPTH, _study_models, _study_test

HERE = Path(__file__).resolve().parent
DEMO = HERE.parent / "examples" / "perf" / "test_models.py"
GPU_BAR = "3"
FORWARD_ITEMS = "(gpu or test_mlp or test_convnet or test_encoder) and not training"
"""The study's items (`test_model[gpu-linear-...]`) and the demo's forward items (`-k` reads
the file's name too: `test_model` would take all of test_models.py)."""
BUDGET = "0.25"
"""Each item's sampling budget: a block is a fifth of it (or ten calls, if longer), a
comparison at least six pairs of blocks. At 0.25 s, 5 items x 70 comparisons fit the stage's
8 minutes with the workers' starts (the CPU rehearsal's figures: docs/runner-setup.md)."""
CPU_DEPTH = 2
"""The GPU-bound model's blocks in a CPU rehearsal (100 on a GPU: seconds a call on a CPU)."""
CPU_ROWS = 64
"""Its input's rows in a CPU rehearsal (2048 on a GPU)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--canary", default="2,5,10")
    parser.add_argument("--budget", default=BUDGET, help="--perfguard-budget of each item")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--part",
        choices=("forward", "compiled"),
        default="forward",
        help="forward: the study model and the demo's forward items in eager; compiled: the "
        "study model in compile-reduce-overhead (compile-default on a CPU)",
    )
    parser.add_argument("--pairs", help="calibrate's --pairs (its default when left out)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfguard-calibrate-gpu-") as tmp:
        suite = Path(tmp)
        # on a CPU, compile-default in its stead: reduce-overhead's point is CUDA graphs,
        # and perfguard refuses it elsewhere
        compiled = (
            "compile-reduce-overhead" if args.device.startswith("cuda") else "compile-default"
        )
        variants = [compiled] if args.part == "compiled" else ["eager"]
        (suite / "test_study.py").write_text(_study_test(["gpu-linear"], variants))
        models = _study_models(0)
        if not args.device.startswith("cuda"):  # a rehearsal: the same path, a CPU's size
            models = models.replace(f"GPU_DEPTH = {GPU_DEPTH}\n", f"GPU_DEPTH = {CPU_DEPTH}\n")
            models = models.replace("torch.randn(2048, 1024,", f"torch.randn({CPU_ROWS}, 1024,")
        (suite / "study_models.py").write_text(models)
        # the demo suite's items in eager only (its markers name up to five variants each)
        demo = re.sub(r"variants=(VARIANTS|\[[^\]]*\])", 'variants=["eager"]', DEMO.read_text())
        (suite / "test_models.py").write_text(demo)
        ini = "[pytest]\n" + (
            f"perfguard_ab_min_change = {GPU_BAR}\n" if args.device.startswith("cuda") else ""
        )
        (suite / "pytest.ini").write_text(ini)
        command = [
            sys.executable,
            "-m",
            "perfguard.cli",
            "calibrate",
            *(["--pairs", args.pairs] if args.pairs else []),
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
            *(["test_models.py", "-k", FORWARD_ITEMS] if args.part == "forward" else []),
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
