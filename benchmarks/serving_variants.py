"""The serving variants on the CPU: `aot-inductor` and `compile-dynamic` on the demo's MLP and
a GPT-2 built from its config, and whether a recompile storm is told from identical code.

Run:  .venv/bin/python -m benchmarks.serving_variants [--runs 10]

1. Figures: each variant of each model once: latency, compile time (for aot-inductor, the
   package's build), export and load time and the package's size, the drift check, the
   recompiles and the latency at each declared shape.
2. The recompile study: `--runs` pairs of identical code (a clean model measured twice under
   compile-dynamic at 4 shapes) and `--runs` pairs where the head adds a guard on a size
   (`x.shape[0] == 4`: a recompile at that shape), each pair compared by perfguard's exact
   signals: how often the storm is flagged (regression of `recompiles`, with dynamo's reason)
   and how often identical code is. Each measurement in a fresh process.

Figures go to `benchmarks/data/serving-variants.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ONE = """
import json, sys, torch
from torch import nn
from perfguard import Job, MeasureSettings, SamplingSettings, measure_model

class Clean(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
    def forward(self, x):
        return torch.relu(self.lin(x))

class Guarded(Clean):
    def forward(self, x):
        y = torch.relu(self.lin(x))
        return y * 2 if x.shape[0] == 4 else y

torch.manual_seed(0)
model = {"clean": Clean, "guarded": Guarded}[sys.argv[1]]().eval()
settings = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.1, repeats=2, min_samples_per_repeat=3),
    memory_calls=1, device="cpu", shapes=((2, 16), (4, 16), (8, 16), (16, 16)),
)
result = measure_model(Job.of(model, (torch.randn(8, 16),), "compile-dynamic", settings))
print(json.dumps(result.to_json()))
"""


def one(kind: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", ONE, kind], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def study(runs: int) -> dict[str, Any]:
    from perfguard.records import VariantResult
    from perfguard.stats.exact import exact_comparisons

    found: dict[str, Any] = {"identical": [], "storm": []}
    for i in range(runs):
        for name, head_kind in (("identical", "clean"), ("storm", "guarded")):
            base = VariantResult.from_json(one("clean"))
            head = VariantResult.from_json(one(head_kind))
            rows = {
                c.metric: c
                for c in exact_comparisons(
                    "t", "compile-dynamic", base.counters, head.counters, gate_ops=False
                )
            }
            row = rows["recompiles"]
            found[name].append(
                {
                    "verdict": row.verdict,
                    "base": row.baseline,
                    "head": row.current,
                    "note": row.note,
                }
            )
            print(f"run {i + 1} {name}: {row.verdict} ({row.note})", flush=True)
    return {
        "runs": runs,
        "storm_flagged": sum(r["verdict"] == "regression" for r in found["storm"]),
        "identical_flagged": sum(r["verdict"] != "unchanged" for r in found["identical"]),
        "pairs": found,
    }


def figures() -> list[dict[str, Any]]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from perfguard import Job, MeasureSettings, SamplingSettings, measure_model
    from perfguard.examples import SmallMLP, example_inputs

    torch.manual_seed(0)
    mlp = SmallMLP().eval()
    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=100,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    gpt2 = GPT2LMHeadModel(config).eval()  # type: ignore[no-untyped-call]
    ids = torch.randint(0, 100, (2, 16))
    x = example_inputs(mlp)
    width = int(x[0].shape[-1])
    cases = [
        ("mlp", mlp, x, {}, ((1, width), (8, width), (32, width))),
        ("gpt2", gpt2, (ids,), {"use_cache": False}, ((1, 8), (2, 16), (4, 32))),
    ]
    rows = []
    for name, model, inputs, kwargs, shapes in cases:
        for variant in ("aot-inductor", "compile-dynamic"):
            settings = MeasureSettings(
                sampling=SamplingSettings(budget_s=0.2, repeats=3), device="cpu", shapes=shapes
            )
            started = time.monotonic()
            r = measure_model(Job.of(model, inputs, variant, settings, kwargs=kwargs))
            row = {
                "model": name,
                "variant": variant,
                "status": r.status,
                "error": r.error,
                "p50_ms": r.metrics.latency_p50_ms,
                "compile_time_s": r.metrics.compile_time_s,
                "drift": None if r.drift_check is None else r.drift_check.to_json(),
                "recompiles": None if r.counters is None else r.counters.recompiles,
                "build": r.details.build,
                "wall_s": round(time.monotonic() - started, 1),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "serving-variants.json"
    )
    args = parser.parse_args()
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "figures": figures(),
        "study": study(args.runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    found = out["study"]
    assert isinstance(found, dict)
    print(
        f"recompile storm flagged in {found['storm_flagged']} of {found['runs']}; identical "
        f"code flagged in {found['identical_flagged']} of {found['runs']}"
    )


if __name__ == "__main__":
    main()
