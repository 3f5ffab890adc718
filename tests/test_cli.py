"""The `perfguard` command: exit codes, and no torch needed."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.cli import main
from perfguard.store.baselines import BaselineStore
from tests import gitrepo
from tests.factories import result, run

T = "t.py::test_m"


def write(path: Path, r: object) -> Path:
    path.write_text(json.dumps(r.to_json()))  # type: ignore[attr-defined]
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "base": write(tmp_path / "base.json", run([result(T, "eager", 1.0, seed=1)])),
        "same": write(
            tmp_path / "same.json", run([result(T, "eager", 1.0, seed=2)], commit="b" * 40)
        ),
        "slow": write(
            tmp_path / "slow.json", run([result(T, "eager", 1.6, seed=3)], commit="b" * 40)
        ),
        "other": write(
            tmp_path / "other.json", run([result(T, "eager", 1.0)], machine="cpu-other-8c")
        ),
    }


def test_compare_exit_codes(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(files["base"]), str(files["same"])]) == 0
    out = tmp_path / "cmp.json"
    assert (
        main(
            [
                "compare",
                str(files["base"]),
                str(files["slow"]),
                "--json",
                str(out),
                "-o",
                str(tmp_path / "cmp.md"),
            ]
        )
        == 1
    )
    doc = json.loads(out.read_text())
    assert any(c["verdict"] == "regression" for c in doc["comparisons"])
    assert "regression" in (tmp_path / "cmp.md").read_text()
    capsys.readouterr()
    assert main(["compare", str(files["base"]), str(files["other"])]) == 2
    assert "never compares numbers from different machines" in capsys.readouterr().err


def test_report_renders_a_results_file(files: dict[str, Path], tmp_path: Path) -> None:
    assert main(["report", str(files["base"]), "-o", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("<!-- perfguard-report -->")


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert main(["report", str(broken)]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and len(err.strip().splitlines()) == 1
    assert main(["report", str(tmp_path / "absent.json")]) == 2
    assert main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_merge_joins_shards_and_refuses_mismatches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "a.json", run([result("t.py::a", "eager", 1.0)]))
    b = write(tmp_path / "b.json", run([result("t.py::b", "eager", 1.0)]))
    out = tmp_path / "m.json"
    assert main(["merge", str(a), str(b), "-o", str(out)]) == 0
    assert {r["test"] for r in json.loads(out.read_text())["results"]} == {"t.py::a", "t.py::b"}
    other = write(tmp_path / "c.json", run([result("t.py::c", "eager", 1.0)], commit="c" * 40))
    assert main(["merge", str(a), str(other), "-o", str(out)]) == 2
    assert "only shards of one commit" in capsys.readouterr().err
    assert main(["merge", str(a), str(a), "-o", str(out)]) == 2
    assert "must not overlap" in capsys.readouterr().err


def test_baselines_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfguard.store import BaselineStore

    BaselineStore(tmp_path).save(run([result(T, "eager", 1.0)]))
    assert main(["baselines", "list", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cuda-test-gpu" in out and "a" * 12 in out


@pytest.mark.slow
def test_report_and_compare_run_without_torch(files: dict[str, Path], tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from perfguard.cli import main\n"
        f"a = main(['report', {str(files['base'])!r}, '-o', {str(tmp_path / 'x.md')!r}])\n"
        f"b = main(['compare', {str(files['base'])!r}, {str(files['slow'])!r}, "
        f"'-o', {str(tmp_path / 'y.md')!r}])\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "sys.exit(a * 10 + b)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr


def test_merge_confirms_the_whole_run_with_the_shards_re_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards re-measure their flagged items on the GPU; merge's verdicts use those."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return gitrepo.git(repo, *args)

    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "A")
    a = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", "B")
    b = git("rev-parse", "HEAD")
    base = run([result("t.py::a", "eager", 1.0, seed=1), result("t.py::b", "eager", 1.0, seed=2)])
    BaselineStore(repo / "baselines").save(run(list(base.results), commit=a))
    real = replace(
        run([result("t.py::a", "eager", 1.6, seed=3)], commit=b),
        confirm_results=((result("t.py::a", "eager", 1.5, seed=5),),),
    )
    # this shard re-measured beside the base commit: the base side was as slow (a spell)
    fluke = replace(
        run([result("t.py::b", "eager", 1.6, seed=4)], commit=b),
        confirm_results=((result("t.py::b", "eager", 1.6, seed=6),),),
        confirm_base_results=((result("t.py::b", "eager", 1.6, seed=7),),),
    )
    s1, s2 = write(tmp_path / "s1.json", real), write(tmp_path / "s2.json", fluke)
    monkeypatch.chdir(repo)
    out = tmp_path / "merged.json"
    assert main(["merge", str(s1), str(s2), "-o", str(out), "--compare", "auto"]) == 1
    doc = json.loads(out.read_text())
    p50 = {c["test"]: c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms"}
    assert p50["t.py::a"]["verdict"] == "regression"
    assert p50["t.py::a"]["confirm_change_pct"][0] > 40
    assert p50["t.py::b"]["verdict"] == "inconclusive"
    fluked, real_one = p50["t.py::b"]["confirmation"], p50["t.py::a"]["confirmation"]
    assert (fluked["kind"], fluked["where"]) == ("not_shown", ["beside the base commit"])
    assert (real_one["kind"], real_one["where"]) == ("shown", ["in a fresh process"])
    assert [len(rs) for rs in doc["confirm_results"]] == [2]  # one round, both shards
    assert [len(rs) for rs in doc["confirm_base_results"]] == [1]
    assert doc["settings"]["confirm"] == 1


def test_report_exit_code_says_whether_the_results_hold_a_regression(
    files: dict[str, Path], tmp_path: Path
) -> None:
    compared = tmp_path / "cmp.json"
    main(["compare", str(files["base"]), str(files["slow"]), "--json", str(compared)])
    assert main(["report", str(compared), "-o", str(tmp_path / "a.md"), "--exit-code"]) == 1
    assert main(["report", str(compared), "-o", str(tmp_path / "b.md")]) == 0
    assert main(["report", str(files["base"]), "-o", str(tmp_path / "c.md"), "--exit-code"]) == 0


def test_comment_and_baselines_import_no_third_party_package() -> None:
    """The workflow's write jobs install perfguard with --no-deps: `comment` must need only the
    standard library, `baselines pull/push` only filelock."""
    import subprocess
    import sys

    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    top = name.split('.')[0]\n"
        "    if top in {'numpy', 'scipy', 'pandas', 'jinja2', 'torch', 'git', 'filelock'}:\n"
        "        raise ImportError('not installed: ' + top)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "from perfguard.cli import main\n"
        "sys.exit(main(['comment', '--help']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_merge_compares_ab_shards_with_the_base_side_they_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same-job A/B shards carry their base side: `--compare auto` pairs the whole run with
    it, not with a stored baseline (which here was saved in a slow spell and would hide the
    slowdown), and a shard of another kind or another base commit is refused."""
    from perfguard.records import BaselineRef

    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return gitrepo.git(repo, *args)

    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "A")
    a = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", "B")
    b = git("rev-parse", "HEAD")
    slow_spell = [result("t.py::a", "eager", 1.6, seed=1), result("t.py::b", "eager", 1.6, seed=2)]
    BaselineStore(repo / "baselines").save(run(slow_spell, commit=a))
    beside = BaselineRef(commit=a, reason="same-job A/B", mode="ab")

    def shard(test: str, head_ms: float, k: int, ref: BaselineRef = beside) -> Path:
        made = replace(
            run([result(test, "eager", head_ms, seed=10 + k)], commit=b),
            baseline=ref,
            baseline_results=(result(test, "eager", 1.0, seed=20 + k),),
            settings={"shard": f"{k}/2"},
        )
        return write(tmp_path / f"s{k}-{ref.mode}.json", made)

    s1, s2 = shard("t.py::a", 1.5, 1), shard("t.py::b", 1.0, 2)
    monkeypatch.chdir(repo)
    out = tmp_path / "merged.json"
    assert main(["merge", str(s1), str(s2), "-o", str(out), "--compare", "auto"]) == 1
    doc = json.loads(out.read_text())
    assert (doc["baseline"]["mode"], doc["baseline"]["commit"]) == ("ab", a)
    p50 = {c["test"]: c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms"}
    assert p50["t.py::a"]["verdict"] == "regression"  # +50% beside the base
    assert p50["t.py::b"]["verdict"] == "unchanged"
    context = [r for r in p50["t.py::a"]["reasons"] if r["kind"] == "stored_context"]
    assert len(context) == 1  # the stored baseline, shown as context only
    assert [r["test"] for r in doc["baseline_results"]] == ["t.py::a", "t.py::b"]
    capsys.readouterr()

    assert main(["merge", str(s1), str(s2), "-o", str(out), "--compare", b]) == 2
    assert "use --compare auto" in capsys.readouterr().err
    stored = shard("t.py::b", 1.0, 2, BaselineRef(commit=a, reason="stored"))
    assert main(["merge", str(s1), str(stored), "-o", str(out), "--compare", "auto"]) == 2
    assert "merge them without --compare" in capsys.readouterr().err
    elsewhere = shard("t.py::b", 1.0, 2, BaselineRef(commit=b, reason="x", mode="ab"))
    assert main(["merge", str(s1), str(elsewhere), "-o", str(out), "--compare", "auto"]) == 2
    assert "measure one base commit" in capsys.readouterr().err
