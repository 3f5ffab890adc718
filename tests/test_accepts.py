"""Accepting a known change: the accept file's form, where an entry counts, and the gate."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from perfguard.cli import main
from perfguard.pipeline import FinishSettings, Measured, PipelineOutcome, finish_run
from perfguard.records import Comparison, Run, reason
from perfguard.stats import accepts
from perfguard.store.baselines import BaselineStore
from tests import forkserver
from tests.factories import result, run
from tests.gitrepo import commit, git

T, OTHER = "tests/test_models.py::test_mlp[eager]", "tests/test_models.py::test_cnn"
MACHINE = "cpu-test-2c"
WIDE = """
[[accept]]
test = "tests/test_models.py::test_mlp*"
metric = ["latency_p50_ms", "latency_p95_ms"]
up_to = "+150%"
reason = "the MLP is twice as wide for the new head"
"""


def _cmp(test: str = T, metric: str = "latency_p50_ms", change: float = 100.0) -> Comparison:
    return Comparison(
        test=test,
        variant="eager",
        metric=metric,  # type: ignore[arg-type]
        baseline=1.0,
        current=1.0 + change / 100,
        change_pct=change,
        p_value=1e-6,
        cohens_d=5.0,
        verdict="regression",
    )


# ---- the form ----------------------------------------------------------------------------


def test_an_entry_reads_its_patterns_metrics_and_bound() -> None:
    (entry,) = accepts.parse(WIDE)
    assert entry.test == "tests/test_models.py::test_mlp*" and entry.variant == "*"
    assert entry.metrics == ("latency_p50_ms", "latency_p95_ms")
    assert (entry.limit, entry.size, entry.bound) == (150.0, False, "+150%")
    (mem,) = accepts.parse(
        WIDE.replace('"+150%"', '"+200 MiB"').replace(
            '["latency_p50_ms", "latency_p95_ms"]', '"peak_memory_bytes"'
        )
    )
    assert (mem.limit, mem.size) == (200 * 2**20, True)


P50_P95 = 'metric = ["latency_p50_ms", "latency_p95_ms"]'


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ('"+150%"', '"150"', "up_to must be a rise like '+15%' or '+200 MiB', got '150'"),
        ('"+150%"', '"-10%"', "up_to must be a rise"),
        ('reason = "the MLP is twice as wide for the new head"', "", "reason is missing"),
        ('"tests/test_models.py::test_mlp*"', '"*"', "test = '*' would accept every test"),
        (P50_P95, 'metric = "speed"', "metric 'speed' is not one of"),
        ('"+150%"', '"+1 GiB"', "a size (+1 GiB) bounds only peak_memory_bytes"),
        ("[[accept]]", "[[accept]", "not TOML"),
        ("[[accept]]", "[[accepts]]", "unknown table 'accepts'"),
        ("reason =", 'reviewer = "me"\nreason =', "unknown key 'reviewer'"),
        ('"tests/test_models.py::test_mlp*"', '"**"', "test = '**' would accept every test"),
        ('"tests/test_models.py::test_mlp*"', '"*::*"', "test = '*::*' would accept every"),
        ('"+150%"', '"+' + "9" * 400 + '%"', "is no bound: at most +1000%"),
        ('"+150%"', '"+2000%"', "is no bound: at most +1000%"),
        (P50_P95, "metric = []", "metric = [] names no metric"),
        ("[[accept]]", "x = " + "[" * 2000 + "]" * 2000 + "\n[[accept]]", "nested too deeply"),
    ],
)
def test_a_malformed_file_is_one_error_naming_the_entry(old: str, new: str, said: str) -> None:
    with pytest.raises(accepts.AcceptError, match=r"^perfguard-accept\.toml") as caught:
        accepts.parse(WIDE.replace(old, new))
    assert said in str(caught.value)


# ---- the gate ----------------------------------------------------------------------------


def test_a_regression_within_the_bound_is_accepted_and_beyond_it_stays() -> None:
    entries = accepts.parse(WIDE)
    within, beyond, other, p99 = accepts.apply(
        [_cmp(change=120.0), _cmp(change=180.0), _cmp(OTHER), _cmp(metric="latency_p99_ms")],
        entries,
    )
    assert within.verdict == "accepted" and within.accepted is not None
    assert within.accepted.bound == "+150%" and "twice as wide" in within.accepted.reason
    assert beyond.verdict == "regression"
    assert beyond.reasons[-1] == reason("beyond_accepted", bound="+150%")
    assert other.verdict == "regression" and other.reasons == ()  # not named: untouched
    assert p99.verdict == "regression"  # a metric the entry does not name


def test_a_test_id_is_matched_with_star_alone() -> None:
    """`[` in a parametrized id is a character, not fnmatch's set."""
    (entry,) = accepts.parse(WIDE.replace("test_mlp*", "test_mlp[eager]"))
    (c,) = accepts.apply([_cmp()], [entry])
    assert c.verdict == "accepted"


