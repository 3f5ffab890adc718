"""Variant names (docs/reference.md, "Variants"): the registry of every variant perfguard can
build, and parsing and validation of names, without torch.

A variant name is one or more registered parts joined by `+`, in the order of their stages:
`[prune] [quantize] [layout] [amp] [compile]`, or `eager`, or `[prune+]onnxruntime`. A pruning
part may carry its amount: `prune-l1-unstructured:0.7`.

The registry (`VARIANTS`) holds one `Variant` per part name: perfguard's own families first,
then a team's, added by the pytest hook `pytest_perfguard_variants(registry)` or by an
installed package's entry point in the group `perfguard.variants`. A team's `Variant` carries
its own build; perfguard's families are built by `perfguard.variants.registry`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from perfguard.variants.declared import (
    ENTRY_POINT_GROUP,
    RECORD_ONLY,
    STAGES,
    TOLERANCE_CLASSES,
    Changed,
    Registering,
    UnknownVariantError,
    Variant,
    VariantRegistry,
)

__all__ = [
    "BASE_VARIANTS",
    "DEFAULT_PRUNE_AMOUNT",
    "DEFAULT_VARIANTS",
    "ENTRY_POINT_GROUP",
    "RECORD_ONLY",
    "STAGES",
    "TOLERANCE_CLASSES",
    "VARIANTS",
    "Changed",
    "Registering",
    "UnknownVariantError",
    "Variant",
    "VariantPart",
    "VariantRegistry",
    "VariantSpec",
    "parse_variant",
    "parse_variant_list",
    "variant_of",
]

DEFAULT_PRUNE_AMOUNT = {"prune-l1-unstructured": 0.5, "prune-ln-structured": 0.3}


@dataclass(frozen=True)
class VariantPart:
    family: str
    name: str
    amount: float | None = None

    def __str__(self) -> str:
        return self.name if self.amount is None else f"{self.name}:{self.amount:g}"


@dataclass(frozen=True)
class VariantSpec:
    """A parsed variant name. `name` is exactly what the user wrote (it is the item id)."""

    name: str
    parts: tuple[VariantPart, ...]

    def part(self, family: str) -> VariantPart | None:
        for p in self.parts:
            if p.family == family:
                return p
        return None

    @property
    def compile_mode(self) -> str | None:
        part = self.part("compile")
        return None if part is None else part.name.removeprefix("compile-")

    @property
    def changes_weights(self) -> bool:
        """Whether building it rewrites the weights (int8, pruning, channels_last): it works
        on a copy of the model, the others on the model itself."""
        return any(VARIANTS[p.name].changes_weights for p in self.parts)

    @property
    def is_compiled(self) -> bool:
        return self.part("compile") is not None


def _perfguards_own() -> VariantRegistry:
    registry = VariantRegistry()
    own = [
        *(
            Variant(name, None, "prune", tolerance="pruned", changes_weights=True, family="prune")
            for name in ("prune-l1-unstructured", "prune-ln-structured")
        ),
        *(
            Variant(name, None, "quantize", tolerance=t, changes_weights=True, family="quantize")
            for name, t in (
                ("int8-dynamic", "int8"),
                ("int8-weight-only", "int8"),
                ("int4-weight-only", "low-precision"),
                ("fp8", "low-precision"),
            )
        ),
        Variant(
            "channels-last",
            "perfguard.variants.layout:channels_last",
            "layout",
            tolerance="compiled-fp32",
            changes_weights=True,
            inputs="perfguard.variants.layout:channels_last_inputs",
            about="the model and its 4-d inputs in channels_last memory format",
        ),
        Variant("amp-bf16", None, "amp", tolerance="reduced-precision", family="amp"),
        Variant("amp-fp16", None, "amp", tolerance="reduced-precision", family="amp"),
        *(
            Variant(f"compile-{mode}", None, tolerance="compiled-fp32", family="compile")
            for mode in (
                "default",
                "reduce-overhead",
                "max-autotune",
                "max-autotune-no-cudagraphs",
                "dynamic",
            )
        ),
        Variant("onnxruntime", None, tolerance="compiled-fp32", composes=("prune",)),
        Variant(
            "aot-inductor",
            None,
            tolerance="compiled-fp32",
            composes=("prune", "quantize"),
            family="aoti",
        ),
        Variant(
            "tensorrt",
            None,
            tolerance="compiled-fp32",
            devices=("cuda",),
            composes=("prune", "amp"),
        ),
        Variant("eager", None, composes=False),
    ]
    for variant in own:
        registry.add(variant)
    return registry


VARIANTS = _perfguards_own()
"""The process's registry: perfguard's own parts, and a session's or an installed package's."""

BASE_VARIANTS: tuple[str, ...] = tuple(VARIANTS._parts)
"""perfguard's own names, as the reference lists them."""

