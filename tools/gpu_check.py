"""make gpu-check: perfguard on a GPU, in stages that each fit one call of a lent machine.

    python3 tools/gpu_check.py [--steps env,cuda,figures,variants,autotune,study] [--out DIR]

(`make gpu-check` runs it with `GPU_CHECK_STEPS` and `GPU_CHECK_OUT`, default `$OUT` when set,
else `gpu-check/`.) On a CUDA machine with this tree. It pins nothing: it uses the machine's
own torch, triton, onnx and nvidia-ml-py, installs what the image lacks from wheels in `.whl/`
when they are there (`make gpu-wheels`), and perfguard itself from this tree, into a
temporary folder. Without CUDA it says so in one line and exits 2 (`--device cpu` rehearses
the stages on the CPU: how the tests check the staging, and where the time estimates in the
runner docs come from).

Each stage ends by itself within `--stage-seconds` (default 450: a 10-minute call with room
for the machine's start and the transfers); a step that would start after that is listed as
not run, with the command that runs it alone. What a stage writes goes into one archive,
`<stage>.tar.gz`, rewritten whole after every step (a kill loses only the step in flight),
and one line per step goes into `summary.txt`: at most 8 files for all seven stages, every
name plain. The `calibrate` stage is `perfguard calibrate` on the GPU-bound model and the demo
suite: the GPU's detection table in one call.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("env", "cuda", "figures", "variants", "autotune", "study", "calibrate")
AUTOTUNE = ("compile-max-autotune-no-cudagraphs", "compile-max-autotune")
"""The variants with the longest cold compiles (inductor tries kernel configurations): their
own stage."""
VARIANTS = (
    "eager",
    "amp-bf16",
    "amp-fp16",
    "int8-dynamic",
    "int8-weight-only",
    "prune-l1-unstructured",
    "prune-ln-structured",
    "onnxruntime",
    "compile-default",
    "compile-reduce-overhead",
)
"""The variants a GPU has measured before, quickest first, so a stage cut short has measured
the most."""
SERVING = ("channels-last", "fp8", "int4-weight-only", "tensorrt")
"""The variants serving teams ship, new and never run on a GPU: after the others in the
`variants` stage (fp8 needs an H100/H200-class GPU, tensorrt Torch-TensorRT or ONNX Runtime's
TensorRT provider; each skips with the reason where it cannot run)."""
NEWEST = ("compile-dynamic", "aot-inductor")
"""The variants no GPU has measured yet: in the `figures` stage, with the other new items."""
STUDY_PLAN = ("0:8", "5:8", "20:4")
"""Injected change (%): runs, each level its own step (the runs are kept as they finish)."""
CALIBRATE = ("--rounds", "40", "--canary", "2,5,10", "--budget", "0.25")
"""The GPU table in one run (`benchmarks/calibrate_gpu.py`): the GPU-bound study model and the
demo suite's forward items in eager, each compared with itself 40 times and 10 times at each
of +2%, +5% and +10%, on four pairs of worker processes (not calibrate's eight: each pair
starts CUDA and builds every item), at the GPU-bound suite's 3% bar, each item's sampling
budget 0.25 s, so that the 280 comparisons fit the stage's minutes; then, if time is left,
the study model in compile-reduce-overhead on two pairs (every worker compiles it cold). It
replaces the paired study's GPU stage, which started three processes and their CUDA per
comparison: 57 s each on an H100."""
OP_STUDY_RUNS = 4
"""A/B runs per level of the kernels' verdicts study (identical code, +1%, +2%): its pads found
first (an estimated minute or two), then 12 runs of two CUDA workers each."""
STATE = Path(os.environ.get("GPU_CHECK_STATE") or "/tmp/perfguard-gpu-check").resolve()
"""Where the studies keep their runs between calls: a stage called again on a machine still
warm goes on where the last call stopped (each run is kept as it finishes), and one given
runs carried from another machine goes on from them."""
RESERVE_S = 20.0
"""Kept back from the stage's time for the steps that sum it up and for the archive."""


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]  # `{py}`, `{work}`, `{device}`, `{state}` are filled in
    needs: tuple[str, ...] = ()  # programs it cannot do without (git, nvidia-smi)
    closing: bool = False  # sums the stage up: runs even when its time is spent


