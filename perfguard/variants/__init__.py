"""Building a variant of a model: eager, compile modes, amp, quantized, pruned, ONNX Runtime."""

from perfguard.variants.spec import (
    BASE_VARIANTS,
    DEFAULT_VARIANTS,
    RECORD_ONLY,
    UnknownVariantError,
    VariantSpec,
    parse_variant,
    parse_variant_list,
)

__all__ = [
    "BASE_VARIANTS",
    "DEFAULT_VARIANTS",
    "RECORD_ONLY",
    "UnknownVariantError",
    "VariantSpec",
    "parse_variant",
    "parse_variant_list",
]
