"""The one registry: from a variant name to a built, runnable variant."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from perfguard.variants.amp import Amp
from perfguard.variants.aoti import AotInductor
from perfguard.variants.base import (
    Built,
    ModuleTransform,
    VariantUnavailableError,
    compiled_or_eager,
    model_size_bytes,
    weight_sparsity,
)
from perfguard.variants.compile import GRAPHED_ON_CUDA, POOL_NOTE, Compile
from perfguard.variants.ort import OnnxRuntime
from perfguard.variants.own import Engine, own_backend, own_transform
from perfguard.variants.prune import Prune
from perfguard.variants.quantize import BF16_ACTIVATIONS, Quantize, int8_fallbacks
from perfguard.variants.spec import TOLERANCE_CLASSES, Variant, VariantSpec, variant_of
from perfguard.variants.tensorrt import TensorRT
from perfguard.variants.workload import FORWARD, Building, Workload

TRANSFORMS: dict[str, ModuleTransform] = {"prune": Prune(), "quantize": Quantize()}
AMP = Amp()
COMPILE = Compile()
ORT = OnnxRuntime()
AOTI = AotInductor()
TENSORRT = TensorRT()


def tolerance_class(spec: VariantSpec) -> str:
    """A variant's drift class: its loosest part's."""
    classes = [variant_of(p).tolerance for p in spec.parts]
    return max(classes, key=TOLERANCE_CLASSES.index)


def unavailable_reason(spec: VariantSpec, device: torch.device) -> str | None:
    """Why `spec` cannot run on `device`, or None when it can (as far as can be told unbuilt)."""
    for part in spec.parts:
        declared = variant_of(part)
        if part.family in TRANSFORMS:
            reason = TRANSFORMS[part.family].unavailable_reason(part, device)
        elif part.family == "amp":
            reason = AMP.unavailable_reason(part, device)
        elif part.family == "compile":
            reason = COMPILE.unavailable_reason(part, device)
        elif part.family == "onnxruntime":
            reason = ORT.unavailable_reason(part, device)
        elif part.family == "aoti":
            reason = AOTI.unavailable_reason(part, device)
        elif part.family == "tensorrt":
            reason = TENSORRT.unavailable_reason(part, device)
        else:  # a part with a build of its own: what it declared
            reason = declared.unmet(device.type)
            if reason is None and declared.available is not None:
                reason = declared.available(device)
        if reason:
            return reason
    return None


def to_device(value: Any, device: torch.device) -> Any:
    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, value)


def build_variant(
    model: nn.Module,
    example_inputs: Sequence[Any],
    spec: VariantSpec,
    device: torch.device,
    kwargs: Mapping[str, Any] | None = None,
    workload: Workload = FORWARD,
    *,
    lent: bool = False,
) -> Built:
    """Build `spec` of `model` for `workload`: each call `model(*example_inputs, **kwargs)`,
    or a training step of it, or a greedy `model.generate` (`variants.workload`).

    `lent`: the caller lent the model itself (`lending.lent`: on `device`, in eval mode, given
    back afterwards), and a variant that leaves the weights alone runs it as it is. Otherwise,
    and for a variant that rewrites the weights (int8, pruning) or a training step, the build
    works on its own copy, which goes when the build does: the caller's model is never
    modified."""
    reason = workload.refuses(spec) or unavailable_reason(spec, device)
    if reason:
        raise VariantUnavailableError(reason)
    inputs = tuple(to_device(tuple(example_inputs), device))
    named: dict[str, Any] = to_device(dict(kwargs or {}), device)
    autocast, compiler = _autocast_and_compiler(spec, device)
    return workload.build(
        Building(
            model=model,
            inputs=inputs,
            named=named,
            spec=spec,
            device=device,
            autocast=autocast,
            autocast_dtype=_autocast_dtype(spec),
            compiler=compiler,
            tolerance_class=tolerance_class(spec),
            forward=lambda: _forward(model, inputs, named, spec, device, lent=lent),
        )
    )


def _forward(
    model: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    spec: VariantSpec,
    device: torch.device,
    *,
    lent: bool,
) -> tuple[nn.Module, Built]:
    """The variant's forward call: the model as the variant transforms it, and its build."""
    in_place = lent and not spec.changes_weights
    work = model if in_place else copy.deepcopy(model).to(device).eval()
    notes: list[str] = []
    backend: Variant | None = None
    for part in spec.parts:
        declared = variant_of(part)
        if part.family in TRANSFORMS:
            work = TRANSFORMS[part.family].apply(work, part, notes)
        elif declared.own and declared.stage == "compile":
            backend = declared
        elif declared.own:
            work, inputs = own_transform(declared, work, inputs, device, notes)
    pruned = spec.part("prune") is not None
    size = model_size_bytes(work)
    sparsity = weight_sparsity(work) if pruned else None
    if spec.part("onnxruntime") is not None:
        return work, _onnxruntime(work, inputs, named, spec, device, notes, size, sparsity)
    engine = None
    if spec.part("aoti") is not None:
        engine = AOTI.build(work, inputs, named, device)
    elif spec.part("tensorrt") is not None:
        engine = TENSORRT.build(work, inputs, named, device, _autocast_dtype(spec))
    elif backend is not None:
        engine = own_backend(backend, work, inputs, named, device)
    if engine is not None:
        return work, _engine(engine, work, inputs, named, spec, notes, size, sparsity)
    return work, _torch(work, inputs, named, spec, device, notes, size, sparsity)


