"""The fault audit: bad inputs and faults tried against the plugin and every command, counted.

Run:  .venv/bin/python -m benchmarks.fault_audit [--only documents,options,...] [--out FILE]

Each case runs perfguard as a user would (a pytest session or a `perfguard` command, in a
scratch repository of its own) with one bad input or one fault, and is judged on what came
out. A case is handled cleanly when:
- nothing printed a traceback, and the token or password it was given appears in no output;
- a refused input exits 2 (pytest's usage error: 4; a collection error: 2) with a line that
  names what was wrong (the file, the option, the test);
- an input that is fine, or a fault perfguard is meant to ride out, ends as documented (its
  exit code, a note), and the case's own checks pass: nothing measured or stored is lost,
  nothing is written outside the baseline folder, the token reaches no other host.

The families: `documents` (results and baseline files, whole and field by field), `options`
(every plugin option with a value outside its contract, ini keys, marker keys, the commands'
options), `markup` (test ids that would mention, link or inject HTML in a comment, rendered with
GitHub's own Markdown library), then from `benchmarks.fault_cases`: `git` (refusals, shallow and
empty repositories, missing refs), `branch` (a baselines branch with hostile and broken files,
pushes that would lose results), `api` (a loopback GitHub that redirects, loops, refuses and
fails) and `signals` (kill -9, SIGTERM and SIGINT at the moments that matter); from
`benchmarks.fault_gate`: `gate` (runs that did not measure all they claim, a change that loosens
its own bar, committed input that once crashed the run); from `benchmarks.fault_round4`:
`round4` (the base environment, package bisect, init's upgrade, calibrate's records, the
recording beside a profiler or coverage, a cache key that is no file).

It prints a line per case that was not clean and the counts per family, and writes every
case's outcome to `--out` (default benchmarks/data/fault-audit.json). About 8 minutes on a
2-core machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import fault_cases, fault_gate, fault_round4
from benchmarks.fault_harness import (
    HERE,
    Case,
    Outcome,
    Ran,
    Seed,
    judge,
    make_seed,
    perfguard,
    pytest_session,
)
from tests.gitrepo import git

# ---- documents ----

FREE_FORM = re.compile(
    r"^(environment|baseline\.environment|health\.facts|(baseline_)?results\[0\]\.details|"
    r"(baseline_)?results\[0\]\.counters\.(ops|break_reasons)|comparisons\[0\]\.why)"
)


def leaves(doc: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every field of the document, lists by their first element, to depth 4. A mapping
    keyed by data (test ids, file paths: `selection.reached`, `reach`'s tables) is one
    field: its keys hold dots and brackets that a path cannot."""
    keyed_by_data = isinstance(doc, dict) and any(re.search(r"[.\[\]]", k) for k in doc)
    if keyed_by_data and path:
        yield path, doc
    elif isinstance(doc, dict) and path.count(".") < 4:
        for key, value in doc.items():
            yield from leaves(value, f"{path}.{key}" if path else key)
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict):
        yield from leaves(doc[0], f"{path}[0]")
    elif path:
        yield path, doc


def set_path(doc: Any, path: str, value: Any, delete: bool = False) -> None:
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    for part in parts[:-1]:
        doc = doc[int(part[1:-1])] if part.startswith("[") else doc[part]
    last = parts[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if delete:
        del doc[key]
    else:
        doc[key] = value


def setter(path: str, value: Any = None, delete: bool = False) -> Callable[[dict[str, Any]], None]:
    return lambda doc: set_path(doc, path, value, delete)


def wrong_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, (int, float)):
        return "fast"
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return "a list"
    return None


