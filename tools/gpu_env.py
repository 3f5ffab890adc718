"""gpu-check's environment step: torch, CUDA, and NVML's view of the GPU CUDA measures on.

python3 tools/gpu_env.py [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import json

import torch

from perfguard.environment import collect_environment, cuda_gpu_id
from perfguard.health import Monitor, compute_mode, gpu_handle, load_nvml


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    device = p.parse_args().device
    print("torch", torch.__version__, "cuda", torch.version.cuda)
    gpu = None
    if device == "cuda":
        print("device:", torch.cuda.get_device_name(0))
        gpu = cuda_gpu_id(torch.cuda.current_device())
        print("CUDA's device:", gpu)
        nvml = load_nvml()
        if nvml is None:
            print("NVML: not available")
        else:
            name = nvml.nvmlDeviceGetName(gpu_handle(nvml, gpu))
            print("NVML's GPU for it:", name.decode() if isinstance(name, bytes) else name)
            print("compute mode:", compute_mode(gpu))
    print("environment:", json.dumps(collect_environment(torch.device(device)), indent=1))
    monitor = Monitor(device, gpu=gpu)
    monitor.start()
    print("runner health:", json.dumps(monitor.stop().to_json(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
