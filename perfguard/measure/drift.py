"""Numerical drift of a variant's outputs.

Two references, for two questions:
- the figures (max abs, max rel, cosine) compare against fp32 eager on the same inputs:
  "how far from what I ship today", so eager's own drift is 0 by construction;
- the pass/fail judgement compares against eager in fp64 where the model allows: a variant
  passes when its error against fp64 stays within its tolerance class relative to eager's
  own fp32 error, the way PyTorch's compiler benchmarks judge accuracy.

Both bounds are measured, not assumed: eager runs three times, and what it changes between
identical calls (atomics in scatter_add or index_add on CUDA) is allowed to every class, so
"exact" means "as exact as eager itself is"; a model that changes more than a compiled
variant's tolerance between them (random in eval mode) is not judged at all, and says so;
and a reduced-precision variant is held to the error of eager under the same autocast dtype,
so fp16 gets fp16's error, not bf16's eight times larger one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils import _pytree as pytree

from perfguard.bounds import TOLERANCES, DriftTolerance
from perfguard.errors import PerfguardError
from perfguard.records import DriftCheck
from perfguard.variants.base import first_line
from perfguard.variants.generation import first_token_only
from perfguard.variants.workload import FORWARD, Workload

TF32_FLOOR = 1e-3
"""A compiled fp32 variant's extra error where TF32 is allowed on CUDA (cuDNN's convolutions
by PyTorch's default, matmuls by the user's choice), relative to the output's RMS: a compiler
that changes a convolution's layout gets other cuDNN kernels, TF32's among them, where eager's
were full fp32 (an H200, a small CNN, compile-default: 1.9e-4 of RMS against eager's 1.4e-7)."""

NONDETERMINISTIC_FLOOR = 1e-4
"""Eager's own call-to-call spread, relative to the output's RMS, past which a model is not
deterministic enough to judge drift on (a layer dropped at random in eval mode): at least a
compiled fp32 variant's tolerance, and a variant's class's own where it is larger. What
atomics on CUDA change between identical calls (1e-7 of RMS) is far below it, and is allowed
to every class instead."""

REDUCED_PRECISION_FLOOR = 1e-3
"""With eager's own error in the reduced dtype measured, what a compiler's reordering may
add on top of twice that, relative to the output's RMS."""


class NonFiniteOutputError(PerfguardError, ValueError):
    """The outputs hold NaN or Inf."""


def flatten_outputs(outputs: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """All floating outputs (tensors or numpy arrays, nested anyhow) as one float64 vector."""
    leaves = pytree.tree_leaves(outputs)
    parts: list[np.ndarray[Any, np.dtype[np.float64]]] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if leaf.is_floating_point() or leaf.is_complex():
                parts.append(leaf.detach().to("cpu", torch.float64).reshape(-1).numpy())
        elif isinstance(leaf, np.ndarray) and np.issubdtype(leaf.dtype, np.floating):
            parts.append(leaf.astype(np.float64).reshape(-1))
    if not parts:
        raise ValueError("the model returned no floating-point tensors to compare")
    return np.concatenate(parts)


@dataclass(frozen=True)
class Reference:
    """Eager outputs in fp32 (what ships) and in fp64 (closest to exact), flattened."""

    fp32: np.ndarray[Any, np.dtype[np.float64]]
    fp64: np.ndarray[Any, np.dtype[np.float64]] | None
    fp64_note: str = ""
    fp32_spread: float = 0.0  # RMS difference between two identical eager fp32 calls
    tokens: Any = None  # a generation's: eager's greedy tokens, prompt included


def _double(value: Any) -> Any:
    return pytree.tree_map(
        lambda x: x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x,
        value,
    )


def _eager_outputs(
    work: nn.Module,
    args: Sequence[Any],
    named: Mapping[str, Any],
    device: torch.device,
    workload: Workload,
    autocast: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
    tokens: Any = None,
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """What drift is judged on, from eager, flat (`Workload.drift_view`: the outputs of a
    forward call, a training step's loss and gradients, a generation's first two tokens'
    logits, `tokens` being eager's)."""
    return flatten_outputs(workload.drift_view(work, args, named, device, autocast, tokens))


FP64_PIECE_FLOOR = 64 * 2**20
FP64_PIECE_SHARE = 0.10
"""The fp64 reference is computed piece by piece (`lending.in_fp64`), each module's weights in
fp64 only while it runs; what that holds beside the model is the largest module's weights in
fp64. Where that is more than 10% of the model's bytes (and more than 64 MiB), the fp64 pass
would make perfguard's footprint the model's and then some (four Linear(8192, 8192) layers:
each 537 MB in fp64, half the 1.07 GB model): the drift is judged on the model's own
precision instead (`reference: fp32`), with eager's call-to-call spread as its own error,
and the result says so."""


def compute_reference(
    model: nn.Module,
    inputs: Sequence[Any],
    device: torch.device,
    kwargs: Mapping[str, Any] | None = None,
    workload: Workload = FORWARD,
) -> Reference:
    """Run eager fp32 and, where the model allows, eager fp64. Computed once per test.
    For another `workload`, what is compared is the first step's loss and gradients (a
    training step) or the first two new tokens' logits and the tokens (a generation).

    No second copy of the model is made on the device for a forward call or a generation:
    the model itself runs (`lending.lent`), and fp64 runs one module at a time
    (`lending.in_fp64`); a training step works on a copy, as its variants do."""
    from perfguard.variants.registry import to_device

    args = to_device(tuple(inputs), device)
    named = to_device(dict(kwargs or {}), device)
    with workload.workspace(model, device) as work:
        tokens = workload.reference_tokens(work, args, named)
        fp32 = _eager_outputs(work, args, named, device, workload, tokens=tokens)
        if not np.all(np.isfinite(fp32)):
            raise NonFiniteOutputError("eager outputs hold NaN or Inf")
        # two more identical calls: what eager itself changes between them (a third makes a
        # model random in eval mode all but certain to show it)
        spread = 0.0
        for _ in range(2):
            again = _eager_outputs(work, args, named, device, workload, tokens=tokens)
            if again.shape == fp32.shape:
                spread = max(spread, _rms(again - fp32))
        fp64, note = _fp64_outputs(work, args, named, device, workload, tokens)
    if fp64 is None:
        return Reference(fp32, None, note, spread, tokens)
    if fp64.shape != fp32.shape:
        return Reference(fp32, None, "fp64 outputs differ in shape; judged on fp32", spread, tokens)
    return Reference(fp32, fp64, fp32_spread=spread, tokens=tokens)


def _fp64_outputs(
    work: nn.Module,
    args: Any,
    named: Any,
    device: torch.device,
    workload: Workload,
    tokens: Any,
) -> tuple[np.ndarray[Any, np.dtype[np.float64]] | None, str]:
    """Eager's outputs in fp64, or None and why not: a training step's own copy converted
    whole, the model itself one module at a time (`lending.in_fp64`)."""
    from perfguard.variants.base import model_size_bytes
    from perfguard.variants.lending import fp64_bytes_of_largest_piece, in_fp64

    running: contextlib.AbstractContextManager[nn.Module]
    if workload.copies_model:  # its own copy: converted whole
        running = contextlib.nullcontext(work.double())
    else:
        piece = fp64_bytes_of_largest_piece(work)
        if piece > max(FP64_PIECE_FLOOR, FP64_PIECE_SHARE * model_size_bytes(work)):
            return None, (
                f"its largest module holds {piece / 2**20:,.0f} MiB of weights in fp64, more "
                f"than {FP64_PIECE_SHARE:.0%} of the model: judged on the model's own precision"
            )
        running = in_fp64(work)
    try:
        with running as fp64:
            out = _eager_outputs(
                fp64, _double(args), _double(named), device, workload, tokens=tokens
            )
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        return None, f"the model does not run in fp64 ({first_line(exc)}); judged on fp32"
    return out, ""


def precision_error(
    model: nn.Module,
    inputs: Sequence[Any],
    device: torch.device,
    dtype: torch.dtype,
    reference: Reference,
    kwargs: Mapping[str, Any] | None = None,
    workload: Workload = FORWARD,
) -> float:
    """RMS error of eager under autocast to `dtype` against the high-precision reference:
    the error that precision itself brings, which a reduced-precision variant is held to."""
    from perfguard.variants.registry import to_device

    args = to_device(tuple(inputs), device)
    named = to_device(dict(kwargs or {}), device)
    with workload.workspace(model, device) as work:
        out = _eager_outputs(
            work,
            args,
            named,
            device,
            workload,
            lambda: torch.autocast(device.type, dtype=dtype),
            reference.tokens,
        )
    high = reference.fp64 if reference.fp64 is not None else reference.fp32
    return _rms(out - high) if out.shape == high.shape else math.inf


@dataclass(frozen=True)
class DriftFigures:
    max_abs: float
    max_rel: float
    cosine: float


def figures(out: np.ndarray[Any, Any], ref: np.ndarray[Any, Any]) -> DriftFigures:
    """max abs; max rel (max abs over the reference's largest magnitude); cosine similarity."""
    if out.shape != ref.shape:
        raise ValueError(f"outputs have {out.size} values, the eager reference {ref.size}")
    diff = np.abs(out - ref)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    if np.array_equal(out, ref):
        cosine = 1.0
    else:
        norm = float(np.linalg.norm(out) * np.linalg.norm(ref))
        cosine = float(np.dot(out, ref) / norm) if norm > 0 else 0.0
    return DriftFigures(max_abs, max_rel, min(max(cosine, -1.0), 1.0))


def _rms(x: np.ndarray[Any, Any]) -> float:
    return float(np.sqrt(np.mean(np.square(x)))) if x.size else 0.0


def judge(
    out: np.ndarray[Any, Any],
    reference: Reference,
    tolerance_class: str,
    override: DriftTolerance = None,
    precision_error: float | None = None,
    tf32: bool = False,
) -> DriftCheck:
    """Pass when error(variant, fp64) <= multiplier * (error(eager, fp64) + eager's own
    call-to-call spread) + tol * rms(fp64).

    `precision_error`: for a reduced-precision variant, the error of eager under the same
    autocast dtype (`precision_error()`), which then stands for eager's error, and the class's
    fixed tolerance shrinks to a floor for the reordering a compiler may add. `tf32`: TF32 is
    allowed where the variant ran (`tf32_allowed`), and a compiled fp32 variant gets
    TF32_FLOOR."""
    multiplier, tol = TOLERANCES[tolerance_class]
    if tf32 and tolerance_class == "compiled-fp32":
        tol = max(tol, TF32_FLOOR)
    high = reference.fp64 if reference.fp64 is not None else reference.fp32
    error = _rms(out - high)
    eager_error = _rms(reference.fp32 - high)
    baseline = eager_error
    measured = precision_error is not None and math.isfinite(precision_error)
    if tolerance_class == "reduced-precision" and precision_error is not None and measured:
        baseline = max(precision_error, eager_error)
        tol = REDUCED_PRECISION_FLOOR
    if isinstance(override, Mapping):
        tol = float(override.get(tolerance_class, tol))
    elif override is not None:
        tol = float(override)
    # a hair of slack so that "exact" tolerates the last bit of a reduction's order
    allowed = (
        multiplier * (baseline + reference.fp32_spread) + tol * _rms(high) + 1e-12 * _rms(high)
    )
    spread = reference.fp32_spread / _rms(high) if _rms(high) > 0 else 0.0
    noisy = spread > max(tol, NONDETERMINISTIC_FLOOR)
    return DriftCheck(
        tolerance_class=tolerance_class,
        passed=noisy or bool(error <= allowed),  # not judged is no failure
        error=error,
        eager_error=eager_error,
        allowed=allowed,
        reference="fp64" if reference.fp64 is not None else "fp32",
        nondeterministic=spread if noisy else None,
    )


FIRST_TOKEN_ONLY = (
    "its first new token differs from eager's in some row: drift judged on the first new "
    "token's logits alone (the second's follow another prefix)"
)


def drift_view(
    out: np.ndarray[Any, Any], reference: Reference, tokens: Any, new_tokens: int
) -> tuple[np.ndarray[Any, Any], Reference, str | None]:
    """What a generation's drift is judged on: the first two new tokens' logits, each
    following eager's tokens; where the variant's first new token is not eager's, the first's
    alone (and a note that says so)."""
    if tokens is None or reference.tokens is None or tokens.shape != reference.tokens.shape:
        return out, reference, None
    first = int(reference.tokens.shape[1]) - new_tokens  # the first new token's position
    if bool((tokens[:, first].cpu() == reference.tokens[:, first].cpu()).all()):
        return out, reference, None
    batch = int(reference.tokens.shape[0])
    cut, fp32, fp64 = first_token_only(out, reference.fp32, reference.fp64, batch)
    return cut, replace(reference, fp32=fp32, fp64=fp64), FIRST_TOKEN_ONLY


def check(
    out: np.ndarray[Any, Any],
    reference: Reference,
    tolerance_class: str,
    override: DriftTolerance,
    own_precision: Callable[[], float] | None,
    tf32: bool,
    generated: tuple[Any, int] | None = None,
) -> tuple[DriftCheck, DriftFigures, str | None]:
    """A variant's drift check and figures against `reference`; `own_precision`: eager's
    error under the variant's autocast, computed when needed; `generated`: a generation's
    tokens and its count of new tokens, and then the note where its first new token is not
    eager's."""
    note = None
    if generated is not None:
        out, reference, note = drift_view(out, reference, *generated)
    precision = own_precision() if own_precision is not None else None
    verdict = judge(out, reference, tolerance_class, override, precision, tf32)
    return verdict, figures(out, reference.fp32), note


def tf32_allowed(module: nn.Module, device: torch.device) -> bool:
    """Whether kernels of `module` may run in TF32 on `device`: matmuls where the user allowed
    it, convolutions where cuDNN is allowed it (PyTorch's default) and the model has some."""
    if device.type != "cuda":
        return False
    if torch.backends.cuda.matmul.allow_tf32:
        return True
    convs = any(isinstance(m, nn.modules.conv._ConvNd) for m in module.modules())
    return convs and bool(torch.backends.cudnn.allow_tf32)
