"""`perfguard calibrate`: rounds judged as the pull request's check judges them, the canaries
caught, the check that cannot fire named, and the command end to end on a scripted clock."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.calibrate import Calibration, CalibrationError, analyze, merged, schedule
from perfguard.calibrate.analysis import flagged_before_correction
from perfguard.calibrate.record import Comparison, Item, Round
from perfguard.calibrate.render import markdown
from perfguard.stats.sequential import LOOKS
from perfguard.stats.thresholds import Thresholds
from tests import forkserver
from tests.timing import SCRIPTED_CLOCK


def _blocks(rng: random.Random, ms: float, pairs: int = 6) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(ms * (1 + rng.gauss(0, 0.01)) for _ in range(30)) for _ in range(pairs))


def _comparison(rng: random.Random, slower: float, offset: float = 0.0) -> Comparison:
    """A comparison whose B side is `slower` percent slower, and `offset` percent more for
    the pair of workers that took it."""
    pairing = {
        "pairs": 6,
        "order": " ".join(["AB"] * 6),
        "sequential": {"looks": list(LOOKS), "stopped_at": 6},
    }
    a, b = _blocks(rng, 1.0), _blocks(rng, (1 + slower / 100) * (1 + offset / 100))
    return Comparison(a, b, pairing, wall_s=1.5, device_ms=360.0)


def _calibration(shown: float, *, seed: int = 1, offset: float = 0.0) -> Calibration:
    """Two items, 8 identical rounds and 4 at a +10% canary; `shown`: the share of the
    canary's rounds that really slowed the side (0: a check that cannot see it); `offset`:
    the pair's own, on every round it took."""
    rng = random.Random(seed)
    kinds = schedule(8, (10.0,), 4, seed)
    items = []
    for test in ("t.py::test_a", "t.py::test_b"):
        rounds = []
        for k, kind in enumerate(kinds):
            acting = kind if kind == 0 or (k % 4) < shown * 4 else 0.0
            main = _comparison(rng, acting, offset)
            again = (_comparison(rng, acting, offset),) if acting else ()
            rounds.append(Round(kind, 0.1 * kind / 100, main, again))
        items.append(Item(test, "eager", tuple(rounds), call_ms=1.0))
    return Calibration(
        rounds=8,
        canary=(10.0,),
        canary_rounds=4,
        confirm=1,
        thresholds=Thresholds().to_json(),
        items=tuple(items),
        launches={"A": 1, "B": 1},
    )


def test_the_schedule_starts_identical_and_is_the_same_for_every_item() -> None:
    kinds = schedule(5, (2.0, 10.0), 3, seed=7)
    assert kinds[0] == 0.0 and sorted(kinds) == [0.0] * 5 + [2.0] * 3 + [10.0] * 3
    assert kinds == schedule(5, (2.0, 10.0), 3, seed=7) != schedule(5, (2.0, 10.0), 3, seed=8)


def test_a_record_reads_back_and_one_of_another_version_is_refused() -> None:
    cal = _calibration(1.0)
    assert Calibration.from_json(json.loads(json.dumps(cal.to_json()))) == cal
    with pytest.raises(CalibrationError, match="version 99"):
        Calibration.from_json({**cal.to_json(), "version": 99})


@pytest.mark.slow
def test_the_pairs_records_join_into_one_calibration() -> None:
    """Rounds shared among pairs of workers are judged as one calibration: each item's
    rounds one after the other, the workers' starts summed."""
    one, two = _calibration(1.0, seed=1), _calibration(1.0, seed=2)
    joined = merged([one, two])
    assert (joined.rounds, joined.canary_rounds) == (16, 8)
    assert joined.launches == {"A": 2, "B": 2}
    assert joined.pairs == 2
    for item, first, second in zip(joined.items, one.items, two.items, strict=True):
        assert [r.main for r in item.rounds] == [
            *(replace(r.main, pair=0) for r in first.rounds),
            *(replace(r.main, pair=1) for r in second.rounds),
        ]
        # each round confirmed by the other pair's round of the same kind, not its own pair
        mine = item.rounds[0]
        same_kind = [r.main for r in second.rounds if r.slower_pct == mine.slower_pct]
        assert mine.confirmations == (replace(same_kind[0], pair=1),)
    report = analyze(joined)
    assert [(i.identical, i.false_alarms) for i in report.items] == [(16, 0), (16, 0)]
    assert [i.canaries[0].rounds for i in report.items] == [8, 8]


def _pairs(offsets: list[float]) -> Calibration:
    """One calibration from pairs of workers with these offsets of their own."""
    return merged([_calibration(1.0, seed=10 + k, offset=o) for k, o in enumerate(offsets)])


