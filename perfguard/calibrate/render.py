"""The calibration's table, in Markdown (the job summary, `-o OUT.md`) and for the terminal."""

from __future__ import annotations

from perfguard.calibrate.report import RELIABLE, ItemReport, Report
from perfguard.report.format import cell


def markdown(report: Report) -> str:
    cal = report.calibration
    canaries = ", ".join(f"+{c:g}%" for c in cal.canary) or "none"
    lines = [
        "## perfguard calibrate",
        "",
        f"Each item compared with itself {cal.rounds} times as a pull request's A/B compares "
        f"it (pairs of blocks until the sequential design decides, the run-wide correction, "
        f"{cal.confirm} confirmation round(s) for a flag), and {cal.canary_rounds} times at "
        f"each canary ({canaries}: this side's calls made that much slower), interleaved, on "
        f"a few pairs of worker processes ({_launches(report)}), on {cal.device}.",
        "",
        "| test | variant | false alarms | noise (sd) | "
        + " | ".join(f"+{c:g}% caught" for c in cal.canary)
        + " | called reliably | bar | advised bar | per comparison |",
        "| --- | --- | --- | --- | "
        + " | ".join("---" for _ in cal.canary)
        + " | --- | --- | --- | --- |",
    ]
    lines += [_row(item, len(cal.canary)) for item in report.items]
    lines += ["", *_verdict_lines(report), "", *_notes(report)]
    ops = op_lines(report)
    if ops:
        lines += [
            "",
            "### Operators and kernels",
            "",
            "Each item's profiled blocks (operators' self time on a CPU, kernels' device time on "
            "CUDA), compared in pairs as a pull request's are, as many times as it had identical "
            "rounds (at most 5); the same code on both sides, so every place called is a false "
            "alarm. *Advised*: the largest change of a place of 1% of the call or more, half "
            "again, rounded up (never under the bar in force); paste it into the test's marker "
            "(`op_min_change_pct=...`) or the ini file (`perfguard_op_min_change`).",
            "",
            *(f"- {line}" for line in ops),
        ]
    return "\n".join(lines) + "\n"


def _row(item: ItemReport, canaries: int) -> str:
    cells = [cell(item.test), cell(item.variant)]
    if item.error is not None:
        return (
            "| "
            + " | ".join([*cells, f"not calibrated: {item.error}"] + [""] * (canaries + 5))
            + " |"
        )
    fresh = item.fresh_false_alarms
    cells += [
        f"{item.false_alarms} of {item.identical}"
        + ("" if fresh is None else f"; fresh pair {fresh:.1%}"),
        _noise(item),
    ]
    for canary in item.canaries:
        said = []
        if canary.measured_pct is not None:
            said.append(f"measured {canary.measured_pct:+.1f}%")
        if canary.fresh is not None:
            said.append(f"fresh pair {canary.fresh:.0%}")
        missed = " **missed**" if canary.pct in item.missed else ""
        inside = f" ({'; '.join(said)})" if said else ""
        cells.append(f"{canary.caught} of {canary.rounds}{inside}{missed}")
    reliable = item.reliable_pct
    advised = item.advised_bar_pct
    cells += [
        "none of the canaries" if reliable is None else f"+{reliable:g}%",
        f"{item.bar_pct:g}%",
        "–" if advised is None else f"{advised:g}% (`ab_min_change_pct={advised:g}`)",
        f"{item.device_s:.2f} s timed, {item.wall_s:.1f} s wall",
    ]
    return "| " + " | ".join(cells) + " |"


def _noise(item: ItemReport) -> str:
    noise = item.noise_pct
    if noise is None:
        return "–"
    if item.offsets is None:
        return f"{noise:.2f}%"
    within, between = item.offsets.within_pct, item.offsets.between_pct
    return f"{noise:.2f}% ({within:.2f}% within a pair, {between:.2f}% between pairs)"


