"""Write (or check) the reusable workflows and the composite actions this repository
publishes, from perfguard's templates: `.github/workflows/reusable.yml` (baselines on a
branch), `.github/workflows/reusable-s3.yml` (in an object store) and
`actions/<name>/action.yml`. They are part of a release: a team's caller pins the release's
commit, and that commit must hold them as this perfguard renders them.

Run:  python tools/workflows.py           # write them
      python tools/workflows.py --check   # exit 1 naming each one that is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfguard.init import _template, forms, render_reusable  # noqa: E402
from perfguard.version import __version__  # noqa: E402


def published() -> dict[Path, str]:
    """Each published file, as this perfguard renders it."""
    files = {
        ROOT / ".github" / "workflows" / forms.REUSABLE[store]: render_reusable(store)
        for store in (False, True)
    }
    for name in forms.ACTIONS:
        files[ROOT / "actions" / name / "action.yml"] = forms.action(_template, name, __version__)
    return files


def same(a: str, b: str) -> bool:
    """Equal but for the versions the write-token jobs pin (`pkg==X`: this environment's)."""
    pins = re.compile(r"(?<=[\w\]])==[\w.+-]+")
    return pins.sub("==V", a) == pins.sub("==V", b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if one is stale")
    args = parser.parse_args()
    stale = []
    for path, text in published().items():
        if args.check:
            if not path.is_file() or not same(path.read_text(), text):
                stale.append(str(path.relative_to(ROOT)))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"stale (run make workflows): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