def test_the_spread_between_pairs_is_told_from_the_spread_within() -> None:
    """Offsets of -3% and +3% (sd 3.5%) over rounds whose own noise is a fraction of a
    percent: the estimate finds the pairs' spread, and none where the pairs agree."""
    apart = analyze(_pairs([-3.0, 3.0, -3.0, 3.0]), draws=2)
    for item in apart.items:
        assert item.offsets is not None
        assert 2.5 < item.offsets.between_pct < 4.5 and item.offsets.within_pct < 1.0
        assert item.noise_pct is not None and item.noise_pct > 2.5
        assert item.advised_bar_pct is not None and item.advised_bar_pct >= 8.0
    alike = analyze(_pairs([0.0, 0.0, 0.0, 0.0]), draws=2)
    for item in alike.items:
        assert item.offsets is not None and item.offsets.between_pct < 0.5
        assert item.advised_bar_pct is not None and item.advised_bar_pct < 3.0


@pytest.mark.slow
def test_a_fresh_pair_is_predicted_to_miss_what_the_pairs_offsets_hide() -> None:
    """One pair in four 7% off: every pair caught +10% (that one read +17%), but a fresh pair
    is as likely 7% off the other way (which process is "A" is arbitrary), where +10% reads
    +3%, under the 5% bar: an eighth of the rounds and of their confirmations. The prediction
    says so, the counts do not."""
    apart = analyze(_pairs([0.0, 0.0, 0.0, 7.0]), draws=8)
    alike = analyze(_pairs([0.0, 0.0, 0.0, 0.0]), draws=2)
    for item in apart.items:
        (canary,) = item.canaries
        assert canary.caught == canary.rounds and canary.fresh is not None
        assert 0.6 < canary.fresh < 0.9
        assert item.reliable_pct is None  # predicted under 90%: not called reliably
    assert [i.canaries[0].fresh for i in alike.items] == [1.0, 1.0]
    assert alike.false_alarm_rate == 0.0 and alike.detection_rate(10.0) == 1.0
    detection = apart.detection_rate(10.0)
    assert detection is not None and detection < 0.9
    assert apart.seen()["caught"] == {"10": [32, 32]}
    assert "fresh pair" in markdown(apart) and "between pairs" in markdown(apart)


def test_identical_rounds_raise_no_alarm_and_a_ten_percent_canary_is_caught() -> None:
    report = analyze(_calibration(1.0))
    for item in report.items:
        assert (item.identical, item.false_alarms) == (8, 0)
        (canary,) = item.canaries
        assert (canary.rounds, canary.caught) == (4, 4)
        assert canary.measured_pct is not None and 9 < canary.measured_pct < 11
        assert item.reliable_pct == 10.0 and item.missed == ()
        assert item.advised_bar_pct is not None and 1.0 <= item.advised_bar_pct < 5.0
    assert report.false_alarm_rate == 0.0 and report.detection_rate(10.0) == 1.0
    assert not report.missed


def test_a_canary_at_the_bar_never_caught_is_the_check_that_cannot_fire() -> None:
    report = analyze(_calibration(0.0))
    assert [(i.test, p) for i, p in report.missed] == [
        ("t.py::test_a", 10.0),
        ("t.py::test_b", 10.0),
    ]
    table = markdown(report)
    assert "**The check did not fire**" in table and "0 of 4" in table
    assert "**missed**" in table


def test_a_round_is_confirmed_only_where_it_could_be_flagged() -> None:
    rng = random.Random(3)
    th = Thresholds()
    assert flagged_before_correction("t.py::a", "eager", _comparison(rng, 10.0), th)
    assert not flagged_before_correction("t.py::a", "eager", _comparison(rng, 0.0), th)


def test_a_flag_that_its_confirmation_does_not_show_is_no_false_alarm() -> None:
    """The pull request's check re-measures a flag; so does the calibration's judgement."""
    rng = random.Random(5)
    flagged = _comparison(rng, 10.0)  # an identical round that read +10% (a slow spell)
    quiet = _comparison(rng, 0.0)
    item = Item("t.py::a", "eager", (Round(0.0, 0.0, flagged, (quiet,)),), call_ms=1.0)
    cal = Calibration(1, (), 0, 1, Thresholds().to_json(), (item,))
    (report,) = analyze(cal).items
    assert (report.identical, report.false_alarms) == (1, 0)
    unconfirmed = Calibration(1, (), 0, 0, Thresholds().to_json(), (item,))
    assert analyze(unconfirmed).items[0].false_alarms == 1


CANARY_SCRIPT = """
import perfguard.measure.canary as canary

_extra = [0.0]


def _delay(ms):  # a canary's delay, added to the scripted time of its call
    _extra[0] += ms


canary.host_delay = _delay


def _scripted_with_canary(self, fn):
    _extra[0] = 0.0
    fn()
    return (MS + _extra[0]) * (1.0 + _noise.gauss(0.0, 0.01))


clock.HostClock.time_call = _scripted_with_canary
"""

TESTS = """
import pytest, torch

@pytest.mark.perfguard(variants=["eager"])
def test_small(perfguard):
    perfguard.run(torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),))
"""