def test_a_size_bound_is_on_the_bytes_added() -> None:
    (entry,) = accepts.parse(
        WIDE.replace('["latency_p50_ms", "latency_p95_ms"]', '"peak_memory_bytes"').replace(
            "+150%", "+200 MiB"
        )
    )
    grew = [
        Comparison(
            test=T,
            variant="eager",
            metric="peak_memory_bytes",
            baseline=1e9,
            current=1e9 + mib * 2**20,
            change_pct=mib * 2**20 / 1e7,
            p_value=None,
            cohens_d=None,
            verdict="regression",
        )
        for mib in (150, 250)
    ]
    within, beyond = accepts.apply(grew, [entry])
    assert (within.verdict, beyond.verdict) == ("accepted", "regression")


def test_an_accepted_verdict_round_trips_and_does_not_fail_the_gate() -> None:
    (c,) = accepts.apply([_cmp()], accepts.parse(WIDE))
    doc = run([result(T, "eager", 2.0)], commit="a" * 40).to_json()
    doc["comparisons"] = [c.to_json()]
    again = Run.from_json(doc)
    assert again.comparisons[0].accepted == c.accepted
    assert not again.has_regression


# ---- where an entry counts: introduced since the base, read from git ----------------------


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    """main with a stored baseline of a 1 ms MLP, and a pull request's commit on top."""
    root, store_dir = tmp_path / "repo", tmp_path / "baselines"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    base = commit(root, "base")
    BaselineStore(store_dir).save(
        run([result(T, "eager", 1.0, seed=1)], commit=base, machine=MACHINE)
    )
    return root, store_dir


def _pr(root: Path, store_dir: Path, accept: str | None, *, save: bool = False) -> PipelineOutcome:
    """A commit that makes the MLP 2x slower, with `accept` as its accept file, measured
    (and with `save`, filed as main's run files its baseline)."""
    if accept is not None:
        (root / accepts.ACCEPT_FILE).write_text(accept)
        git(root, "add", accepts.ACCEPT_FILE)
    commit(root, "widen the MLP")
    return finish_run(
        Measured([result(T, "eager", 2.0, seed=2)], run([]).environment),
        FinishSettings(
            root=root,
            baseline_dir=store_dir,
            machine=MACHINE,
            report=root / "report.md",
            save=save,
            allow_dirty=True,  # the report is written in the checkout
        ),
    )


def _merge_the_wide_accept(root: Path, store_dir: Path) -> None:
    """An earlier pull request merged with WIDE in its accept file, and main's baseline."""
    (root / accepts.ACCEPT_FILE).write_text(WIDE)
    git(root, "add", accepts.ACCEPT_FILE)
    merged = commit(root, "an earlier pull request, merged with its accept")
    BaselineStore(store_dir).save(
        run([result(T, "eager", 1.0, seed=3)], commit=merged, machine=MACHINE)
    )


def _p50(outcome: PipelineOutcome) -> Comparison:
    return next(c for c in outcome.run.comparisons if c.metric == "latency_p50_ms")


