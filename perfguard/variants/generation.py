"""Greedy generation as a workload: one sample is one whole `model.generate`, its tokens timed.

`perfguard.generate(model, input_ids, max_new_tokens=N)` runs a Hugging Face-style model's
`generate` greedily (`do_sample=False`, one beam) for exactly N new tokens (`min_new_tokens=N`:
an end-of-sequence token ends nothing, so every run makes the same tokens' worth of work). A
streamer notes the time each token arrives (on CUDA after a synchronize, so the time is the
token's, not its launch's): the time to the first token (TTFT: the prompt's prefill and the
first decode) and the time per output token after it (TPOT) come from inside the sample, and
`tokens_per_s` is the batch's new tokens over the whole generation's median.

Compiled variants generate the way transformers' own compiled generation does: a static KV
cache (fixed shapes, so the decode step compiles once), the decode steps through the compiled
`forward` (in the variant's mode; `reduce-overhead` replays the decode step as a CUDA graph on
a GPU) and the prompt's prefill through the eager one (one prompt, one shape: compiling it
would only add a second graph, and on an H200 a prefill and a decode graph recorded into the
same CUDA-graph tree crashed the process).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from perfguard.errors import PerfguardError
from perfguard.variants.base import Built
from perfguard.variants.spec import VariantSpec, variant_of
from perfguard.variants.workload import Autocast, Building, Workload


class GenerationError(PerfguardError):
    """A generation test that cannot run as written; the message says what to change."""


@dataclass(frozen=True)
class Generation(Workload):
    """What `perfguard.generate` measures: `max_new_tokens` greedy tokens after the prompt."""

    name: ClassVar[str] = "generate"

    max_new_tokens: int

    def key(self) -> str:
        return f"generate{self.max_new_tokens}"  # eager's tokens depend on how many it makes

    def refuses(self, spec: VariantSpec) -> str | None:
        backend = [p for p in spec.parts if p.family not in ("compile", "eager")]
        if any(variant_of(p).stage == "compile" for p in backend):
            return (
                f"{spec.name} runs a forward graph built ahead of time, not model.generate: "
                "a generation is measured under eager, compile-*, amp-*, quantization, "
                "pruning and the parts that change the model"
            )
        return None

    def reference_tokens(
        self, work: nn.Module, args: Sequence[Any], named: Mapping[str, Any]
    ) -> Any:
        return generated_tokens(work, tuple(args), dict(named), self)

    def drift_view(
        self,
        work: nn.Module,
        args: Sequence[Any],
        named: Mapping[str, Any],
        device: torch.device,
        autocast: Autocast,
        tokens: Any,
    ) -> Any:
        with torch.inference_mode(), autocast():
            return first_steps_logits(work, tuple(args), dict(named), tokens)

    def build(self, building: Building) -> Built:
        b = building
        work, base = b.forward()
        return build_generation(
            work,
            b.inputs,
            b.named,
            b.device,
            self,
            compiler=b.compiler,
            autocast=b.autocast,
            base=base,
        )

    def __post_init__(self) -> None:
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise GenerationError(
                f"max_new_tokens must be a whole number of at least 2 (a first token and one "
                f"after it, for TTFT and TPOT), got {n!r}"
            )


@dataclass
class TokenTimes:
    """A streamer for `generate`: `put` is called with the prompt, then with each new token.
    Each finished generation adds its (TTFT, TPOT) in milliseconds to `phases`."""

    device: torch.device
    phases: list[tuple[float, float]] = field(default_factory=list)
    tokens: torch.Tensor | None = None  # the drift check's generation: its tokens
    _started: float = 0.0
    _times: list[float] = field(default_factory=list)

    def start(self) -> None:
        self._times = []
        self._started = time.perf_counter()

    def put(self, value: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._times.append(time.perf_counter())

    def end(self) -> None:
        times = self._times[1:]  # the first put is the prompt
        if len(times) < 2:
            raise GenerationError(f"generate() streamed {len(times)} new token(s); expected more")
        ttft = (times[0] - self._started) * 1e3
        tpot = (times[-1] - times[0]) * 1e3 / (len(times) - 1)
        self.phases.append((ttft, tpot))


PHASES = ("ttft", "tpot")
"""The per-sample figures a generation gives besides its whole time, in this order."""


class PhasedClock:
    """A clock that also keeps, for each call it times, the (TTFT, TPOT) the call recorded."""

    def __init__(self, clock: Any, times: TokenTimes) -> None:
        self.inner, self.times = clock, times
        self.timed: list[tuple[float, float]] = []

    def __getattr__(self, name: str) -> Any:  # name, flush buffer: the inner clock's
        return getattr(self.inner, name)

    def time_call(self, fn: Callable[[], Any]) -> float:
        elapsed = float(self.inner.time_call(fn))
        self.timed.append(self.times.phases[-1])
        return elapsed

    def per_block(
        self, warmup_calls: int, blocks: Sequence[Sequence[float]]
    ) -> dict[str, list[list[float]]]:
        """The timed calls' phases, split as the sampler split the calls into blocks (the
        first `warmup_calls` were the warm-up's)."""
        rest = self.timed[warmup_calls:]
        out: dict[str, list[list[float]]] = {name: [] for name in PHASES}
        start = 0
        for block in blocks:
            part = rest[start : start + len(block)]
            start += len(block)
            for i, name in enumerate(PHASES):
                out[name].append([p[i] for p in part])
        return out


