"""`make demo-history`: main's history of the example suite, its change point and trend site.

Run from the repository's root: `python -m examples.history_demo`.
In a scratch git repository, `COMMITS` commits of main, each measured and saved as its
baseline with `pytest --perfguard --perfguard-save` (the MLP and the CNN, eager only, a
short budget: this is a demo of the history, not of the measuring); commit `WIDEN_AT` widens
the MLP, as a direct push to main would. Then `perfguard history` finds the step and names
its commit range, and `perfguard site` writes the trend site into reports/history-site/ of
this repository.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from examples.demo import REPO, SUITE, git, pytest
from perfguard.cli import main as perfguard

COMMITS = 22
WIDEN_AT = 11  # ten commits before the step, twelve after: enough for its rank test
SITE = REPO / "reports" / "history-site"
HISTORY = REPO / "reports" / "history.md"


def main() -> int:
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="perfguard-history-demo-"))
    repo = scratch / "repo"
    (repo / "tests").mkdir(parents=True)
    shutil.copy(SUITE, repo / "tests" / "test_models.py")
    (repo / "pytest.ini").write_text(
        "[pytest]\nperfguard_budget = 0.2\nperfguard_repeats = 3\nperfguard_confirm = 0\n"
    )
    (repo / ".gitignore").write_text("reports/\n__pycache__/\n")
    git(repo, "init", "-q", "-b", "main")
    suite = repo / "tests" / "test_models.py"
    for i in range(1, COMMITS + 1):
        if i == WIDEN_AT:
            suite.write_text(suite.read_text().replace("HIDDEN = 512", "HIDDEN = 1024"))
        (repo / "CHANGES").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        git(
            repo, "commit", "-q", "-m", f"commit {i}" + (": widen the MLP" if i == WIDEN_AT else "")
        )
        print(f"== {i}/{COMMITS}: measure main's commit {i} and save its baseline", flush=True)
        code = pytest(
            repo,
            "--perfguard-save",
            "--perfguard-compare=none",
            "--perfguard-variants=eager",
            "-k",
            "mlp or convnet",
        )
        if code != 0:
            print(
                f"demo-history: measuring commit {i} failed (pytest exit {code})", file=sys.stderr
            )
            return 1
    baselines = str(scratch / "baselines")
    os.chdir(repo)
    code = perfguard(["history", "--dir", baselines, "-o", str(HISTORY)])
    code = code or perfguard(["site", "--dir", baselines, "-o", str(SITE)])
    print(f"history: {HISTORY}")
    print(f"site:    {SITE / 'index.html'}")
    print(f"demo-history finished in {time.monotonic() - started:.0f}s")
    return code


if __name__ == "__main__":
    sys.exit(main())
