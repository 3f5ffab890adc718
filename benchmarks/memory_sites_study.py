"""Memory sites study: does "where the memory went" name the code that allocated the change?

Run:  .venv/bin/python -m benchmarks.memory_sites_study [--runs 10]
          [--out benchmarks/data/memory-sites-study.json]

For three models (an MLP, a CNN, a transformer encoder layer), on this machine's device: a
head that keeps one extra activation of a known size in its `forward` (an `aten::mul` of a
known tensor) against its base, `--runs` times, each time recorded afresh
(`perfguard.measure.memory_sites.record`, one call per side) and matched
(`perfguard.records.sites.diff`, changes over 64 KiB); identical code against itself; and a
model that appends its output to a list each call (a leak), whose held sites must name it.
A run is right when the first changed site is the head's `forward` with `aten::mul` and its
change is the extra's size (exact on the CPU; within 1 MiB on CUDA).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perfguard.measure.memory_sites import record
from perfguard.stats.memory_why import LEAST_BYTES, diff


class Mlp(nn.Module):
    def __init__(self, extra: bool = False, leak: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(512, 2048), nn.Linear(2048, 512)
        self.extra, self.leak = extra, leak
        self.held: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> Any:
        h = self.a(x)
        kept = h * 2 if self.extra else None  # live through the rest: it raises the peak
        out = self.b(torch.relu(h))
        if self.leak:
            self.held.append(out * 1)
        return (out, kept) if self.extra else out


class Cnn(nn.Module):
    def __init__(self, extra: bool = False, leak: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1, self.c2 = nn.Conv2d(16, 32, 3, padding=1), nn.Conv2d(32, 16, 3, padding=1)
        self.extra, self.leak = extra, leak
        self.held: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> Any:
        h = torch.relu(self.c1(x))
        kept = h * 2 if self.extra else None
        out = self.c2(h)
        if self.leak:
            self.held.append(out * 1)
        return (out, kept) if self.extra else out


class Encoder(nn.Module):
    def __init__(self, extra: bool = False, leak: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
        self.extra, self.leak = extra, leak
        self.held: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> Any:
        kept = x * 2 if self.extra else None
        out = self.layer(x)
        if self.leak:
            self.held.append(out * 1)
        return (out, kept) if self.extra else out


MODELS: dict[str, tuple[type[nn.Module], tuple[int, ...], tuple[int, ...]]] = {
    # name: (class, input shape, the extra activation's shape)
    "mlp": (Mlp, (256, 512), (256, 2048)),
    "cnn": (Cnn, (8, 16, 32, 32), (8, 32, 32, 32)),
    "encoder": (Encoder, (16, 64, 128), (16, 64, 128)),  # the extra is the input's size
}


def sites(model: nn.Module, shape: tuple[int, ...], device: torch.device) -> Any:
    model = model.to(device).eval()
    x = torch.randn(*shape, device=device)
    with torch.no_grad():
        model(x)
        return record(lambda: model(x), device)


def one(name: str, device: torch.device) -> dict[str, Any]:
    cls, shape, extra_shape = MODELS[name]
    extra = 4
    for n in extra_shape:
        extra *= n
    tolerance = 0 if device.type == "cpu" else 1 << 20
    changes = diff(sites(cls(), shape, device)[0], sites(cls(extra=True), shape, device)[0],
                   least=LEAST_BYTES)  # fmt: skip
    first = changes[0] if changes else None
    right = (
        first is not None
        and first.where.endswith(": forward")
        and (device.type == "cuda" or first.op == "aten::mul")
        and abs(first.change_bytes - extra) <= max(tolerance, 64)
    )
    same = diff(sites(cls(), shape, device)[0], sites(cls(), shape, device)[0], least=LEAST_BYTES)
    held = [s for s in sites(cls(leak=True), shape, device)[1] if s.bytes >= LEAST_BYTES]
    return {
        "model": name,
        "extra_bytes": extra,
        "first": None if first is None else first.to_json(),
        "right": right,
        "identical_changed": [c.to_json() for c in same],
        "leak_named": bool(held) and held[0].where.endswith(": forward"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "memory-sites-study.json"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = [one(name, device) for _ in range(args.runs) for name in MODELS]
    summary = {}
    for name in MODELS:
        mine = [r for r in rows if r["model"] == name]
        summary[name] = {
            "named_first_with_its_size": f"{sum(r['right'] for r in mine)}/{len(mine)}",
            "identical_with_a_changed_site": f"{sum(bool(r['identical_changed']) for r in mine)}"
            f"/{len(mine)}",
            "leak_named": f"{sum(r['leak_named'] for r in mine)}/{len(mine)}",
        }
        print(f"{name:<8} {summary[name]}", flush=True)
    doc = {"device": str(device), "torch": torch.__version__, "summary": summary, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