def test_a_run_says_what_it_cost_on_the_runner(repo: tuple[Path, Path]) -> None:
    """The cost counts from the session's start (`started`): measuring until the pipeline,
    then comparing and confirming; the report's footer says it."""
    root, store_dir = repo
    commit(root, "head")
    outcome = finish_run(
        Measured(
            [result(T, "eager", 1.0, seed=2)],
            run([]).environment,
            started=time.monotonic() - 125.0,  # measuring began two minutes ago
        ),
        FinishSettings(root=root, baseline_dir=store_dir, machine=MACHINE, report=root / "r.md"),
    )
    cost = outcome.run.cost
    assert cost is not None and cost.items == 1 and cost.shards == 1
    assert 125.0 <= cost.measure_s < 185.0 and cost.seconds == cost.measure_s + cost.confirm_s
    assert "**Cost on the runner:** 2\u00a0min 0" in (root / "r.md").read_text()


def test_the_pull_request_that_adds_an_entry_is_accepted_and_says_so(
    repo: tuple[Path, Path],
) -> None:
    outcome = _pr(*repo, WIDE)
    p50 = _p50(outcome)
    assert p50.verdict == "accepted" and outcome.error is None
    assert p50.accepted is not None and p50.accepted.by == "t"  # tests.gitrepo's author
    assert not outcome.run.has_regression
    report = (repo[0] / "report.md").read_text()
    first = report.splitlines()[1]
    assert first.startswith("## perfguard: no regression; ") and "accepted" in first
    assert "### Accepted by this pull request" in report and "+150%" in report
    assert any("2 regression(s) accepted" in m for m in outcome.messages)  # p50, p95


def test_without_an_entry_or_beyond_its_bound_the_regression_stands(
    repo: tuple[Path, Path],
) -> None:
    assert _p50(_pr(*repo, None)).verdict == "regression"
    tight = _p50(_pr(*repo, WIDE.replace("+150%", "+20%")))
    assert tight.verdict == "regression"
    assert tight.reasons[-1] == reason("beyond_accepted", bound="+20%")


def test_an_entry_the_base_already_holds_accepts_nothing(repo: tuple[Path, Path]) -> None:
    """An accept never outlives its pull request: once merged, the next one finds it in its
    base, and it applies to nothing there."""
    root, store_dir = repo
    _merge_the_wide_accept(root, store_dir)
    p50 = _p50(_pr(root, store_dir, None))
    assert p50.verdict == "regression"


def test_rewording_an_old_entry_does_not_give_it_its_bound_again(
    repo: tuple[Path, Path],
) -> None:
    root, store_dir = repo
    _merge_the_wide_accept(root, store_dir)
    reworded = WIDE.replace("twice as wide", "two times as wide")
    assert _p50(_pr(root, store_dir, reworded)).verdict == "regression"


@pytest.mark.parametrize(
    "rewritten",
    [
        WIDE.replace("test_mlp*", "test_mlp**"),  # an equivalent glob
        WIDE.replace('metric = ["latency_p50_ms"', 'variant = "eager"\nmetric = ["latency_p50_ms"'),
        WIDE.replace("+150%", "+120%"),  # a lower bound
    ],
    ids=["equivalent-glob", "one-variant", "lower-bound"],
)
def test_an_old_entry_narrowed_or_written_otherwise_is_not_new_again(
    repo: tuple[Path, Path], rewritten: str
) -> None:
    root, store_dir = repo
    _merge_the_wide_accept(root, store_dir)
    assert _p50(_pr(root, store_dir, rewritten)).verdict == "regression"


def test_a_broken_base_with_quoted_headers_keeps_its_entries() -> None:
    """`[[ "accept" ]]` is TOML's `[[accept]]`: a broken base file still had those entries."""
    base = WIDE.replace("[[accept]]", '[[ "accept" ]]') + "\n[[accept]]\nbroken =\n"
    assert accepts.parse_each(base) == accepts.parse(WIDE)


