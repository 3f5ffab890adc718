"""Main's history: series in main's order, change points, the command, the site and the alert."""

from __future__ import annotations

import json
import math
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.cli import main
from perfguard.history import site_data
from perfguard.history.analysis import analyze
from perfguard.history.changepoints import Detection, find_steps
from perfguard.history.columns import build_series
from perfguard.history.series import main_line, order_runs
from perfguard.history.site import write_site
from perfguard.records import VariantResult
from perfguard.records.sketch import BlockStats, percentile
from perfguard.report.format import pct
from perfguard.store.baselines import BaselineStore
from tests import chromium
from tests.factories import result, run
from tests.github_fake import FakeGitHub
from tests.gitrepo import commit, git

TEST = "tests/perf/test_models.py::test_mlp[<b>16</b>]"
MACHINE = "cpu-test"
GENERATE = "tests/perf/test_lm.py::test_generate"
STEP_AT = 25  # the commit of main that makes the eager MLP 20% slower
MEMORY_AT = 30  # ... and the one that makes compile-default use 5% more memory


def noisy(values: list[float], seed: int, spread: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [v * (1 + rng.gauss(0, spread)) for v in values]


def test_steps_are_found_where_they_are_with_their_size() -> None:
    level = [1.0] * 40 + [1.2] * 40 + [1.08] * 40
    steps = find_steps(noisy(level, seed=1))
    assert [s.index for s in steps] == [40, 80]
    assert 15 < steps[0].change_pct < 25 and -15 < steps[1].change_pct < -5
    assert all(s.p_value < 1e-5 for s in steps)


def test_a_long_series_is_searched_in_stretches_and_misses_no_step_at_their_edges() -> None:
    from perfguard.history import changepoints

    # steps on a stretch's edge, inside its margin, in the middle of one, and near the end
    at = [changepoints.STRETCH, 2 * changepoints.STRETCH + 40, 1750, 2500]
    level, values = 1.0, []
    for i in range(2600):
        level *= 1.1 if i in at else 1.0
        values.append(level)
    steps = find_steps(noisy(values, seed=2, spread=0.01))
    assert [s.index for s in steps] == at
    assert find_steps(noisy([1.0] * 2600, seed=3)) == []
    sight = changepoints.reach([1.0] * 2600)  # the first and last index a step can be at
    assert (sight.first, sight.last) == (5, 2595)


@pytest.mark.slow  # starts worker processes
def test_the_search_spread_over_the_cores_finds_what_one_core_finds() -> None:
    import numpy as np

    from perfguard.history.searching import _bundles, steps_of_all

    series = []
    for k in range(9):  # lengths 40 to 1,640, a step in most, one series of noise alone
        n = 40 + 200 * k
        level = [1.0] * (n // 2) + [1.0 + 0.05 * k] * (n - n // 2)
        series.append(np.asarray(noisy(level, seed=10 + k, spread=0.01)))
    one_core = steps_of_all(series, Detection(), parallel_from=10**9)
    spread = steps_of_all(series, Detection(), parallel_from=0)
    assert spread == one_core and sum(map(len, one_core)) >= 7
    bundles = _bundles(series, 4)  # every series once, the longest first in its bundle
    assert sorted(i for b in bundles for i in b) == list(range(9)) and bundles[0][0] == 8


def test_ruptures_pelt_loaded_alone_places_the_steps_as_its_kernelcpd_does() -> None:
    import numpy as np
    import ruptures

    from perfguard.history import changepoints

    assert changepoints._pelt_l2() is not None  # the compiled search, without the package
    rng = np.random.default_rng(5)
    for n in (6, 40, 300, 1000):
        signal = np.cumsum(rng.normal(0, 1, n) * (rng.random(n) < 0.05)) + rng.normal(0, 0.3, n)
        penalty = 3.0 * math.log(n)
        algo = ruptures.KernelCPD(kernel="linear", min_size=3).fit(signal.reshape(-1, 1))
        assert changepoints._segmented(signal, 3, penalty) == algo.predict(pen=penalty)[:-1]


def test_noise_alone_has_no_change_points() -> None:
    flagged = [s for seed in range(30) for s in find_steps(noisy([1.0] * 120, seed=seed))]
    assert flagged == []


def test_a_slow_process_now_and_then_is_not_a_step() -> None:
    values = noisy([1.0] * 120, seed=3)
    for at in (10, 11, 50, 51, 52, 90):  # a whole process 2.5x slower, as seen on this machine
        values[at] *= 2.5
    assert find_steps(values) == []


def test_a_step_needs_five_commits_after_it() -> None:
    level = [1.0] * 40
    for after in (3, 4, 5):
        values = noisy(level + [1.3] * after, seed=after)
        assert bool(find_steps(values)) == (after >= 5), after


def test_a_small_step_in_an_exact_metric_is_found_and_a_constant_one_is_not() -> None:
    memory = [1000.0] * 20 + [1020.0] * 10
    [step] = find_steps(memory)
    assert (step.index, step.p_value, round(step.change_pct, 6)) == (20, 0.0, 2.0)
    assert find_steps([1000.0] * 30) == []


def test_a_step_smaller_than_the_minimum_change_is_not_reported() -> None:
    memory = [1000.0] * 20 + [1005.0] * 10  # +0.5%
    assert find_steps(memory) == []
    assert [s.index for s in find_steps(memory, Detection(min_change_pct=0.1))] == [20]


def test_the_rank_test_gives_scipys_p_values_exact_and_with_ties() -> None:
    import numpy as np
    from scipy import stats

    from perfguard.history.changepoints import rank_p

    rng = np.random.default_rng(7)
    for trial in range(600):
        m, n = (int(k) for k in rng.integers(2, 31, 2))
        if trial % 3 == 0:  # no ties: the exact distribution
            left, right = rng.normal(size=m), rng.normal(rng.uniform(0, 2), size=n)
        elif trial % 3 == 1:  # many ties
            left, right = rng.integers(0, 5, m).astype(float), rng.integers(0, 6, n).astype(float)
        else:
            left, right = np.round(rng.normal(size=m), 1), np.round(rng.normal(0.5, size=n), 1)
        if np.ptp(left) == 0 and np.ptp(right) == 0:
            continue
        tied = np.unique(np.concatenate([left, right])).size < m + n
        method = "asymptotic" if tied else "exact"
        expected = stats.mannwhitneyu(left, right, alternative="two-sided", method=method).pvalue
        assert rank_p(left, right) == pytest.approx(float(expected), rel=1e-9, abs=1e-300)
    assert rank_p(np.arange(10.0), np.arange(10.0) + 100) == pytest.approx(2 / math.comb(20, 10))


def test_too_short_or_unusable_series_have_no_change_points() -> None:
    assert find_steps([1.0, 2.0, 3.0]) == []
    assert find_steps([1.0] * 10 + [float("nan")] + [2.0] * 10) == []
    assert find_steps([0.0] * 10 + [1.0] * 10) == []


@pytest.fixture
def history_repo(built_history: tuple[Path, list[str]], tmp_path: Path) -> tuple[Path, list[str]]:
    """Main with 40 commits, each with a baseline; and a branch commit with one (a copy of
    the module's, which the test may change)."""
    built, shas = built_history
    repo = tmp_path / "repo"
    shutil.copytree(built, repo, symlinks=True)
    return repo, shas


@pytest.fixture(scope="module")
def built_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """`history_repo`, built once a module (40 commits and 41 saves: 1.5 s a test)."""
    repo = tmp_path_factory.mktemp("history") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "remote", "add", "origin", "https://github.com/octo/models.git")
    store = BaselineStore(repo / "baselines")
    shas = []
    for i in range(40):
        sha = commit(repo, f"commit {i}")
        shas.append(sha)
        center = 2.0 * (1.2 if i >= STEP_AT else 1.0) * (1 + random.Random(i).gauss(0, 0.02))
        memory = 1e6 * (1.05 if i >= MEMORY_AT else 1.0)
        results = [
            result(TEST, "eager", center, seed=i),
            result(TEST, "compile-default", 1.0, seed=100 + i, memory=memory, compile_s=3.0),
        ]
        store.save(run(results, commit=sha, machine=MACHINE))
    git(repo, "checkout", "-q", "-b", "feature")
    side = commit(repo, "feature work")
    store.save(run([result(TEST, "eager", 9.0)], commit=side, machine=MACHINE))
    git(repo, "checkout", "-q", "main")
    return repo, shas


@pytest.mark.slow
def test_the_history_command_finds_the_steps_with_their_commit_ranges(
    history_repo: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo, shas = history_repo
    monkeypatch.chdir(repo)
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    code = main(["history", "--json", "out/history.json", "-o", "out/history.md"])
    assert code == 0
    data = json.loads((repo / "out/history.json").read_text())
    found = {(c["variant"], c["metric"]): c for c in data["change_points"]}
    assert set(found) == {("eager", "latency_p50_ms"), ("compile-default", "peak_memory_bytes")}
    latency = found[("eager", "latency_p50_ms")]
    assert (latency["previous"], latency["commit"]) == (shas[STEP_AT - 1], shas[STEP_AT])
    assert latency["kind"] == "regression" and 15 < latency["change_pct"] < 25
    assert latency["points_after"] == 40 - STEP_AT
    memory = found[("compile-default", "peak_memory_bytes")]
    assert memory["commit"] == shas[MEMORY_AT] and round(memory["change_pct"], 6) == 5.0
    assert data["commits"] == shas and data["left_out"] == 1  # the feature commit
    # newest first
    assert [c["commit"] for c in data["change_points"]] == [shas[MEMORY_AT], shas[STEP_AT]]
    out = capsys.readouterr().out
    assert f"{shas[STEP_AT - 1][:10]}..{shas[STEP_AT][:10]}" in out
    markdown = (repo / "out/history.md").read_text()
    assert f"https://github.com/octo/models/commit/{shas[STEP_AT]}" in markdown
    assert "<b>" not in markdown  # test names are escaped


def test_history_without_git_orders_by_date_and_says_so() -> None:
    runs = [
        replace(
            run([result(TEST, "eager", 2.0 if i < 15 else 3.0, seed=i)], commit=f"{i:040x}"),
            created=f"2026-11-01T00:{i:02d}:00+00:00",
        )
        for i in range(30)
    ]
    ordered = order_runs(reversed(runs), main_line(None, "main"), "main")
    assert "measured" in ordered.how
    assert [r.commit for r in ordered.runs] == [r.commit for r in runs]
    history = analyze(ordered, build_series(ordered))
    [step] = [c for c in history.change_points if c.metric == "latency_p50_ms"]
    assert (step.previous, step.commit) == (f"{14:040x}", f"{15:040x}")


def generation(center_ms: float, ttft_ms: float, tpot_ms: float, seed: int) -> VariantResult:
    """A generation's result: its call, and per repeat its first token and the tokens after."""
    rng = random.Random(seed)
    base = result(GENERATE, "eager", center_ms, seed=seed)
    blocks = {
        phase: BlockStats.of([[ms * (1 + rng.gauss(0, 0.02)) for _ in range(8)] for _ in range(5)])
        for phase, ms in (("ttft", ttft_ms), ("tpot", tpot_ms))
    }

    def p50(phase: str) -> float:  # the median of its repeats' medians
        return percentile(sorted(blocks[phase].percentile(50.0) or ()), 50.0)

    metrics = replace(base.metrics, ttft_p50_ms=p50("ttft"), tpot_p50_ms=p50("tpot"))
    return replace(base, metrics=metrics, phases=tuple(blocks.items()))


def test_a_generations_time_to_first_token_and_per_token_are_series_with_their_steps(
    tmp_path: Path,
) -> None:
    # 30 commits of main: one makes each new token 25% slower, the first token unchanged (the
    # call's own latency is held flat here: the step is found in the per-token series itself)
    runs = [
        replace(
            run(
                [generation(20.0, 4.0, 1.25 if i >= 15 else 1.0, seed=i)],
                commit=f"{i:040x}",
                machine=MACHINE,
            ),
            created=f"2026-11-01T00:{i:02d}:00+00:00",
        )
        for i in range(30)
    ]
    ordered = order_runs(runs, None, "main")
    series = {s.metric: s for s in build_series(ordered)}
    assert {"ttft_p50_ms", "tpot_p50_ms"} <= set(series)
    tpot = series["tpot_p50_ms"]
    assert len(tpot.values) == 30 and len(tpot.low) == 30  # with the spread of its repeats
    bands = zip(tpot.values, tpot.low, tpot.high, strict=True)
    assert all(lo is not None and hi is not None and lo <= v <= hi for v, lo, hi in bands)
    history = analyze(ordered, list(series.values()))
    steps = {c.metric: c for c in history.change_points}
    assert "ttft_p50_ms" not in steps
    tpot_step = steps["tpot_p50_ms"]
    assert tpot_step.commit == f"{15:040x}" and tpot_step.kind == "regression"
    assert 20 < tpot_step.change_pct < 30
    # the trend site draws them in a row of their own, the step marked with its change
    [page] = [p for p in write_site(history, tmp_path / "site") if p.name != "index.html"]
    text = page.read_text()
    assert "time to first token" in text and f"{MACHINE}: tpot_p50_ms" in text
    assert pct(tpot_step.change_pct).replace("\u00a0", " ") in text


@pytest.mark.slow
def test_a_broken_baseline_is_left_out_with_a_line_naming_it(
    history_repo: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo, shas = history_repo
    monkeypatch.chdir(repo)
    broken = repo / "baselines" / MACHINE / f"{shas[3]}.json.gz"
    broken.write_text('{"schema_version": 1, "commit"')
    # left out with a note, as `baselines pull` leaves it: one bad file must not stop the
    # history, the alert and the site of every other commit
    assert main(["history", "--json", "h.json"]) == 0
    err = capsys.readouterr().err
    assert f"note: left out {broken.relative_to(repo)}" in err
    assert len(err.strip().splitlines()) == 1
    data = json.loads((repo / "h.json").read_text())
    assert shas[3] not in data["commits"] and len(data["commits"]) == len(shas) - 1
    assert main(["site", "-o", "site"]) == 0
    assert main(["history", "--dir", "nowhere"]) == 2
    assert main(["history", "--max-p", "0"]) == 2


@pytest.mark.slow
def test_history_reads_the_baselines_branch_without_checking_it_out(
    history_repo: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, shas = history_repo
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "set-url", "origin", str(bare))
    monkeypatch.chdir(repo)
    assert main(["baselines", "push"]) == 0
    shutil.rmtree(repo / "baselines")
    git(repo, "fetch", "-q", "origin")
    status = git(repo, "status", "--porcelain")
    assert main(["history", "--branch", "origin/perfguard-baselines", "--json", "h.json"]) == 0
    data = json.loads((repo / "h.json").read_text())
    assert data["commits"] == shas
    assert shas[STEP_AT] in {c["commit"] for c in data["change_points"]}
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "status", "--porcelain") == status + ("\n?? h.json" if status else "?? h.json")


# --- the site ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_site_has_a_page_per_test_with_plots_and_escaped_names(
    history_repo: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, shas = history_repo
    monkeypatch.chdir(repo)
    assert main(["site", "-o", "site"]) == 0
    site = repo / "site"
    pages = sorted(p.name for p in site.glob("*.html"))
    assert len(pages) == 2 and "index.html" in pages
    assert (site / "plotly.min.js").stat().st_size > 1_000_000
    index = (site / "index.html").read_text()
    assert "<b>16</b>" not in index and "&lt;b&gt;16&lt;/b&gt;" in index
    assert f"https://github.com/octo/models/commit/{shas[STEP_AT]}" in index
    page = (site / next(p for p in pages if p != "index.html")).read_text()
    assert page.count("Plotly.newPlot") == 2  # eager, compile-default
    assert "speedup_over_eager" in page and "peak memory" in page
    assert "https://cdn" not in page  # plotly.js is local: the site opens offline


@pytest.mark.slow
@chromium.needed
def test_the_site_loads_in_headless_chromium_without_errors_and_plots_have_data(
    history_repo: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo, _ = history_repo
    monkeypatch.chdir(repo)
    # a push's update: the first finds no site and builds it whole, the next updates it,
    # reading main from 5 commits before its settled chunks (of 10 commits, 5 back)
    monkeypatch.setattr(site_data, "CHUNK", 10)
    monkeypatch.setattr(site_data, "SETTLE", 5)
    monkeypatch.setattr(site_data, "SPAN", 5)
    assert main(["site", "-o", "site", "--update"]) == 0
    assert "no previous site" in capsys.readouterr().err
    assert main(["site", "-o", "site", "--update"]) == 0
    said = "updated 2 page(s) in site: main's newest 15 commits read, 3 settled chunk(s) kept"
    assert said in capsys.readouterr().out
    for page in sorted((repo / "site").glob("*.html")):
        done = chromium.dump_dom(
            page,
            tmp_path / "profile",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
        )
        console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
        assert done.returncode == 0, done.stderr[-2000:]
        assert console == [], f"{page.name}: {console}"
        if page.name != "index.html":
            assert 'data-plots="2"' in done.stdout and 'data-plots-with-data="2"' in done.stdout


# --- the alert --------------------------------------------------------------------------


@pytest.mark.slow
def test_the_alert_opens_one_issue_and_updates_it_on_a_rerun(
    history_repo: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, shas = history_repo
    monkeypatch.chdir(repo)
    with FakeGitHub() as fake:
        fake.add_issue("unrelated", "someone's bug report")
        fake.add_issue(
            "forged", f"<!-- perfguard-alert machine={MACHINE} commit={shas[STEP_AT]} -->"
        )
        monkeypatch.setenv("GITHUB_TOKEN", fake.token)
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        args = ["alert", "--repo", fake.repo, "--newest", "20"]
        assert main(args) == 0
        ours = [i for i in fake.issues if i["user"]["login"] == fake.login]
        assert len(ours) == 2  # the latency step and the memory step: two commits, two issues
        latency = next(i for i in ours if "latency_p50_ms" in i["title"])
        assert f"commit={shas[STEP_AT]}" in latency["body"]
        assert f"**Culprit: [`{shas[STEP_AT][:10]}`]" in latency["body"]  # a one-commit range
        assert "latency_p50_ms +1" in latency["title"] and MACHINE in latency["title"]
        assert main(args) == 0
        assert len(fake.issues) == 4  # updated, not duplicated; the forged one untouched
        assert [m for m, _ in fake.requests].count("PATCH") == 2
        assert fake.issues[1]["body"].endswith("-->")
        latency["state"] = "closed"  # a maintainer dealt with it
        assert main(args) == 0
        assert len(fake.issues) == 4 and latency["state"] == "closed"
        assert [m for m, _ in fake.requests].count("PATCH") == 3  # the memory one alone


@pytest.mark.slow
def test_no_alert_when_main_has_no_new_regression(
    history_repo: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo, _ = history_repo
    monkeypatch.chdir(repo)
    with FakeGitHub() as fake:
        monkeypatch.setenv("GITHUB_TOKEN", fake.token)
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        assert main(["alert", "--repo", fake.repo, "--newest", "5"]) == 0
        assert fake.issues == [] and fake.requests == []
    assert "no alert" in capsys.readouterr().out


@pytest.mark.slow  # a second or more
def test_an_alert_of_a_machine_key_with_a_space_or_an_arrow_is_found_again() -> None:
    from perfguard.github import Client
    from perfguard.history.alert import raise_alerts
    from perfguard.history.analysis import ChangePoint, History
    from perfguard.history.changepoints import Detection
    from perfguard.history.series import Ordered

    machine = "gpu box --> <b>x</b>"
    previous, after = "a" * 40, "b" * 40
    step = ChangePoint(
        machine, TEST, "eager", "latency_p50_ms", previous, after, 5, 10, 1.0, 1.2, 20.0, 1e-9
    )
    history = History(Ordered((), "test"), (), (step,), Detection())
    with FakeGitHub() as fake:
        client = Client(fake.token, api=fake.url)
        for _ in range(2):
            raise_alerts(client, fake.repo, history, [step], line=[previous, after])
        assert len(fake.issues) == 1  # the second run found the first one's issue
        body = fake.issues[0]["body"]
        hidden = body[: body.index("-->") + 3]
        assert hidden.startswith("<!-- perfguard-alert machine=gpu%20box%20--%3E%20")
        assert "<b>" not in body


def test_a_step_that_came_with_a_package_change_names_it() -> None:
    """torch 2.13.0 -> 2.14.0 at the commit where the latency stepped: history, its alert and
    the site say so; the step itself is found as ever."""
    runs = []
    for i in range(30):
        center = 2.0 * (1.3 if i >= 15 else 1.0) * (1 + random.Random(i).gauss(0, 0.01))
        version = "2.14.0" if i >= 15 else "2.13.0"
        made = run([result(TEST, "eager", center, seed=i)], commit=f"{i:040x}", machine=MACHINE)
        env = {**made.environment, "torch": version, "packages": {"torch": version, "jinja2": "3"}}
        runs.append(replace(made, environment=env, created=f"2026-10-{i + 1:02d}T00:00:00+00:00"))
    ordered = order_runs(runs, None, "main")
    history = analyze(ordered, build_series(ordered))
    step = next(c for c in history.change_points if c.metric == "latency_p50_ms")
    assert step.commit == f"{15:040x}"
    assert step.environment == "torch 2.13.0 -> 2.14.0"
    assert "with torch 2.13.0 -> 2.14.0" in step.found
