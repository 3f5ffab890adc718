"""Partial runs: which perf tests a change reaches (imports, declared globs, forcing files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfguard.selection import Imports, changed_files, decide, forcing, inert, search_roots
from tests.gitrepo import git

FILES = {
    "models/__init__.py": "",
    "models/mlp.py": "from models.layers import block\n",
    "models/layers.py": "from . import activations\n",
    "models/activations.py": "import math\n",
    "models/cnn.py": "def build():\n    from models import conv_utils\n    return conv_utils\n",
    "models/conv_utils.py": "",
    "models/unused.py": "",
    "tests/perf/test_mlp.py": "from models.mlp import *\n",
    "tests/perf/test_cnn.py": "import models.cnn\n",
    "tests/perf/test_lm.py": "from lm import tiny\n",
    "src/lm/__init__.py": "",
    "src/lm/tiny.py": "from .config import SIZE\n",
    "src/lm/config.py": "SIZE = 1\n",
    "configs/cnn.yaml": "depth: 2\n",
    "README.md": "# models\n",
}
TESTS = {
    "tests/perf/test_mlp.py::test_mlp": ("tests/perf/test_mlp.py", ()),
    "tests/perf/test_cnn.py::test_cnn": ("tests/perf/test_cnn.py", ("configs/cnn.yaml",)),
    "tests/perf/test_lm.py::test_lm": ("tests/perf/test_lm.py", ()),
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def reached(repo: Path, *changed: str, every: tuple[str, ...] = ()) -> set[str] | str:
    tests = {t: (repo / f, globs) for t, (f, globs) in TESTS.items()}
    d = decide(repo, list(changed), tests, every_test=every)
    return d.reason if d.full else {t.split("::")[1] for t in d.affected}


def test_a_change_reaches_the_tests_that_import_it_transitively(repo: Path) -> None:
    assert reached(repo, "models/activations.py") == {"test_mlp"}  # via a relative import
    assert reached(repo, "models/conv_utils.py") == {"test_cnn"}  # imported in a function
    assert reached(repo, "models/__init__.py") == {"test_mlp", "test_cnn"}  # every package
    assert reached(repo, "src/lm/config.py") == {"test_lm"}  # a src layout
    assert reached(repo, "tests/perf/test_mlp.py") == {"test_mlp"}  # the test itself


def test_unrelated_files_reach_nothing(repo: Path) -> None:
    assert reached(repo, "models/unused.py") == set()
    assert reached(repo, "README.md", "docs/guide/index.rst", ".github/CODEOWNERS") == set()
    assert reached(repo) == set()


def test_declared_files_reach_their_test_and_undeclared_data_forces_a_full_run(
    repo: Path,
) -> None:
    assert reached(repo, "configs/cnn.yaml") == {"test_cnn"}
    assert "configs/lm.json changed, and no perf test declares it" in str(
        reached(repo, "configs/lm.json")
    )
    assert "every perf test depends on" in str(reached(repo, "data/x.bin", every=("data/*",)))
    assert "kernels/gelu.cu" in str(reached(repo, "kernels/gelu.cu"))


@pytest.mark.parametrize(
    "path",
    ["uv.lock", "requirements-dev.txt", "pyproject.toml", "tests/perf/conftest.py",
     ".github/workflows/perfguard.yml", "setup.cfg", "constraints.txt", "perfguard-accept.toml"],
)  # fmt: skip
def test_files_that_can_move_every_test_force_a_full_run(repo: Path, path: str) -> None:
    assert forcing(path) and "can move every perf test" in str(reached(repo, path))


def test_a_deleted_python_file_forces_a_full_run(repo: Path) -> None:
    (repo / "tests/perf/test_lm.py").unlink()
    assert "tests/perf/test_lm.py deleted" in str(reached(repo, "tests/perf/test_lm.py"))


def test_a_module_that_does_not_parse_is_measured_by_whoever_imports_it(repo: Path) -> None:
    (repo / "models/layers.py").write_text("from . import activations\ndef broken(:\n")
    assert reached(repo, "models/activations.py") == {"test_mlp"}
    imports = Imports(search_roots(repo, [repo / "tests/perf/test_mlp.py"]))
    imports.closure(repo / "tests/perf/test_mlp.py")
    assert imports.unreadable == {(repo / "models/layers.py").resolve()}


def test_changed_files_are_the_diff_with_the_base_and_new_files(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    (repo / "models/mlp.py").write_text("# edited\n")
    git(repo, "commit", "-qam", "edit")
    (repo / "models/cnn.py").write_text("# not committed\n")
    (repo / "models/new.py").write_text("")
    (repo / "models/ignored.py").write_text("")
    (repo / "out.log").write_text("")  # untracked, not Python: a run's output
    (repo / ".gitignore").write_text("models/ignored.py\n")
    git(repo, "add", ".gitignore")
    changed = ["models/cnn.py", "models/mlp.py", "models/new.py", ".gitignore"]
    assert changed_files(repo, base) == sorted(changed)
    assert inert(".gitignore") and not inert("models/new.py")
    json.dumps(changed_files(repo, base))  # plain strings
