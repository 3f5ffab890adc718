"""The paired (A/B) detection study's bookkeeping: its table from kept runs alone, and a study
resumed from runs carried to another machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.detection import ab_repository, main

ITEM = "test_study.py::test_model[gpu-linear]"


def _kept_run(directory: Path, name: str, verdicts: dict[str, tuple[str, float]]) -> None:
    """A results file as a study run keeps it: one gating p50 comparison per variant."""
    doc = {
        "results": [{"variant": v, "details": {"ab": {"pairs": 6}}} for v in verdicts],
        "comparisons": [
            {
                "test": ITEM,
                "variant": variant,
                "metric": "latency_p50_ms",
                "verdict": verdict,
                "change_pct": change,
                "gating": True,
            }
            for variant, (verdict, change) in verdicts.items()
        ],
    }
    (directory / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")


def test_the_table_of_a_paired_study_alone_needs_no_stored_mode_study(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`analyze --ab-dir DIR` (the gpu-check stage's closing step) read the stored-mode
    study's schedule from the default folder too, and failed where there was none."""
    monkeypatch.chdir(tmp_path)  # no reports/detection here
    study = tmp_path / "study-gpu"
    study.mkdir()
    (study / "commits.json").write_text(
        json.dumps({"base": "b", "heads": {}, "suite": {"ab_min_change": 3.0}}), encoding="utf-8"
    )
    for i in range(2):
        _kept_run(
            study, f"ab-plus00-{i:03d}", {"eager": ("unchanged", -0.4), "other": ("unchanged", 0.2)}
        )
    _kept_run(study, "ab-plus05-000", {"eager": ("regression", 5.3), "other": ("regression", 5.9)})
    assert main(["analyze", "--ab-dir", str(study)]) == 0
    out = capsys.readouterr().out
    assert "Same-job A/B (`--perfguard-ab`):" in out
    assert "| identical | -0.1% (-0.4% to +0.2%) | 4 | 0 (0.0%) |" in out
    assert "| +5% | +5.6% (+5.5% to +5.8%) | 2 | 2 (100.0%) |" in out
    assert "A/B bar (`--perfguard-ab-min-change`): 3%." in out
    assert "flagged at least 90% of the time in A/B mode: +5%." in out
    assert not (tmp_path / "reports").exists()


def _commit_of(repo: Path, sha: str) -> str:
    done = subprocess.run(
        ["git", "show", "-s", "--format=%s", sha], cwd=repo, capture_output=True, text=True
    )
    return done.stdout.strip()


def test_a_study_carried_without_its_scratch_repository_is_resumed(tmp_path: Path) -> None:
    """Runs brought back from a lent GPU hold no scratch repository (it is not archived): the
    next machine makes it again, with the same levels and bar, and new commits."""
    study = tmp_path / "study"
    repo, base, heads = ab_repository(study, (0, 5), ("gpu-linear",), ("eager",), 3.0)
    assert _commit_of(repo, heads[5]) == "head +5%"
    first = json.loads((study / "commits.json").read_text())
    assert first["suite"]["ab_min_change"] == 3.0

    assert ab_repository(study, (0,), ("gpu-linear",), ("eager",), 3.0)[1] == base  # as it was

    subprocess.run(["rm", "-rf", str(repo)], check=True)
    again, _, heads_again = ab_repository(study, (0,), ("gpu-linear",), ("eager",), 3.0)
    assert sorted(heads_again) == [0, 5]  # the levels it had, not only those asked now
    assert _commit_of(again, heads_again[5]) == "head +5%"
    assert json.loads((study / "commits.json").read_text())["heads"] == {
        str(k): v for k, v in heads_again.items()
    }

    with pytest.raises(SystemExit, match="other models, variants, levels or A/B bar"):
        ab_repository(study, (0,), ("gpu-linear",), ("eager",), 5.0)  # another bar
