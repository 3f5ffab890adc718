"""Does judging drift on the model's own precision decide as judging on fp64 does?

Run:  .venv/bin/python -m benchmarks.fp32_reference

Above a size (`drift.FP64_PIECE_SHARE`), perfguard judges a variant's drift against eager in
the model's own precision instead of fp64 (`reference: fp32`). For the example models, every
CPU variant that changes the numerics (autocast, int8, pruning) and eager itself is judged
both ways on the same outputs; the table says where the two verdicts agree, and the error
each allows. Figures go to `benchmarks/data/fp32-reference.json`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from perfguard import Job, MeasureSettings, SamplingSettings, compute_reference, measure_model
from perfguard.examples import SmallCNN, SmallEncoder, SmallMLP, example_inputs
from perfguard.measure import drift

VARIANTS = (
    "eager",
    "amp-bf16",
    "int8-dynamic",
    "int8-weight-only",
    "prune-l1-unstructured",
    "prune-ln-structured",
)
SETTINGS = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.02, repeats=2, min_samples_per_repeat=3),
    memory_calls=1,
    device="cpu",
)


OUTPUTS: list[Any] = []  # what each measured variant's drift check was given
_CHECK = drift.check


def _keeping(out: Any, *rest: Any, **kw: Any) -> Any:
    OUTPUTS.append(out)
    return _CHECK(out, *rest, **kw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "fp32-reference.json"
    )
    args = parser.parse_args()
    rows = []
    for model_cls in (SmallMLP, SmallCNN, SmallEncoder):
        torch.manual_seed(0)
        model = model_cls().eval()
        inputs = example_inputs(model)
        reference = compute_reference(model, inputs, torch.device("cpu"))
        own = replace(reference, fp64=None)
        for variant in VARIANTS:
            OUTPUTS.clear()
            drift.check = _keeping
            try:
                result = measure_model(
                    Job.of(model, inputs, variant, SETTINGS), reference=reference
                )
            finally:
                drift.check = _CHECK
            if result.status != "ok" or result.drift_check is None or not OUTPUTS:
                continue
            cls = result.drift_check.tolerance_class
            on_fp32 = drift.judge(OUTPUTS[0], own, cls)
            row: dict[str, Any] = {
                "model": model_cls.__name__,
                "variant": variant,
                "class": cls,
                "fp64": result.drift_check.passed,
                "fp32": on_fp32.passed,
                "error_fp64": result.drift_check.error,
                "error_fp32": on_fp32.error,
                "allowed_fp64": result.drift_check.allowed,
                "allowed_fp32": on_fp32.allowed,
            }
            rows.append(row)
            print(
                f"{row['model']:12} {variant:22} {cls:17} fp64 {'pass' if row['fp64'] else 'FAIL'}"
                f"  fp32 {'pass' if row['fp32'] else 'FAIL'}"
                f"  error/allowed {row['error_fp64'] / row['allowed_fp64']:.3f}"
                f" vs {row['error_fp32'] / row['allowed_fp32']:.3f}",
                flush=True,
            )
    agree = sum(r["fp64"] == r["fp32"] for r in rows)
    print(f"verdicts agree in {agree} of {len(rows)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"agree": agree, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
