"""Every setting in one table: command-line options, ini keys, marker keys, help, defaults.

The pytest options and ini keys, how each is read and checked into the session's `Options`
(its `read` kind), the command line of the child sessions that measure as a session does
(`child`) and what a results file records of them (`recorded`)
(`perfguard.pytest_plugin.options`); the marker's keys and their checks
(`perfguard.pytest_plugin.marker`), the thresholds' defaults
(`perfguard.stats.verdicts.Thresholds`) and the options table of docs/reference.md are all
made from `SETTINGS`. A new setting is a row here and the code that uses it.
`tools/settings_table.py` writes the docs' table from it, and a test fails when the page and
this module disagree. Plain data: no pytest here.
"""

# long module: the one table of every setting, on purpose: one place to read and change them

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfguard.bounds import Bounds
from perfguard.variants.spec import DEFAULT_VARIANTS


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One setting. `name` is the ini key's suffix (`perfguard_<name>`); the option is
    `--perfguard-<name with dashes>` unless `option` is False (a marker key only)."""

    name: str
    flag: str = ""  # the command-line option, written out: users and docs search for it
    help: str  # the help of the option and the ini key, without the default
    default: Any = None  # as the ini file or the command line spells it; None: none
    shown_default: str | None = None  # how the help shows a default that is not a value
    metavar: str | None = None  # None: a switch (store_true) or, without option, no flag
    option: bool = True
    marker: str | None = None  # the marker key that overrides it per test
    marker_types: tuple[type, ...] = ()
    marker_what: str = ""  # what the marker's value must be, for its error message
    doc: str | None = None  # the docs table's longer text (else `help`)
    threshold: bool = False  # a verdict rule (perfguard.stats.verdicts.Thresholds)
    # how the session reads it (perfguard.pytest_plugin.options): "text", "switch", "number"
    # (within `bounds`), "choice" (one of `choices`), or a reader of its own ("variants",
    # "location", "machine", "path", "device", "shard", "instructions", "ab", "globs"); a
    # marker-only row's "shapes" or "drift" names its check (perfguard.bounds)
    read: str = "text"
    # the numbers it takes, checked by perfguard.bounds for every source (option, ini, marker,
    # perfguard.run's options, a results file); None: not a number
    bounds: Bounds | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False  # empty means None (not the default)
    attribute: str = ""  # the session options' attribute: `name` unless given
    # passed on to the sessions that measure as this one does: "all" of them, "ab" (the A/B
    # workers, which decide when their pairs stop by this session's thresholds), or "flag"
    # (only when this session had it from its command line: a child reads the ini file and
    # the markers itself)
    child: str = ""
    recorded: bool = False  # written into the run's settings (the results file)
    record_as: str = ""  # how the results file writes a value of several parts ("{0}/{1}")
    bare: str | None = None  # what the flag given without a value means (an optional value)
    # which way a value softens or withholds a verdict, when a pull request changes it (it is
    # then judged by the base's value: perfguard.stats.bars): "higher", "lower", "later" (a
    # choice further along `choices`), "changed" (any change that is not stricter in every
    # part: a drift tolerance's); "" for a setting that cannot soften one
    loosens: str = ""
    # where a loosened value is put back (a setting that takes power from the verdicts, not
    # a verdict rule's threshold): "run", at the finish (a setting of the whole run); "item",
    # before each item is measured (the session's, its marker's and its call's value)
    guard: str = ""

    @property
    def ini(self) -> str:
        return f"perfguard_{self.name}"

    @property
    def field(self) -> str:
        """The attribute of the session's options that holds it."""
        return self.attribute or self.name

    @property
    def switch(self) -> bool:
        return self.option and self.metavar is None

    @property
    def default_text(self) -> str | None:
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None or self.default is False:
            return None
        return str(self.default)

    @property
    def full_help(self) -> str:
        shown = self.default_text
        return f"{self.help} (default: {shown})" if shown else self.help


PCT = ((int, float), "a number of percent")

SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="variants",
        flag="--perfguard-variants",
        help="comma-separated variant names for every perf test",
        shown_default=",".join(DEFAULT_VARIANTS),
        metavar="LIST",
        marker="variants",
        marker_types=(list, tuple),
        marker_what="a list of variant names",
        read="variants",
        child="flag",
    ),
    Setting(
        name="baseline_dir",
        flag="--perfguard-baseline-dir",
        help="where baselines live: a folder, or an object store's URL (s3://bucket/prefix, "
        "with perfguard[s3])",
        shown_default="baselines under the rootdir",
        metavar="DIR",
        read="location",
    ),
    Setting(
        name="machine",
        flag="--perfguard-machine",
        help="machine key baselines are filed under",
        shown_default="from the GPU or CPU model",
        metavar="NAME",
        read="machine",
    ),
    Setting(
        name="save",
        flag="--perfguard-save",
        help="store the results as the baseline of the current commit (HEAD); where the "
        "checkout has HEAD's first parent, HEAD is measured beside it (same-job A/B) and the "
        "paired change is stored with the baseline",
        default=False,
        doc="store results as the baseline of HEAD (refuses a dirty tree); a baseline HEAD "
        'already has is updated, never shrunk ([ci.md](ci.md), "A save never loses a '
        "baseline\"). Where the checkout has HEAD's first parent, HEAD is measured beside it "
        "(same-job A/B) and the paired change is stored with the baseline "
        '([history.md](history.md), "Main\'s record: pairs")',
        read="switch",
    ),
    Setting(
        name="save_replace",
        flag="--perfguard-save-replace",
        help="with --perfguard-save: replace HEAD's stored baseline whole, instead of "
        "updating it with what this session measured (keeping the results of tests it did "
        "not run)",
        default=False,
        read="switch",
    ),
    Setting(
        name="save_unpaired",
        flag="--perfguard-save-unpaired",
        help="with --perfguard-save: measure HEAD alone and compare it with the stored "
        "baseline, instead of measuring it beside its first parent (same-job A/B) and storing "
        "the paired change with its baseline",
        doc="with `--perfguard-save`: measure HEAD alone and compare it with the stored "
        "baseline. By default a saving session whose checkout has HEAD's first parent "
        "measures HEAD beside it (same-job A/B, as a pull request is measured) and stores the "
        "paired change with the baseline: the gating verdict of main's run, and what "
        "`perfguard history` finds steps in. `--perfguard-compare` or `--perfguard-ab` also "
        "choose the comparison themselves",
        default=False,
        read="switch",
    ),
    Setting(
        name="full",
        flag="--perfguard-full",
        help="on a pull request, measure every perf item, not only those the change can affect",
        doc="on a pull request, measure every perf item, not only those the change can affect "
        "(a partial run skips a perf test only when the base's record of what it ran says "
        "nothing it ran changed; main's run, a schedule and a manual run measure everything "
        'and record: [ci.md](ci.md), "Partial runs")',
        default=False,
        read="switch",
    ),
    Setting(
        name="record",
        flag="--perfguard-record",
        help="record what each perf test runs (the code blocks it executes and the files it "
        "opens, from collection to one untimed call of its work), stored with the baseline: "
        "what a pull request's partial run selects against. 'auto' records on a full run "
        "(--perfguard-save, --perfguard-full, a push or scheduled run)",
        doc="record what each perf test runs (the code blocks it executes, the files it opens, "
        "the folders it lists and the installed packages it runs, from collection to its work "
        "run untimed as timed; never a timed call, beside a coverage session the user runs), "
        "stored with the baseline: a pull request's partial run measures a test "
        "unless this record says nothing it ran changed. `auto` records on a full run "
        "(`--perfguard-save`, `--perfguard-full`, a push or scheduled run) ([ci.md](ci.md), "
        '"Partial runs")',
        default="auto",
        metavar="auto|yes|no",
        read="choice",
        choices=("auto", "yes", "no"),
    ),
    Setting(
        name="depends",
        flag="--perfguard-depends",
        help="globs of files (rootdir-relative) every perf test reads besides its imports "
        "(data, configs, native code): a change to one measures every test; the marker key "
        "`depends` declares those of one test",
        metavar="GLOBS",
        marker="depends",
        marker_types=(list, tuple),
        marker_what="a list of globs of files (rootdir-relative) the test reads besides its "
        "imports",
        read="globs",
        optional=True,
    ),
    Setting(
        name="compile_cache",
        flag="--perfguard-compile-cache",
        help="a folder of main's compiled artifacts (torch.compiler's cache artifacts): main's "
        "run writes each compiled item's after its cold compile; the base commit's side in "
        "A/B and confirmation rounds load them (this tree's cold compile is always measured "
        "in a fresh cache)",
        metavar="DIR",
        read="path",
        optional=True,
        child="all",
    ),
    Setting(
        name="allow_dirty",
        flag="--perfguard-allow-dirty",
        help="allow --perfguard-save on a working tree with uncommitted changes",
        default=False,
        read="switch",
    ),
    Setting(
        name="compare",
        flag="--perfguard-compare",
        help="compare against the baseline of git revision REF; 'auto' picks the base commit, "
        "'none' disables comparison",
        default="auto",
        metavar="REF",
    ),
    Setting(
        name="report",
        flag="--perfguard-report",
        help="Markdown report path",
        shown_default="reports/perfguard.md under the rootdir",
        metavar="PATH",
        read="path",
    ),
    Setting(
        name="json",
        flag="--perfguard-json",
        help="write machine-readable results (the results JSON) to this path",
        metavar="PATH",
        read="path",
        optional=True,
    ),
    Setting(
        name="fail_on",
        guard="run",
        loosens="later",
        flag="--perfguard-fail-on",
        help="'regression': exit non-zero when a verdict is regression; 'never'",
        default="regression",
        metavar="regression|never",
        read="choice",
        choices=("regression", "never"),
        recorded=True,
    ),
    Setting(
        name="budget",
        guard="item",
        loosens="lower",
        flag="--perfguard-budget",
        help="seconds of sampling per test item",
        default="2.0",
        metavar="SECONDS",
        marker="budget_s",
        marker_types=(int, float),
        marker_what="seconds of sampling",
        read="number",
        bounds=Bounds(low=0.001, high=3600),
        attribute="budget_s",
        child="all",
        recorded=True,
    ),
    Setting(
        name="repeats",
        guard="item",
        loosens="lower",
        flag="--perfguard-repeats",
        help="independent repeat blocks per item",
        default="5",
        metavar="N",
        marker="repeats",
        marker_types=(int,),
        marker_what="a whole number of repeats",
        read="number",
        bounds=Bounds(low=1, high=1000, whole=True),
        child="all",
        recorded=True,
    ),
    Setting(
        name="timeout",
        flag="--perfguard-timeout",
        help="the most one perf item may take, all its phases together (build, compile, "
        "warm-up, sampling, counters); past it the item is an error naming the limit and "
        "the session goes on",
        default="1200",
        metavar="SECONDS",
        marker="timeout_s",
        marker_types=(int, float),
        marker_what="seconds for the whole item",
        read="number",
        bounds=Bounds(low=1, high=86400),
        attribute="timeout_s",
        child="all",
        recorded=True,
    ),
    Setting(
        name="import_timeout",
        flag="--perfguard-import-timeout",
        help="the most importing one test module may take (its imports, torch's included); "
        "past it the module is a collection error naming the limit. It never ends torch's "
        "own import halfway (a signal there waits until it is done), and an item's "
        "--perfguard-timeout does not bound it",
        default="600",
        metavar="SECONDS",
        read="number",
        bounds=Bounds(low=1, high=86400),
        attribute="import_timeout_s",
        child="all",
    ),
    Setting(
        name="device",
        flag="--perfguard-device",
        help="'auto' (CUDA when present), 'cpu' or 'cuda[:N]'",
        default="auto",
        metavar="DEVICE",
        marker="device",
        marker_types=(str,),
        marker_what="'auto', 'cpu' or 'cuda'",
        read="device",
        child="all",
    ),
    Setting(
        name="threads",
        flag="--perfguard-threads",
        help="torch intra-op threads while measuring",
        shown_default="torch's own",
        metavar="N",
        marker="threads",
        marker_types=(int,),
        marker_what="a whole number of threads",
        read="number",
        bounds=Bounds(low=1, high=4096, whole=True),
        optional=True,
        child="all",
    ),
    Setting(
        name="flush_l2",
        flag="--perfguard-flush-l2",
        help="CUDA: evict the L2 cache before each timed call, as triton's do_bench does "
        "(cold-cache latency)",
        default=False,
        shown_default="hot, as a serving loop runs",
        read="switch",
        child="all",
    ),
    Setting(
        name="seed",
        flag="--perfguard-seed",
        help="torch, numpy and random seed set before each perf item, so random weights match",
        default="0",
        metavar="N",
        read="number",
        bounds=Bounds(low=0, high=2**32 - 1, whole=True),  # numpy's seeds
        child="all",
        recorded=True,
    ),
    Setting(
        name="min_change",
        loosens="higher",
        flag="--perfguard-min-change",
        help=(
            "smallest latency change, in percent, that can be a regression; in same-job A/B,"
            " the change an unchanged verdict rules out"
        ),
        default="10",
        metavar="PCT",
        marker="min_change_pct",
        marker_types=PCT[0],
        marker_what=PCT[1],
        threshold=True,
        read="number",
        bounds=Bounds(low=0, high=1000),  # past it a bar is no bar
        attribute="min_change_pct",
        child="ab",
    ),
    Setting(
        name="gate_p99",
        loosens="lower",
        flag="--perfguard-gate-p99",
        help="let p99 latency gate the verdict",
        default=False,
        shown_default="reported only",
        marker="gate_p99",
        marker_types=(bool,),
        marker_what="True or False",
        threshold=True,
        read="switch",
    ),
    Setting(
        name="gate_kernels",
        loosens="lower",
        flag="--perfguard-gate-kernels",
        help="let per-operator and per-kernel time verdicts gate",
        default=False,
        shown_default="reported only",
        marker="gate_kernels",
        marker_types=(bool,),
        marker_what="True or False (operator and kernel time verdicts gate)",
        threshold=True,
        read="switch",
    ),
    Setting(
        name="op_min_change",
        loosens="higher",
        flag="--perfguard-op-min-change",
        help="smallest change of one operator's or kernel's time, in percent, that can be "
        "called (perfguard calibrate advises it per item)",
        default="10",
        metavar="PCT",
        marker="op_min_change_pct",
        marker_types=PCT[0],
        marker_what="a number of percent (an operator's or kernel's time)",
        threshold=True,
        read="number",
        bounds=Bounds(low=0, high=1000),
        attribute="op_min_change_pct",
    ),
    Setting(
        name="op_blocks",
        guard="item",
        loosens="lower",
        flag="--perfguard-op-blocks",
        help="profiled blocks per item after the timed ones, which time each operator and "
        "kernel for their own verdicts (0: none)",
        default="8",
        metavar="N",
        marker="op_blocks",
        marker_types=(int,),
        marker_what="a whole number of blocks",
        read="number",
        bounds=Bounds(low=0, high=100, whole=True),
        child="all",
        recorded=True,
    ),
    Setting(
        name="main_branch",
        flag="--perfguard-main-branch",
        help="the main branch for the merge-base lookup",
        default="main",
        metavar="NAME",
    ),
    Setting(
        name="baseline_depth",
        flag="--perfguard-baseline-depth",
        help="how many first-parent ancestors auto looks back",
        default="50",
        metavar="N",
        read="number",
        bounds=Bounds(low=1, high=10000, whole=True),
    ),
    Setting(
        name="progress",
        flag="--perfguard-progress",
        help="show measuring progress lines",
        default="auto",
        metavar="auto|yes|no",
        read="choice",
        choices=("auto", "yes", "no"),
    ),
    Setting(
        name="shard",
        flag="--perfguard-shard",
        help="measure only the K-th of N shards of the perf tests (1-based; the variants of "
        "a test stay together); join the shards' --perfguard-json files with perfguard merge",
        metavar="K/N",
        read="shard",
        recorded=True,
        record_as="{0}/{1}",
    ),
    Setting(
        name="confirm",
        guard="run",
        loosens="higher",
        flag="--perfguard-confirm",
        help="re-measure each item with a latency regression or improvement N times (0: "
        "off); the verdict stands only if every re-measure shows it again. Against a stored "
        "baseline: beside the base commit (same-job A/B) when the checkout has it, else in a "
        "fresh process, and beside the base commit, items whose median moved by the minimum "
        "change without a verdict are measured too, and take the paired verdict. In same-job "
        "A/B (--perfguard-ab): beside the base commit again, by a fresh pair of processes",
        default="1",
        metavar="N",
        read="number",
        bounds=Bounds(low=0, high=10, whole=True),
    ),
    Setting(
        name="confirm_gap",
        flag="--perfguard-confirm-gap",
        help="seconds at least between measuring an item and re-measuring it in a fresh "
        "process: a passing slowdown of the host must not hit both",
        default="60",
        metavar="SECONDS",
        read="number",
        bounds=Bounds(low=0, high=3600),
        attribute="confirm_gap_s",
    ),
    Setting(
        name="unhealthy",
        guard="run",
        loosens="later",
        flag="--perfguard-unhealthy",
        help="when runner health checks warn (busy GPU or CPU, clocks not locked, "
        "throttling): 'warn' notes it in the report; 'inconclusive' also withholds speed "
        "verdicts",
        default="warn",
        metavar="warn|inconclusive",
        read="choice",
        choices=("warn", "inconclusive"),
        recorded=True,
    ),
    Setting(
        name="ab",
        flag="--perfguard-ab",
        help="same-job A/B: measure git revision REF (without a value: the commit 'auto' "
        "compares with) in a worktree beside this tree, blocks interleaved, and compare "
        "paired",
        metavar="REF",
        doc="same-job A/B: measure REF (default: the commit `auto` compares with) beside this "
        'tree, interleaved ([method.md](method.md), "Same-job A/B")',
        read="ab",
        bare="auto",
        recorded=True,
    ),
    Setting(
        name="base_env",
        flag="--perfguard-base-env",
        help="same-job A/B: the environment the base side runs in. 'auto': when the change "
        "alters what gets installed (dependency tables, requirements, constraints and lock "
        "files), an environment built from the base's own files and cached by their hash; "
        "'same': this environment; or an existing environment's python (or folder)",
        default="auto",
        metavar="auto|same|PATH",
        doc="same-job A/B: the environment the base side runs in: `auto` builds one from the "
        "base's own files when the change alters what gets installed ([ci.md](ci.md), "
        '"Dependency bumps"), `same` keeps this one, a path names an existing environment\'s '
        "python",
        recorded=True,
        child="flag",
    ),
    Setting(
        name="install",
        flag="--perfguard-install",
        help="the command that installs the project into an environment perfguard builds "
        "(the base's, a bisected version's), run in that tree with the environment first on "
        "PATH, e.g. 'pip install -e .[dev]'; without it, the dependency files are read",
        metavar="COMMAND",
        optional=True,
        child="flag",
    ),
    Setting(
        name="env_cache",
        flag="--perfguard-env-cache",
        help="the folder of the environments perfguard builds, kept by the hash of what "
        "installs them (cache it in CI as the compile cache is)",
        shown_default="~/.cache/perfguard/environments",
        metavar="DIR",
        read="path",
        optional=True,
        child="flag",
    ),
    Setting(
        name="install_timeout",
        flag="--perfguard-install-timeout",
        help="the most building one environment may take; past it the install is ended and "
        "the base side is not measured (the run is incomplete)",
        default="1800",
        metavar="SECONDS",
        read="number",
        bounds=Bounds(low=1, high=86400),
        attribute="install_timeout_s",
        child="flag",
    ),
    Setting(
        name="ab_env",
        flag="--perfguard-ab-env",
        help="measure this tree in another environment (its python or folder) beside this "
        "one, paired as same-job A/B pairs the base commit: what a dependency's other "
        "version does to the models, before anyone opens the bump",
        metavar="PATH",
        optional=True,
        recorded=True,
    ),
    Setting(
        name="ab_min_change",
        loosens="higher",
        flag="--perfguard-ab-min-change",
        help="same-job A/B: smallest median latency change, in percent, that can be a regression "
        "(p95 and p99: twice that)",
        default="5",
        metavar="PCT",
        marker="ab_min_change_pct",
        marker_types=PCT[0],
        marker_what="a number of percent (same-job A/B)",
        threshold=True,
        read="number",
        bounds=Bounds(low=0, high=1000),
        attribute="ab_min_change_pct",
        child="ab",
    ),
    Setting(
        name="instructions",
        flag="--perfguard-instructions",
        help="also count instructions under valgrind's callgrind, each item in a process of "
        "its own after all timing (slow: about a minute per item; needs valgrind with its "
        "headers and a C compiler): 'compile', the cold compile of each compiled variant, or "
        "'compile,forward', and one warm call of every variant; a change past "
        "instructions_pct is a verdict",
        metavar="compile[,forward]",
        doc="also count instructions under valgrind's callgrind, each item in a process of "
        "its own after all timing: `compile`, the cold compile of each compiled variant; "
        "`forward`, one warm call of every variant (slow, about a minute per item; needs "
        'valgrind with its headers and a C compiler) ([method.md](method.md), "Instruction '
        'counts")',
        read="instructions",
    ),
    # marker keys only
    Setting(
        name="alpha",
        loosens="lower",
        help="the significance level of the latency tests",
        default=0.05,
        option=False,
        marker="alpha",
        marker_types=(float,),
        marker_what="a significance level between 0 and 1",
        threshold=True,
        bounds=Bounds(low=0, high=1, above=True, below=True),
    ),
    Setting(
        name="gate_ops",
        loosens="lower",
        help="let a change in the ATen operators or FLOPs of a call gate",
        default=False,
        shown_default="reported",
        option=False,
        marker="gate_ops",
        marker_types=(bool,),
        marker_what="True or False (operator-count and FLOP changes gate)",
        threshold=True,
    ),
    Setting(
        name="instructions_pct",
        loosens="higher",
        help="the tolerance of instruction counts, in percent",
        default=1.5,
        option=False,
        marker="instructions_pct",
        marker_types=PCT[0],
        marker_what="a number of percent (callgrind instruction counts)",
        threshold=True,
        bounds=Bounds(low=0, high=1000),
    ),
    Setting(
        name="memory_tolerance_pct",
        loosens="higher",
        help="the tolerance of peak memory, in percent",
        default=5.0,
        option=False,
        marker="memory_tolerance_pct",
        marker_types=PCT[0],
        marker_what=PCT[1],
        threshold=True,
        bounds=Bounds(low=0, high=1000),
    ),
    Setting(
        name="compile_ratio",
        loosens="higher",
        help="the compile-time ratio that is a regression",
        default=1.5,
        option=False,
        marker="compile_ratio",
        marker_types=(int, float),
        marker_what="a ratio above 1",
        threshold=True,
        bounds=Bounds(low=1, high=100, above=True),
    ),
    Setting(
        name="shapes",
        help="compile-dynamic: the shapes of the first input to measure it at, compiled once "
        "(e.g. [[1, 128], [8, 128]]); its recompiles across them are counted",
        option=False,
        marker="shapes",
        marker_types=(list, tuple),
        marker_what="a list of shapes, e.g. [[1, 128], [8, 128]]",
        read="shapes",
    ),
    Setting(
        name="drift_tolerance",
        guard="item",
        loosens="changed",
        help="the drift tolerance: a relative tolerance, or {class: tolerance}",
        option=False,
        marker="drift_tolerance",
        marker_types=(int, float, dict),
        marker_what="a relative tolerance, or {class: tolerance}",
        read="drift",
    ),
)

BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}
OPTIONS: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.option)
BY_FIELD: Mapping[str, Setting] = {s.field: s for s in SETTINGS}
MARKER_KEYS: Mapping[str, Setting] = {s.marker: s for s in SETTINGS if s.marker}
THRESHOLD_KEYS: tuple[str, ...] = tuple(s.marker for s in SETTINGS if s.threshold and s.marker)
GUARDED: Mapping[str, Setting] = {
    key: s for s in SETTINGS if s.loosens for key in {s.field, s.marker or s.field}
}
"""The settings a pull request may not loosen for its own verdict, by field and marker key."""
GUARDED_RUN: tuple[str, ...] = tuple(s.field for s in SETTINGS if s.guard == "run")
"""Settings of the whole run that withhold or soften a verdict: judged at the finish."""
GUARDED_ITEM: tuple[str, ...] = tuple(s.field for s in SETTINGS if s.guard == "item")
"""Settings of each item that take power from its measurement: judged before it is measured
(the session's value, its marker's and its call's: the strictest of those the base had)."""
RECORDED: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.recorded)
"""The settings a results file records."""


def threshold_default(key: str) -> Any:
    """The default of a verdict rule, by its marker key, as its type (a number or a bool)."""
    value = MARKER_KEYS[key].default
    if isinstance(value, bool):
        return value
    return float(value)


ENABLE_HELP = "measure perf tests (without it they are skipped)"


@dataclass(frozen=True)
class MarkerSettings:
    """A test's `@pytest.mark.perfguard(...)`, checked: its variants and its other keys."""

    variants: tuple[str, ...] | None
    options: Mapping[str, Any]

    @property
    def thresholds(self) -> dict[str, Any]:
        return {k: v for k, v in self.options.items() if k in THRESHOLD_KEYS}

    @property
    def guarded(self) -> dict[str, Any]:
        """The marker's values of the settings that take the power to see a slowdown."""
        return {k: self.options[k] for k in GUARDED_ITEM if k in self.options}


@dataclass(frozen=True)
class ItemSettings:
    """A perf test's settings: its marker, checked, merged with the session's options."""

    test: str  # the test function's node id (every variant and parameter of it)
    variants: tuple[str, ...]
    marker: MarkerSettings
    timeout_s: float  # the marker's `timeout_s`, else the session's `--perfguard-timeout`
    depends: tuple[str, ...] = ()  # the marker's globs of files the test reads
