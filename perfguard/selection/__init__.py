"""Partial runs: which perf tests a change can affect.

- `decide`: the decision, against the record of what each test ran at the base commit;
- `blocks`: a Python file's blocks (a function's body, a module's own code) and checksums;
- `forcing`: what changed in a file that can move every test (a version line cannot);
- `static`: the change's files, the files that force a full run or that no test reads, and
  the import closure read from the source (an addition to the record, never a reason to
  skip).

Nothing here imports torch or pytest: the plugin's selection step (`pytest_plugin.selection`)
asks, and the benchmarks (`benchmarks/pr_cost.py`, `benchmarks/reach_study.py`) and the
tests call the same functions.
"""

from perfguard.selection.decide import Decision, PerfTest, decide
from perfguard.selection.static import (
    FORCING,
    INERT,
    Changes,
    Imports,
    changed_files,
    forcing,
    inert,
    listed,
    search_roots,
)

__all__ = [
    "FORCING",
    "INERT",
    "Changes",
    "Decision",
    "Imports",
    "PerfTest",
    "changed_files",
    "decide",
    "forcing",
    "inert",
    "listed",
    "search_roots",
]
