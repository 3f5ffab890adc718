"""Building a variant of a model: eager, compile modes, amp, quantized, pruned, ONNX Runtime,
AOTInductor, TensorRT, channels_last, and a team's own (`Variant`, registered by the pytest hook
`pytest_perfguard_variants` or the entry point group `perfguard.variants`)."""

from perfguard.variants.spec import (
    BASE_VARIANTS,
    DEFAULT_VARIANTS,
    RECORD_ONLY,
    STAGES,
    TOLERANCE_CLASSES,
    VARIANTS,
    Changed,
    UnknownVariantError,
    Variant,
    VariantRegistry,
    VariantSpec,
    parse_variant,
    parse_variant_list,
)

__all__ = [
    "BASE_VARIANTS",
    "DEFAULT_VARIANTS",
    "RECORD_ONLY",
    "STAGES",
    "TOLERANCE_CLASSES",
    "VARIANTS",
    "Changed",
    "UnknownVariantError",
    "Variant",
    "VariantRegistry",
    "VariantSpec",
    "parse_variant",
    "parse_variant_list",
]