def _autocast_and_compiler(
    spec: VariantSpec, device: torch.device
) -> tuple[Callable[[], contextlib.AbstractContextManager[object]], Callable[[Any], Any] | None]:
    """The autocast context (a no-op without an amp part or int4 weights) and the compiler
    (None without a compile part) that `spec` runs under, as every build (forward, training,
    generation) uses them."""
    autocast = AMP.context(_autocast_dtype(spec), device)
    compile_part = spec.part("compile")
    return autocast, COMPILE.compiler(compile_part) if compile_part is not None else None


def _autocast_dtype(spec: VariantSpec) -> Any:
    """The amp part's dtype; bfloat16 for int4 weights (torchao's int4 kernels take bfloat16
    activations); else None."""
    amp_part, quantize_part = spec.part("amp"), spec.part("quantize")
    if amp_part is not None:
        return AMP.dtype(amp_part)
    if quantize_part is not None and quantize_part.name in BF16_ACTIVATIONS:
        return torch.bfloat16
    return None


def _onnxruntime(
    work: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    spec: VariantSpec,
    device: torch.device,
    notes: list[str],
    size: int,
    sparsity: float | None,
) -> Built:
    """The model exported to ONNX and run by an ONNX Runtime session, timed on the host."""
    details: dict[str, Any] = {}
    ort_call, fetch = ORT.build(work, inputs, device, details, named)
    return Built(
        make_call=ort_call,
        timing="host",
        tolerance_class=tolerance_class(spec),
        model_size_bytes=details.get("onnx_model_bytes", size),
        sparsity=sparsity,
        notes=notes,
        details=details,
        fetch_outputs=fetch,
        module=work,
        eager_call=lambda: work(*inputs, **named),
        memory_unseen=(
            "not measured: ONNX Runtime allocates from its own CUDA arena, which torch's "
            "allocator cannot see"
            if device.type == "cuda"
            else None
        ),
    )


def _engine(
    engine: Engine,
    work: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    spec: VariantSpec,
    notes: list[str],
    size: int,
    sparsity: float | None,
) -> Built:
    """A model built ahead of time into a callable of its own (an AOTInductor package, a
    TensorRT engine, a team's backend): timed on the device clock, under autocast where the
    variant has an amp part (and the engine was not built in its dtype); its build is its
    compile time."""
    autocast = AMP.context(_autocast_dtype(spec) if engine.autocast else None, engine.device)
    run = engine.run

    def make_call() -> Callable[[], Any]:
        def call() -> Any:
            with torch.inference_mode(), autocast():
                return run(*inputs, **named)

        return call

    return Built(
        make_call=make_call,
        timing="device",
        tolerance_class=tolerance_class(spec),
        build_s=engine.build_s,
        autocast_dtype=_autocast_dtype(spec),
        model_size_bytes=size,
        sparsity=sparsity,
        notes=[*notes, *engine.notes],
        details=dict(engine.details),
        fetch_outputs=engine.fetch_outputs,
        module=work,
        eager_call=lambda: work(*inputs, **named),
    )


def _torch(
    work: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    spec: VariantSpec,
    device: torch.device,
    notes: list[str],
    size: int,
    sparsity: float | None,
) -> Built:
    """The (transformed) module in inference mode, under autocast and torch.compile as the
    variant says."""
    autocast, compiler = _autocast_and_compiler(spec, device)
    compile_part = spec.part("compile")
    if device.type == "cuda" and compile_part is not None and compile_part.name in GRAPHED_ON_CUDA:
        notes.append(POOL_NOTE)  # which figure is which, for this variant
    quantize_part = spec.part("quantize")
    if device.type == "cuda" and quantize_part is not None and quantize_part.name == "int8-dynamic":
        notes.extend(int8_fallbacks(work, lambda: work(*inputs, **named)))

    def make_call(compiled: bool = True) -> Callable[[], Any]:
        fn = compiled_or_eager(work, compiler, compiled)

        def at(args: Sequence[Any]) -> Callable[[], Any]:
            """This call's compiled function with other positional inputs (a shape sweep)."""

            def call() -> Any:
                with torch.inference_mode(), autocast():
                    return fn(*args, **named)

            return call

        call = at(inputs)
        call.at = at  # type: ignore[attr-defined]
        call.inputs = inputs  # type: ignore[attr-defined]
        return call

    return Built(
        make_call=make_call,
        timing="device",
        tolerance_class=tolerance_class(spec),
        compiled=compiler is not None,
        autocast_dtype=_autocast_dtype(spec),
        model_size_bytes=size,
        sparsity=sparsity,
        notes=notes,
        details={},
        module=work,
        eager_call=make_call(compiled=False),
    )


def batch_of(inputs: Sequence[Any], kwargs: Mapping[str, Any] | None) -> int:
    """Items per call: the leading dimension of the first input tensor (positional first,
    then keyword), 1 where there is none or it has no dimension."""
    for leaf in pytree.tree_leaves((tuple(inputs), dict(kwargs or {}))):
        if isinstance(leaf, torch.Tensor):
            return int(leaf.shape[0]) if leaf.dim() > 0 else 1
    return 1
