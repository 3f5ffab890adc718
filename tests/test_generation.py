"""Generations (`perfguard.generate`): GPT-2 and Llama from their configs under eager and
compile-default with every figure, TTFT and TPOT tested per repeat like latency, the tokens
held to eager's, one clear message for what cannot generate, and the plugin's wiring down to
the JSON and the report."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from perfguard import Generation, MeasureSettings, SamplingSettings, VariantResult
from perfguard.measure.drift import FIRST_TOKEN_ONLY, Reference, drift_view
from perfguard.measure.generating import with_generation
from perfguard.measure.sampling import SamplingOutcome, WarmupOutcome
from perfguard.records import Run
from perfguard.records.sketch import BlockStats
from perfguard.report.markdown import render_markdown
from perfguard.stats.latency import decide_latency, latency_comparisons
from perfguard.stats.thresholds import Thresholds
from perfguard.variants.generation import (
    GenerationError,
    PhasedClock,
    TokenTimes,
    decode_compiled,
    token_agreement,
)
from tests import factories
from tests.factories import run as run_of
from tests.measuring import measure

transformers = pytest.importorskip("transformers")

FAST = MeasureSettings(
    sampling=SamplingSettings(
        budget_s=0.15, repeats=3, min_samples_per_repeat=3, max_warmup_ms=200
    ),
    memory_calls=1,
    device="cpu",
    warm_compile=False,
)
NEW = 6


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=500, n_positions=64, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model: nn.Module = transformers.GPT2LMHeadModel(config).eval()
    return model


def llama() -> nn.Module:
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=500, max_position_embeddings=64, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model: nn.Module = transformers.LlamaForCausalLM(config).eval()
    return model


def prompt() -> torch.Tensor:
    return torch.randint(1, 500, (2, 8), generator=torch.Generator().manual_seed(3))


_MEASURED: dict[tuple[str, str], VariantResult] = {}


def measured(name: str, variant: str) -> VariantResult:
    if (name, variant) not in _MEASURED:
        model = gpt2() if name == "gpt2" else llama()
        _MEASURED[name, variant] = measure(
            model, (prompt(),), variant, FAST, test=name, work=Generation(NEW)
        )
    return _MEASURED[name, variant]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "variant"),
    # Llama compiled takes GPT-2's compiled path (a static cache, the decode step compiled)
    # and half a minute of this machine: it runs compiled on a GPU (test_cuda_training.py)
    [("gpt2", "eager"), ("gpt2", "compile-default"), ("llama", "eager")],
)
def test_real_models_generate_with_every_figure_and_eagers_tokens(name: str, variant: str) -> None:
    r = measured(name, variant)
    assert r.status == "ok", r.error
    assert r.workload == "generate"
    m = r.metrics
    for phase in ("ttft", "tpot"):
        p50, p95, p99 = (getattr(m, f"{phase}_{q}_ms") for q in ("p50", "p95", "p99"))
        assert p50 and p95 and p99 and 0 < p50 <= p95 <= p99
    assert m.ttft_p50_ms is not None and m.tpot_p50_ms is not None
    assert m.latency_p50_ms is not None
    # each timed generation holds its first token and the tokens after it, so each phase's
    # percentiles lie within the whole's (their sum does not: medians do not add, and a busy
    # host delays some tokens of some calls; the split itself is tested with a scripted clock)
    for q in ("p50", "p95", "p99"):
        whole = getattr(m, f"latency_{q}_ms") * 1.001  # (figures are rounded)
        assert (
            getattr(m, f"ttft_{q}_ms") <= whole and (NEW - 1) * getattr(m, f"tpot_{q}_ms") <= whole
        )
    assert m.tokens_per_s == pytest.approx(2 * NEW / (m.latency_p50_ms / 1000))
    assert m.token_agreement == 1.0
    assert m.peak_memory_bytes and m.peak_memory_bytes > 0
    assert (m.compile_time_s is not None) == (variant == "compile-default")
    check = r.drift_check
    assert check is not None and check.passed and check.reference == "fp64", check
    phases = dict(r.phases)
    assert set(phases) == {"ttft", "tpot"}
    assert phases["tpot"].sizes == tuple(len(b) for b in r.blocks())


@pytest.mark.slow
def test_what_cannot_generate_says_so() -> None:
    r = measure(nn.Linear(4, 4), (torch.randn(2, 4),), "eager", FAST, work=Generation(4))
    assert r.status == "error" and r.workload == "generate"
    assert r.error is not None and "needs a model with a Hugging Face-style generate()" in r.error
    skipped = measure(gpt2(), (prompt(),), "onnxruntime", FAST, work=Generation(4))
    assert skipped.status == "skipped"
    assert skipped.error is not None and "not model.generate" in skipped.error
    with pytest.raises(GenerationError, match="at least 2"):
        Generation(1)


@pytest.mark.slow
def test_a_compiled_generation_compiles_the_decode_steps_and_prefills_eagerly() -> None:
    """As transformers' compiled generation: one shape through the compiled forward (a new
    token a row), the prompt's prefill through the eager one (on an H200, a prefill and a
    decode graph recorded into one CUDA-graph tree by reduce-overhead crashed the process)."""
    model = gpt2()
    shapes: dict[str, list[tuple[int, ...]]] = {"compiled": [], "eager": []}

    def recording(fn: Any, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            shapes[name].append(tuple(kwargs["input_ids"].shape))
            return fn(*args, **kwargs)

        return call

    forward = model.forward  # the "compiler" wraps the plain forward: each call counted once
    model.forward = decode_compiled(
        recording(forward, "eager"), lambda _: recording(forward, "compiled")
    )
    generate: Any = model.generate  # (nn.Module's attributes are typed as tensors)
    with torch.inference_mode():
        out = generate(prompt(), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    assert out.shape == (2, 8 + NEW)
    assert shapes["eager"] == [(2, 8)]
    assert shapes["compiled"] == [(2, 1)] * (NEW - 1)


def test_drift_is_judged_on_two_new_tokens_or_the_first_alone_where_it_is_not_eagers() -> None:
    """The second new token's logits come from a decode step (what compiling changes) and
    follow eager's first token; where a variant's first token differs, they follow another
    prefix, and only the first token's logits are compared, with a note."""
    eager = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 9]])  # prompts of 2, then 2 new tokens
    flat = np.arange(2 * 2 * 3, dtype=np.float64)  # batch 2, 2 tokens, a vocabulary of 3
    reference = Reference(flat, flat + 0.5, tokens=eager)
    out, against, note = drift_view(flat.copy(), reference, eager.clone(), new_tokens=2)
    assert note is None and against is reference and out.size == 12
    other = eager.clone()
    other[1, 2] = 4  # the second row's first new token is not eager's
    out, against, note = drift_view(flat.copy(), reference, other, new_tokens=2)
    assert note == FIRST_TOKEN_ONLY
    assert out.tolist() == [0, 1, 2, 6, 7, 8]  # each row's first new token's logits
    assert against.fp64 is not None and against.fp64.tolist() == [0.5, 1.5, 2.5, 6.5, 7.5, 8.5]