DEFAULT_VARIANTS: tuple[str, ...] = ("eager", "compile-default")
"""The built-in default set, overridden by ini, marker and command line in that order."""


def _parse_part(text: str, whole: str) -> VariantPart:
    name, sep, amount_text = text.partition(":")
    declared = VARIANTS.get(name)
    if declared is None:
        raise UnknownVariantError(
            f"unknown variant {whole!r} (no part {name!r}); known: {VARIANTS.known()}"
        )
    family = declared.family
    if not sep:
        return VariantPart(family, name, DEFAULT_PRUNE_AMOUNT.get(name))
    if family != "prune":
        raise UnknownVariantError(
            f"variant {whole!r}: only pruning takes an amount (':0.5'), not {name!r}"
        )
    try:
        amount = float(amount_text)
    except ValueError:
        amount = float("nan")
    if not 0.0 < amount < 1.0:
        raise UnknownVariantError(
            f"variant {whole!r}: the pruning amount must be a number between 0 and 1, "
            f"got {amount_text!r}"
        )
    return VariantPart(family, name, amount)


def parse_variant(text: str) -> VariantSpec:
    """Parse and validate a variant name; raise `UnknownVariantError` saying what is wrong."""
    whole = text.strip()
    if not whole:
        raise UnknownVariantError("empty variant name")
    if whole == RECORD_ONLY:
        raise UnknownVariantError(
            f"{RECORD_ONLY!r} is recorded from tests that use pytest-benchmark's `benchmark` "
            "fixture; it cannot be chosen as a variant"
        )
    parts = tuple(_parse_part(p.strip(), whole) for p in whole.split("+"))
    families = [p.family for p in parts]
    if len(set(families)) != len(families):
        raise UnknownVariantError(f"variant {whole!r} names the same kind of variant twice")
    declared = [VARIANTS[p.name] for p in parts]
    for d in declared:
        others = set(families) - {d.family}
        if not others or d.composes is True:
            continue
        if d.composes is False:
            raise UnknownVariantError(
                f"variant {whole!r}: {d.name!r} cannot be combined with others"
            )
        if others - set(d.composes):
            raise UnknownVariantError(
                f"variant {whole!r}: {d.name} combines only with "
                f"{' or '.join(d.composes)} before it"
                + (
                    " (it is compiled ahead of time, not by torch.compile or under autocast)"
                    if d.family == "aoti"
                    else ""
                )
            )
    stages = [STAGES.index(d.stage) for d in declared]
    if any(b <= a for a, b in itertools.pairwise(stages)):
        raise UnknownVariantError(
            f"variant {whole!r}: parts must come in the order {', '.join(STAGES)}, one of each "
            "at most (for example 'int8-dynamic+compile-max-autotune')"
        )
    return VariantSpec(whole, parts)


def variant_of(part: VariantPart) -> Variant:
    """The registered declaration of a parsed part."""
    return VARIANTS[part.name]


def parse_variant_list(text: str) -> tuple[str, ...]:
    """Split a comma-separated list (option or ini value), validating each name."""
    names = tuple(n.strip() for n in text.replace("\n", ",").split(",") if n.strip())
    for name in names:
        parse_variant(name)
    return names
