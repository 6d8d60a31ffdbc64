"""Check NVML's XID events against a real driver (needs an NVIDIA GPU; not run in CI).

    python scripts/real_gpu_xid_check.py [--waits 3] [--wait-ms 1000]

Registers every GPU for XID events through the exporter's own registry
(exporter.vendors.nvidia.nvml.event_registry: parent GPU handles, nvmlEventTypeXidCriticalError), prints which
GPUs registered, which NVML refused (NOT_SUPPORTED) and which it answers lost, then waits on the set
--waits times for --wait-ms each and prints what each wait returned and how long it took. No XID is
expected on a healthy GPU: every wait should answer NVML_ERRORTIMEOUT after about --wait-ms. Exit
status 0 when at least one GPU registered and every wait answered on time (an XID counts as an
answer, and is printed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from exporter.vendors.nvidia.nvml.event_registry import TIMEOUT, EventRegistry  # noqa: E402
from exporter.vendors.nvidia.nvml.events import NO_INSTANCE, XID_CRITICAL_ERROR  # noqa: E402
from exporter.vendors.nvidia.nvml.library import open_nvml  # noqa: E402

# A wait answered later than its timeout by more than this is reported late: the driver is expected to
# answer a wait with nothing to report when its timeout runs out, not to hold the caller past it.
_LATE_SECONDS = 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waits", type=int, default=3)
    parser.add_argument("--wait-ms", type=int, default=1000)
    args = parser.parse_args()
    nvml, problem = open_nvml()
    if nvml is None:
        print(f"NVML unavailable: {problem}")
        return 1
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except nvml.NVMLError as exc:
        driver = f"version unknown ({exc})"
    print(f"driver {driver}, {nvml.nvmlDeviceGetCount()} GPU(s)")
    registry = EventRegistry(nvml)
    started = time.perf_counter()
    outcome = registry.register(XID_CRITICAL_ERROR)
    lost = sorted(gpu.uuid or f"GPU {gpu.gpu}" for gpu in outcome.lost)
    refused = [f"GPU {refusal.gpu}: {refusal.error}" for refusal in outcome.failed]
    print(f"registered {outcome.registered} GPU(s) for XID events in {(time.perf_counter() - started) * 1000:.1f} ms; "
          f"lost: {lost or 'none'}; refused: {refused or 'none'}")
    on_time = True
    for number in range(1, args.waits + 1):
        started = time.perf_counter()
        try:
            data = registry.wait(args.wait_ms)
            seen = _describe(registry, data)
        except nvml.NVMLError as exc:
            seen = "timeout (no XID)" if exc.value == TIMEOUT else f"NVML error {exc.value}: {exc}"
            on_time = on_time and exc.value == TIMEOUT
        took = time.perf_counter() - started
        on_time = on_time and took <= args.wait_ms / 1000 + _LATE_SECONDS
        print(f"  wait {number} ({args.wait_ms} ms): {seen}, answered in {took * 1000:.1f} ms")
    started = time.perf_counter()
    registry.free()
    print(f"event set freed in {(time.perf_counter() - started) * 1000:.1f} ms")
    ok = outcome.registered > 0 and on_time
    print("OK: XID events registered and every wait answered on time" if ok else "NOT OK")
    return 0 if ok else 1


def _describe(registry: EventRegistry, data) -> str:
    gpu = registry.identity_of(data.device)
    instance = "" if data.gpuInstanceId == NO_INSTANCE else f", GPU instance {data.gpuInstanceId}"
    return (f"event type {data.eventType:#x}, XID {data.eventData} on "
            f"{gpu.uuid if gpu else 'an unregistered GPU'}{instance}")


def _text(value) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    sys.exit(main())
