"""A simulated GPU node for the image check: a test kubelet socket plus a dcgm-exporter endpoint.

Usage: python .ci/fake_node.py SOCKDIR FIXTURE.prom

Starts exporter.demo.fake_kubelet.FakeKubelet at SOCKDIR/kubelet.sock, with one pod owning the
first GPU (by UUID) found in FIXTURE, and exporter.demo.fake_upstream.FakeUpstreamExporter on a free
loopback port serving FIXTURE. Prints one line `ready dcgm_url=URL pod=NAMESPACE/POD` once
both answer, then runs until SIGTERM/SIGINT. .ci/image.sh mounts SOCKDIR into the container.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from exporter.demo.fake_upstream import FakeUpstreamExporter  # noqa: E402
from exporter.demo.fake_kubelet import FakeKubelet  # noqa: E402
from exporter.sources.kubelet import AllocatedDevice  # noqa: E402

NAMESPACE = "ml-team"
POD = "trainer-0"
CONTAINER = "cuda"


def _first_gpu_uuid(body: bytes) -> str:
    match = re.search(rb'UUID="(GPU-[0-9a-fA-F-]+)"', body)
    if match is None:
        raise SystemExit("fake_node: the fixture has no UUID=\"GPU-...\" label to attribute")
    return match.group(1).decode()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sockdir, fixture = argv[1], argv[2]
    with open(fixture, "rb") as f:
        body = f.read()
    device = AllocatedDevice(namespace=NAMESPACE, pod=POD, container=CONTAINER,
                             resource="nvidia.com/gpu", device_id=_first_gpu_uuid(body))
    stop = threading.Event()
    # Handlers before start-up, so a SIGTERM from the CI script always ends in cleanup.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kubelet = FakeKubelet(os.path.join(sockdir, "kubelet.sock"))
    dcgm = FakeUpstreamExporter(body)
    kubelet.set_devices([device])
    kubelet.start()
    dcgm.start()
    try:
        print(f"ready dcgm_url={dcgm.url} pod={NAMESPACE}/{POD}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        dcgm.stop()
        kubelet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
