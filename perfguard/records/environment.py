"""The keys of a run's `environment`, in one table: what each is, and what a change of it
does to a comparison.

- `gates`: a change of the hardware. Timings measured across it are incomparable, so no
  speed or memory verdict is given (`perfguard.stats.verdicts.hardware_change_reason`).
- `watched`: a change that can move the numbers without touching the code (a version, a
  precision flag). The report lists it beside the verdicts (`perfguard.environment_diff`).

`perfguard.environment.collect_environment` writes exactly these keys, the `cuda` ones on a
CUDA device only (a test holds it to the table), so nothing is listed that nothing writes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentKey:
    name: str
    about: str
    gates: bool = False
    watched: bool = False
    cuda: bool = False  # written on a CUDA device only


ENVIRONMENT_KEYS: tuple[EnvironmentKey, ...] = (
    EnvironmentKey("perfguard", "perfguard's version"),
    EnvironmentKey("python", "Python's version", watched=True),
    EnvironmentKey("platform", "the operating system and kernel"),
    EnvironmentKey("torch", "torch's version", watched=True),
    EnvironmentKey("torchao", "torchao's version (null without it)", watched=True),
    EnvironmentKey("onnxruntime", "onnxruntime's version (null without it)", watched=True),
    EnvironmentKey("onnx", "onnx's version (null without it)"),
    EnvironmentKey("triton", "Triton's version (null without it)", watched=True),
    EnvironmentKey(
        "packages",
        "every installed distribution and its version ({name: version}): the report's "
        "Dependencies block names those that differ between the two sides",
    ),
    EnvironmentKey(
        "tracer",
        "a trace hook that stayed on while items were timed (a debugger's); a coverage "
        "session is paused while timing and is not one",
        gates=True,
        watched=True,
    ),
    EnvironmentKey("cpu", "the CPU's model name", gates=True),
    EnvironmentKey("cpu_count", "the CPUs the OS reports", gates=True),
    EnvironmentKey("torch_threads", "torch's intra-op threads", gates=True, watched=True),
    EnvironmentKey(
        "float32_matmul_precision", "torch.get_float32_matmul_precision()", watched=True
    ),
    EnvironmentKey("deterministic_algorithms", "torch.are_deterministic_algorithms_enabled()"),
    EnvironmentKey("cudnn_benchmark", "torch.backends.cudnn.benchmark"),
    EnvironmentKey("device_type", "cpu or cuda"),
    EnvironmentKey("device", "the GPU's name on CUDA, else the CPU's model", gates=True),
    EnvironmentKey("gpu_memory_bytes", "the GPU's memory", cuda=True),
    EnvironmentKey("cuda", "the CUDA version torch was built with", watched=True, cuda=True),
    EnvironmentKey("cudnn", "cuDNN's version", watched=True, cuda=True),
    EnvironmentKey("gpu_driver", "the NVIDIA driver's version", watched=True, cuda=True),
    EnvironmentKey("tf32_matmul", "torch.backends.cuda.matmul.allow_tf32", watched=True, cuda=True),
    EnvironmentKey("tf32_cudnn", "torch.backends.cudnn.allow_tf32", watched=True, cuda=True),
)

HARDWARE_KEYS = tuple(k.name for k in ENVIRONMENT_KEYS if k.gates)
"""Keys whose change makes timings incomparable: no speed or memory verdict across them."""
WATCHED_KEYS = tuple(k.name for k in ENVIRONMENT_KEYS if k.watched)
"""Keys whose change the report names beside the verdicts."""
