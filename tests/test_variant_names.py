from __future__ import annotations

import pytest

from perfguard.variants.spec import (
    BASE_VARIANTS,
    UnknownVariantError,
    parse_variant,
    parse_variant_list,
)


@pytest.mark.parametrize("name", BASE_VARIANTS)
def test_every_interface_name_parses(name: str) -> None:
    assert parse_variant(name).name == name


def test_interface_names_are_exactly_section_3() -> None:
    assert set(BASE_VARIANTS) == {
        "eager",
        "compile-default",
        "compile-reduce-overhead",
        "compile-max-autotune",
        "compile-max-autotune-no-cudagraphs",
        "amp-bf16",
        "amp-fp16",
        "int8-dynamic",
        "int8-weight-only",
        "prune-l1-unstructured",
        "prune-ln-structured",
        "onnxruntime",
        "aot-inductor",
        "compile-dynamic",
        "channels-last",
        "tensorrt",
        "fp8",
        "int4-weight-only",
    }


def test_composition_and_amounts() -> None:
    spec = parse_variant("prune-l1-unstructured:0.7+int8-dynamic+compile-max-autotune")
    assert [p.name for p in spec.parts] == [
        "prune-l1-unstructured",
        "int8-dynamic",
        "compile-max-autotune",
    ]
    assert spec.part("prune") is not None and spec.part("prune").amount == 0.7  # type: ignore[union-attr]
    assert spec.compile_mode == "max-autotune"
    assert parse_variant("prune-ln-structured").parts[0].amount == 0.3
    assert parse_variant("prune-l1-unstructured").parts[0].amount == 0.5


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("compile-fast", "unknown variant 'compile-fast'"),
        ("compile-default+int8-dynamic", "order prune, quantize, layout, amp, compile"),
        ("compile-default+channels-last", "order prune, quantize, layout, amp, compile"),
        ("int8-dynamic+int4-weight-only", "same kind"),
        ("channels-last+onnxruntime", "onnxruntime combines only with prune"),
        ("int8-dynamic+tensorrt", "tensorrt combines only with prune or amp"),
        ("eager+compile-default", "'eager' cannot be combined"),
        ("int8-dynamic+int8-weight-only", "same kind"),
        ("prune-l1-unstructured:1.5", "between 0 and 1"),
        ("prune-l1-unstructured:abc", "between 0 and 1"),
        ("int8-dynamic:0.5", "only pruning takes an amount"),
        ("int8-dynamic+onnxruntime", "onnxruntime combines only"),
        ("pytest-benchmark", "cannot be chosen"),
        ("", "empty"),
    ],
)
def test_bad_names_say_what_is_wrong(name: str, message: str) -> None:
    with pytest.raises(UnknownVariantError, match=message):
        parse_variant(name)


def test_lists_split_on_commas_and_validate() -> None:
    assert parse_variant_list("eager, compile-default,,") == ("eager", "compile-default")
    with pytest.raises(UnknownVariantError, match="nope"):
        parse_variant_list("eager,nope")


def test_the_layout_and_serving_parts_compose_in_their_stages() -> None:
    spec = parse_variant(
        "prune-l1-unstructured+int8-dynamic+channels-last+amp-bf16+compile-default"
    )
    assert [p.family for p in spec.parts] == [
        "prune",
        "quantize",
        "channels-last",
        "amp",
        "compile",
    ]
    assert parse_variant("channels-last").changes_weights  # it relayouts the weights: a copy
    assert parse_variant("fp8+compile-max-autotune").parts[0].family == "quantize"
    assert [p.name for p in parse_variant("amp-fp16+tensorrt").parts] == ["amp-fp16", "tensorrt"]
