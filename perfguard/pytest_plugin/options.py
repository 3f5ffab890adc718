"""Command-line and ini options, read and checked; they are declared in perfguard.settings.

Precedence: command line > ini > default; the `@pytest.mark.perfguard(...)` marker overrides
per test where it has a key for it (variants, thresholds, budget, drift tolerance).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from perfguard.ab.channel import ENV_ADDRESS, ENV_TRACES
from perfguard.settings import DEVICE, ENABLE_HELP, Setting
from perfguard.settings import OPTIONS as SETTINGS_OPTIONS
from perfguard.variants.spec import UnknownVariantError, parse_variant_list

OPTIONS: tuple[Setting, ...] = SETTINGS_OPTIONS
"""The options and ini keys, from the one table of settings (perfguard.settings)."""


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfguard", "performance regression testing of PyTorch models")
    group.addoption("--perfguard", action="store_true", default=False, help=ENABLE_HELP)
    for opt in OPTIONS:
        if opt.name == "ab":  # a bare --perfguard-ab means REF=auto
            group.addoption(
                opt.flag,
                action="store",
                nargs="?",
                const="auto",
                default=None,
                metavar=opt.metavar,
                help=opt.full_help,
            )
            parser.addini(opt.ini, opt.full_help, type="string", default="")
        elif opt.switch:
            group.addoption(opt.flag, action="store_true", default=None, help=opt.full_help)
            parser.addini(opt.ini, opt.full_help, type="bool", default=bool(opt.default))
        else:
            group.addoption(
                opt.flag, action="store", default=None, metavar=opt.metavar, help=opt.full_help
            )
            parser.addini(
                opt.ini,
                opt.full_help,
                type="string",
                default=opt.default if opt.default is not None else "",
            )


@dataclass(frozen=True)
class Options:
    """The resolved options of a session; `source` says where each value came from."""

    enabled: bool
    variants: tuple[str, ...] | None  # None: the built-in default, unless a marker says
    variants_source: str
    baseline_dir: Path | str  # a folder, or an object store's URL
    machine: str | None
    save: bool
    allow_dirty: bool
    compare: str
    report: Path
    json: Path | None
    fail_on: str
    budget_s: float
    repeats: int
    device: str
    threads: int | None
    min_change_pct: float
    gate_p99: bool
    seed: int
    main_branch: str
    baseline_depth: int
    progress: str
    shard: tuple[int, int] | None = None  # (K, N), 1-based
    unhealthy: str = "warn"
    ab_min_change_pct: float = 5.0
    ab: str | None = None  # same-job A/B against this revision ("auto": find it)
    worker: bool = False  # this session is an A/B worker, driven from another session
    confirm: int = 1  # re-measures of a flagged item (stored-baseline mode)
    confirm_gap_s: float = 60.0  # least time between an item's measurement and its re-measure
    save_replace: bool = False  # replace HEAD's stored baseline whole, not update it
    flush_l2: bool = False  # CUDA: evict L2 before each timed call
    instructions: tuple[str, ...] = ()  # callgrind regions to count: compile, forward

    def measuring_args(self, rootdir: Path, repeats: int, ab: str | None = None) -> list[str]:
        """The pytest command line of a child session that measures as this one does
        (A/B workers, confirmation re-measures): it never saves or confirms, and compares
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
            f"--perfguard-budget={self.budget_s}",
            f"--perfguard-repeats={repeats}",
            f"--perfguard-device={self.device}",
            f"--perfguard-seed={self.seed}",
        ]
        if ab is not None:  # it decides when its pairs stop, by this session's thresholds
            args.append(f"--perfguard-min-change={self.min_change_pct}")
            args.append(f"--perfguard-ab-min-change={self.ab_min_change_pct}")
        if self.threads is not None:
            args.append(f"--perfguard-threads={self.threads}")
        if self.flush_l2:
            args.append("--perfguard-flush-l2")
        if self.variants is not None and self.variants_source.startswith("--"):
            args.append(f"--perfguard-variants={','.join(self.variants)}")
        return args


def _shard(config: pytest.Config, opt: Setting) -> tuple[int, int] | None:
    value, source = _raw(config, opt)
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


def _instructions(config: pytest.Config, opt: Setting) -> tuple[str, ...]:
    from perfguard.measure.callgrind import parse_modes

    value, source = _raw(config, opt)
    if not value:
        return ()
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


def _number(config: pytest.Config, opt: Setting, kind: type, low: float) -> Any:
    value, source = _raw(config, opt)
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"{source}: expected a {'whole ' if kind is int else ''}number, got {value!r}"
        ) from None
    if not math.isfinite(number):
        raise pytest.UsageError(f"{source}: expected a finite number, got {value!r}")
    if number < low:
        raise pytest.UsageError(f"{source}: must be at least {low}, got {value!r}")
    return number


