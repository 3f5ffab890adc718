"""Command-line and ini options, read and checked; they are declared in perfguard.settings.

Precedence: command line > ini > default; the `@pytest.mark.perfguard(...)` marker overrides
per test where it has a key for it (variants, thresholds, budget, drift tolerance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from perfguard.bounds import check
from perfguard.orders import Orders, OrdersError, from_environment
from perfguard.settings import BY_NAME, Setting
from perfguard.settings import OPTIONS as SETTINGS_OPTIONS
from perfguard.variants.spec import UnknownVariantError, parse_variant_list

OPTIONS: tuple[Setting, ...] = SETTINGS_OPTIONS
"""The options and ini keys, from the one table of settings (perfguard.settings)."""


@dataclass(frozen=True)
class Options:
    """The resolved options of a session: an attribute per row of the settings table
    (`Setting.field`, read by its `read` kind), and four facts of the session (whether it is
    on, where each setting came from, whether it is an A/B worker, and the orders of the
    session that started it). A test holds the attributes and the table to each other."""

    enabled: bool  # --perfguard
    sources: Mapping[str, str]  # where each setting came from: its flag, its ini key, "default"
    worker: bool  # this session is an A/B worker, driven from another session
    variants: tuple[str, ...] | None  # None: the built-in default, unless a marker says
    baseline_dir: Path | str  # a folder, or an object store's URL
    machine: str | None
    save: bool
    save_replace: bool  # replace HEAD's stored baseline whole, not update it
    save_unpaired: bool  # save without measuring beside HEAD's first parent
    full: bool  # measure every perf item, not only those the change can affect
    record: str  # record what each perf test runs: auto (on a full run), yes, no
    depends: str | None  # globs every perf test reads besides its imports
    compile_cache: Path | None  # main's compiled artifacts (perfguard.measure.compile_cache)
    allow_dirty: bool
    compare: str
    report: Path
    json: Path | None
    fail_on: str
    budget_s: float
    repeats: int
    timeout_s: float  # the most one perf item may take, all its phases together
    import_timeout_s: float  # the most importing one test module may take
    device: str
    threads: int | None
    flush_l2: bool  # CUDA: evict L2 before each timed call
    seed: int
    min_change_pct: float
    gate_p99: bool
    gate_kernels: bool  # operator and kernel time verdicts gate
    op_min_change_pct: float
    op_blocks: int  # profiled blocks per item, for operator and kernel verdicts
    main_branch: str
    baseline_depth: int
    progress: str
    shard: tuple[int, int] | None  # (K, N), 1-based
    confirm: int  # re-measures of a flagged item
    confirm_gap_s: float  # least time between an item's measurement and its re-measure
    unhealthy: str
    ab: str | None  # same-job A/B against this revision ("auto": find it)
    base_env: str  # where A/B's base side runs: auto, same, or an environment's python
    install: str | None  # the team's command that installs the project into an environment
    env_cache: Path | None  # the environments perfguard builds (None: ~/.cache/perfguard/...)
    install_timeout_s: float  # the most building one environment may take
    ab_env: str | None  # this tree measured in that environment beside this one
    ab_min_change_pct: float
    instructions: tuple[str, ...]  # callgrind regions to count: compile, forward

    orders: Orders = field(default_factory=Orders)  # what the session that started this asks

    def measuring_args(self, rootdir: Path, repeats: int, ab: str | None = None) -> list[str]:
        """The pytest command line of a child session that measures as this one does
        (A/B workers, confirmation re-measures): every setting the table passes on to a
        child (`child`), as this session has it; it never saves or confirms, and compares
        only with the base commit `ab` measured beside it (same-job A/B), if given."""
        args = [
            f"--rootdir={rootdir}",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--perfguard",
            "--perfguard-compare=none" if ab is None else f"--perfguard-ab={ab}",
            "--perfguard-confirm=0",
            "--perfguard-progress=no",
            "--perfguard-full",  # it measures the items it is given, not a selection of them
            "--perfguard-record=no",  # its parent records (an A/B worker: when told to)
        ]
        for opt in OPTIONS:
            if not opt.child or (opt.child == "ab" and ab is None):
                continue
            value = repeats if opt.field == "repeats" else getattr(self, opt.field)
            if opt.child == "flag" and not self.sources.get(opt.name, "").startswith("--"):
                continue  # from the ini or the markers, which the child reads itself
            if opt.switch:
                args.extend([opt.flag] if value else [])
            elif value is not None:
                text = ",".join(value) if isinstance(value, tuple) else str(value)
                args.append(f"{opt.flag}={text}")
        return args

    def guarded(self) -> dict[str, Any]:
        """The session's values of the settings a pull request may not loosen for its own
        verdict (`perfguard.stats.bars`: the run's, and the items' defaults)."""
        from perfguard.settings import GUARDED_ITEM, GUARDED_RUN

        return {
            name: getattr(self, name)
            for name in (*GUARDED_RUN, *GUARDED_ITEM)
            if name in OPTION_FIELDS
        }

    def recorded(self) -> dict[str, Any]:
        """The settings a results file records (the table's `recorded` rows that are set)."""
        out: dict[str, Any] = {}
        for opt in OPTIONS:
            value = getattr(self, opt.field)
            if opt.recorded and value is not None:
                out[opt.field] = opt.record_as.format(*value) if opt.record_as else value
        return out


def _shard(value: Any, source: str, opt: Setting, root: Path) -> tuple[int, int] | None:
    if not value:
        return None
    k, sep, n = str(value).partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = (0, 0)
    if not sep or not 1 <= shard[0] <= shard[1]:
        raise pytest.UsageError(f"{source}: expected K/N with 1 <= K <= N, got {value!r}")
    return shard


def _instructions(value: Any, source: str, opt: Setting, root: Path) -> tuple[str, ...]:
    if not value:
        return ()
    from perfguard.measure.callgrind import parse_modes

    try:
        return parse_modes(str(value))
    except ValueError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def _raw(config: pytest.Config, opt: Setting) -> tuple[Any, str]:
    value = config.getoption(opt.flag)
    if value is not None:
        return value, opt.flag
    ini = config.getini(opt.ini)
    if opt.switch:
        return bool(ini), f"ini {opt.ini}"
    text = str(ini).strip()
    if text:
        return text, f"ini {opt.ini}"
    return opt.default, "default"


def _checked(value: Any, source: str, opt: Setting, root: Path) -> Any:
    """A value whose check is the table's own (perfguard.bounds): a number within its bounds,
    a device, globs."""
    return check(opt, value, source, text=True, error=pytest.UsageError)


def _choice(value: Any, source: str, opt: Setting, root: Path) -> str:
    if value not in opt.choices:
        raise pytest.UsageError(f"{source}: must be one of {', '.join(opt.choices)}, got {value!r}")
    return str(value)


def _machine(value: Any, source: str, opt: Setting, root: Path) -> str | None:
    """The machine key names a folder of the baselines: no path out of it."""
    if not value:
        return None
    from perfguard.store.baselines import machine_problem

    problem = machine_problem(str(value))
    if problem:
        raise pytest.UsageError(f"{source}: {problem}")
    return str(value)


def _variants(value: Any, source: str, opt: Setting, root: Path) -> tuple[str, ...] | None:
    if not value:
        return None
    try:
        variants = parse_variant_list(str(value))
    except UnknownVariantError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None
    if not variants:
        raise pytest.UsageError(f"{source}: no variant names in {value!r}")
    return variants


def _path(value: Any, source: str, opt: Setting, root: Path) -> Path | None:
    """A path under the rootdir; the report's default is `reports/perfguard.md`."""
    if not value:
        return None if opt.optional else root / "reports" / "perfguard.md"
    return root / str(value)


def _location(value: Any, source: str, opt: Setting, root: Path) -> Path | str:
    """The baseline folder under the rootdir, or an object store's URL (checked that its
    client is installed by `_check_store`, in the sessions that open the store)."""
    from perfguard.store.location import location

    where = location(str(value or "baselines"))
    return root / where if isinstance(where, Path) else where


def _check_store(where: Path | str, flag: str) -> None:
    """An object store's client is installed: a missing one is a usage error before
    anything is measured. Other sessions (plain pytest, a measuring worker) never open the
    store, and do not start its client (half a second)."""
    from perfguard.store.objects import ObjectStore, ObjectStoreError

    if isinstance(where, str):
        try:
            ObjectStore(where)
        except ObjectStoreError as exc:
            raise pytest.UsageError(f"{flag}: {exc}") from None


Reader = Callable[[Any, str, Setting, Path], Any]
READERS: Mapping[str, Reader] = {
    "text": lambda value, source, opt, root: str(value),
    "switch": lambda value, source, opt, root: bool(value),
    "number": _checked,
    "choice": _choice,
    "device": _checked,
    "globs": _checked,
    "machine": _machine,
    "shard": _shard,
    "instructions": _instructions,
    "variants": _variants,
    "path": _path,
    "location": _location,
    "ab": lambda value, source, opt, root: str(value) if value else None,
}
"""How a setting's raw value (from the command line, the ini file or its default) becomes
its attribute, by the table's `read`; a bad value is a usage error naming its source."""


def _read(opt: Setting, value: Any, source: str, root: Path) -> Any:
    if opt.optional and value in (None, ""):
        return None
    return READERS[opt.read](value, source, opt, root)


def _refuse_conflicts(options: Options, sources: Mapping[str, str]) -> None:
    """Options that make no sense together, or alone: a usage error, before measuring."""
    if options.save_replace and not options.save:
        raise pytest.UsageError(
            "--perfguard-save-replace says how --perfguard-save stores the baseline; it saves "
            "nothing alone: add --perfguard-save"
        )
    if options.save_unpaired and not options.save and sources["save_unpaired"].startswith("--"):
        raise pytest.UsageError(
            "--perfguard-save-unpaired says how --perfguard-save measures; it saves nothing "
            "alone: add --perfguard-save"
        )
    if options.ab_env and (options.ab is not None or options.save):
        other = sources["ab"] if options.ab is not None else "--perfguard-save"
        raise pytest.UsageError(
            f"--perfguard-ab-env measures this tree in two environments; {other} measures "
            "two commits: use one (the base commit in another environment is "
            "--perfguard-base-env)"
        )
    base_env = None if options.base_env in ("auto", "same") else options.base_env
    for path, source in ((base_env, sources["base_env"]), (options.ab_env, sources["ab_env"])):
        if path:  # an environment's python, or its folder
            from perfguard.environments import EnvironmentChoiceError, interpreter

            try:
                interpreter(path, source)
            except EnvironmentChoiceError as exc:
                raise pytest.UsageError(str(exc)) from None
    if options.ab is not None and sources["compare"] == "--perfguard-compare":
        raise pytest.UsageError(
            f"{sources['ab']} and --perfguard-compare choose two different baselines; use one"
        )


OPTION_FIELDS = frozenset(opt.field for opt in OPTIONS)


def configured(config: pytest.Config, root: Path) -> dict[str, Any]:
    """The guarded settings as this tree's ini file (or the default) sets them, whatever the
    command line says: what an A/B base worker reports of its tree (both workers are given
    the driver's command line; the base's own file is what a change would have loosened)."""
    from perfguard.settings import GUARDED_ITEM, GUARDED_RUN

    out: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.field not in (*GUARDED_RUN, *GUARDED_ITEM):
            continue
        raw = config.getini(opt.ini)
        text = str(raw).strip() if not opt.switch else raw
        value, source = (text, f"ini {opt.ini}") if text else (opt.default, "default")
        try:
            out[opt.field] = _read(opt, value, source, root)
        except pytest.UsageError:
            continue  # a value its own session refuses: it judges nothing
    return out


def read_options(config: pytest.Config) -> Options:
    """Read and validate every option of the table; a bad value is a usage error naming
    where it came from (the flag, the ini key, or the default)."""
    root = Path(config.rootpath)
    try:
        orders = from_environment()
    except OrdersError as exc:
        raise pytest.UsageError(f"perfguard: {exc} (a child session of another version?)") from None
    worker = orders.worker
    enabled = bool(config.getoption("--perfguard"))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        value, sources[opt.name] = _raw(config, opt)
        values[opt.field] = _read(opt, value, sources[opt.name], root)
    if worker:  # a worker measures one side; the driver compares
        values["ab"] = None
    options = Options(enabled=enabled, sources=sources, worker=worker, orders=orders, **values)
    _refuse_conflicts(options, sources)
    opens_store = options.compare != "none" or options.save or options.ab is not None
    if enabled and not worker and opens_store:
        _check_store(options.baseline_dir, BY_NAME["baseline_dir"].flag)
    return options


PARENT = "HEAD^"
"""The base of main's paired run (`--perfguard-save`): HEAD's first parent."""


def paired_save(root: Path, options: Options) -> tuple[Options, str | None]:
    """A saving session's options: measuring HEAD beside its first parent (same-job A/B),
    unless the session chose its comparison itself (`--perfguard-ab`, `--perfguard-compare`,
    `--perfguard-save-unpaired`); and, where the checkout cannot, why HEAD is measured alone
    (None where nothing needs saying)."""
    if not options.enabled or options.worker or not options.save:
        return options, None
    if options.ab is not None or options.compare != "auto" or options.save_unpaired:
        return options, None
    from perfguard.git import GitError, first_parent

    try:
        parent, why = first_parent(root)
    except GitError:  # not a usable checkout: the save refuses and says why
        return options, None
    if parent is None:
        return options, (
            f"--perfguard-save: {why}; HEAD was measured alone and compared with the stored "
            "baseline (no paired change stored)"
        )
    return replace(options, ab=PARENT), None


def default_options(root: Path, **given: Any) -> Options:
    """The options of a session with every setting at its default, but `given` (tests)."""
    values = {opt.field: _read(opt, opt.default, "default", root) for opt in OPTIONS}
    facts = {"enabled": True, "sources": {}, "worker": False}
    return Options(**{**facts, **values, **given})


def trace_dir(options: Options) -> Path:
    """Where this session's Chrome traces go: beside the report, or where the session that
    started this process (A/B driver, confirmation) asked."""
    given = options.orders.traces
    return Path(given) if given else options.report.parent / "traces"