class _Steps:
    """A clock whose every timed call records a TTFT and TPOT of its own."""

    name = "fake"

    def __init__(self) -> None:
        self.n = 0

    def time_call(self, fn: Any) -> float:
        fn()
        self.n += 1
        return float(self.n)


def test_each_timed_samples_phases_land_in_its_block() -> None:
    times = TokenTimes(torch.device("cpu"))
    clock = PhasedClock(_Steps(), times)

    def call() -> None:  # TTFT 10 + n, TPOT n: one figure per call
        times.phases.append((10.0 + len(times.phases), float(len(times.phases))))

    for _ in range(7):  # two warm-up calls, then blocks of 2 and 3
        clock.time_call(call)
    call()  # a re-warm call, not timed
    per_block = clock.per_block(2, [(3.0, 4.0), (5.0, 6.0, 7.0)])
    assert per_block["ttft"] == [[12.0, 13.0], [14.0, 15.0, 16.0]]
    assert per_block["tpot"] == [[2.0, 3.0], [4.0, 5.0, 6.0]]


def with_phases(result: VariantResult, ttft_ms: float, tpot_ms: float) -> VariantResult:
    """`result` as a generation whose repeats' phases scatter around the given figures."""
    blocks = result.blocks()
    ttft = [
        [ttft_ms * (1 + 0.01 * ((i + j) % 3)) for j in range(len(b))] for i, b in enumerate(blocks)
    ]
    tpot = [
        [tpot_ms * (1 + 0.01 * ((i * j) % 3)) for j in range(len(b))] for i, b in enumerate(blocks)
    ]
    return replace(
        result,
        workload="generate",
        phases=(("ttft", BlockStats.of(ttft)), ("tpot", BlockStats.of(tpot))),
        metrics=replace(result.metrics, ttft_p50_ms=ttft_ms, tpot_p50_ms=tpot_ms),
    )