@dataclass
class Context:
    out: Path
    device: str
    seconds: float
    python: str
    env: dict[str, str]
    say: Callable[[str], None]
    state: Path = STATE


def steps(stage: str) -> list[Step]:
    """The steps of `stage`, in order."""
    pytest = ("{py}", "-m", "pytest", "-p", "no:cacheprovider")
    if stage == "env":
        return [
            Step("nvidia-smi", ("nvidia-smi",), needs=("nvidia-smi",)),
            Step("torch, CUDA and NVML", ("{py}", "tools/gpu_env.py", "--device", "{device}")),
        ]
    if stage == "cuda":
        picks = {
            "test_cuda": "not max-autotune",
            "test_distributed": "cuda",
            "test_op_verdicts": "cuda",
        }
        return [
            _cuda_tests(name, pytest, picks.get(name))
            # the quick files first: a stage cut at its deadline loses the compiles, not them
            for name in (
                "test_health",
                "test_ort",
                "test_fingerprint",
                "test_lending",
                "test_op_verdicts",  # its cuda item: the kernels of a call, each timed
                "test_distributed",  # its cuda item: a DDP step on NCCL over every GPU here
                "test_cuda",
                "test_cuda_training",
            )
        ]
    if stage == "figures":  # the newest GPU items, quickest first; the timer's accuracy last
        return [
            _cuda_tests("test_memory_sites", pytest, "cuda"),
            _figures(
                "memory sites study", "memory-sites-study.json", "memory_sites_study", "--runs", "3"
            ),
            *(_demo(variant, pytest) for variant in NEWEST),
            # main's compile cache against none, on identical code A/B
            _figures(
                "compile cache (A/B, cold and warm)",
                "pr-cache.json",
                "pr_cost",
                "cache",
                "--runs",
                "1",
            ),
            # a bf16 model of 35% of the device, measured in place, stored and A/B
            _figures("model scale (stored and A/B)", "model-scale.json", "model_scale"),
            Step(
                "timer accuracy (Timer, do_bench)",
                ("{py}", "benchmarks/timer_accuracy.py", "--device", "{device}", "--rounds", "5"),
            ),
            _variant_table(),
        ]
    if stage in ("variants", "autotune"):
        # max-autotune's cuda test items compile for a minute each: this stage's, not cuda's
        first = [_cuda_tests("test_cuda", pytest, "max-autotune")]
        return [
            *(first if stage == "autotune" else []),
            *(_demo(v, pytest) for v in (AUTOTUNE if stage == "autotune" else VARIANTS + SERVING)),
            _variant_table(),
        ]
    if stage == "calibrate":
        table = ("{py}", "-m", "benchmarks.calibrate_gpu", *CALIBRATE, "--device", "{device}")
        return [
            Step("calibrate: the GPU table", (*table, "--pairs", "4", "--out", "{work}/forward")),
            Step(
                "calibrate: compiled, CUDA graphs",
                (*table, "--part", "compiled", "--pairs", "2", "--out", "{work}/compiled"),
            ),
        ]
    if stage == "study":
        study = ("{py}", "benchmarks/detection.py")
        where = f"{{state}}/{stage}"
        return [
            *(
                Step(
                    f"paired study, +{plan.split(':')[0]}%",
                    (*study, "run-ab", "--dir", where, "--plan", plan),
                    needs=("git",),
                )
                for plan in STUDY_PLAN
            ),
            # the kernels' verdicts: a GPU-bound 20-layer model, one layer's matmul slower by
            # +1% and +2% of the model (`--only 4` runs it in a call of its own)
            Step(
                "op verdicts study (kernels)",
                (
                    *("{py}", "-m", "benchmarks.op_verdicts", "study", "--device", "{device}"),
                    *("--runs", str(OP_STUDY_RUNS), "--dir", f"{where}/op-verdicts"),
                    *("--out", "{work}/data/op-verdicts-gpu.json"),
                ),
                needs=("git",),
            ),
            Step("paired study, the table", (*study, "analyze", "--ab-dir", where), closing=True),
        ]
    raise ValueError(f"no stage {stage!r}: the stages are {', '.join(STAGES)}")


