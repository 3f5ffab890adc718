"""`aot-inductor`: `torch.export`, then an AOTInductor package, loaded and run as a serving
stack runs it (`torch._inductor.aoti_compile_and_package`, `aoti_load_package`).

Its figures besides latency: the export, the package's build (cold: a compile of its own,
C++ included, in a fresh cache, as `compile_time_s`) and its load, each apart, and the
package's size. Judged in the compiled-fp32 class against fp64 eager, as `compile-*` is. An
export failure (a graph break export cannot take, data-dependent control flow) is this item's
error with export's own first line and the frame it points to. int8 and pruning may come
before it (`int8-dynamic+aot-inductor`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perfguard.measure.isolation import prime_compiler
from perfguard.variants.exporting import ExportError, export_failure, quiet_export
from perfguard.variants.own import Engine
from perfguard.variants.spec import VariantPart


class AotInductor:
    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None:
        inductor = getattr(torch, "_inductor", None)
        if inductor is None:
            import importlib

            inductor = importlib.import_module("torch._inductor")
        if not hasattr(inductor, "aoti_compile_and_package"):
            return (
                f"{part.name} needs torch.export and AOTInductor packages "
                f"(torch 2.6 or newer); this torch is {torch.__version__}"
            )
        if device.type == "cpu" and shutil.which("c++") is None and shutil.which("g++") is None:
            return f"{part.name} on the CPU needs a C++ compiler (c++ or g++) on the PATH"
        return None

    def build(
        self,
        model: nn.Module,
        inputs: Sequence[Any],
        named: Mapping[str, Any],
        device: torch.device,
    ) -> Engine:
        """Export, build the package in a fresh cache, load it: the loaded package runs one
        inference; the package's build (cold) is its compile time."""
        from torch._inductor import aoti_compile_and_package, aoti_load_package
        from torch._inductor.utils import fresh_cache

        details: dict[str, Any] = {}
        started = time.perf_counter()
        try:
            with quiet_export():
                program = torch.export.export(model, tuple(inputs), kwargs=dict(named))
        except Exception as exc:  # export raises many kinds; each means "cannot export"
            raise ExportError(export_failure("aot-inductor", exc)) from None
        details["export_time_s"] = time.perf_counter() - started
        # the process's one-time compiler discovery first, in the user's cache: inside the
        # fresh cache, a first build in a process built inductor's vector-instruction probes
        # too (16 s of build here where the same package's second build took 5.5 s)
        prime_compiler(device)
        folder = Path(tempfile.mkdtemp(prefix="perfguard-aoti-"))
        try:
            started = time.perf_counter()
            with fresh_cache(), quiet_export():  # cold: nothing compiled before helps
                path = aoti_compile_and_package(program, package_path=str(folder / "model.pt2"))
            details["package_build_time_s"] = time.perf_counter() - started
            details["package_bytes"] = Path(path).stat().st_size
            started = time.perf_counter()
            runner = aoti_load_package(path)
            details["load_time_s"] = time.perf_counter() - started
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        build_s = details["package_build_time_s"]
        return Engine(run=runner, device=device, build_s=build_s, details=details, autocast=False)
