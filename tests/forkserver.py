"""Pytest sessions for the tests, forked from an interpreter that has already imported what
every session imports.

A test's `pytester.runpytest_subprocess` starts a new interpreter: about 4 s of CPU for one
eager item on a 2-core machine, 3 s of it importing torch, pytest and the plugin. The suite
starts about ninety of them. This server imports those modules once per pytest-xdist worker and
forks a child for each session; the child sets the session's directory, environment, path and
standard streams, runs `python -m pytest` as the interpreter would, and exits as it would. Each
session is still a process of its own, with its own signals, state and exit code.

The server never runs a torch operation and starts no Python thread, so that forking it is
safe (OpenBLAS's parked threads, started as numpy and scipy load, are fork-safe). It imports
the compiler's front end too (dynamo and inductor, about 1.7 s of CPU): not only compiling
sessions import it, but training ones (torch's optimizers import dynamo as they are made),
quantizing ones (torchao) and generating ones (transformers). Their configuration is read from
the environment at import, so a session whose `TORCH*` variables differ from the server's
starts a new interpreter instead (`shares_compiler_config`). A test about what a session
imports (or when it imports it) is marked `fresh_interpreter`, and its sessions start a new
interpreter as before.

The protocol is one JSON line each way on the server's standard streams: a request (argv, cwd,
env, the two output files), then the child's pid, then its exit status as `Popen` gives it.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

# what a measuring session imports before it measures. The other plugins pytest loads are left
# out: pytest rewrites their asserts, which it cannot do (and warns) once they are imported
PRELOAD = (
    "torch",
    # the compiler's front end: what a compiling, training, quantizing or generating session
    # imports (its configuration is the server's: `shares_compiler_config`)
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "torch.profiler",
    "torch.utils.flop_counter",
    "numpy",
    "scipy.special",
    "git",
    "jinja2",
    "pygments.lexers",
    "pytest",
    "_pytest.pytester",
    "perfguard.pytest_plugin",
    "perfguard.pytest_plugin.roles",
    "perfguard.pytest_plugin.finish",
    "perfguard.pytest_plugin.fixture",
    "perfguard.pytest_plugin.ab.session",
    "perfguard.measure.runner",
    "perfguard.report.markdown",
    "perfguard.report.outputs",
    "perfguard.store.baselines",
    "perfguard.store.sync",
    "perfguard.variants.registry",
    # what a session imports at its end (the comparison, the reports, a saved baseline's
    # summary part): about 1.5 s of CPU a session, pandas most of it
    "pandas",
    "fastparquet",
    "perfguard.plan",
    "perfguard.pipeline.finish",
    "perfguard.pipeline.write",
    "perfguard.pytest_plugin.startup",
    "perfguard.pytest_plugin.confirm",
    "perfguard.pytest_plugin.ab.roles",
    "perfguard.pytest_plugin.ab.worker",
    "perfguard.store.history",
)


# ---- the server: one per pytest-xdist worker -----------------------------------------------


def _serve() -> None:
    # Python 3.12 warns of forking a process with threads: OpenBLAS's, which fork safely
    warnings.filterwarnings("ignore", ".*multi-threaded.*fork", DeprecationWarning)
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    for name in PRELOAD:
        importlib.import_module(name)
    import torch
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    from perfguard.report.markdown import compile_templates

    # inductor's check of the CPU's vector instructions, once for every session: it builds and
    # loads a small program for each (1-2.5 s of CPU in each session that compiled on the CPU)
    pick_vec_isa()
    # and the report's templates, which every session that ends with a report compiled again
    compile_templates()
    # a CUDA runtime started here would be unusable in every child; nothing here starts one
    if threading.active_count() != 1 or torch.cuda._initialized:
        raise SystemExit("forkserver: a thread or CUDA was started")
    # the path a new interpreter would have, less this file's folder and the server's PYTHONPATH
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = sys.path[1 + len(own) :]
    # what is imported here lives as long as every session: the collector leaves it be (each
    # full collection in a session, pytest's at its end and the measuring code's, walked its
    # 200,000 objects: 0.1 s each)
    gc.freeze()
    reply(replies, {"ready": True})
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            _child(request, base)  # never returns
        reply(replies, {"pid": pid})
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime  # the session's own and its waited children's
        reply(replies, {"returncode": os.waitstatus_to_exitcode(status), "cpu_s": cpu})


FORKED_CPU: list[float] = []
"""The CPU seconds of each forked session this process waited for (the slow-test check)."""


def reply(stream: IO[str], message: dict[str, Any]) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def _enter(request: dict[str, Any], base: list[str]) -> None:
    """This process as a new interpreter started with the request's folder, environment,
    path and standard streams would be (a stream without a file is left as it is)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *base]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        if path is not None:
            os.dup2(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), fd)


