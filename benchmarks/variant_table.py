"""The variant table: one row per test and variant from perfguard results files.

    python3 benchmarks/variant_table.py RESULTS.json|DIR [...] [--out table.md]

What `make gpu-check`'s variants and autotune stages end with (one results file per variant),
and what docs/method.md quotes: p50/p95/p99 from the event clock, the device's own time from
the profiled calls, the allocator's peak (and what the caching allocator reserved), the cold
and warm compile, drift against fp64 with its class's allowance, and each generation's TTFT and
TPOT. A skipped or failed item is one row with its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.1f} µs" if value < 1 else f"{value:.2f} ms"


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value / MIB:.1f}"


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} s"


def rows(results: Iterable[dict[str, Any]]) -> list[str]:
    """The table's Markdown rows (header first) for `results` (results files' `results`)."""
    out = [
        "| test | variant | p50 | p95 | p99 | device time | peak MiB (reserved) "
        "| compile cold / warm | drift (allowed) | TTFT / TPOT p50 | notes |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        test = r["test"].split("::", 1)[-1]
        if r["status"] != "ok":
            reason = (r.get("error") or "").splitlines()[0][:120] if r.get("error") else ""
            out.append(f"| {test} | {r['variant']} | {r['status']}: {reason} |" + " |" * 8)
            continue
        m = r["metrics"]
        drift = r.get("drift_check") or {}
        drift_cell = (
            f"{drift['error']:.1e} ({drift['allowed']:.1e})"
            if drift.get("error") is not None and drift.get("allowed") is not None
            else "–"
        )
        tokens = (
            f"{_ms(m.get('ttft_p50_ms'))} / {_ms(m.get('tpot_p50_ms'))}"
            if m.get("ttft_p50_ms") is not None
            else "–"
        )
        reserved = m.get("peak_memory_reserved_bytes")
        memory = _mib(m.get("peak_memory_bytes")) + (
            f" ({_mib(reserved)})" if reserved is not None else ""
        )
        details = r.get("details") or {}
        notes = "; ".join(details.get("notes") or [])
        if details.get("cudagraph_skips"):
            skips = f"CUDA graphs skipped: {details['cudagraph_skips']}"
            notes = "; ".join(filter(None, [notes, skips]))
        out.append(
            " | ".join(
                [
                    f"| {test}",
                    r["variant"],
                    _ms(m.get("latency_p50_ms")),
                    _ms(m.get("latency_p95_ms")),
                    _ms(m.get("latency_p99_ms")),
                    _ms(m.get("device_time_ms")),
                    memory,
                    f"{_s(m.get('compile_time_s'))} / {_s(m.get('compile_time_warm_s'))}",
                    drift_cell,
                    tokens,
                    notes.replace("|", "/") + " |",
                ]
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "files", nargs="+", type=Path, help="perfguard results JSON files, or folders of them"
    )
    p.add_argument("--out", type=Path, help="write the table here too")
    args = p.parse_args(argv)
    results: list[dict[str, Any]] = []
    files = [
        f for path in args.files for f in (sorted(path.glob("*.json")) if path.is_dir() else [path])
    ]
    for path in files:
        try:
            results.extend(json.loads(path.read_text(encoding="utf-8"))["results"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"variant-table: {path}: not a perfguard results file ({exc})", file=sys.stderr)
            return 2
    results.sort(key=lambda r: (r["test"], r["variant"]))
    table = "\n".join(rows(results)) + "\n"
    print(table, end="")
    if args.out:
        args.out.write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
