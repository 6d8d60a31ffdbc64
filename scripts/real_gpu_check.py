"""Check --sharing.mode process's NVML side against a real driver (needs an NVIDIA GPU; not run in CI).

    python scripts/real_gpu_check.py [--mib 256] [--device 0]

Allocates GPU memory in this process through the CUDA driver API (ctypes over libcuda.so.1), then
reads the node through the exporter's own NVML reader (exporter.vendors.nvidia.nvml.processes) and prints what NVML
reports for this PID: the device, its used memory, and the per-process SM samples; and for each
device the board's energy counter read twice a second apart (the power the energy split works
from; none where the driver does not answer it) and, on MIG, the instance's memory slices. Exit
status 0 when this process is listed on a device with at least the allocated memory, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from exporter.vendors.nvidia.nvml.library import open_nvml  # noqa: E402
from exporter.vendors.nvidia.nvml.processes import NvmlProcessReader  # noqa: E402
from exporter.sources.procfs import read_process_owner  # noqa: E402

MIB = 1024 * 1024


def allocate(device_index: int, size: int):
    """A CUDA context on the device and `size` bytes of device memory in it; returns what keeps them alive."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise SystemExit(f"cannot load the CUDA driver (libcuda.so.1): {exc}; run this on a node with an NVIDIA GPU")

    def check(result: int, what: str) -> None:
        if result != 0:
            raise SystemExit(f"{what} failed with CUDA error {result}")

    device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    check(cuda.cuInit(0), "cuInit")
    check(cuda.cuDeviceGet(ctypes.byref(device), device_index), "cuDeviceGet")
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate_v2")
    check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "cuMemAlloc_v2")
    check(cuda.cuMemsetD8_v2(pointer, 1, ctypes.c_size_t(size)), "cuMemsetD8_v2")  # touch it: some SM work too
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    return cuda, context, pointer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    keep = allocate(args.device, args.mib * MIB)
    nvml, problem = open_nvml()
    if nvml is None:
        print(f"NVML unavailable: {problem}")
        return 1
    time.sleep(1.0)  # let the driver take a utilisation sample
    started = time.perf_counter()
    reader = NvmlProcessReader(nvml, 5.0)
    devices = reader.read()
    elapsed_ms = (time.perf_counter() - started) * 1000
    time.sleep(1.0)
    later = {entry.device: entry.energy_mj for entry in reader.read()}
    pid = os.getpid()
    print(f"NVML read of {len(devices)} device(s) in {elapsed_ms:.2f} ms; this PID {pid}, "
          f"cgroup owner {read_process_owner('/proc', pid)}")
    found = False
    for entry in devices:
        used = entry.memory_bytes.get(pid)
        sm = None if entry.sm_ratio is None else entry.sm_ratio.get(pid, 0.0)
        print(f"  {entry.device}: {len(entry.memory_bytes)} process(es); this PID: "
              f"{'absent' if used is None else f'{used / MIB:.1f} MiB'}, SM {sm}; {_energy(entry, later)}")
        found = found or (used is not None and used >= args.mib * MIB)
    del keep
    print("OK: this process is listed with its memory" if found else "NOT FOUND with its memory")
    return 0 if found else 1


def _energy(entry, later) -> str:
    after = later.get(entry.device)
    if entry.energy_mj is None or after is None:
        return "no energy counter"
    slices = f", {entry.memory_slices} memory slices" if entry.memory_slices else ""
    return f"board energy {entry.energy_mj} mJ, {after - entry.energy_mj} mJ in the next second{slices}"


if __name__ == "__main__":
    sys.exit(main())
