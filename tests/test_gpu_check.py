"""`make gpu-check`, in stages that each fit one call of a lent GPU machine: checked here
without CUDA (a stage's steps faked, or rehearsed on the CPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PLAIN = re.compile(r"^[A-Za-z0-9._-]+$")  # what the machine's $OUT gives back


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


gpu_check = _load()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu-check runs")
def test_gpu_check_without_cuda_says_so_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "figures"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py")],
        env={**os.environ, "PYTHON": sys.executable, "GPU_CHECK_OUT": str(out)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("gpu-check: no CUDA device here")
    assert len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()


def _text(tar: tarfile.TarFile, name: str) -> str:
    member = tar.extractfile(name)
    assert member is not None
    return member.read().decode()


def _context(out: Path, seconds: float, said: list[str]) -> Any:
    return gpu_check.Context(out, "cpu", seconds, sys.executable, dict(os.environ), said.append)


@pytest.mark.slow
def test_a_stage_keeps_its_time_archives_after_every_step_and_names_files_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Step = gpu_check.Step
    py = sys.executable
    archive = tmp_path / "out" / "fake.tar.gz"
    fake = [
        Step(
            "traces",
            (
                py,
                "-c",
                "import sys, pathlib; w = pathlib.Path(sys.argv[1]); "
                "(w / 'trace[eager].json').write_text('{}')",
                "{work}",
            ),
        ),
        Step(
            "what step 1 left",
            (py, "-c", f"import sys, tarfile; print(tarfile.open({str(archive)!r}).getnames())"),
        ),
        Step("needs a program", ("no-such-program-here",), needs=("no-such-program-here",)),
        Step(
            "slow",  # with a child of its own, which the deadline ends too
            (
                py,
                "-c",
                "import subprocess, sys, time; "
                f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
                f"open({str(tmp_path / 'child.pid')!r}, 'w').write(str(c.pid)); time.sleep(120)",
            ),
        ),
        Step("after the deadline", (py, "-c", "pass")),
        Step("the table", (py, "-c", "print('table')"), closing=True),
    ]
    monkeypatch.setattr(gpu_check, "steps", lambda stage: fake)
    monkeypatch.setattr(gpu_check, "RESERVE_S", 4.0)
    (tmp_path / "out").mkdir()
    said: list[str] = []
    assert gpu_check.run_stage("fake", _context(tmp_path / "out", 10.0, said)) is False

    assert said[0] == "== fake"
    assert re.fullmatch(r"   traces: exit 0 after \d+ s", said[1])
    assert said[3] == "   needs a program: skipped, no no-such-program-here on this machine"
    assert re.fullmatch(r"   slow: stopped at the stage's deadline after \d+ s", said[4])
    assert _ended(int((tmp_path / "child.pid").read_text()))
    assert said[5].startswith("   after the deadline: not run, the stage's 10 s are spent")
    assert "--steps fake --only 5" in said[5]
    assert re.fullmatch(r"   the table: exit 0 after \d+ s", said[6])

    assert [p.name for p in (tmp_path / "out").iterdir()] == ["fake.tar.gz"]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        logs = {Path(n).name: _text(tar, n) for n in names if n.endswith(".log")}
    assert "fake/trace[eager].json" in names  # any name inside: the archive is one plain file
    assert sorted(logs) == [
        "01-traces.log",
        "02-what-step-1-left.log",
        "04-slow.log",
        "06-the-table.log",
    ]
    assert "fake/trace[eager].json" in logs["02-what-step-1-left.log"]  # archived as it went
    assert all(PLAIN.match(n) for n in logs)


def _ended(pid: int) -> bool:
    """Whether process `pid` has ended (gone, or a zombie no one has reaped yet)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_every_stage_fits_the_files_a_call_brings_back() -> None:
    assert len(gpu_check.STAGES) + 1 <= 8  # one archive a stage, and summary.txt
    names = [f"{stage}.tar.gz" for stage in gpu_check.STAGES] + ["summary.txt"]
    assert all(PLAIN.match(n) for n in names)
    for stage in gpu_check.STAGES:
        for number, step in enumerate(gpu_check.steps(stage), 1):
            assert PLAIN.match(f"{number:02d}-{gpu_check._plain(step.name)}.log"), step.name
    names = [st.name for s in gpu_check.STAGES for st in gpu_check.steps(s)]
    from perfguard.variants.spec import BASE_VARIANTS

    assert sorted(n for n in names if n in BASE_VARIANTS) == sorted(BASE_VARIANTS)  # once each
    for stage in ("figures", "variants", "autotune"):  # each ends with its table
        last = gpu_check.steps(stage)[-1]
        assert last.closing and "benchmarks/variant_table.py" in last.argv
    # max-autotune's cuda test items run in autotune's stage, the other items in cuda's
    picks = [" ".join(st.argv) for s in ("cuda", "autotune") for st in gpu_check.steps(s)]
    assert sum("test_cuda.py -k not max-autotune" in p for p in picks) == 1
    assert sum("test_cuda.py -k max-autotune" in p for p in picks) == 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--steps", "env,gpu"], "unknown stage gpu"),
        (["--steps", "env,cuda", "--only", "1"], "--only picks a step of one stage"),
        (["--steps", "env", "--only", "9"], "--only picks a step of one stage"),
    ],
)
def test_a_wrong_stage_or_step_is_one_usage_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.slow
def test_the_env_stage_rehearsed_on_the_cpu_installs_the_tree_and_says_each_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin")
    assert gpu_check.main(["--device", "cpu", "--steps", "env", "--out", str(tmp_path)]) == 0
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert summary[0].startswith("gpu-check on cpu, stages env (git: ")
    assert any(line.startswith("   torch, CUDA and NVML: exit 0") for line in summary)
    assert summary[-1] == "gpu-check: every step passed"
    with tarfile.open(tmp_path / "env.tar.gz") as tar:
        (log,) = [n for n in tar.getnames() if n.endswith("torch-CUDA-and-NVML.log")]
        text = _text(tar, log)
    assert '"device_type": "cpu"' in text and "runner health:" in text