def test_an_entry_that_matches_the_whole_suite_is_refused_in_a_shard_of_one_test(
    repo: tuple[Path, Path],
) -> None:
    """A shard holds one test; the suite (collected before the shards) holds more: `*test*`
    accepts all of it, and is refused there as it is in the whole run."""
    root, store_dir = repo
    (root / accepts.ACCEPT_FILE).write_text(
        WIDE.replace("tests/test_models.py::test_mlp*", "*test*")
    )
    git(root, "add", accepts.ACCEPT_FILE)
    commit(root, "widen the MLP, accept everything")
    outcome = finish_run(
        Measured(
            [result(T, "eager", 2.0, seed=2)],
            run([]).environment,
            suite=frozenset({T, "tests/test_models.py::test_cnn"}),
        ),
        FinishSettings(root=root, baseline_dir=store_dir, machine=MACHINE),
    )
    assert _p50(outcome).verdict == "regression"
    assert outcome.run.accept_error is not None and "matches every one" in outcome.run.accept_error


def test_mending_a_broken_file_on_main_makes_only_the_mended_entry_new(
    repo: tuple[Path, Path],
) -> None:
    root, store_dir = repo
    broken = WIDE + '\n[[accept]]\ntest = "tests/test_models.py::test_cnn"\nmetric = "bogus"\n'
    (root / accepts.ACCEPT_FILE).write_text(broken)
    git(root, "add", accepts.ACCEPT_FILE)
    merged = commit(root, "main's accept file is broken")
    BaselineStore(store_dir).save(
        run([result(T, "eager", 1.0, seed=3)], commit=merged, machine=MACHINE)
    )
    outcome = _pr(root, store_dir, WIDE)  # mends it by dropping the broken entry
    assert _p50(outcome).verdict == "regression"  # the old entry does not apply again


def test_a_reason_that_is_not_utf8_is_one_line_and_the_report_is_written(
    repo: tuple[Path, Path],
) -> None:
    root, store_dir = repo
    (root / accepts.ACCEPT_FILE).write_bytes(WIDE.replace("twice", "tw\xffice").encode("latin-1"))
    git(root, "add", accepts.ACCEPT_FILE)
    outcome = _pr(root, store_dir, None)
    assert outcome.run.accept_error is not None and "not UTF-8" in outcome.run.accept_error
    assert _p50(outcome).verdict == "regression"
    assert "not UTF-8" in (root / "report.md").read_text()


def test_a_malformed_accept_file_fails_the_run_and_the_report_says_why(
    repo: tuple[Path, Path],
) -> None:
    outcome = _pr(*repo, WIDE.replace('up_to = "+150%"', 'up_to = "lots"'))
    assert _p50(outcome).verdict == "regression"  # nothing accepted
    assert outcome.error is not None and "nothing accepted" in outcome.error
    assert outcome.run.accept_error is not None and "up_to" in outcome.run.accept_error
    report = (repo[0] / "report.md").read_text()
    assert "could not be read" in report.splitlines()[1]
    assert "[!CAUTION]" in report and "must be a rise" in report


def test_perfguard_report_renders_an_accepted_results_file(
    repo: tuple[Path, Path], tmp_path: Path
) -> None:
    outcome = _pr(*repo, WIDE)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(outcome.run.to_json()))
    assert main(["report", str(path), "--exit-code", "-o", str(tmp_path / "r.md")]) == 0


# ---- main's history: the step at the merge commit is accepted, and no alert opens ------------