def _demo(variant: str, pytest: tuple[str, ...]) -> Step:
    """The demo suite (examples/perf) in one variant: its results, report and traces."""
    return Step(
        variant,
        (
            *pytest,
            "examples/perf",
            "--perfguard",
            "--perfguard-device={device}",
            f"--perfguard-variants={variant}",
            "--perfguard-compare=none",
            f"--perfguard-json={{work}}/{variant}.json",
            f"--perfguard-report={{work}}/{variant}.md",
        ),
    )


def _figures(name: str, data: str, module: str, *args: str) -> Step:
    """A benchmark of `benchmarks/` on this device, its figures in `data/<data>` (not beside
    the demo runs' results, which the variant table reads)."""
    out = f"{{work}}/data/{data}"
    return Step(
        name, ("{py}", "-m", f"benchmarks.{module}", *args, "--device", "{device}", "--out", out)
    )


def _variant_table() -> Step:
    """A stage's closing step: one row per item and variant of the demo runs it made."""
    return Step(
        "the variant table",
        ("{py}", "benchmarks/variant_table.py", "{work}", "--out", "{work}/table.md"),
        closing=True,
    )


def _cuda_tests(name: str, pytest: tuple[str, ...], pick: str | None = None) -> Step:
    """One file of `cuda` tests, or its items that `pick` (a `-k` expression) selects; its
    JUnit XML beside the log."""
    xml = name if pick is None else f"{name}-{_plain(pick)}"
    return Step(
        f"cuda tests: {name}" + (f" ({pick})" if pick else ""),
        (
            *pytest,
            f"tests/{name}.py",
            *(("-k", pick) if pick else ()),
            "-v",
            "-rs",
            f"--junitxml={{work}}/{xml}.xml",
        ),
    )


def pack(work: Path, archive: Path, state: Path | None = None) -> None:
    """`work` (and the stage's `state`, where it keeps runs) as `archive` (tar.gz), replaced
    whole: a kill leaves the last whole one."""
    name = archive.name.removesuffix(".tar.gz")
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(work, arcname=name)
        if state is not None and state.is_dir():
            tar.add(state, arcname=f"{name}/state", filter=_no_repository)
    os.replace(partial, archive)