@pytest.mark.slow
def test_calibrate_end_to_end_catches_its_canary_and_starts_each_pair_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a scripted clock (what the canary adds is added to the script): identical sides
    are never flagged, a +10% canary is caught every time; the rounds shared among two pairs
    of workers, each started once. (The command runs here, its session forked as the suite's
    sessions are; `test_sigterm_ends_a_calibration_with_its_session_and_workers` runs it as
    a user does, in an interpreter of its own.)"""
    from perfguard.cli import main

    (tmp_path / "conftest.py").write_text(SCRIPTED_CLOCK + CANARY_SCRIPT)
    (tmp_path / "test_small.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "cal.json"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("perfguard.cli.calibrate.subprocess", forkserver.Sessions())
    code = main(
        [
            "calibrate",
            "--rounds",
            "4",
            "--canary",
            "10",
            "--pairs",
            "2",
            "--json",
            str(out),
            "-o",
            str(tmp_path / "cal.md"),
            "--",
            "test_small.py",
            "--perfguard-device=cpu",
            "--perfguard-budget=0.05",
        ]
    )
    assert code == 0, capsys.readouterr().err[-3000:]
    found = json.loads(out.read_text())
    assert found["launches"] == {"A": 2, "B": 2}
    (item,) = found["items"]
    assert item["identical"]["rounds"] == 4 and item["identical"]["false_alarms"] == 0
    assert item["canaries"] == [
        {
            "pct": 10.0,
            "rounds": 3,
            "caught": 3,
            "measured_pct": pytest.approx(10, abs=1.5),
            "predicted": pytest.approx(1.0, abs=0.1),
        }
    ]
    table = (tmp_path / "cal.md").read_text()
    assert "| test&#95;small.py::test&#95;small | eager | 0 of 4" in table
    # the rounds kept in the JSON are judged again without measuring: the same table
    again = _judge(out, "again.md")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "again.md").read_text() == table


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--canary", "ten"], "--canary takes percentages"),
        (["--canary", "0,5"], "above 0 and at most 100"),
        (["--rounds", "1"], "--rounds must be 2 or more"),
        (["--pairs", "0"], "--pairs must be 1 or more"),
        (["--judge", "missing.json"], "calibrate --judge: missing.json does not read"),
    ],
)
def test_calibrate_refuses_what_it_cannot_use_in_one_line(
    args: list[str], said: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "perfguard.cli", "calibrate", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and said in done.stderr
    assert done.stderr.count("\n") == 1


def test_the_rounds_of_a_calibration_cut_short_are_judged_again(tmp_path: Path) -> None:
    """After each pair of workers the rounds so far are in --json; a calibration stopped by a
    job's time limit keeps them, and `--judge` makes the table of them."""
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps({"partial": "1 of 2 pairs", "record": _calibration(1.0).to_json()}))
    done = _judge(cut, "t.md")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| t.py::test&#95;a | eager | 0 of 8" in (tmp_path / "t.md").read_text()


def _judge(record: Path, table: str) -> subprocess.CompletedProcess[str]:
    """`perfguard calibrate --judge RECORD -o TABLE`, in RECORD's folder."""
    return subprocess.run(
        [sys.executable, "-m", "perfguard.cli", "calibrate", "--judge", str(record), "-o", table],
        cwd=record.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ({"items": [{"test": {"a": 1}, "variant": "eager"}]}, "are names"),
        ({"items": [{"test": "t", "variant": "eager", "error": ["x"]}]}, "error is text"),
        ({"items": [{"test": "t", "variant": "eager", "delay": "elsewhere"}]}, "host or device"),
        (
            {"items": [{"test": "t", "variant": "eager", "rounds": [{"slower_pct": 900}]}]},
            "out of bounds",
        ),
    ],
)
def test_judge_refuses_a_record_whose_fields_are_not_what_it_wrote(
    tmp_path: Path, record: dict[str, object], said: str
) -> None:
    base = _calibration(1.0).to_json()
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"record": {**base, **record}}))
    done = _judge(path, "t.md")
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_judge_says_one_line_of_a_file_nested_too_deeply_and_a_canary_of_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100000 + "]" * 100000)
    done = _judge(path, "t.md")
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    from perfguard.cli import main

    assert main(["calibrate", "--canary", "", "--", "x"]) == 2


@pytest.mark.slow
def test_sigterm_ends_a_calibration_with_its_session_and_workers(tmp_path: Path) -> None:
    """A cancelled job's SIGTERM ends the calibrate command, its pytest session and that
    session's two workers (on a GPU runner they would go on holding the GPU)."""
    import os
    import signal
    import time

    (tmp_path / "test_slow.py").write_text(
        "import time, torch\n"
        "def test_slow(perfguard):\n"
        "    time.sleep(120)  # building its model takes long: the job is cancelled meanwhile\n"
        "    perfguard.run(torch.nn.Linear(4, 4), (torch.randn(2, 4),))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfguard.cli", "calibrate", "--rounds", "2", "--pairs", "1",
         "--", str(tmp_path), "--perfguard-variants=eager", "-p", "no:cacheprovider"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def ours() -> list[int]:
        found = []
        for pid in os.listdir("/proc"):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if pid.isdigit() and str(tmp_path).encode() in cmd and int(pid) != proc.pid:
                found.append(int(pid))
        return found

    deadline = time.monotonic() + 60
    while len(ours()) < 3 and time.monotonic() < deadline:  # the session and its workers
        time.sleep(0.5)
    assert len(ours()) >= 3, ours()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=90)
    deadline = time.monotonic() + 30
    while ours() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ours()
