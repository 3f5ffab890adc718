"""Partial runs: which perf tests a change reaches, judged against the base's record of what
each test ran (blocks, whole files, package folders), with forcing files judged by what changed
in them and the static reading as an addition only."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.records.reach import Reach, ReachBuilder
from perfguard.selection import (
    Changes,
    Imports,
    PerfTest,
    changed_files,
    decide,
    forcing,
    inert,
    search_roots,
)
from perfguard.selection.blocks import MODULE, read_blocks
from perfguard.selection.forcing import moves_every_test
from tests.gitrepo import git

MODELS = """
import torch

SCALE = 2

class MLP(torch.nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.width = width

    def forward(self, x):
        return x * SCALE


class CNN(torch.nn.Module):
    def forward(self, x):
        return x + 1
"""
FILES = {
    "models/__init__.py": "",
    "models/zoo.py": MODELS,
    "models/extra.py": "def unused():\n    return 1\n",
    "models/config.py": "HIDDEN = 1\n",
    "tests/perf/test_mlp.py": "from models.zoo import MLP\n\ndef test_mlp():\n    MLP()\n",
    "tests/perf/test_cnn.py": "import models.config\n\ndef test_cnn():\n    pass\n",
    "data/cnn.bin": "weights\n",
    "docs/model.yaml": "depth: 2\n",
    "README.md": "# models\n",
}
MLP_TEST = "tests/perf/test_mlp.py::test_mlp"
CNN_TEST = "tests/perf/test_cnn.py::test_cnn"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def record(repo: Path) -> Reach:
    """The record a full run would make: test_mlp ran MLP's __init__ and forward, and read
    docs/model.yaml; test_cnn ran CNN.forward and read data/cnn.bin."""
    builder = ReachBuilder()
    zoo = read_blocks((repo / "models/zoo.py").read_text())

    def blocks(names: set[str]) -> list[int]:
        return [builder.block("models/zoo.py", "x", n, zoo.checksums[n]) for n in names]

    mlp = zoo.of_lines({8, 12})  # the bodies of MLP.__init__ and MLP.forward
    cnn = zoo.of_lines({17})
    assert mlp == {MODULE, "MLP", "MLP.__init__", "MLP.forward"}
    assert cnn == {MODULE, "CNN", "CNN.forward"}
    builder.add(
        MLP_TEST,
        blocks=blocks(mlp),
        files=[builder.file("docs/model.yaml", "x")],
        packages={"models", "tests/perf"},
    )
    builder.add(
        CNN_TEST,
        blocks=blocks(cnn),
        files=[builder.file("data/cnn.bin", "x")],
        packages={"models", "tests/perf"},
    )
    builder.distributions.update({"torch", "numpy"})
    return builder.build()


TESTS = {
    MLP_TEST: PerfTest(Path("tests/perf/test_mlp.py")),
    CNN_TEST: PerfTest(Path("tests/perf/test_cnn.py")),
}


def reached(
    repo: Path,
    *changed: str,
    reach: Reach | None = None,
    added: tuple[str, ...] = (),
    before: dict[str, str] | None = None,
) -> dict[str, str] | str:
    tests = {t: PerfTest(repo / s.path, s.depends) for t, s in TESTS.items()}
    d = decide(
        repo,
        Changes(tuple(changed), frozenset(added)),
        tests,
        reach=record(repo) if reach is None else reach,
        before=lambda p: (before or {}).get(p),
    )
    return d.reason if d.full else dict(d.reached)


def edit(repo: Path, path: str, old: str, new: str) -> None:
    text = (repo / path).read_text()
    assert old in text
    (repo / path).write_text(text.replace(old, new))


def test_a_changed_function_reaches_only_the_tests_that_ran_it(repo: Path) -> None:
    reach = record(repo)
    edit(repo, "models/zoo.py", "return x * SCALE", "return x * SCALE * 6")
    assert reached(repo, "models/zoo.py", reach=reach) == {MLP_TEST: "models/zoo.py: MLP.forward"}
    edit(repo, "models/zoo.py", "return x + 1", "return x + 2")
    assert set(reached(repo, "models/zoo.py", reach=reach)) == {MLP_TEST, CNN_TEST}


def test_code_that_runs_at_import_reaches_every_test_that_imported_the_module(repo: Path) -> None:
    """A new class registers itself when it is defined (its base's `__init_subclass__`, a
    metaclass, a decorator) and may replace the model a test builds: the class statement is
    the module's own code. So is a `def` that replaces another of the same name."""
    reach = record(repo)
    text = (repo / "models/zoo.py").read_text()
    (repo / "models/zoo.py").write_text(
        text + "\n\nclass Faster(MLP):\n    def forward(self, x):\n        return x\n"
    )
    assert set(reached(repo, "models/zoo.py", reach=reach)) == {MLP_TEST, CNN_TEST}
    (repo / "models/zoo.py").write_text(text + "\n\n@register\ndef build():\n    return None\n")
    assert set(reached(repo, "models/zoo.py", reach=reach)) == {MLP_TEST, CNN_TEST}
    twice = text + "\n\ndef helper():\n    return 1\n\n\ndef helper():\n    return 2\n"
    (repo / "models/zoo.py").write_text(twice)
    assert set(reached(repo, "models/zoo.py", reach=reach)) == {MLP_TEST, CNN_TEST}


def test_a_new_keyword_reaches_its_class_and_the_modules_code_reaches_all(repo: Path) -> None:
    reach = record(repo)
    edit(repo, "models/zoo.py", "width=64", "width=64, depth=6")
    assert reached(repo, "models/zoo.py", reach=reach) == {MLP_TEST: "models/zoo.py: MLP.__init__"}
    edit(repo, "models/zoo.py", "SCALE = 2", "SCALE = 12")
    assert set(reached(repo, "models/zoo.py", reach=reach)) == {MLP_TEST, CNN_TEST}


def test_comments_docstrings_and_moved_code_reach_nothing(repo: Path) -> None:
    reach = record(repo)
    text = (repo / "models/zoo.py").read_text()
    text = text.replace("    def forward(self, x):\n        return x * SCALE", (
        '    def forward(self, x):\n        """Doubles."""\n\n        # scaled\n'
        "        return x * SCALE"))  # fmt: skip
    (repo / "models/zoo.py").write_text("# a header\n\n" + text + "\n\ndef added():\n    pass\n")
    assert reached(repo, "models/zoo.py", reach=reach) == {}


def test_files_read_whole_new_files_and_deletions_reach_their_tests(repo: Path) -> None:
    reach = record(repo)
    assert reached(repo, "docs/model.yaml", reach=reach) == {
        MLP_TEST: "docs/model.yaml (read whole: opened, loaded before recording, or its conftest)"
    }  # an inert glob, but a test read it
    assert set(reached(repo, "data/cnn.bin", reach=reach)) == {CNN_TEST}
    (repo / "models/plugin.py").write_text("X = 1\n")
    # a new file no test could have imported: no changed importer, no listing of its folder
    assert reached(repo, "models/plugin.py", reach=reach, added=("models/plugin.py",)) == {}
    # a test that listed the folder (a registry loading every file there) is reached; so is
    # every test of an older record, which holds no listings (its package folders stand in)
    listing = replace(
        reach,
        tests={
            **reach.tests,
            CNN_TEST: replace(reach.tests[CNN_TEST], listed=frozenset({"models"})),
        },
    )
    assert set(reached(repo, "models/plugin.py", reach=listing, added=("models/plugin.py",))) == {
        CNN_TEST
    }
    older = replace(reach, format=1)
    assert set(reached(repo, "models/plugin.py", reach=older, added=("models/plugin.py",))) == {
        MLP_TEST,
        CNN_TEST,
    }
    (repo / "models/zoo.py").unlink()
    gone = reached(repo, "models/zoo.py", reach=reach)
    assert isinstance(gone, dict) and gone[MLP_TEST] == "models/zoo.py (deleted)"


def test_a_pin_bump_reaches_the_tests_that_ran_the_package(repo: Path) -> None:
    """A bump of a package measures the tests whose record ran its code; one no test ran
    (a `jinja2` pin in a repository whose tests never import it) measures nothing."""
    reach = record(repo)
    tests = {
        MLP_TEST: replace(reach.tests[MLP_TEST], distributions=frozenset({"torch", "slowpkg"})),
        CNN_TEST: replace(reach.tests[CNN_TEST], distributions=frozenset({"torch"})),
    }
    reach = replace(reach, tests=tests)
    old = "torch==2.13.0\nslowpkg==1.0\n"
    (repo / "requirements.txt").write_text("torch==2.13.0\nslowpkg==2.0\n")
    assert reached(repo, "requirements.txt", reach=reach, before={"requirements.txt": old}) == {
        MLP_TEST: "requirements.txt: the pin of slowpkg, whose code it ran"
    }
    (repo / "requirements.txt").write_text(old + "jinja2==3.1.6\n")
    assert reached(repo, "requirements.txt", reach=reach, before={"requirements.txt": old}) == {}
    (repo / "requirements.txt").write_text(old.replace("2.13.0", "2.14.0"))
    bumped = reached(repo, "requirements.txt", reach=reach, before={"requirements.txt": old})
    assert set(bumped) == {MLP_TEST, CNN_TEST}
    # an option line moves every test; so does the pin of a package an older record's run
    # imported (it has no test's packages)
    (repo / "requirements.txt").write_text("--index-url https://x\n" + old)
    every = reached(repo, "requirements.txt", reach=reach, before={"requirements.txt": old})
    assert isinstance(every, str) and "requirements.txt changed" in every
    (repo / "requirements.txt").write_text(old.replace("2.13.0", "2.14.0"))
    older = replace(reach, format=1)
    assert isinstance(
        reached(repo, "requirements.txt", reach=older, before={"requirements.txt": old}), str
    )


def test_unrelated_changes_reach_nothing(repo: Path) -> None:
    reach = record(repo)
    edit(repo, "models/extra.py", "return 1", "return 2")  # a function no test ran
    assert reached(repo, "models/extra.py", "README.md", "docs/guide.md", reach=reach) == {}


def test_the_static_reading_adds_a_changed_module_the_record_never_saw(repo: Path) -> None:
    reach = record(repo)
    (repo / "models/config.py").write_text("HIDDEN = 2\n")  # imported, never run when recorded
    assert reached(repo, "models/config.py", reach=reach) == {
        CNN_TEST: "models/config.py (its module imports it; the record never ran it)"
    }


def test_no_record_measures_the_test_and_no_record_at_all_measures_everything(
    repo: Path,
) -> None:
    reach = record(repo)
    only_mlp = Reach(
        files=reach.files,
        blocks=reach.blocks,
        tests={MLP_TEST: reach.tests[MLP_TEST]},
        distributions=reach.distributions,
    )
    assert reached(repo, "README.md", reach=only_mlp) == {
        CNN_TEST: "no record of this test at the base (new, or renamed)"
    }
    tests = {t: PerfTest(repo / s.path) for t, s in TESTS.items()}
    d = decide(repo, Changes(("README.md",)), tests, reach=None, no_record="no record here")
    assert d.full and d.reason == "no record here: every perf item measured"


def test_an_undeclared_unrecorded_data_file_measures_everything(repo: Path) -> None:
    reach = record(repo)
    assert "configs/lm.json changed, and neither the record" in str(
        reached(repo, "configs/lm.json", reach=reach)
    )
    assert "kernels/gelu.cu" in str(reached(repo, "kernels/gelu.cu", reach=reach))
    declared = {CNN_TEST: PerfTest(repo / "tests/perf/test_cnn.py", ("configs/*",))}
    d = decide(repo, Changes(("configs/lm.json",)), declared, reach=reach)
    assert dict(d.reached) == {CNN_TEST: "configs/lm.json (declared: depends)"}


PYPROJECT = """
[project]
name = "zoo"
version = "1.0.0"
description = "models"
dependencies = ["torch>=2.4", "einops>=0.8"]

[tool.ruff]
line-length = 100

[tool.pytest.ini_options]
addopts = "-q"
"""


@pytest.mark.parametrize(
    ("old", "new", "moves"),
    [
        ('version = "1.0.0"', 'version = "1.0.1"', None),  # a release
        ("line-length = 100", "line-length = 120", None),  # another tool's table
        ("[tool.ruff]", "# lint\n[tool.ruff]", None),  # a comment
        ('"einops>=0.8"', '"einops>=0.9"', None),  # a package no recorded test imports
        ('"torch>=2.4"', '"torch>=2.5"', "the pins of torch, which the recorded tests import"),
        ('addopts = "-q"', 'addopts = "-q -x"', "[tool.pytest.ini_options.addopts]"),
        ('name = "zoo"', 'name = "zoo"\nrequires-python = ">=3.10"', "[project.requires-python]"),
    ],
)
def test_pyproject_moves_every_test_only_where_what_changed_can(
    old: str, new: str, moves: str | None
) -> None:
    assert old in PYPROJECT
    after = PYPROJECT.replace(old, new)
    assert moves_every_test("pyproject.toml", PYPROJECT, after, {"torch", "numpy"}) == moves


def test_lock_files_move_every_test_only_for_what_the_tests_import() -> None:
    before = "torch==2.4.0\neinops==0.8.0  # pinned\n"
    assert (
        moves_every_test("requirements.txt", before, "torch==2.4.0\neinops==0.9.0\n", {"torch"})
        is None
    )
    assert "torch" in str(
        moves_every_test("requirements.txt", before, "torch==2.5.0\neinops==0.8.0\n", {"torch"})
    )
    # without a record of what was imported, any pin moves everything
    assert moves_every_test("requirements.txt", before, "torch==2.4.0\neinops==0.9.0\n", None)
    lock = (
        '[[package]]\nname = "einops"\nversion = "0.8.0"\n\n'
        '[[package]]\nname = "torch"\nversion = "2.4.0"\n'
    )
    assert moves_every_test("uv.lock", lock, lock.replace('"0.8.0"', '"0.9.0"'), {"torch"}) is None
    assert moves_every_test("uv.lock", lock, lock.replace('"2.4.0"', '"2.5.0"'), {"torch"})
    assert (
        moves_every_test("uv.lock", lock, "not toml [", {"torch"})
        == "it does not read as its format"
    )
    assert moves_every_test("setup.py", "a", "b", {"torch"}) == "its content"
    assert (
        moves_every_test("tox.ini", "[tox]\nenvlist = py3\n", "[tox]\nenvlist = py3,py4\n", None)
        is None
    )
    assert moves_every_test("tox.ini", "[pytest]\naddopts = -q\n", "[pytest]\naddopts = -x\n", None)
    assert (
        moves_every_test(
            "setup.cfg", "[metadata]\nversion = 1\n", "[metadata]\nversion = 2\n", None
        )
        is None
    )
    assert moves_every_test("pytest.ini", "[pytest]\n# a\n", "[pytest]\n# b\n", None) is None


def test_a_forcing_change_that_moves_the_tests_measures_everything(repo: Path) -> None:
    (repo / "pyproject.toml").write_text(PYPROJECT.replace("-q", "-q -x"))
    why = reached(repo, "pyproject.toml", before={"pyproject.toml": PYPROJECT})
    assert why == (
        "pyproject.toml changed ([tool.pytest.ini_options.addopts]), which can move every perf test"
    )
    (repo / "pyproject.toml").write_text(PYPROJECT.replace("1.0.0", "1.0.1"))
    assert reached(repo, "pyproject.toml", before={"pyproject.toml": PYPROJECT}) == {}


@pytest.mark.parametrize(
    "path",
    ["uv.lock", "requirements-dev.txt", "pyproject.toml", ".github/workflows/perfguard.yml",
     "setup.cfg", "constraints.txt", "perfguard-accept.toml"],
)  # fmt: skip
def test_files_that_can_move_every_test_are_forcing(path: str) -> None:
    assert forcing(path)
    assert not forcing("tests/perf/conftest.py")  # in the record of every test below it


def test_the_static_reading_finds_imports_anywhere_and_says_what_it_could_not_read(
    repo: Path,
) -> None:
    (repo / "models/layers.py").write_text("from . import config\ndef broken(:\n")
    (repo / "models/cnn.py").write_text("def build():\n    from models import layers\n")
    imports = Imports(search_roots(repo, [repo / "models/cnn.py"]))
    closure = imports.closure(repo / "models/cnn.py")
    assert (repo / "models/layers.py").resolve() in closure
    assert imports.unreadable == {(repo / "models/layers.py").resolve()}


def test_changed_files_are_the_diff_with_the_base_and_new_files(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    (repo / "models/zoo.py").write_text("# edited\n")
    git(repo, "commit", "-qam", "edit")
    (repo / "models/extra.py").write_text("# not committed\n")
    (repo / "models/new.py").write_text("")
    (repo / "models/added.py").write_text("")
    git(repo, "add", "models/added.py")
    (repo / "models/ignored.py").write_text("")
    (repo / "out.log").write_text("")  # untracked, not Python: a run's output
    (repo / ".gitignore").write_text("models/ignored.py\n")
    git(repo, "add", ".gitignore")
    changes = changed_files(repo, base)
    changed = [".gitignore", "models/added.py", "models/extra.py", "models/new.py", "models/zoo.py"]
    assert list(changes.paths) == changed
    assert changes.added == {".gitignore", "models/added.py", "models/new.py"}
    assert inert(".gitignore") and not inert("models/new.py")
    json.dumps(list(changes.paths))  # plain strings


def test_the_record_round_trips_through_json_with_what_tests_share_written_once(
    repo: Path,
) -> None:
    reach = record(repo)
    doc = reach.to_json()
    assert doc["common"]["files"] == [] and set(doc["common"]["packages"]) == {
        "models",
        "tests/perf",
    }
    assert doc["tests"][MLP_TEST]["packages"] == []  # written once, in common
    assert Reach.from_json(json.loads(json.dumps(doc))) == reach
    merged = reach.merged(Reach(tests={}))
    assert merged.tests.keys() == reach.tests.keys()
    for test in reach.tests:
        assert {merged.block(i) for i in merged.tests[test].blocks} == {
            reach.block(i) for i in reach.tests[test].blocks
        }