def generate_of(model: nn.Module) -> Callable[..., Any]:
    """The model's `generate`; a GenerationError that says what is needed where it has none."""
    check_generates(model)
    fn: Callable[..., Any] = getattr(model, "generate")  # noqa: B009 (typed: nn.Module lacks it)
    return fn


def check_generates(model: nn.Module) -> None:
    if not callable(getattr(model, "generate", None)):
        raise GenerationError(
            f"perfguard.generate() needs a model with a Hugging Face-style generate() "
            f"(transformers' GenerationMixin, as in AutoModelForCausalLM); "
            f"{type(model).__name__} has none: measure its forward call with perfguard.run"
        )


def _settings(model: nn.Module, generation: Generation) -> dict[str, Any]:
    config = getattr(model, "generation_config", None)
    pad = getattr(config, "pad_token_id", None)
    if pad is None:
        eos = getattr(config, "eos_token_id", None)
        pad = (eos[0] if isinstance(eos, list | tuple) else eos) if eos is not None else 0
    n = generation.max_new_tokens
    return {
        "max_new_tokens": n,
        "min_new_tokens": n,  # no end-of-sequence token ends a run early
        "do_sample": False,
        "num_beams": 1,
        "pad_token_id": pad,
    }


def build_generation(
    work: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    device: torch.device,
    generation: Generation,
    *,
    compiler: Callable[[Any], Callable[..., Any]] | None,
    autocast: Callable[[], contextlib.AbstractContextManager[object]],
    base: Built,
) -> Built:
    """`base` (the forward variant's build of `work`: notes, sizes, tolerance class) as a
    generation: each call one greedy `generate` of `generation.max_new_tokens` tokens."""
    run = generate_of(work)  # checked once here, not in every timed call
    settings = _settings(work, generation)
    times = TokenTimes(device)
    forward = work.forward
    if compiler is not None:
        config: Any = work.generation_config
        config.cache_implementation = "static"  # fixed shapes: the decode step compiles once
        config.disable_compile = True  # perfguard compiles forward itself, in its mode

    def make_call(compiled: bool = True) -> Callable[[], Any]:
        fn = decode_compiled(forward, compiler) if compiled and compiler is not None else forward

        def generate(**extra: Any) -> Any:
            work.forward = fn  # this call's forward (compiled or not), whatever ran last
            with torch.inference_mode(), autocast():
                return run(*inputs, **named, **settings, **extra)

        def call() -> Any:
            times.start()
            return generate(streamer=times)

        call.with_logits = lambda: generate(  # type: ignore[attr-defined]
            return_dict_in_generate=True, output_logits=True
        )
        return call

    def first_logits(call: Callable[[], Any]) -> Any:
        """The drift check's outputs: the first two new tokens' logits (the prefill's and a
        decode step's), from a generation by the same (compiled) forward as the timed calls;
        its tokens are kept for the agreement."""
        out = call.with_logits()  # type: ignore[attr-defined]
        times.tokens = out.sequences
        return torch.stack([out.logits[0], out.logits[1]], dim=1).float()

    return Built(
        make_call=make_call,
        timing=base.timing,
        tolerance_class=base.tolerance_class,
        compiled=base.compiled,
        model_size_bytes=base.model_size_bytes,
        sparsity=base.sparsity,
        notes=base.notes,
        details={"max_new_tokens": generation.max_new_tokens},
        fetch_outputs=first_logits,
        autocast_dtype=base.autocast_dtype,
        module=work,
        eager_call=base.eager_call,
        generation=times,
    )


