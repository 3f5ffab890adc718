"""The environment a run measured in, and the machine key baselines are filed under."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.health import GpuId


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_packages() -> dict[str, str]:
    """Every distribution installed in this interpreter's environment, by its normalized
    name (PEP 503), with its version: what two sides' environments are compared by."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name, version = _name_and_version(dist)
        if name and version:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), version)
    return dict(sorted(found.items()))


def _name_and_version(dist: importlib.metadata.Distribution) -> tuple[str | None, str | None]:
    """A distribution's name and version from its metadata's header lines: parsing the whole
    file as `dist.metadata` does cost every session 0.2 s on an environment of 150."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break  # the header ends at the first blank line; the description follows
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "name" and name is None:
            name = value.strip()
        elif key == "version" and version is None:
            version = value.strip()
    return name, version


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def _gpu_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML here: try the command line tool
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def collect_environment(device: Any) -> dict[str, Any]:
    """A fingerprint of what shapes the numbers: hardware, versions and torch's global flags."""
    import torch

    from perfguard.version import __version__

    env: dict[str, Any] = {
        "perfguard": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": str(torch.__version__),  # a TorchVersion would import torch where unpickled
        "torchao": _version("torchao"),
        "onnxruntime": _version("onnxruntime"),
        "onnx": _version("onnx"),
        "triton": _version("triton"),
        "packages": installed_packages(),
        "tracer": None,  # a trace hook left on while timing (`perfguard.measure.tracers`)
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "device_type": device.type,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            device=props.name,
            gpu_memory_bytes=int(props.total_memory),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            gpu_driver=_gpu_driver(),
            tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
            tf32_cudnn=bool(torch.backends.cudnn.allow_tf32),
        )
    else:
        env["device"] = env["cpu"]
    return env


def environment_without_torch() -> dict[str, Any]:
    """What can be said of this machine where torch does not import (a session ending after
    its import failed still writes its results): the keys that need no torch."""
    from perfguard.version import __version__

    return {
        "perfguard": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": _version("torch"),
        "packages": installed_packages(),
        "tracer": None,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "device_type": "cpu",
        "device": cpu_model(),
    }


def slug(text: str) -> str:
    words = re.sub(r"\((?:r|tm)\)|\bcpu\b|@.*$", " ", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", words).strip("-") or "unknown"


def machine_key(env: Mapping[str, Any]) -> str:
    """`cuda-<gpu model>` or `cpu-<cpu model>-<n>c`: the default key of `--perfguard-machine`."""
    if env.get("device_type") == "cuda":
        return f"cuda-{slug(str(env.get('device', 'gpu')))}"
    return f"cpu-{slug(str(env.get('cpu', 'cpu')))}-{env.get('cpu_count') or 0}c"


def cuda_gpu_id(index: int) -> GpuId:
    """How NVML finds CUDA device `index`: its UUID and PCI bus id, as CUDA reports them."""
    import torch

    from perfguard.health import GpuId

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    text = str(uuid) if uuid is not None else ""
    if text and not text.startswith(("GPU-", "MIG-")):
        text = f"GPU-{text}"
    bus = getattr(props, "pci_bus_id", None)
    pci = (
        f"{int(getattr(props, 'pci_domain_id', 0)):08X}:{int(bus):02X}:"
        f"{int(getattr(props, 'pci_device_id', 0)):02X}.0"
        if bus is not None
        else None
    )
    return GpuId(index, text or None, pci)
