"""Detection study: how often perfguard cries wolf, and what it catches, run as CI would.

Run:  .venv/bin/python benchmarks/detection.py run [--trials 40] [--dir DIR]
      .venv/bin/python benchmarks/detection.py analyze [--dir DIR]

Every measurement is its own process (a fresh Python, a fresh torch), as in CI where the
baseline was measured on main days before the PR. The sequence is:

- `--history` baselines of identical code on "main" first (the noise floor learns from them);
- then, per trial: the PR heads with injected extra compute (+5%, +10%, +20%, +50%, in a
  random order), each compared with the newest baseline; then the next baseline on main,
  which is itself the identical-code comparison (it is compared with the one before it).

The extra compute is real work of the same kind: each model is `DEPTH` identical blocks
(matmul or conv), and +X% adds X% more of those blocks. The measured slowdown of each level
is printed beside its nominal size. Comparisons go through perfguard's own code
(`compare_runs` with the default thresholds and the noise floor from `history_frame`), and
the naive rule (Welch on raw per-call samples, p < 0.05 and |d| > 0.2) is judged on the same
runs. A run is a false alarm when any gating latency metric of a model is a `regression`.

Same-job A/B mode (`run-ab`): a scratch git repository holds the same two models as a
perf test; its base commit has `DEPTH` blocks, and head commits add 0% (identical code, a
different commit), +5%, +10% or +20%. Each run is `pytest --perfguard --perfguard-ab=BASE`
on a head, exactly as CI would run it, and the verdicts are perfguard's own, from the
results JSON. `analyze --dir D --ab-dir E` prints both modes side by side.

Confirmation (`run --confirm ab`, the default, as the plugin in a checkout that has the
base commit): the flagged models, and the undecided ones (median moved by the minimum
change, no verdict), are measured again by `pytest --perfguard --perfguard-ab=BASE` on the
head commit of a scratch repository like the one above. `--confirm fresh`: the flagged
models alone in a fresh process, `--confirm-gap` seconds later.

`wall --runs N`: the time of the PR configuration against stored mode's, in turn, on the
same suite (identical code, a stored baseline saved just before).

`load PATTERN CMD...`: run any command under the load generator, e.g. `load busy make test`
(every core kept busy); the command's exit code is the script's.

Runs are kept as JSON in `--dir`, so `analyze` can be repeated without measuring again, and
`run` resumes where it stopped. Do not run anything else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.gitrepo import git

LEVELS = (5, 10, 20, 50)
DEPTH = 20
MODELS = ("linear", "conv")
HISTORY_WINDOW = 20  # baselines the noise floor is learned from, as FinishSettings does
DEFAULT_DIR = Path("reports/detection")
DEFAULT_AB_DIR = Path("reports/detection-ab")
AB_PLAN = {0: 25, 5: 5, 10: 15, 20: 5, 100: 5}  # A/B runs per injected level (two models each)
AB_LEVELS = (0, 2, 5, 10, 20, 100)  # what `--plan` may ask for (+2%: the GPU-bound model)
GPU_DEPTH = 100  # blocks of the GPU-bound model: +2% and +5% are whole blocks
TRAIN_WIDTH = 256  # hidden width of the training-step model (train-mlp)
GEN_WIDTH = 512  # hidden size of the generating model (gen-gpt2)
GEN_TOKENS = 8  # new tokens of each of its generations
WIDENED = ("train-mlp", "gen-gpt2")  # models whose level widens them rather than adding blocks
LOADS = ("none", "steady", "bursty", "busy")


# --- the load generator: other work on the runner ----------------------------------------

LOAD_PROCESS = """
import random, sys, time
from perfguard.processes import follow_parent
follow_parent(int(sys.argv[3]))  # it ends with the study, even one that was killed
pattern, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
while True:
    if pattern == "bursty":
        time.sleep(rng.uniform(0.2, 2.0))
        busy = rng.uniform(0.1, 1.0)
    else:
        busy = 3600.0
    end = time.perf_counter() + busy
    while time.perf_counter() < end:
        pass
"""


@contextlib.contextmanager
def load(pattern: str, seed: int = 0) -> Iterator[None]:
    """Other work on the machine while the block runs: `steady` keeps one core busy;
    `bursty` runs one process per core, each busy for 0.1-1 s at random after 0.2-2 s idle
    (at random moments, so bursts hit one side of a pair and not the other); `busy` keeps
    every core busy all the time (the test suite's check: `detection.py load busy make test`)."""
    if pattern not in LOADS:
        raise ValueError(f"load must be one of {LOADS}, got {pattern!r}")
    count = {"none": 0, "steady": 1}.get(pattern, os.cpu_count() or 1)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD_PROCESS, pattern, str(seed * 100 + i), str(os.getpid())]
        )
        for i in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


# --- the worker: one process, one measurement of both models ---------------------------