@pytest.mark.slow
def test_under_gpu_check_a_failure_is_printed_when_it_happens(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step stopped at its stage's deadline never reaches pytest's summary: on a lent H200
    that lost the reason of a failed item; the repository's conftest prints it at once."""
    pytester.makeconftest((ROOT / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(
        "def test_fails():\n    assert 1 + 1 == 3, 'the reason'\n\ndef test_next():\n    pass\n"
    )
    monkeypatch.setenv("PERFGUARD_FAIL_NOW", "1")
    out = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    err = out.stderr.str()
    assert (
        "--- test_under_gpu_check_a_failure_is_printed_when_it_happens.py::test_fails failed" in err
    )
    assert "the reason" in err
    monkeypatch.delenv("PERFGUARD_FAIL_NOW")
    assert (
        "failed (call)" not in pytester.runpytest_subprocess("-p", "no:cacheprovider").stderr.str()
    )


def test_the_variant_table_has_a_row_a_result_and_a_skips_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import variant_table
    from perfguard.records import VariantResult
    from tests import factories

    measured = factories.result("t.py::test_mlp", "compile-default", 0.25, compile_s=2.5)
    skipped = VariantResult(
        test="t.py::test_mlp", variant="onnxruntime", status="skipped", error="no CUDA provider"
    )
    (tmp_path / "a.json").write_text(
        json.dumps(factories.run([measured, skipped]).to_json()), encoding="utf-8"
    )
    assert variant_table.main([str(tmp_path), "--out", str(tmp_path / "table.md")]) == 0
    lines = (tmp_path / "table.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(line.count("|") == 12 for line in lines)
    assert re.match(r"\| test_mlp \| compile-default \| 2[45]\d\.\d µs \|", lines[2])
    assert "2.5 s / – " in lines[2] and "(1.0e-04)" in lines[2]  # cold / warm; drift's allowance
    assert lines[3].startswith("| test_mlp | onnxruntime | skipped: no CUDA provider |")

    (tmp_path / "b.json").write_text("{", encoding="utf-8")
    assert variant_table.main([str(tmp_path / "b.json")]) == 2
    assert "not a perfguard results file" in capsys.readouterr().err