def decode_compiled(
    forward: Callable[..., Any], compiler: Callable[[Any], Callable[..., Any]]
) -> Callable[..., Any]:
    """`forward` compiled for the decode steps (one new token a row); the prompt's prefill
    calls the eager `forward`, as transformers' compiled generation does."""
    compiled = compiler(forward)

    def step(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        decoding = ids is not None and ids.shape[-1] == 1  # (a prefill may pass inputs_embeds)
        return (compiled if decoding else forward)(*args, **kwargs)

    return step


def first_steps_logits(
    model: nn.Module, args: tuple[Any, ...], named: dict[str, Any], tokens: torch.Tensor
) -> Any:
    """Eager's logits for the first two new tokens, as greedy generation makes them: the
    prompt's prefill, then one cached decode step of the first new token of `tokens` (eager's):
    what a generation's drift is judged on (the second is a decode step, which is what a
    compiled generation compiles). Shape (batch, 2, vocabulary)."""
    prompt, *rest = args
    first = model(prompt, *rest, **named, use_cache=True)
    token = tokens[:, prompt.shape[-1] : prompt.shape[-1] + 1].to(prompt.device)
    extra = {k: v for k, v in named.items() if k != "attention_mask"}
    if "attention_mask" in named:  # the new token is attended to as the prompt is
        mask = named["attention_mask"]
        extra["attention_mask"] = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)
    second = model(token, past_key_values=first.past_key_values, use_cache=True, **extra)
    return torch.stack([first.logits[:, -1, :], second.logits[:, -1, :]], dim=1)


def first_token_only(
    out: Any, reference_fp32: Any, reference_fp64: Any, batch: int
) -> tuple[Any, Any, Any]:
    """`out` and the references (flat, the first two new tokens' logits a row) cut to the
    first new token's logits: where a variant's first new token is not eager's, its second
    token's logits follow another prefix and cannot be compared."""

    def first(flat: Any) -> Any:
        return None if flat is None else flat.reshape(batch, 2, -1)[:, 0, :].reshape(-1)

    return first(out), first(reference_fp32), first(reference_fp64)


def generated_tokens(
    model: nn.Module, args: tuple[Any, ...], named: dict[str, Any], generation: Generation
) -> torch.Tensor:
    """Eager's greedy tokens: what every variant's tokens are compared with."""
    check_generates(model)
    with torch.inference_mode():
        out = generate_of(model)(*args, **named, **_settings(model, generation))
    tokens = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
    if not isinstance(tokens, torch.Tensor):
        raise GenerationError(
            f"{type(model).__name__}.generate() returned {type(out).__name__}, not the token "
            "ids: perfguard.generate() measures a generate() that returns them (a tensor, or "
            "an output with .sequences), as transformers' does"
        )
    return tokens


def token_agreement(tokens: torch.Tensor, reference: torch.Tensor, prompt: int) -> float:
    """The share of new tokens identical to eager's, position by position."""
    new, ref = tokens[:, prompt:].cpu(), reference[:, prompt:].cpu()
    if new.shape != ref.shape or new.numel() == 0:
        return 0.0
    return float((new == ref).float().mean())
