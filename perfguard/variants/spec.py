"""Variant names (docs/reference.md, "Variants"): parsing and validation, without torch.

A variant name is one or more parts joined by `+`, in pipeline order:
`[prune] [quantize] [amp] [compile]`, or `eager`, or `[prune+]onnxruntime`.
A pruning part may carry its amount: `prune-l1-unstructured:0.7`.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfguard.errors import PerfguardError

# family -> (names, stage). Stages give the only order parts may be combined in.
FAMILIES: dict[str, tuple[tuple[str, ...], int]] = {
    "prune": (("prune-l1-unstructured", "prune-ln-structured"), 0),
    "quantize": (("int8-dynamic", "int8-weight-only"), 1),
    "amp": (("amp-bf16", "amp-fp16"), 2),
    "compile": (
        (
            "compile-default",
            "compile-reduce-overhead",
            "compile-max-autotune",
            "compile-max-autotune-no-cudagraphs",
            "compile-dynamic",
        ),
        3,
    ),
    "onnxruntime": (("onnxruntime",), 3),
    "aoti": (("aot-inductor",), 3),
    "eager": (("eager",), 3),
}

RECORD_ONLY = "pytest-benchmark"
"""Not a variant one builds: the raw timings of a pytest-benchmark test, recorded as is."""

DEFAULT_PRUNE_AMOUNT = {"prune-l1-unstructured": 0.5, "prune-ln-structured": 0.3}

BASE_VARIANTS: tuple[str, ...] = tuple(name for names, _ in FAMILIES.values() for name in names)

DEFAULT_VARIANTS: tuple[str, ...] = ("eager", "compile-default")
"""The built-in default set, overridden by ini, marker and command line in that order."""


class UnknownVariantError(PerfguardError, ValueError):
    """A variant name that perfguard does not know, or parts combined in a way it cannot build."""


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
        """Whether building it rewrites the weights (int8, pruning): it works on a copy of
        the model, the others on the model itself."""
        return any(p.family in ("quantize", "prune") for p in self.parts)

    @property
    def is_compiled(self) -> bool:
        return self.part("compile") is not None


def _family_of(name: str) -> str | None:
    for family, (names, _) in FAMILIES.items():
        if name in names:
            return family
    return None


def _parse_part(text: str, whole: str) -> VariantPart:
    name, sep, amount_text = text.partition(":")
    family = _family_of(name)
    if family is None:
        known = ", ".join([*BASE_VARIANTS, RECORD_ONLY])
        raise UnknownVariantError(f"unknown variant {whole!r} (no part {name!r}); known: {known}")
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
    if len(parts) > 1 and ("eager" in families):
        raise UnknownVariantError(f"variant {whole!r}: 'eager' cannot be combined with others")
    if "onnxruntime" in families and set(families) - {"onnxruntime", "prune"}:
        raise UnknownVariantError(
            f"variant {whole!r}: onnxruntime combines only with a pruning variant before it"
        )
    if "aoti" in families and set(families) - {"aoti", "prune", "quantize"}:
        raise UnknownVariantError(
            f"variant {whole!r}: aot-inductor combines only with pruning or int8 before it "
            "(it is compiled ahead of time, not by torch.compile or under autocast)"
        )
    stages = [FAMILIES[f][1] for f in families]
    if stages != sorted(stages):
        raise UnknownVariantError(
            f"variant {whole!r}: parts must come in the order prune, quantize, amp, compile "
            "(for example 'int8-dynamic+compile-max-autotune')"
        )
    return VariantSpec(whole, parts)


def parse_variant_list(text: str) -> tuple[str, ...]:
    """Split a comma-separated list (option or ini value), validating each name."""
    names = tuple(n.strip() for n in text.replace("\n", ",").split(",") if n.strip())
    for name in names:
        parse_variant(name)
    return names
