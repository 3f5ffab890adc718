"""The study's load generator, as the hogged `make test` check uses it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks.detection import load, main

COUNT_HOGS = """
import os, sys
from pathlib import Path
from perfguard.processes import process_tree
tree = process_tree(os.getppid()) - {os.getppid(), os.getpid()}  # this command's siblings
hogs = [p for p in tree if b"follow_parent" in Path(f"/proc/{p}/cmdline").read_bytes()]
Path(sys.argv[1]).write_text(" ".join(map(str, hogs)))
raise SystemExit(3)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_load_busy_runs_the_command_beside_one_hog_per_core_and_stops_them(
    tmp_path: Path,
) -> None:
    seen = tmp_path / "hogs"
    code = main(["load", "busy", sys.executable, "-c", COUNT_HOGS, str(seen)])
    assert code == 3  # the command's own exit code
    hogs = seen.read_text().split()
    assert len(hogs) == (os.cpu_count() or 1)
    assert not [pid for pid in hogs if Path(f"/proc/{pid}").exists()]


def test_an_unknown_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match="load must be one of"), load("heavy"):
        pass
