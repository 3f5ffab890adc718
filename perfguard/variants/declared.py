"""What a variant part is when registered (`Variant`), and the registry that holds them, by
name: perfguard's own families and a team's alike. Without torch: a declaration holds its
build as a callable or a "module:attribute" string, imported when first built."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from perfguard.errors import PerfguardError

STAGES = ("prune", "quantize", "layout", "amp", "compile")
"""The order parts combine in. `compile` is the last: the compile modes, eager and the backends
(ONNX Runtime, AOTInductor, TensorRT, a team's own engine); the others change the model."""

RECORD_ONLY = "pytest-benchmark"
"""Not a variant one builds: the raw timings of a pytest-benchmark test, recorded as is."""

TOLERANCE_CLASSES = (
    "exact",
    "compiled-fp32",
    "reduced-precision",
    "int8",
    "low-precision",
    "pruned",
)
"""Drift tolerance classes from strictest to loosest; a combined variant takes its loosest
part's (`perfguard.measure.drift`)."""


class UnknownVariantError(PerfguardError, ValueError):
    """A variant name that perfguard does not know, or parts combined in a way it cannot build."""


ENTRY_POINT_GROUP = "perfguard.variants"


@dataclass(frozen=True)
class Variant:
    """One part a variant name may hold, as registered.

    - `build`: how it builds. At any stage before `compile`, `build(model, inputs, device)`
      returns the changed model (an `nn.Module`); at `compile`, it returns the callable that
      runs one inference, `fn(*inputs, **kwargs)`, and the time it took is the variant's
      compile time. A "module:attribute" string is imported when first built. None: one of
      perfguard's own families, built by `perfguard.variants.registry`.
    - `stage`: one of `STAGES`, the part's place in a combined name.
    - `devices`: the device types it runs on; `requires`: modules it imports (a missing one
      skips the item with `install`, or `pip install <module>`); `available`: a last check,
      `available(device)` -> why not (a str) or None.
    - `tolerance`: its drift class (`TOLERANCE_CLASSES`); a combined variant takes its
      loosest part's.
    - `changes_weights`: it rewrites the model's weights (or their layout): it builds on a
      copy, never on the caller's model.
    - `composes`: True: with a part of every other stage; False: alone; a tuple of families:
      only with parts of those families before it.
    - `inputs`: how it changes the example inputs (`inputs(tuple) -> tuple`), if it does.
    - `family`: what "the same kind" means (two parts of one family never combine); its name
      unless given.
    """

    name: str
    build: Callable[..., Any] | str | None
    stage: str = "compile"
    devices: tuple[str, ...] = ("cpu", "cuda")
    requires: tuple[str, ...] = ()
    install: str | None = None
    available: Callable[[Any], str | None] | None = None
    tolerance: str = "exact"
    changes_weights: bool = False
    composes: bool | tuple[str, ...] = True
    inputs: Callable[[tuple[Any, ...]], tuple[Any, ...]] | str | None = None
    family: str = ""
    about: str = ""
    origin: str = field(default="perfguard", compare=False)  # who registered it

    def __post_init__(self) -> None:
        if not self.family:
            object.__setattr__(self, "family", self.name)
        if isinstance(self.devices, str):
            object.__setattr__(self, "devices", (self.devices,))
        if isinstance(self.requires, str):
            object.__setattr__(self, "requires", (self.requires,))
        problem = self._problem()
        if problem:
            raise UnknownVariantError(f"variant {self.name!r} cannot be registered: {problem}")

    def _problem(self) -> str | None:
        if not self.name or any(c in self.name for c in "+:,[] ") or self.name == RECORD_ONLY:
            return "a name is one word of its own, without '+', ':', ',', brackets or spaces"
        if self.stage not in STAGES:
            return f"its stage must be one of {', '.join(STAGES)}, not {self.stage!r}"
        if self.tolerance not in TOLERANCE_CLASSES:
            return f"its tolerance must be one of {', '.join(TOLERANCE_CLASSES)}"
        if not self.devices or set(self.devices) - {"cpu", "cuda"}:
            return f"its devices must be 'cpu' and/or 'cuda', not {self.devices!r}"
        if self.build is not None and not (callable(self.build) or ":" in str(self.build)):
            return "its build must be a callable or a 'module:attribute' string"
        return None

    @property
    def own(self) -> bool:
        """A part with a build of its own (a team's, or a simple one of perfguard's)."""
        return self.build is not None

    def builder(self) -> Callable[..., Any]:
        """The build callable (a "module:attribute" string imported here)."""
        assert self.build is not None
        return _imported(self.build)

    def changed_inputs(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The example inputs as this part changes them (as they are, where it does not)."""
        return inputs if self.inputs is None else tuple(_imported(self.inputs)(inputs))

    def unmet(self, device_type: str) -> str | None:
        """Why it cannot run on this device type as far as its declaration says, or None."""
        if device_type not in self.devices:
            where = " or ".join(self.devices)
            return f"{self.name} runs on {where} only; this run is on {device_type}"
        for module in self.requires:
            if importlib.util.find_spec(module.partition(".")[0]) is None:
                how = self.install or f"pip install {module.partition('.')[0]}"
                return f"{self.name} needs the package {module!r}: {how}"
        return None


@dataclass(frozen=True)
class Changed:
    """What a model-changing part's build may return instead of the model alone: the model,
    and sentences for the report (how many layers it changed, what it left as it was)."""

    model: Any
    notes: tuple[str, ...] = ()


class VariantRegistry:
    """Every part a variant name may hold, by name; what a session registers is undone at
    its end (`scope`)."""

    def __init__(self) -> None:
        self._parts: dict[str, Variant] = {}
        self._entry_points_read = False
        self.broken: list[str] = []  # entry points that could not be loaded, each in a line

    def add(self, variant: Variant, *, origin: str | None = None) -> Variant:
        """Register `variant`; a second variant of the same name is an error naming both."""
        if not isinstance(variant, Variant):
            raise UnknownVariantError(
                f"{origin or 'a plugin'} registered {variant!r}: a perfguard.variants.Variant "
                "is expected"
            )
        if origin is not None:
            variant = _with_origin(variant, origin)
        known = self._parts.get(variant.name)
        if known is not None and known != variant:
            raise UnknownVariantError(
                f"variant {variant.name!r} is registered twice: by {known.origin} and by "
                f"{variant.origin}"
            )
        self._parts[variant.name] = variant
        return variant

    def get(self, name: str) -> Variant | None:
        found = self._parts.get(name)
        if found is None and not self._entry_points_read:
            self.read_entry_points()
            found = self._parts.get(name)
        return found

    def __getitem__(self, name: str) -> Variant:
        found = self.get(name)
        if found is None:
            raise UnknownVariantError(f"unknown variant {name!r}; known: {self.known()}")
        return found

    def names(self) -> tuple[str, ...]:
        self.read_entry_points()
        return tuple(self._parts)

    def known(self) -> str:
        """Every registered name, for an error message; and what could not be loaded."""
        text = ", ".join([*self.names(), RECORD_ONLY])
        if self.broken:
            text += f" (not loaded: {'; '.join(self.broken)})"
        return text

    def read_entry_points(self) -> None:
        """Add what installed packages register in the `perfguard.variants` group, once: an
        entry point is a `Variant`, a list of them, or a function given the registry. One that
        fails to load is warned of and named in the unknown-name error."""
        if self._entry_points_read:
            return
        self._entry_points_read = True
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINT_GROUP):
            origin = f"the entry point {point.name!r} ({point.value})"
            try:
                self.register(point.load(), origin=origin)
            except Exception as exc:  # a package's own error: its variants are missing
                line = f"{origin}: {type(exc).__name__}: {exc}".splitlines()[0]
                self.broken.append(line)
                warnings.warn(f"perfguard: {line}", stacklevel=2)

    def register(self, found: object, *, origin: str) -> None:
        """A `Variant`, a list or tuple of them, or a function that adds them to the registry."""
        if isinstance(found, Variant):
            self.add(found, origin=origin)
        elif isinstance(found, list | tuple):
            for one in found:
                self.add(one, origin=origin)
        elif callable(found):
            found(Registering(self, origin))
        else:
            raise UnknownVariantError(
                f"{origin} is {found!r}: a Variant, a list of them or a function is expected"
            )

    def saved(self) -> Callable[[], None]:
        """What undoes everything registered from now on (a pytest session's conftests)."""
        parts, read, broken = dict(self._parts), self._entry_points_read, list(self.broken)

        def restore() -> None:
            self._parts, self._entry_points_read, self.broken = parts, read, broken

        return restore

    @contextlib.contextmanager
    def scope(self) -> Iterator[VariantRegistry]:
        """What is registered inside is gone after."""
        restore = self.saved()
        try:
            yield self
        finally:
            restore()


class Registering:
    """The registry as a plugin's function sees it: `add` records who registered."""

    def __init__(self, registry: VariantRegistry, origin: str) -> None:
        self._registry, self._origin = registry, origin

    def add(self, variant: Variant) -> Variant:
        return self._registry.add(variant, origin=self._origin)

    def names(self) -> tuple[str, ...]:
        return self._registry.names()


def _with_origin(variant: Variant, origin: str) -> Variant:
    from dataclasses import replace

    return replace(variant, origin=origin)


def _imported(found: Callable[..., Any] | str) -> Callable[..., Any]:
    """A callable, or the one a "module:attribute" string names."""
    if not isinstance(found, str):
        return found
    module, _, attribute = found.partition(":")
    named: Callable[..., Any] = getattr(importlib.import_module(module), attribute)
    return named
