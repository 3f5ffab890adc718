"""Release perfguard: tag the commit that holds this version's workflows and actions, and
build the package that knows that commit.

Run:  python tools/release.py check   # what a release needs, checked; nothing written
      python tools/release.py tag     # check, then tag HEAD v<version> (annotated)
      python tools/release.py build   # the wheel and sdist of the tagged HEAD, in dist/

A team's caller (`perfguard init`) calls `perfguard/perfguard/.github/workflows/reusable.yml`
pinned to the release's commit, with the tag in a comment. So a release is a commit whose
published files (`tools/workflows.py`) are fresh and whose version is new, tagged
`v<version>`; its package is built from that tagged commit with the commit written into it
(`perfguard/init/release.py`, never committed), which is how `init` pins the commit and
`init --check` recognizes it. Push the tag (`git push origin v<version>`) before uploading
the package: a caller written by the package must find its commit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfguard.version import __version__  # noqa: E402

RELEASE = ROOT / "perfguard" / "init" / "release.py"


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def problems() -> list[str]:
    found = []
    if git("status", "--porcelain", "--untracked-files=no"):
        found.append("the working tree has changes: commit them first")
    stale = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "workflows.py"), "--check"], check=False
    )
    if stale.returncode != 0:
        found.append("the published workflows or actions are stale: make workflows, commit")
    tag = f"v{__version__}"
    if git("rev-parse", "-q", "--verify", f"refs/tags/{tag}") and git(
        "rev-parse", f"{tag}^{{commit}}"
    ) != git("rev-parse", "HEAD"):
        found.append(f"{tag} already tags another commit: bump the version")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("check", "tag", "build"))
    args = parser.parse_args()
    tag, head = f"v{__version__}", git("rev-parse", "HEAD")
    if args.step in ("check", "tag"):
        found = problems()
        for line in found:
            print(f"release: {line}", file=sys.stderr)
        if found:
            return 1
        if args.step == "check":
            print(f"release: {head} can be released as {tag}")
            return 0
        if not git("rev-parse", "-q", "--verify", f"refs/tags/{tag}"):
            subprocess.run(["git", "tag", "-a", tag, "-m", f"perfguard {__version__}"],
                           cwd=ROOT, check=True)  # fmt: skip
        print(f"release: tagged {head} {tag}; push it: git push origin {tag}")
        return 0
    if git("rev-parse", f"{tag}^{{commit}}") != head:
        print(f"release: HEAD is not {tag}: run `tag` first", file=sys.stderr)
        return 1
    RELEASE.write_text(
        f'"""Written by tools/release.py into the package of {tag}."""\n\nCOMMIT = "{head}"\n'
    )
    try:
        subprocess.run([sys.executable, "-m", "build", "--outdir", "dist", "."], cwd=ROOT,
                       check=True)  # fmt: skip
    finally:
        RELEASE.unlink()
    print(f"release: dist/ holds perfguard {__version__}, pinned to {head}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