def _child(request: dict[str, Any], base: list[str]) -> None:
    code = 1
    zygote = None
    try:
        _enter(request, base)
        zygote = Zygote(base)  # forked now, while this process is as clean as the server
        zygote.install()
        sys.argv = ["-m", *request["args"]]
        code = _run_pytest()
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does at exit
        atexit._run_exitfuncs()
    except BaseException:  # the child reports and exits, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        if zygote is not None:
            zygote.close()
        os._exit(code)


def _run_pytest() -> int:
    import runpy

    try:
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code is None:
            return 0
        if isinstance(done.code, int):
            return done.code
        print(done.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # as Python ends on an unhandled Ctrl-C: killed by SIGINT
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return 0


# ---- a forked session's zygote: its A/B workers and re-measure sessions forked too ---------


class Zygote:
    """A fork of a forked session, made before the session runs anything, so as clean as the
    server. The session's A/B workers (`python -c BOOT ...`) and re-measure sessions
    (`python -m pytest ...`) are forked from it instead of each starting a new interpreter
    (about 3 s of CPU each, importing torch and pytest again). A worker is the zygote's child,
    in the session's process tree: the zygote dies with the session (the parent-death signal),
    and each worker follows the zygote as it would have followed the session. The session
    asks over one pipe and hears each fork's pid and, later, its exit status over another."""

    def __init__(self, base: list[str]) -> None:
        asked, self._ask = os.pipe()
        self._hear, told = os.pipe()
        session = os.getpid()
        pid = os.fork()
        if pid == 0:
            os.close(self._ask)
            os.close(self._hear)
            _zygote(asked, told, base, session)  # never returns
        os.close(asked)
        os.close(told)
        self.pid = pid
        self._pending = b""
        self._ended: dict[int, int] = {}
        self._lock = threading.Lock()

    def install(self) -> None:
        """Where the session starts its workers and re-measures, fork them from here."""
        from perfguard.pytest_plugin import confirm
        from perfguard.pytest_plugin.ab import side

        launcher = _Launcher(self)
        setattr(side, "subprocess", launcher)  # noqa: B010  # the module's own import
        setattr(confirm, "subprocess", launcher)  # noqa: B010

    def spawn(self, request: dict[str, Any]) -> Forked:
        with self._lock:
            os.write(self._ask, (json.dumps(request) + "\n").encode())
            while True:
                said = self._read(None)
                if "pid" in said:
                    return Forked(self, int(said["pid"]), request["argv"])

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The fork's exit status once it has ended, waiting up to `timeout` (None: until it
        has); None if it is still running then."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while pid not in self._ended:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if left == 0.0 and not self._readable(0.0):
                    return None
                with contextlib.suppress(TimeoutError):
                    self._read(left)
            return self._ended[pid]

    def _readable(self, timeout: float | None) -> bool:
        import select

        return b"\n" in self._pending or bool(select.select([self._hear], [], [], timeout)[0])

    def _read(self, timeout: float | None) -> dict[str, Any]:
        """The zygote's next message (an exit is noted as it passes); TimeoutError."""
        while b"\n" not in self._pending:
            if not self._readable(timeout):
                raise TimeoutError
            chunk = os.read(self._hear, 65536)
            if not chunk:
                raise RuntimeError("the session's zygote has gone")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        said: dict[str, Any] = json.loads(line)
        if "exit" in said:
            self._ended[int(said["exit"])] = int(said["code"])
        return said

    def close(self) -> None:
        """The session is done: its zygote ends what it still runs, then itself."""
        with contextlib.suppress(OSError):
            os.close(self._ask)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _zygote(asked: int, told: int, base: list[str], session: int) -> None:
    import select

    _die_with(session, signal.SIGKILL)
    children: set[int] = set()
    pending = b""

    def say(message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            os.write(told, (json.dumps(message) + "\n").encode())

    def reap(block: bool) -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            children.discard(pid)
            say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    try:
        while True:
            if select.select([asked], [], [], 0.05 if children else None)[0]:
                chunk = os.read(asked, 65536)
                if not chunk:
                    break  # the session has ended
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        os.close(asked)
                        os.close(told)
                        _forked(request, base, session)  # never returns
                    children.add(pid)
                    say({"pid": pid})
            reap(block=False)
        for pid in children:  # what the session left running ends with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        reap(block=True)
    finally:
        os._exit(0)


def _die_with(parent: int, signum: int) -> None:
    """End this process with `signum` when `parent` ends (Linux's parent-death signal)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signum))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _forked(request: dict[str, Any], base: list[str], session: int) -> None:
    """A zygote's fork: a re-measure session, or a worker's `python -c` code run as its
    interpreter would (its parent now the zygote, which it follows instead of the session)."""
    if request["kind"] == "pytest":
        _child(request, base)  # never returns
    code = 1
    try:
        _enter(request, base)
        sys.argv = ["-c", *request["args"]]
        source = request["code"].replace(
            f"follow_parent({session})", f"follow_parent({os.getppid()})"
        )
        exec(compile(source, "<string>", "exec"), {"__name__": "__main__"})
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


class Forked:
    """The `subprocess.Popen` surface a session uses, for a process its zygote forked."""

    stdin = stdout = stderr = None

    def __init__(self, zygote: Zygote, pid: int, args: list[str]) -> None:
        self.zygote, self.pid, self.args = zygote, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class _Launcher:
    """`subprocess` for the modules that start workers and re-measures: what this
    interpreter would start as `python -c ...follow_parent...` or `python -m pytest` is
    forked from the zygote; anything else is started as usual."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def _request(self, argv: Any, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if not isinstance(argv, list) or len(argv) < 3 or argv[0] != sys.executable:
            return None
        if set(kwargs) - {"cwd", "env", "stdout", "stderr", "timeout"}:
            return None
        out, err = kwargs.get("stdout"), kwargs.get("stderr")
        if (out is not None and not hasattr(out, "name")) or err not in (None, subprocess.STDOUT):
            return None
        path = None if out is None else str(out.name)
        env = dict(kwargs.get("env") or os.environ)
        if not shares_compiler_config(env, os.environ):  # torch here read other settings
            return None
        request = {
            "argv": argv,
            "cwd": str(kwargs.get("cwd") or os.getcwd()),
            "env": env,
            "stdout": path,
            "stderr": path if err is not None else None,
        }
        if argv[1] == "-c" and "follow_parent(" in argv[2]:
            return {**request, "kind": "code", "code": argv[2], "args": argv[3:]}
        if argv[1:3] == ["-m", "pytest"]:
            return {**request, "kind": "pytest", "args": argv[3:]}
        return None

    def Popen(self, argv: Any, **kwargs: Any) -> Any:  # subprocess's own name
        request = self._request(argv, kwargs)
        if request is None:
            return subprocess.Popen(argv, **kwargs)
        if out := kwargs.get("stdout"):
            out.flush()
        return self._zygote.spawn(request)

    def run(self, argv: Any, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        request = self._request(argv, kwargs)
        if request is None:
            return subprocess.run(argv, **kwargs)
        if out := kwargs.get("stdout"):
            out.flush()
        forked = self._zygote.spawn(request)
        try:
            code = forked.wait(kwargs.get("timeout"))
        except subprocess.TimeoutExpired:
            forked.kill()
            forked.wait()
            raise
        return subprocess.CompletedProcess(argv, code)


# ---- the client: what a test's pytester gets ----------------------------------------------


class Server:
    """A fork server for this process's tests, started on first use."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.busy = False
        # what was read past the last whole line: a reply is read from the pipe's descriptor
        # (select and a buffered reader disagree once two replies arrive together)
        self._pending = b""
        if self.read() != {"ready": True}:
            raise RuntimeError("the fork server did not start")

    def read(self, timeout: float | None = None) -> dict[str, Any]:
        import select
        import time

        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                if not select.select([fd], [], [], left)[0]:
                    raise subprocess.TimeoutExpired("forked session", timeout or 0.0)
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("the fork server has gone")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def start(
        self, args: list[str], cwd: str, env: dict[str, str], stdout: str, stderr: str
    ) -> Session:
        assert self.process.stdin is not None
        request = {"args": args, "cwd": cwd, "env": env, "stdout": stdout, "stderr": stderr}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        self.busy = True
        return Session(self, self.read()["pid"], args)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Session:
    """The `subprocess.Popen` surface pytester uses, for a forked session."""

    stdin = None

    def __init__(self, server: Server, pid: int, args: list[str]) -> None:
        self.server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            said = self.server.read(timeout)
            self.returncode = int(said["returncode"])
            FORKED_CPU.append(float(said.get("cpu_s", 0.0)))
            self.server.busy = False
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


# ---- this process's server, and sessions started without pytester --------------------------

_START_ENV: dict[str, str] | None = None
_server: Server | None = None


def remember_environment() -> None:
    """Take this process's environment, as it is now, for its server (a test's changes go with
    each request instead): the suite's conftest calls it once it has set what every session
    shares."""
    global _START_ENV
    _START_ENV = dict(os.environ)


READ_WHEN_USED = frozenset({"TORCHINDUCTOR_CACHE_DIR"})
"""Read each time they are used, not at import: inductor sets its cache folder's variable in
the process's environment the first time it looks for the folder (a test that compiled in a
pytest-xdist worker left it set there, and every later session would have started anew)."""


def compiler_config(env: Mapping[str, str]) -> dict[str, str]:
    """What torch reads from the environment as it imports (dynamo's and inductor's
    configuration among it): the `TORCH*` and `PYTORCH*` variables, less those read where
    they are used (`READ_WHEN_USED`)."""
    return {
        k: v
        for k, v in env.items()
        if k.startswith(("TORCH", "PYTORCH")) and k not in READ_WHEN_USED
    }


def shares_compiler_config(env: Mapping[str, str], than: Mapping[str, str]) -> bool:
    """Whether a session with `env` may be forked from a process started with `than`: torch,
    imported there, read the same configuration the session's own import would."""
    return compiler_config(env) == compiler_config(than)


