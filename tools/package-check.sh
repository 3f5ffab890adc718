#!/usr/bin/env bash
# The package as a user gets it: build the wheel and sdist, check them with twine, install the
# wheel into a fresh venv (torch first, pinned, then perfguard without extras), and in a new git
# repository run `perfguard init` and `pytest --perfguard`: the onnxruntime variant must skip
# with its install line; with the `onnx` extra it must run. Prints how long a newcomer's path
# took, from installing the wheel to the first report.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m build --quiet --outdir "$work/dist" . >/dev/null
"$PY" -m twine check --strict "$work"/dist/*
wheel=$(ls "$work"/dist/*.whl)
# listed once: `unzip | grep -q` under pipefail fails with SIGPIPE when grep stops reading early
listing=$(unzip -l "$wheel")
for template in init/templates/perfguard.yml.j2 init/templates/caller.yml.j2 \
  init/scripts/measure.sh init/scripts/merge.sh report/templates/report.md.j2 \
  history/templates/page.html.j2; do
  grep -q "perfguard/$template" <<<"$listing" || { echo "package-check: $template is not in the wheel"; exit 1; }
done

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --upgrade pip
"$work/venv/bin/pip" install --quiet torch==2.13.0   # pinned: the CPU build on this machine
started=$(date +%s)
"$work/venv/bin/pip" install --quiet "$wheel"

repo="$work/project"
mkdir "$repo" && cd "$repo"
git init -q -b main
printf '[project]\nname = "models"\nversion = "0"\n' > pyproject.toml
"$work/venv/bin/perfguard" init --vendored
"$work/venv/bin/perfguard" init --check
"$work/venv/bin/perfguard" init --force
"$work/venv/bin/perfguard" init --check
sed -i 's/variants=\["eager", "compile-default"\]/variants=["eager", "onnxruntime"]/' \
  tests/perf/test_perf_example.py
git add -A && git -c user.name=ci -c user.email=ci@localhost commit -q -m "perfguard init"
run() { "$work/venv/bin/python" -m pytest tests/perf --perfguard --perfguard-budget=0.2 -rs -p no:cacheprovider "$@"; }
out=$(run) || { echo "$out"; exit 1; }
echo "$out" | tail -n 12
test -f reports/perfguard.md
grep -q 'SKIPPED.*onnxruntime needs the package .*pip install "perfguard\[onnx\]"' <<<"$out" \
  || { echo "package-check: the onnxruntime variant did not skip with its install line"; exit 1; }
echo "package-check: from 'pip install <wheel>' to the first report: $(( $(date +%s) - started )) s"

"$work/venv/bin/pip" install --quiet "$wheel[onnx]"
out=$(run) || { echo "$out"; exit 1; }
grep -q "2 passed" <<<"$out" || { echo "$out"; echo "package-check: onnxruntime did not run with the extra"; exit 1; }

# main's history job installs perfguard without torch: history and the site must run there
run --perfguard-save >/dev/null
python3 -m venv "$work/history-venv"
"$work/history-venv/bin/pip" install --quiet --no-deps "$wheel"
"$work/history-venv/bin/pip" install --quiet ruptures plotly numpy scipy pandas fastparquet jinja2 filelock gitpython
"$work/history-venv/bin/python" -c "import torch" 2>/dev/null && { echo "package-check: torch leaked into the history venv"; exit 1; }
"$work/history-venv/bin/perfguard" history -o "$work/history.md"
"$work/history-venv/bin/perfguard" site -o "$work/site"
test -s "$work/site/index.html" && test -s "$work/site/plotly.min.js"
echo "package-check: wheel, sdist, twine, install, init, skip without the extra, run with it, history and site without torch: ok"