def _no_repository(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """A study's scratch repository is rebuilt from its runs' files: not archived."""
    return None if "/repo/" in member.name or member.name.endswith("/repo") else member


def run_stage(stage: str, ctx: Context, only: int | None = None) -> bool:
    """Run the steps of `stage` (or its step number `only`) within its time; True when
    every step that ran passed."""
    work = Path(tempfile.mkdtemp(prefix=f"gpu-check-{stage}-"))
    archive = ctx.out / f"{stage}.tar.gz"
    deadline = time.monotonic() + ctx.seconds - RESERVE_S
    ctx.say(f"== {stage}")
    ok = True
    try:
        for number, step in enumerate(steps(stage), 1):
            if only is not None and number != only:
                continue
            missing = [tool for tool in step.needs if shutil.which(tool) is None]
            left = deadline - time.monotonic()
            if missing:
                ctx.say(f"   {step.name}: skipped, no {' or '.join(missing)} on this machine")
                continue
            if left <= 0 and not step.closing:
                ctx.say(
                    f"   {step.name}: not run, the stage's {ctx.seconds:.0f} s are spent "
                    f"(run it in a call of its own: --steps {stage} --only {number})"
                )
                continue
            ok &= _run_step(step, number, work, ctx, max(left, RESERVE_S / 2))
            pack(work, archive, ctx.state / stage)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ok


def _end_group(child: subprocess.Popen[bytes]) -> None:
    """End `child`'s process group: asked first (SIGTERM), then killed after 5 s."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_step(step: Step, number: int, work: Path, ctx: Context, seconds: float) -> bool:
    fill = {"py": ctx.python, "work": str(work), "device": ctx.device, "state": str(ctx.state)}
    argv = list(step.argv)
    for key, value in fill.items():  # (not str.format: a command may hold braces)
        argv = [part.replace(f"{{{key}}}", value) for part in argv]
    log = work / f"{number:02d}-{_plain(step.name)}.log"
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as sink:
        sink.write("$ " + " ".join(argv) + "\n")
        sink.flush()
        code: int | None
        try:
            # a session of its own: at the deadline the step's whole process tree ends (a
            # step's own children, pytest's workers, would go on using the GPU otherwise)
            child = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=ctx.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            sink.write(f"could not start: {exc}\n")
            code = 127
        else:
            try:
                code = child.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                _end_group(child)
                code = None
    took = time.monotonic() - started
    if code is None:
        ctx.say(f"   {step.name}: stopped at the stage's deadline after {took:.0f} s")
        return False
    ctx.say(f"   {step.name}: exit {code} after {took:.0f} s")
    return code == 0


def _plain(name: str) -> str:
    """A file name of letters, digits, '.', '_' and '-' alone."""
    out = "".join(c if c.isalnum() or c in "._-" else "-" for c in name)
    return "-".join(part for part in out.split("-") if part)[:60]


def _has_cuda(python: str) -> bool:
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0


def _install(python: str, site: Path) -> str | None:
    """perfguard from this tree, and the wheels in .whl/, into `site`; None, or what failed
    (with pip's last lines)."""
    pip = [
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        str(site),
    ]
    wheels = sorted(str(p) for p in (ROOT / ".whl").glob("*.whl"))
    for what, argv in (
        ("the wheels in .whl/", [*pip, *wheels] if wheels else None),
        ("perfguard from this tree", [*pip, "--no-build-isolation", str(ROOT)]),
    ):
        if argv is None:
            continue
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            return f"{what} did not install: {tail}"
    return None


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--steps",
        default=os.environ.get("GPU_CHECK_STEPS") or ",".join(STAGES),
        help=f"the stages to run, in order (default: {','.join(STAGES)})",
    )
    p.add_argument("--only", type=int, help="one step of a single stage, by its number")
    p.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("GPU_CHECK_OUT") or os.environ.get("OUT") or "gpu-check"),
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: a rehearsal of the stages where there is no GPU",
    )
    p.add_argument(
        "--stage-seconds",
        type=float,
        default=float(os.environ.get("GPU_CHECK_STAGE_SECONDS") or 450),
    )
    args = p.parse_args(argv)
    args.stages = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown or not args.stages:
        p.error(
            f"unknown stage {', '.join(unknown) or '(none)'}: the stages are {', '.join(STAGES)}"
        )
    if args.only is not None and (
        len(args.stages) != 1 or not 1 <= args.only <= len(steps(args.stages[0]))
    ):
        p.error("--only picks a step of one stage by its number: name that stage alone")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    python = os.environ.get("PYTHON") or sys.executable
    if args.device == "cuda" and not _has_cuda(python):
        print(
            f"gpu-check: no CUDA device here ({python} cannot import a torch that sees one): "
            "run it on a GPU machine",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    summary = args.out.resolve() / "summary.txt"

    def say(line: str) -> None:
        print(line, flush=True)
        with summary.open("a", encoding="utf-8") as f:
            f.write(line + "\n")

    with tempfile.TemporaryDirectory(prefix="gpu-check-site-") as site:
        failed = _install(python, Path(site))
        if failed:
            print(f"gpu-check: {failed}", file=sys.stderr)
            return 2
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PERFGUARD_FAIL_NOW": "1",  # a failure's traceback at once (tests/conftest.py)
            "PYTHONPATH": os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")])),
        }
        ctx = Context(args.out.resolve(), args.device, args.stage_seconds, python, env, say)
        tools = ", ".join(f"{t}: {'yes' if shutil.which(t) else 'no'}" for t in ("git", "make"))
        say(
            f"gpu-check on {args.device}, stages {','.join(args.stages)} ({tools}; without git "
            "the paired study is skipped, without make run `python3 tools/gpu_check.py`)"
        )
        ok = True
        for stage in args.stages:
            ok &= run_stage(stage, ctx, args.only)
    say(f"gpu-check: {'every step passed' if ok else 'some steps failed or did not run'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