def _choice(config: pytest.Config, opt: Setting, choices: tuple[str, ...]) -> str:
    value, source = _raw(config, opt)
    if value not in choices:
        raise pytest.UsageError(f"{source}: must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _device(config: pytest.Config, opt: Setting) -> str:
    value, source = _raw(config, opt)
    if not DEVICE.fullmatch(str(value)):
        raise pytest.UsageError(f"{source}: must be 'auto', 'cpu' or 'cuda[:N]', got {value!r}")
    return str(value)


def _machine(config: pytest.Config, opt: Setting) -> str | None:
    """The machine key names a folder of the baselines: no path out of it."""
    from perfguard.store.baselines import machine_problem

    value, source = _raw(config, opt)
    if not value:
        return None
    problem = machine_problem(str(value))
    if problem:
        raise pytest.UsageError(f"{source}: {problem}")
    return str(value)


def _baseline_location(root: Path, value: object, flag: str, check: bool) -> Path | str:
    """The baseline folder under the rootdir, or an object store's URL; with `check` (a
    session that measures and compares), checked that its client is installed: a missing one
    is a usage error before anything is measured. Other sessions (plain pytest, a measuring
    worker) never open the store, and do not start its client (half a second)."""
    from perfguard.store.location import location
    from perfguard.store.objects import ObjectStore, ObjectStoreError

    where = location(str(value or "baselines"))
    if isinstance(where, Path):
        return root / where
    if not check:
        return where
    try:
        ObjectStore(where)
    except ObjectStoreError as exc:
        raise pytest.UsageError(f"{flag}: {exc}") from None
    return where


def _refuse_conflicts(config: Any, by_name: Mapping[str, Setting], ab_source: str | None) -> None:
    """Options that make no sense together, or alone: a usage error, before measuring."""
    if _raw(config, by_name["save_replace"])[0] and not _raw(config, by_name["save"])[0]:
        raise pytest.UsageError(
            "--perfguard-save-replace says how --perfguard-save stores the baseline; it saves "
            "nothing alone: add --perfguard-save"
        )
    if ab_source is not None and config.getoption("--perfguard-compare") is not None:
        raise pytest.UsageError(
            f"{ab_source} and --perfguard-compare choose two different baselines; use one"
        )


def read_options(config: pytest.Config) -> Options:
    """Read and validate every option; a bad value is a usage error naming where it came from."""
    by_name = {o.name: o for o in OPTIONS}
    root = Path(config.rootpath)
    variants_raw, variants_source = _raw(config, by_name["variants"])
    variants = None
    if variants_raw:
        try:
            variants = parse_variant_list(str(variants_raw))
        except UnknownVariantError as exc:
            raise pytest.UsageError(f"{variants_source}: {exc}") from None
        if not variants:
            raise pytest.UsageError(f"{variants_source}: no variant names in {variants_raw!r}")
    baseline_dir, _ = _raw(config, by_name["baseline_dir"])
    report, _ = _raw(config, by_name["report"])
    json_path, _ = _raw(config, by_name["json"])
    threads_raw, _ = _raw(config, by_name["threads"])
    worker = bool(os.environ.get(ENV_ADDRESS))
    enabled = bool(config.getoption("--perfguard"))
    ab_raw, ab_source = _raw(config, by_name["ab"])
    ab = None if worker or not ab_raw else str(ab_raw)
    compare = str(_raw(config, by_name["compare"])[0])
    _refuse_conflicts(config, by_name, ab_source if ab is not None else None)
    return Options(
        enabled=enabled,
        variants=variants,
        variants_source=variants_source,
        baseline_dir=_baseline_location(
            root, baseline_dir, by_name["baseline_dir"].flag, check=enabled and not worker
        ),
        machine=_machine(config, by_name["machine"]),
        save=bool(_raw(config, by_name["save"])[0]),
        allow_dirty=bool(_raw(config, by_name["allow_dirty"])[0]),
        compare=compare,
        report=root / (report or "reports/perfguard.md"),
        json=root / json_path if json_path else None,
        fail_on=_choice(config, by_name["fail_on"], ("regression", "never")),
        budget_s=_number(config, by_name["budget"], float, 0.001),
        repeats=_number(config, by_name["repeats"], int, 1),
        device=_device(config, by_name["device"]),
        threads=None if threads_raw in (None, "") else _number(config, by_name["threads"], int, 1),
        min_change_pct=_number(config, by_name["min_change"], float, 0.0),
        gate_p99=bool(_raw(config, by_name["gate_p99"])[0]),
        seed=_number(config, by_name["seed"], int, 0),
        main_branch=str(_raw(config, by_name["main_branch"])[0]),
        baseline_depth=_number(config, by_name["baseline_depth"], int, 0),
        progress=_choice(config, by_name["progress"], ("auto", "yes", "no")),
        shard=_shard(config, by_name["shard"]),
        unhealthy=_choice(config, by_name["unhealthy"], ("warn", "inconclusive")),
        ab=ab,
        ab_min_change_pct=_number(config, by_name["ab_min_change"], float, 0.0),
        worker=worker,
        confirm=_number(config, by_name["confirm"], int, 0),
        confirm_gap_s=_number(config, by_name["confirm_gap"], float, 0.0),
        save_replace=bool(_raw(config, by_name["save_replace"])[0]),
        flush_l2=bool(_raw(config, by_name["flush_l2"])[0]),
        instructions=_instructions(config, by_name["instructions"]),
    )


def trace_dir(options: Options) -> Path:
    """Where this session's Chrome traces go: beside the report, or where the session that
    started this process (A/B driver, confirmation) asked."""
    given = os.environ.get(ENV_TRACES)
    return Path(given) if given else options.report.parent / "traces"