@pytest.mark.slow
def test_a_step_accepted_at_its_merge_commit_is_marked_and_raises_no_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Main measures 20 commits at 1 ms; a pull request that doubles the MLP lands with its
    accept (main's run at the merge commit compares with its parent and saves); 9 commits at
    2 ms follow (enough on each side for the step's rank test). History finds the step and
    marks it accepted; `alert` opens no issue."""
    from tests.github_fake import FakeGitHub

    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    store = BaselineStore(root / "baselines")

    def measured(ms: float, i: int) -> None:
        sha = commit(root, f"commit {i}")
        center = ms * (1 + random.Random(i).gauss(0, 0.02))  # main's day-to-day noise
        store.save(run([result(T, "eager", center, seed=i)], commit=sha, machine=MACHINE))

    for i in range(20):
        measured(1.0, i)
    outcome = _pr(root, root / "baselines", WIDE, save=True)  # main's run at the merge
    assert outcome.saved_path is not None and _p50(outcome).verdict == "accepted"
    for i in range(20, 29):
        measured(2.0, i)
    merge = git(root, "rev-parse", "HEAD~9")

    monkeypatch.chdir(root)
    assert main(["history", "--json", "h.json", "-o", "h.md"]) == 0
    (step,) = [c for c in json.loads((root / "h.json").read_text())["change_points"]]
    assert step["kind"] == "regression" and step["accepted_at"] == merge
    assert step["accepted"].startswith("+150%: the MLP is twice as wide")
    assert f"accepted at `{merge[:10]}`" in (root / "h.md").read_text()
    with FakeGitHub() as fake:
        monkeypatch.setenv("GITHUB_TOKEN", fake.token)
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        assert main(["alert", "--repo", fake.repo, "--newest", "10"]) == 0
        assert fake.issues == []
    out = capsys.readouterr().out
    assert f"accepted at {merge[:10]}" in out and "no alert" in out


# ---- end to end: a pull request in a scratch repository, the workflow's own commands ---------

MODELS = """
import time

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        time.sleep({ms} / 1000)  # a slowdown a busy machine cannot hide or fake
        return x * 2


def test_mlp(perfguard):
    perfguard.run(Model().eval(), (torch.randn(4, 8),))
"""
SESSION = (
    "--perfguard",
    "--perfguard-variants=eager",
    "--perfguard-device=cpu",
    "--perfguard-threads=1",
    "--perfguard-budget=0.1",
    "--perfguard-repeats=6",  # one repeat a busy runner stalls cannot hide a 4x change
    "--perfguard-confirm=0",
    "--perfguard-fail-on=never",  # as the workflow's measure job: the compare job gates
    "--perfguard-json=out.json",
    "-p",
    "no:cacheprovider",
)
FOUR_TIMES = (
    WIDE.replace("tests/test_models.py::test_mlp*", "test_models.py::test_mlp")
    .replace("+150%", "{bound}")
    .replace("the MLP is twice as wide", "the model takes four times as long (@octocat, #12)")
)


def _session(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run_pytest(where, *SESSION, *args)


@pytest.fixture(scope="module")
def measured_main(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch repository whose main is measured and saved, once for the module."""
    root = tmp_path_factory.mktemp("accept-e2e") / "repo"
    root.mkdir()
    (root / ".gitignore").write_text("reports/\nbaselines/\n*.json\n__pycache__/\n")
    (root / "test_models.py").write_text(MODELS.format(ms=2))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    commit(root, "main")
    saved = _session(root, "--perfguard-save")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    return root


@pytest.mark.slow
@pytest.mark.realtime
@pytest.mark.parametrize(("bound", "gate"), [("+1000%", 0), ("+20%", 1), (None, 1)])
def test_a_pull_request_that_slows_a_model_passes_only_within_what_it_accepts(
    measured_main: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bound: str | None,
    gate: int,
) -> None:
    """main measured and saved; a pull request makes the model 4x slower, with an accept of
    +1000%, of +20%, or none; measured as the workflow's measure job does, gated by its
    compare job's `perfguard report --exit-code`, and posted to a loopback GitHub."""
    from tests.github_fake import FakeGitHub

    root = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(measured_main), str(root))
    shutil.copytree(measured_main / "baselines", root / "baselines")
    git(root, "checkout", "-q", "-b", "slower")
    (root / "test_models.py").write_text(MODELS.format(ms=8))
    if bound is not None:
        (root / accepts.ACCEPT_FILE).write_text(FOUR_TIMES.format(bound=bound))
    git(root, "add", "-A")
    commit(root, "a model four times as slow")
    measured = _session(root, "--perfguard-compare=origin/main")
    assert measured.returncode == 0, measured.stdout + measured.stderr
    monkeypatch.chdir(root)

    p50 = next(
        c
        for c in json.loads((root / "out.json").read_text())["comparisons"]
        if c["metric"] == "latency_p50_ms"
    )
    assert main(["report", "out.json", "--exit-code", "-o", "report.md"]) == gate, p50
    body = (root / "report.md").read_text()
    if gate == 0:
        assert p50["verdict"] == "accepted" and p50["accepted"]["bound"] == "+1000%", p50
        assert body.splitlines()[1].startswith("## perfguard: no regression; ")
        assert "@octocat" not in body and "#12" not in body  # the reason mentions nobody
    else:
        assert p50["verdict"] == "regression" and p50["change_pct"] > 100, p50
        beyond = {"kind": "beyond_accepted", "bound": "+20%"}
        assert (beyond in p50["reasons"]) == (bound is not None)
    with FakeGitHub() as fake:
        monkeypatch.setenv("GITHUB_TOKEN", fake.token)
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        args = ["--repo", fake.repo, "--pr", str(fake.pr), "--body-file", "report.md"]
        assert main(["comment", *args]) == 0
        (posted,) = fake.comments
        assert ("Accepted by this pull request" in posted["body"]) == (gate == 0)
        assert "**Cost on the runner:**" in posted["body"]  # the session's own figure


def _entry(test: str, metrics: str, bound: str) -> str:
    return f'[[accept]]\ntest = "{test}"\nmetric = [{metrics}]\nup_to = "{bound}"\nreason = "r"\n'


def test_an_old_entry_written_another_way_is_not_new_and_only_new_bounds_apply() -> None:
    """By meaning: metrics reordered, `+150.0%` for `+150%`, one entry split in one per
    metric: nothing new; a metric the base did not accept is new on its own."""
    base = accepts.parse(WIDE)
    same = accepts.parse(
        _entry("tests/test_models.py::test_mlp*", '"latency_p95_ms", "latency_p50_ms"', "+150.0%")
        + _entry("tests/test_models.py::test_mlp*", '"latency_p50_ms"', "+150%")
    )
    assert accepts.introduced(same, base) == []
    wider = accepts.parse(
        _entry("tests/test_models.py::test_mlp*", '"latency_p50_ms", "latency_p99_ms"', "+150%")
    )
    [new] = accepts.introduced(wider, base)
    assert new.metrics == ("latency_p99_ms",)
    raised = accepts.parse(_entry("tests/test_models.py::test_mlp*", '"latency_p50_ms"', "+200%"))
    assert [a.metrics for a in accepts.introduced(raised, base)] == [("latency_p50_ms",)]


def test_a_broken_base_file_with_spaced_headers_keeps_its_entries() -> None:
    broken = WIDE.replace("[[accept]]", "[[ accept ]]") + "\n[[ accept ]]\ntest = \n"
    assert [a.test for a in accepts.parse_each(broken)] == ["tests/test_models.py::test_mlp*"]


def test_a_pattern_matching_every_test_of_the_run_accepts_nothing() -> None:
    ids = [T, OTHER, "tests/test_models.py::test_encoder"]
    for pattern in ("*test*", "tests/*", "*"):
        assert (
            "matches every one of this run's 3 perf tests"
            in str(
                accepts.too_wide(
                    accepts.parse_each(_entry(pattern, '"latency_p50_ms"', "+5%")), ids
                )
            )
            or pattern == "*"
        )  # "*" is refused when read already
    assert accepts.too_wide(accepts.parse(WIDE), ids) is None


@pytest.mark.parametrize("command", ["report", "merge"])
def test_an_unreadable_accept_file_fails_report_and_merge_as_the_report_says(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = Run.from_json({**run([result(T, "eager", 1.0)]).to_json(), "accept_error": "bad"})
    path = tmp_path / "r.json"
    path.write_text(json.dumps(broken.to_json()))
    args = ["report", str(path), "--exit-code"] if command == "report" else [
        "merge", str(path), "-o", str(tmp_path / "m.json")]  # fmt: skip
    assert main(args) == 1
    assert "nothing accepted: bad" in capsys.readouterr().err