def test_a_slower_decode_step_is_a_tpot_regression_while_the_prefill_is_not() -> None:
    base = with_phases(factories.result("gen", "eager", 50.0, seed=1), 8.0, 6.0)
    head = with_phases(factories.result("gen", "eager", 50.0, seed=2), 8.0, 7.2)
    th = Thresholds()
    decided = decide_latency(latency_comparisons(base, head, th, {}), th)
    by = {c.metric: c for c in decided}
    assert by["tpot_p50_ms"].verdict == "regression" and by["tpot_p50_ms"].gating
    assert by["tpot_p50_ms"].change_pct == pytest.approx(20.0, abs=1.0)
    assert by["ttft_p50_ms"].verdict == "unchanged"
    assert not by["tpot_p99_ms"].gating  # the tails as latency's: p99 reported only
    # a forward call on either side: no phase comparisons at all
    plain = decide_latency(
        latency_comparisons(base, factories.result("gen", "eager", 50.0), th, {}), th
    )
    assert {c.metric for c in plain} == {"latency_p50_ms", "latency_p95_ms", "latency_p99_ms"}


def test_phases_round_trip_and_stay_in_a_compact_baseline() -> None:
    r = with_phases(factories.result("gen", "eager", 50.0), 8.0, 6.0)
    doc = json.loads(json.dumps(run_of([r]).to_json()))
    back = Run.from_json(doc).results[0]
    assert back.phases == r.phases and back.workload == "generate"
    compact = back.compact()
    assert compact.phase_quantiles("tpot", 50.0) == r.phase_quantiles("tpot", 50.0)
    plain = dict(doc, results=[{k: v for k, v in doc["results"][0].items() if k != "phases"}])
    assert Run.from_json(plain).results[0].phases == ()  # a forward call's result


def test_new_tokens_that_differ_from_eagers_fail_a_compiled_fp32_variant_only() -> None:
    times = TokenTimes(torch.device("cpu"))
    clock = PhasedClock(_Steps(), times)
    clock.timed = [(8.0, 6.0)] * 4
    eager = torch.tensor([[1, 2, 3, 4, 5, 6]])
    times.tokens = torch.tensor([[1, 2, 3, 4, 9, 6]])  # one of the four new tokens differs
    assert token_agreement(times.tokens, eager, prompt=2) == 0.75

    class Ref:
        tokens = eager

    outcome = SamplingOutcome(WarmupOutcome(0, True, ()), ((1.0, 1.0), (1.0, 1.0)))
    base = factories.result("gen", "compile-default", 1.0, repeats=2, per_block=2)
    out = with_generation(base, clock, outcome, Ref(), 4, 1)  # type: ignore[arg-type]
    assert out.metrics.token_agreement == 0.75
    assert out.drift_check is not None and not out.drift_check.passed
    assert "1 of 4 new tokens differ from eager's" in out.details.notes
    assert base.drift_check is not None
    amp = replace(base, drift_check=replace(base.drift_check, tolerance_class="reduced-precision"))
    kept = with_generation(amp, clock, outcome, Ref(), 4, 1)  # type: ignore[arg-type]
    assert kept.drift_check is not None and kept.drift_check.passed


PLUGIN_TEST = """
import pytest
import torch
import transformers

@pytest.mark.perfguard(variants=["eager", "onnxruntime"])
def test_gpt2_generates(perfguard):
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=200, n_positions=32, bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    perfguard.generate(model, torch.randint(1, 200, (1, 6)), max_new_tokens=4)

@pytest.mark.perfguard(variants=["eager"])
def test_too_few_tokens(perfguard):
    perfguard.generate(torch.nn.Linear(2, 2), torch.ones(1, 2, dtype=torch.long), max_new_tokens=1)
"""


@pytest.mark.slow
def test_the_plugin_measures_a_generation_into_the_json_and_the_report(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_gen=PLUGIN_TEST)
    result = pytester.runpytest_subprocess(
        "--perfguard",
        "--perfguard-compare=none",
        "--perfguard-budget=0.2",
        "--perfguard-repeats=3",
        "--perfguard-device=cpu",
        "--perfguard-json=out.json",
        "-p",
        "no:cacheprovider",
        "-rs",
    )
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    out = result.stdout.str()
    assert "max_new_tokens must be a whole number of at least 2" in out
    doc = json.loads((pytester.path / "out.json").read_text())
    (gen,) = [r for r in doc["results"] if r["variant"] == "eager" and "gpt2" in r["test"]]
    assert gen["workload"] == "generate" and gen["status"] == "ok"
    assert gen["metrics"]["tpot_p50_ms"] > 0 and set(gen["phases"]) == {"ttft", "tpot"}
    (ort,) = [r for r in doc["results"] if r["variant"] == "onnxruntime"]
    assert ort["status"] == "skipped"
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "eager · generation" in report
    assert "| test | variant | TTFT p50 | TTFT p95 | TPOT p50 | TPOT p95 | tokens/s |" in report
    assert "(generation)" in out
    assert render_markdown(Run.from_json(doc)).count("· generation") >= 1
