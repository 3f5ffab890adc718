"""The trend site updated push by push from a window of main holds what the whole site holds,
and writes only the chunks its new commits fall in."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.history import site_data
from perfguard.history.analysis import History, analyze
from perfguard.history.columns import build_series
from perfguard.history.series import order_runs
from perfguard.history.site import update_site, write_site
from perfguard.history.site_data import SiteStale, read_manifest
from perfguard.records import Run
from tests.factories import result, run

TEST = "tests/perf/test_models.py::test_mlp"
MACHINE = "cpu-test"
STEP_AT = 50  # the commit that makes the eager MLP 20% slower
COMMITS = 70


@pytest.fixture(scope="module")
def runs() -> list[Run]:
    return history_runs()


def history_runs() -> list[Run]:
    """Main's 70 runs: the eager MLP 20% slower from `STEP_AT` on."""
    out = []
    for i in range(COMMITS):
        center = 2.0 * (1.2 if i >= STEP_AT else 1.0) * (1 + random.Random(i).gauss(0, 0.02))
        results = [
            result(TEST, "eager", center, seed=i),
            result(TEST, "compile-default", 1.0, seed=100 + i, compile_s=3.0),
        ]
        created = f"2026-11-01T{i // 60:02d}:{i % 60:02d}:00+00:00"
        out.append(replace(run(results, commit=f"{i:040x}", machine=MACHINE), created=created))
    return out


def history(runs: list[Run]) -> History:
    ordered = order_runs(runs, None, "main")
    return analyze(ordered, build_series(ordered))


def steps(site: Path) -> set[tuple[str, str, str]]:
    return {(c.variant, c.metric, c.commit) for c in read_manifest(site).change_points}


def chunks(site: Path) -> dict[str, str]:
    """Each chunk's series, as comparable text (NaN included)."""
    out = {}
    for path in sorted((site / "data").glob("*.js")):
        text = path.read_text()
        assert text.startswith("perfguardChunk(") and text.endswith(");\n")
        out[path.name] = json.dumps(json.loads(text[len("perfguardChunk(") : -3]), sort_keys=True)
    return out


def plots(site: Path) -> dict[str, list[str]]:
    """Each page's traces (a step's size and p-value are those of the run that last judged
    it: they are not compared)."""
    found = re.compile(r"perfguardTraces\((.*?)\),")
    return {p.name: found.findall(p.read_text()) for p in site.glob("*.html")}


def push(runs: list[Run], end: int, site: Path) -> int:
    """Update `site` with main's first `end` commits, read as `perfguard site --update` reads
    them (from the site's `reads_from`); the first commit read."""
    previous = read_manifest(site)
    oldest = previous.reads_from()
    first = 0 if oldest is None else int(oldest, 16)
    update_site(history(runs[first:end]), previous, site)
    return first


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 16 commits, settled 20 commits back, read 10 before them."""
    monkeypatch.setattr(site_data, "CHUNK", 16)
    monkeypatch.setattr(site_data, "SETTLE", 20)
    monkeypatch.setattr(site_data, "SPAN", 10)


@pytest.mark.slow  # a dozen sites written
def test_a_site_updated_push_by_push_is_the_whole_site_and_keeps_its_settled_chunks(
    runs: list[Run], tmp_path: Path, small: None
) -> None:
    pushed, whole = tmp_path / "pushed", tmp_path / "whole"
    write_site(history(runs[:40]), pushed)
    assert read_manifest(pushed).settled == 1  # places 0-15: older than the newest 20
    [settled] = (pushed / "data").glob("*-0.js")
    stamp = settled.stat().st_mtime_ns
    firsts = [push(runs, end, pushed) for end in range(43, COMMITS + 1, 3)]
    assert firsts[0] == 16 - 10 and firsts[-1] == 32 - 10  # never all of main
    assert read_manifest(pushed).settled == (COMMITS - 20) // 16 == 3
    write_site(history(runs), whole)
    assert read_manifest(pushed).commits == read_manifest(whole).commits
    assert chunks(pushed) == chunks(whole)
    assert settled.stat().st_mtime_ns == stamp  # written once, never again
    assert steps(pushed) == steps(whole) == {("eager", "latency_p50_ms", f"{STEP_AT:040x}")}
    assert plots(pushed) == plots(whole)
    assert len(plots(whole)) == 2 and sum(map(len, plots(whole).values())) == 2


def test_a_history_that_does_not_continue_the_site_is_refused_and_the_site_kept(
    runs: list[Run], tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    with pytest.raises(SiteStale, match="no previous site"):
        read_manifest(site)
    write_site(history(runs[:40]), site)
    previous, manifest = read_manifest(site), (site / "site.json").read_text()
    assert previous.reads_from() == f"{6:040x}" and previous.key == "1-" + f"{15:040x}"[:12]
    with pytest.raises(SiteStale, match="does not hold the site's last settled commit"):
        update_site(history(runs[20:45]), previous, site)
    rewritten = [
        replace(r, commit=f"{i + 1000:040x}") if i >= 10 else r for i, r in enumerate(runs)
    ]
    with pytest.raises(SiteStale, match="rewritten"):
        update_site(history(rewritten[6:45]), previous, site)
    assert (site / "site.json").read_text() == manifest
    monkeypatch.setattr(site_data, "CHUNK", 32)  # another layout: built again whole
    with pytest.raises(SiteStale, match="another site format"):
        read_manifest(site)
    (site / "site.json").write_text("{")
    with pytest.raises(SiteStale, match="unreadable"):
        read_manifest(site)


@pytest.mark.slow  # a storage server, sites built from a bucket
def test_a_site_on_a_bucket_is_updated_from_the_parts_of_main_after_its_settled_chunks(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfguard.cli import main
    from perfguard.store.months import Window
    from perfguard.store.objects import ObjectStore
    from tests.gitrepo import commit, git

    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    monkeypatch.chdir(repo)
    store, made = ObjectStore(s3_url), history_runs()
    monkeypatch.setattr(site_data, "CHUNK", 8)  # settled 5 commits back, read from 3 before
    monkeypatch.setattr(site_data, "SETTLE", 5)
    monkeypatch.setattr(site_data, "SPAN", 3)

    def land(commits: range) -> None:
        for i in commits:
            (repo / "f.txt").write_text(str(i))
            git(repo, "add", "f.txt")
            sha = commit(repo, f"c{i}")
            store.save(replace(made[i], commit=sha))

    land(range(24))
    site = ["site", "--dir", s3_url, "--commit-url", "https://x/{sha}", "-o"]
    assert main([*site, "pushed", "--update"]) == 0  # none yet: built whole
    windows: list[Window | None] = []
    summary = ObjectStore.summary

    def reading(self: ObjectStore, *args: object, **kwargs: object) -> object:
        windows.append(kwargs.get("window"))  # type: ignore[arg-type]
        return summary(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ObjectStore, "summary", reading)
    land(range(24, 28))
    assert main([*site, "pushed", "--update"]) == 0
    assert "main's newest 15 commits read, 2 settled chunk(s) kept" in capsys.readouterr().out
    [window] = windows  # the bucket's parts of those 15 commits alone, not all 28
    assert window is not None and len(window.commits) == 15
    assert main([*site, "whole"]) == 0
    assert chunks(repo / "pushed") == chunks(repo / "whole")
    assert plots(repo / "pushed") == plots(repo / "whole")
