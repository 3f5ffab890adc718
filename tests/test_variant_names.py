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
        ("compile-default+int8-dynamic", "order prune, quantize, amp, compile"),
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