def _build(kind: str, extra_pct: int) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    blocks = DEPTH + round(DEPTH * extra_pct / 100)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    if kind == "gpu-linear":  # GPU-bound: each block a 2048 x 1024 x 1024 matmul
        for _ in range(GPU_DEPTH + round(GPU_DEPTH * extra_pct / 100)):
            layers += [nn.Linear(1024, 1024), nn.ReLU()]
        x = torch.randn(2048, 1024, generator=gen)
    elif kind == "train-mlp":  # a training step (AdamW); +N% widens the hidden layers by N%
        width = round(TRAIN_WIDTH * (1 + extra_pct / 100))
        layers += [nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()]
        layers += [nn.Linear(width, 10)]
        x = torch.randn(64, 256, generator=gen)
        return nn.Sequential(*layers).train(), (x,)
    elif kind == "gen-gpt2":  # greedy generation; +N% widens the hidden size by N% (heads of 16)
        import transformers

        width = 16 * round(GEN_WIDTH * (1 + extra_pct / 100) / 16)
        config = transformers.GPT2Config(
            n_layer=2, n_embd=width, n_head=width // 16, vocab_size=1000, n_positions=64,
            bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        ids = torch.randint(1, 1000, (1, 16), generator=gen)
        model: Any = transformers.GPT2LMHeadModel(config)
        return model.eval(), (ids,)
    elif kind == "linear":
        for _ in range(blocks):
            layers += [nn.Linear(256, 256), nn.ReLU()]
        x = torch.randn(64, 256, generator=gen)
    else:
        for _ in range(blocks):
            layers += [nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()]
        x = torch.randn(4, 16, 24, 24, generator=gen)
    return nn.Sequential(*layers).eval(), (x,)


def worker(extra_pct: int, out: Path, models: Sequence[str] = MODELS) -> None:
    from perfguard.environment import collect_environment, machine_key
    from perfguard.health import Monitor
    from perfguard.measure.job import Job, MeasureSettings
    from perfguard.measure.runner import measure_model, resolve_device
    from perfguard.records import Run

    device = resolve_device("auto")
    gpu = None
    if device.type == "cuda":  # NVML finds the GPU by CUDA's UUID, as the plugin does
        from perfguard.environment import cuda_gpu_id

        gpu = cuda_gpu_id(device.index if device.index is not None else 0)
    monitor = Monitor(device.type, gpu=gpu)  # runner health, as the plugin records it
    monitor.start()
    results = []
    for kind in models:
        model, inputs = _build(kind, extra_pct)
        results.append(measure_model(Job.of(model, inputs, "eager", MeasureSettings(), test=kind)))
    health = monitor.stop()
    environment = collect_environment(device)
    run = Run(
        commit=None,
        machine=machine_key(environment),
        environment=environment,
        results=tuple(results),
        settings={"extra_pct": extra_pct},
        health=health.to_json(),
    )
    out.write_text(json.dumps(run.to_json()), encoding="utf-8")


# --- the schedule ----------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str  # file stem
    extra_pct: int
    base: str | None  # the baseline this head is compared with (None: a warm-up baseline)


def schedule(history: int, trials: int, seed: int) -> list[Step]:
    rng = random.Random(seed)
    steps = [Step(f"b{i:03d}", 0, None) for i in range(history)]
    newest = steps[-1].name
    for t in range(trials):
        levels = [0, *LEVELS]  # +0%: identical code as a PR head, beside the next baseline
        rng.shuffle(levels)
        steps += [Step(f"t{t:03d}-plus{p:02d}", p, newest) for p in levels]
        nxt = f"b{history + t:03d}"
        steps.append(Step(nxt, 0, newest))
        newest = nxt
    return steps


def _progress(done: int, total: int, what: str, started: float) -> None:
    spent = time.monotonic() - started
    eta = spent / done * (total - done)
    print(
        f"[{done}/{total}] {what} done; {spent / 60:.1f} min so far, about {eta / 60:.1f} min left",
        flush=True,
    )


def run_study(
    directory: Path,
    history: int,
    trials: int,
    seed: int,
    confirm_gap: float = 60.0,
    confirm: str = "ab",
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    steps = schedule(history, trials, seed)
    ab = ab_repository(directory, (0, *LEVELS)) if confirm == "ab" else None
    (directory / "schedule.json").write_text(
        json.dumps([s.__dict__ for s in steps], indent=1), encoding="utf-8"
    )
    todo = [s for s in steps if not (directory / f"{s.name}.json").exists()]
    started = time.monotonic()
    done = 0
    # As the plugin does: what a comparison flags (and, beside the base commit, what it left
    # undecided) is measured again: beside the base commit at once (`ab`), or in a fresh
    # process no sooner than `confirm_gap` seconds later while the next steps run, as the
    # rest of a suite would.
    pending: list[tuple[float, Step, list[str]]] = []

    def confirm_due(wait: bool = False) -> None:
        for due, step, flagged in sorted(pending, key=lambda p: p[0]):
            left = due - time.monotonic()
            if left > 0 and not wait:
                continue
            time.sleep(max(left, 0.0))
            out = directory / f"{step.name}.confirm.json"
            if ab is None:
                _measure(step.extra_pct, out, flagged)
            else:
                _measure_ab(ab, step.extra_pct, out, flagged)
            pending.remove((due, step, flagged))
            print(f"    re-measured {', '.join(flagged)} of {step.name}", flush=True)

    for step in steps:
        out = directory / f"{step.name}.json"
        if not out.exists():
            _measure(step.extra_pct, out, MODELS)
            done += 1
            _progress(done, len(todo), step.name, started)
        if step.base is not None and not (directory / f"{step.name}.confirm.json").exists():
            flagged = sorted({test for test, _ in _targets(directory, steps, step, ab is not None)})
            if flagged:
                # beside the base commit a slow spell hits both sides: no need to wait
                gap = confirm_gap if ab is None else 0.0
                pending.append((time.monotonic() + gap, step, flagged))
        confirm_due()
    confirm_due(wait=True)


def _measure(extra_pct: int, out: Path, models: Sequence[str]) -> None:
    """One measurement process (a fresh Python and torch), its run written to `out`."""
    tmp = out.with_suffix(".tmp")
    cmd = [sys.executable, __file__, "worker", "--extra", str(extra_pct), "--out", str(tmp)]
    subprocess.run([*cmd, "--models", ",".join(models)], check=True)
    tmp.rename(out)


def _measure_ab(
    ab: tuple[Path, str, dict[int, str]], extra_pct: int, out: Path, models: Sequence[str]
) -> None:
    """What the plugin's A/B confirmation runs: pytest on the head commit of `extra_pct`
    with `--perfguard-ab` at the base commit, for the flagged models only."""
    repo, base, heads = ab
    git(repo, "checkout", "-q", "--detach", heads[extra_pct])
    tmp = out.with_suffix(".tmp").resolve()
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--perfguard",
        f"--perfguard-ab={base}", f"--perfguard-json={tmp}", "--perfguard-fail-on=never",
        "--perfguard-report=last-report.md", "--perfguard-full", "-k", " or ".join(models),
        "test_study.py",
    ]  # fmt: skip
    subprocess.run(cmd, cwd=repo, check=True, stdout=subprocess.DEVNULL)
    tmp.rename(out)


def _load_runs(directory: Path, steps: Sequence[Step]) -> dict[str, Any]:
    """The runs of `steps` kept in `directory`, by file stem (confirmations `NAME.confirm`)."""
    from perfguard.records import Run

    runs: dict[str, Any] = {}
    for s in steps:
        for stem in (s.name, f"{s.name}.confirm"):
            path = directory / f"{stem}.json"
            if path.exists():
                runs[stem] = _by_model(Run.from_json(json.loads(path.read_text())))
    return runs


def _by_model(run: Any) -> Any:
    """A run whose results are named by model: pytest names them `...test_model[linear]`."""
    from dataclasses import replace

    def short(results: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(replace(r, test=r.test.rpartition("[")[2].rstrip("]")) for r in results)

    return replace(run, results=short(run.results), baseline_results=short(run.baseline_results))


def _compare_step(
    steps: Sequence[Step], runs: dict[str, Any], step: Step
) -> tuple[tuple[Any, ...], Any]:
    """The step's comparisons with its baseline, as the plugin makes them (noise floor from
    the last `HISTORY_WINDOW` baselines), before any confirmation."""
    from perfguard.stats.verdicts import Thresholds, compare_runs
    from perfguard.store.history import history_frame, noise_floor

    assert step.base is not None, "a warm-up baseline is compared with nothing"
    floor = noise_floor(history_frame([runs[b.name] for b in _history(steps, step)]))
    return compare_runs(runs[step.base], runs[step.name], Thresholds(), floor), floor


def _history(steps: Sequence[Step], step: Step) -> list[Step]:
    """The baselines the noise floor of `step` is learned from, ending with its own."""
    baselines = [s for s in steps if s.name.startswith("b")]
    position = next(i for i, s in enumerate(baselines) if s.name == step.base)
    return baselines[max(0, position - HISTORY_WINDOW + 1) : position + 1]


def _targets(directory: Path, steps: Sequence[Step], step: Step, ab: bool) -> list[tuple[str, str]]:
    """What the plugin re-measures: the flagged items, and beside the base commit also the
    undecided ones (median moved by the minimum change, no verdict)."""
    from perfguard.confirm import confirm_targets, settle_targets

    needed = [*_history(steps, step), step]
    comparisons, _ = _compare_step(steps, _load_runs(directory, needed), step)
    return confirm_targets(comparisons) + (settle_targets(comparisons) if ab else [])


# --- same-job A/B mode ----------------------------------------------------------------


def _study_test(kinds: Sequence[str], variants: Sequence[str]) -> str:
    """The scratch repository's perf test: the models `kinds`, each in `variants`."""
    return f"""
import pytest
import torch
from study_models import build

@pytest.mark.perfguard(variants={list(variants)!r})
@pytest.mark.parametrize("kind", {list(kinds)!r})
def test_model(perfguard, kind):
    model, inputs = build(kind)
    if kind.startswith("train-"):
        perfguard.train_step(
            model,
            inputs,
            loss_fn=lambda out: out.square().mean(),
            optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4),
        )
    elif kind.startswith("gen-"):
        perfguard.generate(model, inputs[0], max_new_tokens={GEN_TOKENS})
    else:
        perfguard.run(model, inputs)
"""


def _study_models(extra_pct: int) -> str:
    """The models module of the scratch repository: `_build` itself, at one level."""
    return (
        "from __future__ import annotations\n\nfrom typing import Any\n\n"
        f"DEPTH = {DEPTH}\nGPU_DEPTH = {GPU_DEPTH}\nTRAIN_WIDTH = {TRAIN_WIDTH}\n"
        f"GEN_WIDTH = {GEN_WIDTH}\n"
        f"EXTRA_PCT = {extra_pct}\n\n\n"
        + inspect.getsource(_build)
        + "\n\ndef build(kind):\n    return _build(kind, EXTRA_PCT)\n"
    )


STUDY_PYTEST = (
    sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--perfguard",
    "--perfguard-fail-on=never", "--perfguard-report=last-report.md",
    "--perfguard-full",  # identical code (+0%) is measured on purpose
)  # fmt: skip
"""A run of the scratch repository's suite as CI would run it (the mode's options follow)."""


def ab_repository(
    directory: Path,
    levels: Sequence[int] = tuple(AB_PLAN),
    kinds: Sequence[str] = MODELS,
    variants: Sequence[str] = ("eager",),
    bar: float | None = None,
) -> tuple[Path, str, dict[int, str]]:
    """(repo, base sha, head sha per level), made once and reused when resuming (with the
    same models, variants and A/B bar: a study is not resumed with others). Runs kept from
    another machine (carried without their scratch repository, which is not archived) are
    resumed too: the repository is made again, and its new commits recorded."""
    repo = directory / "repo"
    index = directory / "commits.json"
    suite: dict[str, Any] = {"kinds": list(kinds), "variants": list(variants)}
    if bar is not None:  # studies made before the bar was recorded ran at the default
        suite["ab_min_change"] = bar
    if index.exists():
        saved = json.loads(index.read_text())
        if saved.get("suite", suite) != suite or not set(levels) <= {
            int(k) for k in saved["heads"]
        }:
            raise SystemExit(
                f"{directory} holds a study of other models, variants, levels or A/B bar"
            )
        if (repo / ".git").is_dir():
            return repo, saved["base"], {int(k): v for k, v in saved["heads"].items()}
        levels = sorted({*levels, *(int(k) for k in saved["heads"])})
        shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "study@perfguard")
    git(repo, "config", "user.name", "perfguard study")
    (repo / "test_study.py").write_text(_study_test(kinds, variants), encoding="utf-8")
    (repo / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # its own rootdir
    (repo / "study_models.py").write_text(_study_models(0), encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    heads: dict[int, str] = {}
    for level in levels:
        git(repo, "checkout", "-q", "--detach", base)
        (repo / "study_models.py").write_text(_study_models(level), encoding="utf-8")
        git(repo, "commit", "-q", "--allow-empty", "-am", f"head +{level}%")
        heads[level] = git(repo, "rev-parse", "HEAD")
    index.write_text(json.dumps({"base": base, "heads": heads, "suite": suite}), encoding="utf-8")
    return repo, base, heads


def run_ab_study(
    directory: Path,
    seed: int,
    runs: dict[int, int] | None = None,
    pattern: str = "none",
    suite: tuple[Sequence[str], Sequence[str]] = (MODELS, ("eager",)),
    bar: float | None = None,
) -> None:
    """`runs`: A/B runs per injected level (default AB_PLAN); `pattern`: the load generator's
    other work during the runs (`load`); `suite`: the models and the variants; `bar`: the
    runs' `--perfguard-ab-min-change` (None: its default)."""
    with load(pattern, seed):
        _run_ab_study(directory, seed, runs, suite, bar)


def _run_ab_study(
    directory: Path,
    seed: int,
    runs: dict[int, int] | None,
    suite: tuple[Sequence[str], Sequence[str]],
    bar: float | None,
) -> None:
    runs = runs or AB_PLAN
    for kind in (k for k in suite[0] if k not in WIDENED):
        depth = GPU_DEPTH if kind == "gpu-linear" else DEPTH
        for level in runs:
            if level and round(depth * level / 100) * 100 != depth * level:
                raise SystemExit(
                    f"+{level}% is no whole number of {kind}'s {depth} blocks: "
                    "use gpu-linear for +2%"
                )
    directory.mkdir(parents=True, exist_ok=True)
    # a later call may ask more levels: the repository holds them all
    repo, base, heads = ab_repository(directory, AB_LEVELS, *suite, bar)
    plan = [(level, i) for level, count in runs.items() for i in range(count)]
    random.Random(seed).shuffle(plan)
    bar_option = [] if bar is None else [f"--perfguard-ab-min-change={bar:g}"]
    todo = [(lv, i) for lv, i in plan if not (directory / f"ab-plus{lv:02d}-{i:03d}.json").exists()]
    started = time.monotonic()
    for done, (level, i) in enumerate(todo, 1):
        out = directory / f"ab-plus{level:02d}-{i:03d}.json"
        git(repo, "checkout", "-q", "--detach", heads[level])
        json_out = f"--perfguard-json={out.with_suffix('.tmp').resolve()}"
        cmd = [*STUDY_PYTEST, f"--perfguard-ab={base}", *bar_option, json_out, "test_study.py"]
        began = time.monotonic()
        subprocess.run(cmd, cwd=repo, check=True, stdout=subprocess.DEVNULL)
        out.with_suffix(".tmp").rename(out)
        _record_wall(directory, out.stem, time.monotonic() - began)
        _progress(done, len(todo), f"A/B +{level}%", started)


def wall_study(directory: Path, runs: int) -> dict[str, Any]:
    """The PR configuration's time against stored mode's on the study suite: identical code
    (the +0% head), each mode run `runs` times in turn, each as `pytest` as CI would run it,
    against a stored baseline of the base commit saved just before. A run counts as
    `confirmed` when a flag of its first round was measured again (the default
    `--perfguard-confirm=1`), which costs stored mode a second round beside the base."""
    repo, base, heads = ab_repository(directory, (0,))
    exclude = repo / ".git" / "info" / "exclude"  # what runs write there keeps the tree clean
    exclude.write_text("baselines/\nreports/\nlast-report.md\n", encoding="utf-8")
    git(repo, "checkout", "-q", "--detach", base)
    for old in (repo / "baselines").glob("*/*.json*"):  # plain or compressed
        old.unlink()
    save = [*STUDY_PYTEST, "--perfguard-save", "--perfguard-compare=none", "test_study.py"]
    subprocess.run(save, cwd=repo, check=True, stdout=subprocess.DEVNULL)
    git(repo, "checkout", "-q", "--detach", heads[0])
    walls: dict[str, list[dict[str, Any]]] = {"stored": [], "ab": []}
    started = time.monotonic()
    for i in range(runs):
        for mode, extra in (("stored", []), ("ab", [f"--perfguard-ab={base}"])):
            out = (directory / f"wall-{mode}-{i:03d}.json").resolve()
            cmd = [*STUDY_PYTEST, *extra, f"--perfguard-json={out}", "test_study.py"]
            began = time.monotonic()
            subprocess.run(cmd, cwd=repo, check=True, stdout=subprocess.DEVNULL)
            seconds = time.monotonic() - began
            doc = json.loads(out.read_text())
            confirmed = any("confirmation" in c for c in doc["comparisons"])
            walls[mode].append({"wall_s": round(seconds, 2), "confirmed": confirmed})
        _progress(i + 1, runs, "stored and A/B", started)
    from perfguard.environment import cpu_model

    return {"machine": f"{cpu_model()}, {os.cpu_count()} CPUs", "runs": walls}


def wall_table(doc: dict[str, Any]) -> str:
    """Medians and means of both modes, and the ratios the README quotes."""
    import numpy as np

    def stats(rows: list[dict[str, Any]]) -> tuple[float, float]:
        values = [r["wall_s"] for r in rows]
        return float(np.median(values)), float(np.mean(values))

    ab, stored = doc["runs"]["ab"], doc["runs"]["stored"]
    lines = [
        "| mode | runs | confirmed a flag | median | mean |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, rows in (("stored", stored), ("A/B (PR)", ab)):
        median, mean = stats(rows)
        confirmed = sum(r["confirmed"] for r in rows)
        lines.append(f"| {name} | {len(rows)} | {confirmed} | {median:.2f} s | {mean:.2f} s |")
    quiet = [r for r in stored if not r["confirmed"]]
    (ab_median, ab_mean), (st_median, st_mean) = stats(ab), stats(stored)
    lines.append("")
    lines.append(f"A/B / stored: {ab_median / st_median:.2f} by the median, "
                 f"{ab_mean / st_mean:.2f} by the mean")  # fmt: skip
    if quiet:
        lines.append(
            f"A/B / stored runs that confirmed nothing ({len(quiet)}): "
            f"{ab_median / stats(quiet)[0]:.2f} by the median"
        )
    return "\n".join(lines)


def _plan(text: str) -> dict[int, int]:
    """'0:8,5:8' -> {0: 8, 5: 8}; levels among AB_LEVELS (the study's models have them)."""
    plan = {}
    for part in text.split(","):
        level, _, runs = part.partition(":")
        if int(level) not in AB_LEVELS:
            raise argparse.ArgumentTypeError(f"level {level} is not one of {list(AB_LEVELS)}")
        plan[int(level)] = int(runs)
    return plan


def _record_wall(directory: Path, name: str, seconds: float) -> None:
    path = directory / "wall_s.json"
    walls = json.loads(path.read_text()) if path.exists() else {}
    walls[name] = round(seconds, 2)
    path.write_text(json.dumps(walls, indent=1), encoding="utf-8")


def analyze_ab(
    directories: Sequence[Path], metric: str = "latency_p50_ms"
) -> tuple[str, dict[int, dict[str, Any]]]:
    """The A/B table from the results files kept in `directories`: per injected level, how
    often a model's comparison was a gating regression, how often `inconclusive` (not
    caught), any other verdict than `unchanged` on identical code, the block pairs taken,
    and the wall time of a run. The measured change is `metric`'s; a column more counts
    that metric's own regressions (a generation's `tpot_p50_ms`, say)."""
    import numpy as np

    def row0() -> dict[str, Any]:
        return {"n": 0, "pg": 0, "flagged": 0, "inconclusive": 0, "effect": [], "pairs": [],
                "wall": [], "on_metric": 0}  # fmt: skip

    tally: dict[int, dict[str, Any]] = {p: row0() for p in AB_LEVELS}
    bars = set()
    for directory in directories:
        index = directory / "commits.json"
        suite = json.loads(index.read_text()).get("suite", {}) if index.exists() else {}
        bars.add(suite.get("ab_min_change"))
        walls = json.loads((directory / "wall_s.json").read_text()) if (
            directory / "wall_s.json"
        ).exists() else {}  # fmt: skip
        for path in sorted(directory.glob("ab-plus*.json")):
            level = int(path.stem.split("-")[1].removeprefix("plus"))
            doc = json.loads(path.read_text())
            row = tally[level]
            if path.stem in walls:
                row["wall"].append(walls[path.stem])
            for r in doc["results"]:
                ab = (r.get("details") or {}).get("ab") or {}
                if "pairs" in ab:
                    row["pairs"].append(ab["pairs"])
            for item in sorted({(c["test"], c["variant"]) for c in doc["comparisons"]}):
                mine = [
                    c for c in doc["comparisons"]
                    if (c["test"], c["variant"]) == item and c["gating"]
                ]  # fmt: skip
                verdicts = {c["verdict"] for c in mine}
                row["n"] += 1
                row["pg"] += "regression" in verdicts
                row["flagged"] += bool(verdicts & {"regression", "improvement"})
                row["inconclusive"] += "inconclusive" in verdicts and "regression" not in verdicts
                chosen = next((c for c in mine if c["metric"] == metric), None)
                if chosen is not None and chosen["change_pct"] is not None:
                    row["effect"].append(chosen["change_pct"])
                    row["on_metric"] += chosen["verdict"] == "regression"
    lines = [
        f"| injected | measured {metric} change (median, IQR) | comparisons | regression | "
        f"regression on {metric} | inconclusive | identical: regression or improvement | "
        "pairs (median, max) | wall per run (median) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for level, row in tally.items():
        if not row["n"]:
            continue
        q1, med, q3 = np.percentile(np.asarray(row["effect"]), [25, 50, 75])
        name = "identical" if level == 0 else f"+{level}%"
        pairs = f"{np.median(row['pairs']):.0f}, {max(row['pairs'])}" if row["pairs"] else "–"
        wall = f"{np.median(row['wall']):.1f} s" if row["wall"] else "–"
        false = f"{row['flagged']}" if level == 0 else "–"
        lines.append(
            f"| {name} | {med:+.1f}% ({q1:+.1f}% to {q3:+.1f}%) | {row['n']} "
            f"| {row['pg']} ({100 * row['pg'] / row['n']:.1f}%) | {row['on_metric']} "
            f"| {row['inconclusive']} "
            f"| {false} | {pairs} | {wall} |"
        )
    said = sorted(f"{b:g}%" if b is not None else "the plugin's default" for b in bars)
    lines.append(f"\nA/B bar (`--perfguard-ab-min-change`): {', '.join(said)}.")
    return "\n".join(lines), tally


# --- the analysis ----------------------------------------------------------------------


def naive_alarm(base: Sequence[float], head: Sequence[float]) -> bool:
    """The naive rule, first measured at 73% false alarms: raw samples, p < 0.05, |d| > 0.2."""
    from perfguard.stats.significance import cohens_d, welch_t_test

    t, p, _ = welch_t_test(base, head)
    return p < 0.05 and abs(cohens_d(base, head)) > 0.2 and t > 0


def analyze(directories: Sequence[Path]) -> str:
    """The tables over every study kept in `directories` (each with its own schedule)."""
    tally: dict[int, dict[str, Any]] = {
        p: {"n": 0, "pg": 0, "first": 0, "later": 0, "later_n": 0, "naive": 0, "improve": 0}
        | {"settled": 0}
        | {"effect": []}
        for p in (0, *LEVELS)
    }
    processes = confirmed = 0
    any_run = None
    for directory in directories:
        steps = [Step(**s) for s in json.loads((directory / "schedule.json").read_text())]
        runs = _load_runs(directory, steps)
        processes += len(runs)
        confirmed += sum(name.endswith(".confirm") for name in runs)
        any_run = any_run or next(iter(runs.values()), None)
        _tally(steps, runs, tally)
    return _table(tally, processes, confirmed, any_run)


def _tally(steps: Sequence[Step], runs: dict[str, Any], tally: dict[int, dict[str, Any]]) -> None:
    """Count flags per level; a step that was re-measured is judged as the plugin would.

    `later` judges the same rule with a re-measure about a minute later instead: the next
    process that ran the same code, re-paired from the runs kept (not a new measurement).
    """
    from perfguard.confirm import confirm_verdicts
    from perfguard.stats.verdicts import Thresholds

    def flagged(comparisons: Sequence[Any], model: str, verdict: str = "regression") -> bool:
        return any(c.verdict == verdict for c in comparisons if c.test == model and c.gating)

    for i, s in enumerate(steps):
        if s.base is None or s.name not in runs or s.base not in runs:
            continue
        first, floor = _compare_step(steps, runs, s)
        again = runs.get(f"{s.name}.confirm")
        final = (
            first
            if again is None
            else confirm_verdicts(
                first, [again.results], Thresholds(), floor, bases=[again.baseline_results]
            )
        )
        later = next((t.name for t in steps[i + 1 :] if t.extra_pct == s.extra_pct), None)
        spaced = None
        if later in runs:
            spaced = confirm_verdicts(first, [runs[later].results], Thresholds(), floor)
        base, head = runs[s.base], runs[s.name]
        row = tally[s.extra_pct]
        for model in MODELS:
            b, h = base.result(model, "eager"), head.result(model, "eager")
            if b is None or h is None or b.status != "ok" or h.status != "ok":
                continue
            row["n"] += 1
            row["pg"] += flagged(final, model)
            row["first"] += flagged(first, model)
            row["settled"] += flagged(final, model) and not flagged(first, model)
            if spaced is not None:
                row["later_n"] += 1
                row["later"] += flagged(spaced, model)
            row["improve"] += flagged(final, model, "improvement")
            row["naive"] += naive_alarm(b.samples_ms, h.samples_ms)
            bp, hp = b.metrics.latency_p50_ms, h.metrics.latency_p50_ms
            if bp and hp:
                row["effect"].append(100.0 * (hp - bp) / bp)


def _table(tally: dict[int, dict[str, Any]], processes: int, confirmed: int, any_run: Any) -> str:
    import numpy as np

    lines = [
        "| injected | measured p50 change (median, IQR) | comparisons | perfguard flags "
        "| flagged before re-measuring | re-measured a minute later (re-paired) "
        "| naive rule flags |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for level, row in tally.items():
        n = row["n"]
        if not n:
            continue
        eff = np.asarray(row["effect"])
        q1, med, q3 = np.percentile(eff, [25, 50, 75])
        name = "identical" if level == 0 else f"+{level}%"
        lines.append(
            f"| {name} | {med:+.1f}% ({q1:+.1f}% to {q3:+.1f}%) | {n} "
            f"| {row['pg']} ({100 * row['pg'] / n:.1f}%) "
            f"| {row['first']} ({100 * row['first'] / n:.1f}%) "
            f"| {row['later']} of {row['later_n']} "
            f"({100 * row['later'] / max(row['later_n'], 1):.1f}%) "
            f"| {row['naive']} ({100 * row['naive'] / n:.1f}%) |"
        )
    settled = ", ".join(
        f"{'identical' if p == 0 else f'+{p}%'} {row['settled']}"
        for p, row in tally.items()
        if row["n"]
    )
    lines.append(
        "\nFlags that the stored comparison left undecided and a re-measure beside the base "
        f"commit settled: {settled}."
    )
    ident = tally[0]
    if ident["n"]:
        lines.append(
            f"Identical code flagged as an improvement by perfguard: {ident['improve']} of "
            f"{ident['n']}."
        )
    smallest = next(
        (p for p in LEVELS if tally[p]["n"] and tally[p]["pg"] / tally[p]["n"] >= 0.9), None
    )
    lines.append(
        "Smallest injected change flagged at least 90% of the time: "
        + (f"+{smallest}%." if smallest else "none of the levels.")
    )
    if any_run is not None:
        env = any_run.environment
        lines.append(
            f"Machine: {env.get('cpu')}, {env.get('cpu_count')} CPUs, torch {env.get('torch')}, "
            f"Python {platform.python_version()}; {processes} measurement processes "
            f"({confirmed} of them confirmation re-measures)."
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure (resumes), then analyze")
    run.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    run.add_argument("--history", type=int, default=8, help="warm-up baselines on main")
    run.add_argument("--trials", type=int, default=40)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--confirm-gap", type=float, default=60.0, help="seconds before a re-measure (plugin: 60)"
    )
    run.add_argument(
        "--confirm",
        choices=("ab", "fresh"),
        default="ab",
        help="re-measure beside the base commit (A/B, as the plugin) or in a fresh process",
    )
    run_ab = sub.add_parser("run-ab", help="same-job A/B runs through pytest (resumes)")
    run_ab.add_argument("--dir", type=Path, default=DEFAULT_AB_DIR)
    run_ab.add_argument("--seed", type=int, default=0)
    run_ab.add_argument(
        "--load",
        choices=LOADS,
        default="none",
        help="other work during the runs: none, steady (one core kept busy), bursty (random "
        "bursts on every core), busy (every core kept busy)",
    )
    run_ab.add_argument(
        "--plan",
        type=_plan,
        default=None,
        help="runs per injected level, e.g. 0:8,2:8 (default: "
        + ",".join(f"{k}:{v}" for k, v in AB_PLAN.items())
        + ")",
    )
    run_ab.add_argument(
        "--models",
        default=",".join(MODELS),
        help="linear, conv (launch-bound on a GPU), gpu-linear (GPU-bound), train-mlp (a "
        "training step; a level widens its hidden layers), gen-gpt2 (a greedy generation; a "
        "level widens its hidden size)",
    )
    run_ab.add_argument("--metric", default="latency_p50_ms", help="whose change the table reports")
    run_ab.add_argument("--variants", default="eager", help="the variants each model runs in")
    run_ab.add_argument(
        "--ab-min-change",
        type=float,
        metavar="PCT",
        help="the runs' --perfguard-ab-min-change (default: the plugin's); kept with the study",
    )
    wall = sub.add_parser("wall", help="stored mode and the PR configuration, timed in turn")
    wall.add_argument("--dir", type=Path, default=Path("reports/detection-wall"))
    wall.add_argument("--runs", type=int, default=10)
    wall.add_argument("--out", type=Path, help="also write the times as JSON here")
    hog = sub.add_parser("load", help="run a command while the load generator runs")
    hog.add_argument("pattern", choices=LOADS)
    hog.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, e.g. make test")
    ana = sub.add_parser("analyze", help="tables from the runs kept in --dir (repeatable)")
    ana.add_argument("--dir", type=Path, action="append")
    ana.add_argument("--ab-dir", type=Path, action="append", help="A/B runs (repeatable)")
    work = sub.add_parser("worker", help="(internal) one measurement process")
    work.add_argument("--extra", type=int, required=True)
    work.add_argument("--out", type=Path, required=True)
    work.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    if args.command == "worker":
        worker(args.extra, args.out, args.models.split(","))
        return 0
    if args.command == "load":
        if not args.cmd:
            parser.error("load: give the command to run under it, e.g. `load busy make test`")
        with load(args.pattern, 0):
            return subprocess.run(args.cmd, check=False).returncode
    if args.command == "run-ab":
        suite = (args.models.split(","), args.variants.split(","))
        run_ab_study(args.dir, args.seed, args.plan, args.load, suite, args.ab_min_change)
        table, _ = analyze_ab([args.dir], args.metric)
        (args.dir / "summary.md").write_text(table + "\n", encoding="utf-8")
        print(table)
        return 0
    if args.command == "wall":
        doc = wall_study(args.dir, args.runs)
        if args.out is not None:
            args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(wall_table(doc))
        return 0
    if args.command == "run":
        run_study(args.dir, args.history, args.trials, args.seed, args.confirm_gap, args.confirm)
    ab_dirs = getattr(args, "ab_dir", None) or []
    if isinstance(args.dir, Path):
        directories = [args.dir]
    else:  # `analyze`: the stored-mode study only where asked for, or where no A/B one is
        directories = args.dir or ([] if ab_dirs else [DEFAULT_DIR])
    parts = []
    if directories:
        parts.append(analyze(directories))
        if not ab_dirs:
            (directories[0] / "summary.md").write_text(parts[0] + "\n", encoding="utf-8")
    if ab_dirs:
        table, tally = analyze_ab(ab_dirs)
        smallest = next(
            (p for p in AB_LEVELS if p and tally[p]["n"] and tally[p]["pg"] / tally[p]["n"] >= 0.9),
            None,
        )
        parts.append(
            "Same-job A/B (`--perfguard-ab`)"
            + (", same models and machine" if directories else "")
            + ":\n\n"
            + table
            + "\nSmallest injected change flagged at least 90% of the time in A/B mode: "
            + (f"+{smallest}%." if smallest else "none of the levels.")
        )
    print("\n\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