def fresh_interpreters() -> bool:
    """Whether every session is to start a new interpreter (FRESH_INTERPRETERS=1, to compare)."""
    return os.environ.get("FRESH_INTERPRETERS") == "1"


def shared(env: Mapping[str, str] | None = None) -> Server | None:
    """This process's server, started on first use; None while its one session runs, where
    every session is to start a new interpreter, or where a session's environment (`env`)
    would configure torch otherwise than the server's did."""
    global _server
    if fresh_interpreters():
        return None
    start = _START_ENV if _START_ENV is not None else dict(os.environ)
    if env is not None and not shares_compiler_config(env, start):
        return None
    if _server is not None and _server.process.poll() is not None:
        _server = None  # it died: start a new one
    if _server is None:
        _server = Server(start)
        atexit.register(_server.close)
    return None if _server.busy else _server


def run_pytest(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m pytest *args` in `cwd`, as `subprocess.run` with its output captured, forked
    from this process's server where it can be."""
    server = shared(env if env is not None else os.environ)
    if server is None:
        command = [sys.executable, "-m", "pytest", *args]
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        told = dict(env if env is not None else os.environ)
        code = server.start(list(args), str(cwd), told, str(out), str(err)).wait()
        return subprocess.CompletedProcess(
            ["python", "-m", "pytest", *args], code, out.read_text(), err.read_text()
        )


class Sessions:
    """`subprocess` for a module that this process calls and that runs `python -m pytest`,
    with its output captured as text (`bisect`'s steps, `run`) or sent to a stream (the
    calibrate command's session, `Popen`): each such session is forked from this process's
    server (`run_pytest`); anything else runs as usual."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def Popen(self, argv: Any, **kwargs: Any) -> Any:  # subprocess's own name
        stream: Any = kwargs.get("stdout")
        plain = (
            isinstance(argv, list)
            and argv[:3] == [sys.executable, "-m", "pytest"]
            and not set(kwargs) - {"cwd", "env", "stdout"}
            and hasattr(stream, "write")
        )
        env = dict(kwargs.get("env") or os.environ)
        server = shared(env) if plain else None
        if server is None:
            return subprocess.Popen(argv, **kwargs)
        import tempfile

        fd, log = tempfile.mkstemp(prefix="forked-session-", suffix=".log")
        os.close(fd)
        cwd = str(kwargs.get("cwd") or os.getcwd())
        return _Echoed(server.start(argv[3:], cwd, env, log, log), Path(log), stream)

    def run(self, argv: Any, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        plain = (
            isinstance(argv, list)
            and argv[:3] == [sys.executable, "-m", "pytest"]
            and kwargs.get("capture_output")
            and kwargs.get("text")
            and not kwargs.get("check")
            and not set(kwargs) - {"cwd", "env", "capture_output", "text", "check"}
        )
        if not plain:
            return subprocess.run(argv, **kwargs)
        done = run_pytest(Path(kwargs.get("cwd") or os.getcwd()), *argv[3:], env=kwargs.get("env"))
        return subprocess.CompletedProcess(argv, done.returncode, done.stdout, done.stderr)


class _Echoed:
    """A forked session whose output, written to a file, goes to the caller's stream as it
    ends (the stream has no descriptor of its own where pytest captures it)."""

    def __init__(self, session: Session, log: Path, stream: IO[str]) -> None:
        self.session, self.log, self.stream = session, log, stream
        self.pid, self.args = session.pid, session.args

    def wait(self, timeout: float | None = None) -> int:
        code = self.session.wait(timeout)
        if self.log.exists():
            self.stream.write(self.log.read_text(errors="replace"))
            self.log.unlink()
        return code

    def poll(self) -> int | None:
        return self.session.poll()

    def terminate(self) -> None:
        self.session.terminate()

    def kill(self) -> None:
        self.session.kill()


if __name__ == "__main__":
    _serve()