def _launches(report: Report) -> str:
    launches = report.calibration.launches
    if not launches:
        return "workers started once per side"
    said = ", ".join(f"{side} {n}" for side, n in sorted(launches.items()))
    return f"worker starts per side: {said}"


def _verdict_lines(report: Report) -> list[str]:
    missed = report.missed
    if missed:
        return [
            f"**The check did not fire**: {len(missed)} canary level(s) at or above the item's "
            "bar were caught in none of their rounds: "
            + "; ".join(f"{cell(i.test)} [{cell(i.variant)}] at +{p:g}%" for i, p in missed)
            + ". A pull request slowed as much would pass here."
        ]
    rate = report.false_alarm_rate
    said = (
        "no identical round was judged"
        if rate is None
        else f"{rate:.1%} of identical comparisons predicted flagged"
    )
    return [f"Every canary at or above its item's bar was caught at least once; {said}."]


def _notes(report: Report) -> list[str]:
    return [
        "Counts are what these pairs of worker processes saw. A pull request measures on a "
        "fresh pair, whose two processes differ by an offset of their own that one pair's "
        "rounds all share: *fresh pair* is the share predicted there, each round judged again "
        "moved onto offsets drawn from those the pairs showed, either sign (with one pair, "
        "they are not known and the counts stand for it). "
        f"*Called reliably*: the smallest canary predicted caught in at least {RELIABLE:.0%} of "
        "comparisons, every larger one too. *Advised bar*: three standard deviations of a "
        "fresh pair's paired change of the median for identical code, rounded up to half a "
        "percent (at least 1%); paste it into the test's marker (`@pytest.mark.perfguard("
        "ab_min_change_pct=...)`) or the ini file (`perfguard_ab_min_change`). A canary is a "
        "delay at the end of each call (on the device for CUDA-timed items, else on the host): "
        "it shows that a slowdown of that size, where it acts, is measured and called here "
        "today; a change that adds a synchronization or slows only the tails acts elsewhere.",
    ]


def op_lines(report: Report) -> list[str]:
    """One line per item whose operators' blocks were compared."""
    out = []
    for item in report.calibration.items:
        ops = item.ops
        if not ops:
            continue
        places = ops.get("places") or {}
        big = [p for p, v in places.items() if float(v.get("share_pct", 0.0)) >= 1.0]
        out.append(
            f"{cell(item.test)} [{cell(item.variant)}]: {len(big)} place(s) of 1% of the call "
            f"or more over {ops.get('rounds')} comparison(s) of {ops.get('blocks')} pairs; "
            f"largest change {float(ops.get('largest_pct', 0.0)):.1f}%; called "
            f"{ops.get('called')}; advised op bar {ops.get('advised_pct')}% "
            f"(`op_min_change_pct={ops.get('advised_pct')}`)"
        )
    return out


def terminal(report: Report) -> str:
    """A few lines for the terminal: per item, the false alarms and the canaries caught."""
    out = []
    for item in report.items:
        if item.error is not None:
            out.append(f"{item.test} [{item.variant}]: not calibrated: {item.error}")
            continue
        caught = ", ".join(
            f"+{c.pct:g}% {c.caught}/{c.rounds}"
            + ("" if c.fresh is None else f" (fresh pair {c.fresh:.0%})")
            for c in item.canaries
        )
        advised = item.advised_bar_pct
        fresh = item.fresh_false_alarms
        out.append(
            f"{item.test} [{item.variant}]: false alarms {item.false_alarms}/{item.identical}"
            + ("" if fresh is None else f" (fresh pair {fresh:.1%})")
            + (f"; caught {caught}" if caught else "")
            + ("" if advised is None else f"; advised bar {advised:g}%")
            + (" -- MISSED " + ", ".join(f"+{p:g}%" for p in item.missed) if item.missed else "")
        )
    out += [f"operators: {line}".replace("`", "") for line in op_lines(report)]
    return "\n".join(out)
