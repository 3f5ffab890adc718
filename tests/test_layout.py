"""The shape of the package: layers without cycles (at import, and through the imports made
inside functions), pytest and torch where they belong, modules and functions of a readable
size (or a reason in a comment).

Sizes: a module's lines, at most 400 unless a `# long module: why` comment near its top says
why; a function's code after its docstring, at most 60 unless a `# long: why` comment right
above it says why."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "perfguard"
MODULE_LINES = 400
FUNCTION_LINES = 60
# where torch may be imported: measuring code, and the plugin where it measures (seeding
# before an item, the device a session runs on)
TORCH_HOMES = ("measure/", "variants/", "examples/", "environment.py", "pytest_plugin/")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _modules_named(nodes: Iterable[ast.AST]) -> set[str]:
    """The perfguard modules that the import statements among `nodes` name."""
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            found.update(s for s in subs if s in MODULES)
            if not all(s in MODULES for s in subs):
                found.add(node.module)
    return {m for m in found if m in MODULES}


def _top_level_imports(path: Path) -> set[str]:
    """The perfguard modules a module imports when it is imported (not inside functions,
    not under TYPE_CHECKING)."""
    return _modules_named(ast.parse(path.read_text(encoding="utf-8")).body)


def _every_import(path: Path) -> set[str]:
    """The perfguard modules a module imports anywhere: at its top and inside its functions
    (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    return _modules_named(node for node in ast.walk(tree) if id(node) not in typing_only)


LAZY_UPWARD: set[tuple[str, str]] = set()
"""Imports inside functions that reach back up to a module importing this one: none, and
none may be added (the summary table's loaders moved beside the stores they read)."""


FLOORS: tuple[tuple[str, ...], ...] = (
    # the ground: leaves that every floor stands on (errors, the version, the one check of a
    # value, files written all or nothing, temporary folders, processes, a comment's marker,
    # GitHub's answers read, the variant names and their registry)
    (
        "perfguard.errors",
        "perfguard.version",
        "perfguard.orders",
        "perfguard.bounds",
        "perfguard.files",
        "perfguard.scratch",
        "perfguard.processes",
        "perfguard.comment",
        "perfguard.github_answers",
        "perfguard.variants.declared",
        "perfguard.variants.spec",
    ),
    # facts: the settings table, the records, git, the machine, GitHub's client
    (
        "perfguard.settings",
        "perfguard.records",
        "perfguard.git",
        "perfguard.git_run",
        "perfguard.health",
        "perfguard.environment",
        "perfguard.environment_diff",
        "perfguard.worktree",
        "perfguard.github",
        "perfguard.pull_comment",
    ),
    # work on them: measuring, comparing, storing, choosing the tests a change can move
    (
        "perfguard.variants",
        "perfguard.measure",
        "perfguard.stats",
        "perfguard.store",
        "perfguard.selection",
        "perfguard.environments",
        "perfguard.confirm",
        "perfguard.examples",
    ),
    # the steps: the finish's pipeline, the report, main's history, the watchdog, init, the
    # calibration's judgement
    (
        "perfguard.pipeline",
        "perfguard.plan",
        "perfguard.calibrate",
        "perfguard.accept",
        "perfguard.report",
        "perfguard.history",
        "perfguard.watchdog",
        "perfguard.init",
    ),
    # the ways in: the plugin, the command, the library's API (the package itself)
    ("perfguard.pytest_plugin", "perfguard.cli", "perfguard"),
)
"""The floors of the package, lowest first (docs/architecture.md draws them). A module
imports, at its top or inside a function, only modules of its own floor or below: no arrow
runs back up."""


def floor_of(module: str) -> int | None:
    """The floor a module stands on: its longest prefix in FLOORS ("perfguard" itself is only
    the package's `__init__`)."""
    best: tuple[int, int] | None = None
    for i, names in enumerate(FLOORS):
        for prefix in names:
            covers = module == prefix or (prefix != "perfguard" and module.startswith(f"{prefix}."))
            if covers and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    return None if best is None else best[0]


def _all_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_import_cycle() -> None:
    graph = {name: _top_level_imports(path) - {name} for name, path in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [name, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_an_import_inside_a_function_does_not_reach_back_up() -> None:
    """A function-level import is for a heavy or optional dependency, or for a command
    loaded when it runs; one that imports a module which imports this one (directly or
    further up) is a cycle the top-level check cannot see."""
    top = {name: _top_level_imports(path) - {name} for name, path in MODULES.items()}
    every = {name: _every_import(path) - {name} for name, path in MODULES.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            for nxt in every[todo.pop()]:
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    upward = {
        (name, target)
        for name in MODULES
        for target in every[name] - top[name]
        if reaches(target, name)
    }
    assert upward <= LAZY_UPWARD, sorted(upward - LAZY_UPWARD)


def test_every_module_stands_on_a_floor_and_no_arrow_runs_back_up() -> None:
    unplaced = sorted(name for name in MODULES if floor_of(name) is None)
    assert not unplaced, f"modules on no floor (add them to FLOORS): {unplaced}"
    upward = sorted(
        f"{name} (floor {floor_of(name)}) -> {target} (floor {floor_of(target)})"
        for name, path in MODULES.items()
        for target in _every_import(path) - {name}
        if (floor_of(target) or 0) > (floor_of(name) or 0)
    )
    assert not upward, upward


def test_the_floor_check_sees_an_arrow_back_up() -> None:
    """The floors are read as the check reads them: a record importing the pipeline would be
    an arrow up, the pipeline importing a record is not."""
    records, pipeline = floor_of("perfguard.records.runs"), floor_of("perfguard.pipeline.finish")
    assert records is not None and pipeline is not None and records < pipeline
    assert floor_of("perfguard.variants.spec") == 0 < (floor_of("perfguard.variants.registry") or 0)
    assert floor_of("perfguard") == len(FLOORS) - 1 and floor_of("perfguardx") is None


def test_only_the_plugin_imports_pytest_and_only_measuring_code_imports_torch() -> None:
    for path in MODULES.values():
        rel = path.relative_to(PACKAGE).as_posix()
        imports = _all_imports(path)
        if "pytest" in imports:
            assert rel.startswith("pytest_plugin/"), f"{rel} imports pytest"
        if "torch" in imports:
            assert rel.startswith(TORCH_HOMES), f"{rel} imports torch"


def _reason_above(lines: list[str], lineno: int, tag: str) -> bool:
    """A `# long...: why` comment on the lines just above `lineno` (1-based), decorators
    and blank lines between allowed."""
    i = lineno - 2
    while i >= 0 and (lines[i].strip().startswith("@") or not lines[i].strip()):
        i -= 1
    return i >= 0 and lines[i].strip().startswith(f"# {tag}:")


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines from its first statement after the docstring to its end."""
    body = node.body
    first = body[0]
    is_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if is_doc and isinstance(first.value.value, str) and len(body) > 1:  # type: ignore[attr-defined]
        first = body[1]
    return (node.end_lineno or node.lineno) - first.lineno + 1


def test_modules_and_functions_are_short_or_say_why() -> None:
    long_modules, long_functions = [], []
    for path in MODULES.values():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        rel = path.relative_to(PACKAGE).as_posix()
        if len(lines) > MODULE_LINES and not any(
            line.startswith("# long module:") for line in lines[:30]
        ):
            long_modules.append(f"{rel} ({len(lines)} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = _code_lines(node)
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if size > FUNCTION_LINES and not _reason_above(lines, first, "long"):
                    long_functions.append(f"{rel}:{node.name} ({size} lines)")
    assert not long_modules, long_modules
    assert not long_functions, long_functions


@pytest.mark.slow  # imports the modules that declare errors, torch among them
def test_every_error_perfguard_raises_on_purpose_has_one_root() -> None:
    """Each exception class of the package derives from `PerfguardError`, so that a command
    catches the root once (one line, exit 2) and anything else is a bug with its traceback."""
    import importlib
    import inspect

    from perfguard.errors import PerfguardError

    stray = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [
            n.name
            for n in tree.body
            if isinstance(n, ast.ClassDef)
            and any(b in ast.unparse(n) for b in ("Error", "Exception", "Refused"))
        ]
        if not classes:
            continue
        module = importlib.import_module(name)
        for cls_name in classes:
            cls = getattr(module, cls_name)
            if cls_name.startswith("_"):  # a module's own signal, caught where it is raised
                continue
            if not inspect.isclass(cls) or not issubclass(cls, Exception):
                continue
            if not issubclass(cls, (PerfguardError, Warning)):
                stray.append(f"{name}.{cls_name}")
    assert not stray, stray
