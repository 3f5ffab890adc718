"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import forkserver
from tests.gitrepo import commit, git

# One torch thread per process unless a test says otherwise. Under pytest-xdist (`make test`:
# a worker per core), every core's worker with a pool of one thread per core (OpenMP's threads
# spin while they wait) spent a tenth of the suite's time contending; in one process (`make
# test-fast`) beside other work, a pool's spinning is CPU the slow-test check counts (a 0.05 s
# training step read 5.5 s of CPU beside two busy processes). Set before torch is imported (no
# plugin imports it), so the process, its fork server and every session they start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The sessions the tests start leave out anyio's plugin (huggingface_hub brings anyio into this
# environment): no test's session uses it, and importing it cost every session 1-2 s of CPU
# (pytester's sessions too: `_forked_sessions` gives them the option pytester takes away).
NO_ANYIO = "-p no:anyio"
os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"), NO_ANYIO]))
# Bytecode is cached, whatever the shell says (PYTHONDONTWRITEBYTECODE): the suite starts some
# hundreds of pytest sessions, and without the cache each one compiled the modules it imports
# and rewrote the asserts of every test module and plugin again (a sampled profile of `make
# test`: a fifth of its CPU). Where the tree cannot be written, Python goes on without it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
forkserver.remember_environment()


SLOW_CPU_S = 2.0
"""A test that is not marked `slow` uses less CPU than this (itself, the processes it waited
for and the sessions it forked): the rule is a second, and a slower machine gets twice it.
CPU time, not wall time, so that the check holds on a busy machine. The check runs where
the tests run in one process in their order (`make test-fast`): there what a process pays
once (a first import, a kernel's first build) lands on the same test every run; under
pytest-xdist (`make test`) it lands on a different one each run, and nothing is judged."""

JUDGED = not os.environ.get("PYTEST_XDIST_WORKER")


WARMED = ("torch._dynamo", "torchao.quantization", "ruptures", "pandas", "fastparquet")
"""Imported once after collection in a session of many tests: each costs a second or more
of CPU the first time, which would land on whichever test first imports it."""

FIRST_IMPORTS_UNJUDGED = 100
"""A test that brought this many modules in for the first time (a package not warmed, a
session-wide fixture's server) is not judged: its CPU went to importing them."""


KEPT = ("scipy.special",)
"""Imported before the first test, in every process that runs tests: a test with pytester gets
sys.modules put back as it was when the test began, and a module first imported during it
is dropped; numpy's extensions under scipy.special cannot be loaded twice in one process."""


def pytest_collection_finish(session: pytest.Session) -> None:
    import contextlib
    import importlib

    from perfguard.pytest_plugin.roles import settle_heap

    for name in KEPT:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if JUDGED and len(session.items) >= 30:  # a few tests: not worth the seconds
        _warm()
    # what a measuring session does after its collection, for the tests that measure in this
    # process: each of perfguard's collections walked torch, transformers and every test
    # module (0.2-0.4 s in a pytest-xdist worker, a twentieth of the suite's CPU in a sampled
    # profile of `make test`)
    settle_heap()


def _warm() -> None:
    import contextlib
    import importlib
    import logging
    import warnings

    # what these packages say of themselves on import (torchao of its CUDA kernels, absent
    # here) is said where a test imports them, captured with it; not at the session's start
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in WARMED:
                with contextlib.suppress(ImportError):  # an optional extra: its tests skip
                    importlib.import_module(name)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _cpu() -> float:
    import resource

    mine = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = mine.ru_utime + mine.ru_stime + waited.ru_utime + waited.ru_stime
    return used + sum(forkserver.FORKED_CPU)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """`make test-fast` is the tests not marked `slow`: one that uses more CPU than
    `SLOW_CPU_S` in its set-up and call fails, saying to mark it."""
    outcome = yield
    if not JUDGED or call.when not in ("setup", "call") or item.get_closest_marker("slow"):
        return
    report = outcome.get_result()
    began = item.stash.setdefault(_CPU_KEY, {})
    if call.when == "setup":
        return
    used = _cpu() - began.get("start", _cpu())
    first_imports = len(sys.modules) - began.get("modules", len(sys.modules))
    if report.passed and used > SLOW_CPU_S and first_imports < FIRST_IMPORTS_UNJUDGED:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} used {used:.1f} s of CPU without the `slow` marker (a test over a "
            f"second is slow; this check allows {SLOW_CPU_S:g} s): mark it "
            "@pytest.mark.slow, or make it cheaper"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_KEY] = {"start": _cpu(), "modules": len(sys.modules)}


_CPU_KEY = pytest.StashKey[dict[str, float]]()


@pytest.fixture(autouse=True)
def _sessions_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test` runs the tests in pytest-xdist workers, whose environment says so; the
    pytest sessions a test starts are not xdist's, and must not read that they are
    (pytest-benchmark turns itself off where PYTEST_XDIST_WORKER is set)."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _forked_sessions(request: pytest.FixtureRequest) -> None:
    """`pytester.runpytest_subprocess` forks its session from a server that has imported torch,
    pytest and the plugin once (`tests.forkserver`), unless the test is marked
    `fresh_interpreter` (or FRESH_INTERPRETERS=1 is set, to compare)."""
    if "pytester" not in request.fixturenames:
        return
    pytester: pytest.Pytester = request.getfixturevalue("pytester")
    # pytester takes PYTEST_ADDOPTS away from its sessions; they leave anyio's plugin out too
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("PYTEST_ADDOPTS", NO_ANYIO)
    if request.node.get_closest_marker("fresh_interpreter"):
        return
    started = pytester.popen

    def popen(
        cmdargs: Any, stdout: Any = None, stderr: Any = None, stdin: Any = None, **kw: Any
    ) -> Any:
        args = [os.fspath(a) for a in cmdargs]
        plain = (
            args[:2] == [sys.executable, "-mpytest"]
            and stdin is pytester.CLOSE_STDIN
            and not kw
            and hasattr(stdout, "name")
            and hasattr(stderr, "name")
        )
        env = dict(os.environ)  # as pytester gives its subprocess: the test's folder importable
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
        server = forkserver.shared(env) if plain else None
        if server is None:
            return started(cmdargs, stdout=stdout, stderr=stderr, stdin=stdin, **kw)
        stdout.flush()
        stderr.flush()
        return server.start(args[2:], os.getcwd(), env, stdout.name, stderr.name)

    pytester.popen = popen  # type: ignore[method-assign]


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare remote with one commit on main, like a fresh project."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    # as GitHub does: a fetch may leave file contents out (`--filter=blob:none`)
    git(bare, "config", "uploadpack.allowFilter", "true")
    git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(bare), str(seed))
    (seed / ".gitignore").write_text("baselines/\n")
    git(seed, "add", ".gitignore")
    commit(seed, "init")
    git(seed, "push", "-q", "origin", "HEAD:main")
    return bare


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A real S3-compatible server on 127.0.0.1 for the session (`tests.s3server`); its
    endpoint URL. Skips where moto or s3fs is not installed (they come with the dev extra)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.moto_server.werkzeug_app")
    from tests.s3server import serve

    endpoint, stop = serve()
    yield endpoint
    stop()


@pytest.fixture
def s3_url(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """`s3://<a new bucket>/baselines` on the test server, with the environment a runner
    gives the S3 client (endpoint, credentials, region)."""
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "perfguard-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "perfguard-test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    bucket = f"t{uuid.uuid4().hex[:20]}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/baselines"