def document_cases(seed: Seed) -> list[Case]:
    cases: list[Case] = []

    def refuse_text(name: str, text: bytes | str, command: str = "report") -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            bad = tmp / "bad.json"
            bad.write_bytes(text.encode() if isinstance(text, str) else text)
            if command == "report":
                return perfguard("report", "--exit-code", str(bad), "-o", "out.md", cwd=tmp), []
            return perfguard("compare", str(seed.results), str(bad), "-o", "out.md", cwd=tmp), []

        cases.append(Case("documents", f"{command}: {name}", "refuse", act, names="bad.json"))

    whole = json.dumps(seed.doc)
    for command in ("report", "compare"):
        refuse_text("an empty file", "", command)
        refuse_text("truncated", whole[: len(whole) // 2], command)
        refuse_text("not JSON", "perfguard was here\n", command)
        refuse_text("binary", bytes(range(256)), command)
        refuse_text("a list", "[]", command)
        refuse_text("null", "null", command)
        refuse_text("a future schema", json.dumps({**seed.doc, "schema_version": 99}), command)
        refuse_text(
            "no schema_version",
            json.dumps({k: v for k, v in seed.doc.items() if k != "schema_version"}),
            command,
        )
        refuse_text(
            "NaN latency",
            whole.replace('"latency_p50_ms": ', '"latency_p50_ms": NaN, "x": ', 1),
            command,
        )
        refuse_text(
            "Infinity latency",
            whole.replace('"latency_p50_ms": ', '"latency_p50_ms": 1e999, "x": ', 1),
            command,
        )

    def mutated(name: str, edit: Callable[[dict[str, Any]], None], expect: str = "refuse") -> None:
        doc = copy.deepcopy(seed.doc)
        edit(doc)
        text = json.dumps(doc, allow_nan=True)

        def act(tmp: Path) -> tuple[Ran, list[str]]:
            bad = tmp / "bad.json"
            bad.write_text(text)
            ran = perfguard("report", "--exit-code", str(bad), "-o", "out.md", cwd=tmp)
            problems = []
            if expect != "refuse" and ran.rc in (0, 1) and not (tmp / "out.md").exists():
                problems.append("no report written")
            return ran, problems

        cases.append(Case("documents", name, expect, act, names="bad.json", codes=(0, 1)))

    for path, value in leaves(seed.doc):
        free = bool(FREE_FORM.match(path))
        bad = wrong_type(value)
        if bad is not None:
            mutated(
                f"{path} = {bad!r}",
                setter(path, bad),
                "either" if free else "refuse",
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not free:
            mutated(f"{path} = NaN", setter(path, math.nan))
    # required keys (a commit is null outside git, an error result has no metrics: optional)
    for path in (
        "schema_version",
        "results",
        "machine",
        "results[0].test",
        "results[0].variant",
        "results[0].status",
        "comparisons[0].metric",
        "comparisons[0].verdict",
        "comparisons[0].test",
    ):
        mutated(f"without {path}", setter(path, delete=True))
    for metric in ("latency_p50_ms", "peak_memory_bytes", "latency_samples"):
        mutated(
            f"results[0].metrics.{metric} = -1",
            setter(f"results[0].metrics.{metric}", -1),
        )
    mutated(
        "results[0].samples_ms = [-1.0]", lambda d: set_path(d, "results[0].samples_ms", [-1.0])
    )
    mutated("thresholds.alpha = 2", lambda d: set_path(d, "settings.thresholds.alpha", 2))
    mutated(
        "thresholds.min_change_pct = -5",
        lambda d: set_path(d, "settings.thresholds.min_change_pct", -5),
    )
    mutated("health.warnings = [3]", lambda d: set_path(d, "health.warnings", [3]))
    mutated(
        "an unknown field (kept, ignored)",
        lambda d: d.__setitem__("from_the_future", {"x": 1}),
        "ok",
    )
    mutated(
        "an unknown variant name", lambda d: set_path(d, "results[0].variant", "my-variant"), "ok"
    )
    mutated("no comparisons", lambda d: d.__setitem__("comparisons", []), "ok")
    cases += baseline_cases(seed)
    return cases


def baseline_cases(seed: Seed) -> list[Case]:
    """A stored baseline broken in a copy of the seed's folder: compare, history and the
    session that compares with it."""
    cases: list[Case] = []
    first = next(
        p for p in seed.baseline_files if p.suffix == ".json" or p.name.endswith(".json.gz")
    )

    def broken(name: str, text: bytes, command: str) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            folder = tmp / "baselines"
            subprocess.run(["cp", "-r", str(seed.repo / "baselines"), str(folder)], check=True)
            target = folder / first.relative_to(seed.repo / "baselines")
            target.write_bytes(text)
            if command == "history":
                ran = perfguard("history", "--dir", str(folder), "-o", "h.md", cwd=seed.repo)
                return ran, (
                    []
                    if target.name in ran.out or target.stem in ran.out
                    else ["the note does not name the file left out"]
                )
            return perfguard("compare", str(target), str(seed.results), "-o", "out.md", cwd=tmp), []

        expect = "ok" if command == "history" else "refuse"
        cases.append(
            Case(
                "documents",
                f"baseline {command}: {name}",
                expect,
                act,
                names=first.name.split(".")[0],
                codes=(0,),
            )
        )

    for command in ("compare", "history"):
        broken("truncated", first.read_bytes()[:100], command)
        broken("empty", b"", command)
        broken(
            "wrong types",
            json.dumps({"schema_version": 7, "commit": 12345, "results": "x"}).encode(),
            command,
        )
    return cases


# ---- options ----

BAD_VALUES = {
    "N": ("-1", "abc", "1.5"),
    "SECONDS": ("nan", "-5", "inf", "abc"),
    "PCT": ("nan", "-5", "inf", "abc"),
    "K/N": ("3/2", "0/2", "x"),
    "LIST": ("no-such-variant", ","),
    "DEVICE": ("tpu",),
    "NAME": ("../escape", "a/b"),
    "compile[,forward]": ("bogus",),
}
NOT_BAD = {("main-branch", "../escape"), ("main-branch", "a/b")}


def option_cases(seed: Seed) -> list[Case]:
    from perfguard.settings import SETTINGS

    cases: list[Case] = []

    def session(
        name: str, args: Sequence[str], names: str, ini: str = "", marker: str = ""
    ) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            (tmp / "test_one.py").write_text(
                "import pytest, torch\n\n"
                f"@pytest.mark.perfguard({marker})\n"
                "def test_one(perfguard):\n"
                "    perfguard.run(torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),))\n"
            )
            if ini:
                (tmp / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
            git(tmp, "init", "-q", "-b", "main")
            git(tmp, "add", "-A")
            git(tmp, "commit", "-q", "-m", "A")
            flag = "--" + ini.split("=")[0].strip().replace("_", "-") if ini else ""
            return pytest_session("--perfguard", *args, cwd=tmp, drop=flag), []

        cases.append(Case("options", name, "refuse", act, names=names))

    for setting in SETTINGS:
        if not (setting.option and setting.metavar):
            continue
        choices = ("bogus",) if "|" in setting.metavar else ()
        for value in BAD_VALUES.get(setting.metavar, choices):
            if (setting.name.replace("_", "-"), value) in NOT_BAD:
                continue
            session(f"{setting.flag}={value}", [f"{setting.flag}={value}"], setting.flag)
    session(
        "--perfguard-baseline-dir onto a file",
        ["--perfguard-baseline-dir=test_one.py", "--perfguard-save"],
        "test_one.py",
    )
    session(
        "--perfguard-save-replace alone", ["--perfguard-save-replace"], "--perfguard-save-replace"
    )
    session("ini perfguard_budget = nan", [], "perfguard_budget", ini="perfguard_budget = nan")
    session("ini perfguard_repeats = x", [], "perfguard_repeats", ini="perfguard_repeats = x")
    session(
        "ini perfguard_fail_on = sometimes",
        [],
        "perfguard_fail_on",
        ini="perfguard_fail_on = sometimes",
    )
    for marker, key in (
        ("bogus=1", "bogus"),
        ("variants='nope'", "variants"),
        ("budget_s='x'", "budget_s"),
        ("min_change_pct=float('nan')", "min_change_pct"),
        ("repeats=-2", "repeats"),
    ):
        session(f"marker {marker}", [], key, marker=marker)

    def command(name: str, args: Sequence[str], names: str) -> None:
        def act(tmp: Path) -> tuple[Ran, list[str]]:
            argv = [
                str(seed.results)
                if a == "{results}"
                else str(seed.repo / "baselines")
                if a == "{dir}"
                else a
                for a in args
            ]
            return perfguard(*argv, cwd=seed.repo), []

        cases.append(Case("options", name, "refuse", act, names=names))

    for value in ("nan", "-5", "abc", "inf"):
        command(
            f"compare --min-change {value}",
            ["compare", "{results}", "{results}", "--min-change", value],
            "--min-change",
        )
        command(
            f"history --min-change {value}",
            ["history", "--dir", "{dir}", "--min-change", value],
            "--min-change",
        )
    for value in ("0", "2", "nan"):
        command(
            f"history --max-p {value}", ["history", "--dir", "{dir}", "--max-p", value], "--max-p"
        )
    for value in ("-1", "abc"):
        command(
            f"report --max-chars {value}",
            ["report", "{results}", "--max-chars", value],
            "--max-chars",
        )
        command(
            f"baselines prune --keep {value}",
            ["baselines", "prune", "--keep", value, "--dir", "{dir}", "--dry-run"],
            "--keep",
        )
        command(
            f"alert --newest {value}",
            ["alert", "--dir", "{dir}", "--repo", "o/r", "--newest", value],
            "--newest",
        )
        command(
            f"bisect --rounds {value}", ["bisect", "HEAD~1", "HEAD", "--rounds", value], "--rounds"
        )
    command(
        "history --dir that does not exist",
        ["history", "--dir", "/nonexistent/baselines"],
        "/nonexistent/baselines",
    )
    command(
        "report of a missing file",
        ["report", "/nonexistent/results.json"],
        "/nonexistent/results.json",
    )
    command(
        "comment --pr abc",
        ["comment", "--repo", "o/r", "--pr", "abc", "--body-file", "x.md"],
        "--pr",
    )
    command(
        "comment --repo without a slash",
        ["comment", "--repo", "justaname", "--pr", "1", "--body-file", "{results}"],
        "justaname",
    )
    command(
        "merge of one file with itself",
        ["merge", "-o", "m.json", "{results}", "{results}"],
        "results.json",
    )
    command("init --unknown-flag", ["init", "--unknown-flag"], "--unknown-flag")
    return cases


# ---- markup ----

HOSTILE = {
    "a mention": ("test_ping_@octocat", r"(?<![\w\u200b])@\s*octocat"),
    "a team mention": ("test_@acme/ml-team", r"@\s*acme/ml-team"),
    "an issue reference": ("test_fixes #4242", r"(?<![\w&\u200b])#4242"),
    "a cross-repo reference": ("test_acme/models#77", r"acme/models#77"),
    "a URL": ("test_see_https://evil.example/x", r"href=\"https?://evil"),
    "a www link": ("test_www.evil.example", r"href=\"http://www\.evil"),
    "an email": ("test_ceo@evil.example", r"href=\"mailto:"),
    "an image": ("test_<img src=x onerror=alert(1)>", r"<img"),
    "a link": ("test_[click](javascript:alert(1))", r"<a href=\"javascript"),
    "a closed details": ("test_</details><b>x", r"<b>x"),
    "a comment marker": ("test_<!-- perfguard -->", r"<!-- perfguard -->.*<!-- perfguard -->"),
    "a table pipe": ("test_a|b|c", r"<td>b</td>"),
    "a newline": ("test_line\n# Heading", r"<h1>Heading"),
    "right-to-left override": ("test_\u202egnp.exe", "\u202e"),
    "a NUL": ("test_nul\x00byte", "\x00"),
}


def markup_cases(seed: Seed) -> list[Case]:
    import cmarkgfm
    from cmarkgfm.cmark import Options

    cases: list[Case] = []
    for name, (test_id, forbidden) in HOSTILE.items():

        def act(
            tmp: Path, test_id: str = test_id, forbidden: str = forbidden
        ) -> tuple[Ran, list[str]]:
            doc = copy.deepcopy(seed.doc)
            old = doc["results"][0]["test"]
            for row in (
                *doc["results"],
                *doc.get("comparisons", []),
                *doc.get("baseline_results", []),
            ):
                if row.get("test") == old:
                    row["test"] = f"test_models.py::{test_id}"
            (tmp / "hostile.json").write_text(json.dumps(doc))
            ran = perfguard("report", "hostile.json", "-o", "out.md", "--max-chars", "0", cwd=tmp)
            if ran.rc != 0:
                return ran, ["no report"]
            markdown = (tmp / "out.md").read_text()
            html = cmarkgfm.github_flavored_markdown_to_html(
                markdown, options=Options.CMARK_OPT_UNSAFE
            )
            text = re.sub(r"<code>.*?</code>", "", html, flags=re.S)
            found = re.search(forbidden, text, re.S)
            return ran, [f"the comment holds {found.group(0)[:40]!r}"] if found else []

        cases.append(Case("markup", name, "ok", act))
    return cases


# ---- running ----

FAMILIES: dict[str, Callable[[Seed], list[Case]]] = {
    "documents": document_cases,
    "options": option_cases,
    "markup": markup_cases,
}


def main(argv: Sequence[str] | None = None) -> int:
    families = {
        **FAMILIES,
        **fault_cases.FAMILIES,
        **fault_gate.FAMILIES,
        **fault_round4.FAMILIES,
    }
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(families), help="families, comma-separated")
    parser.add_argument("--match", default="", help="only cases whose name holds this")
    parser.add_argument("--out", type=Path, default=HERE / "data" / "fault-audit.json")
    args = parser.parse_args(argv)
    chosen = [f for f in args.only.split(",") if f]
    unknown = set(chosen) - set(families)
    if unknown:
        parser.error(f"no such family: {', '.join(sorted(unknown))} (have {', '.join(families)})")
    outcomes: list[Outcome] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="perfguard-audit-") as scratch:
        root = Path(scratch)
        print("seed: two measured commits in a scratch repository ...", flush=True)
        seed = make_seed(root)
        for family in chosen:
            cases = [c for c in families[family](seed) if args.match in c.name]
            print(f"{family}: {len(cases)} cases", flush=True)
            for i, case in enumerate(cases):
                tmp = root / f"{family}-{i}"
                tmp.mkdir()
                try:
                    ran, extra = case.act(tmp)
                except Exception as exc:  # the harness's own failure is a finding too
                    ran, extra = Ran(-2, f"[audit harness: {exc!r}]"), [f"harness: {exc!r}"]
                outcome = judge(case, ran, extra)
                outcomes.append(outcome)
                if not outcome.clean:
                    why = "; ".join(outcome.problems)
                    print(f"  NOT CLEAN  {case.name}: {why}  [{outcome.message}]", flush=True)
    total = {
        "cases": len(outcomes),
        "clean": sum(o.clean for o in outcomes),
        "seconds": round(time.monotonic() - start),
    }
    per_family = {
        f: {
            "cases": sum(o.family == f for o in outcomes),
            "clean": sum(o.clean for o in outcomes if o.family == f),
        }
        for f in chosen
    }
    for family, counts in per_family.items():
        print(f"{family:10s} {counts['clean']:4d} of {counts['cases']:4d} clean")
    print(f"{'all':10s} {total['clean']:4d} of {total['cases']:4d} clean in {total['seconds']} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"total": total, "families": per_family, "cases": [asdict(o) for o in outcomes]},
            indent=1,
        )
        + "\n"
    )
    return 0 if total["clean"] == total["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
