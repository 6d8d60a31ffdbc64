"""A simulated AMD node for end-to-end tests: its sysfs tree, a fake kubelet, AMD's identity service and exporter, each real on its socket or port."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from exporter.demo.fake_upstream import FakeUpstreamExporter
from exporter.exposition.text import parse_label_pairs, unescape_label_value
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.amd.demo_exporter import SimulatedAmdExporter
from exporter.vendors.amd.demo_node import demo_gpus, identity_states
from exporter.vendors.amd.demo_sysfs import GpuSpec, mi300x_node, write_sysfs
from support.exporter_process import ExporterProcess, start_exporter
from support.fake_amd_identity import FakeAmdIdentity
from support.fake_kube_api import FakeKubeApi, make_pod
from support.fake_kubelet import FakeKubelet
from support.kube_scenario import NODE

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$")
OWNER = ("namespace", "pod", "container")


def samples(text: str) -> List[Tuple[str, Dict[str, str], str]]:
    """Every labelled sample of an answer, its label values unescaped."""
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            pairs = parse_label_pairs(match.group(2))
            assert pairs is not None, line
            found.append((match.group(1), {n: unescape_label_value(v) for n, v, _ in pairs}, match.group(3)))
    return found


def holder(labels: Dict[str, str]) -> Optional[Tuple[str, str, str]]:
    """The owner labels a sample carries, or None."""
    return tuple(labels[name] for name in OWNER) if "pod" in labels else None


class AmdNode:
    """The simulated MI300X node (exporter/vendors/amd/demo_node: seven whole GPUs, one in CPX mode) under
    `tmp`, its servers started; `serve` starts the real exporter on it with --gpu.vendor amd."""

    def __init__(self, tmp: Path, specs: Optional[Sequence[GpuSpec]] = None, identity: bool = True):
        self.sysfs = tmp / "sys"
        write_sysfs(str(self.sysfs), specs if specs is not None else mi300x_node(cpx_gpus=(7,)))
        self.gpus = demo_gpus()
        self.kubelet = FakeKubelet(str(tmp / "kubelet.sock")).start()
        self.identity_socket = str(tmp / "amd.sock")
        self.identity = FakeAmdIdentity(self.identity_socket, identity_states(0) if identity else None)
        self.identity.start()
        moment = [0.0]
        # AMD's exporter answers as client_golang's promhttp does: 4 KiB chunks, gzip where asked.
        self.amd = FakeUpstreamExporter(SimulatedAmdExporter(clock=lambda: moment[0]).render,
                                        name="AMD's device-metrics-exporter", promhttp=True).start()
        self.exporter: Optional[ExporterProcess] = None

    def gpu(self, gpu_id: str):
        return next(gpu for gpu in self.gpus if gpu.gpu_id == gpu_id)

    def hold(self, devices: Sequence[AllocatedDevice]) -> None:
        self.kubelet.set_devices(list(devices))

    def serve(self, *args: str, kubeconfig: str = "", node_name: str = "") -> ExporterProcess:
        """The exporter on this node; with `kubeconfig`, reading the Kubernetes API as `node_name`, else not."""
        api = ["--kubernetes.kubeconfig", kubeconfig, "--kubernetes.node-name", node_name] if kubeconfig else [
            "--kubernetes.api", "off"]
        self.exporter = start_exporter(["serve", "--gpu.vendor", "amd", "--kubelet.socket", self.kubelet.socket_path,
                                        "--amd.metrics-url", self.amd.url, "--amd.metrics-socket", self.identity_socket,
                                        "--amd.sysfs-root", str(self.sysfs), "--kubelet.refresh-interval", "500ms",
                                        *api, *args])
        return self.exporter

    def stop(self) -> None:
        if self.exporter is not None:
            self.exporter.stop()
        self.amd.stop()
        self.identity.stop()
        self.kubelet.stop()


def amd_slice(devices: Dict[str, Dict[str, str]], taints: Optional[Dict[str, Sequence[dict]]] = None) -> dict:
    """This node's ResourceSlice of AMD's DRA driver: device name → its string attributes, as AMD's driver
    publishes them (a whole GPU's `pciAddr`, a partition's `parentPciAddr`, `type`); `taints`: device name → the
    DeviceTaints (key, value, effect) on it."""
    taints = taints or {}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{NODE}-gpu.amd.com"},
            "spec": {"driver": "gpu.amd.com", "nodeName": NODE, "pool": {"name": NODE, "generation": 1,
                     "resourceSliceCount": 1},
                     "devices": [{"name": name, "attributes": {key: {"string": value} for key, value in attrs.items()},
                                  **({"taints": list(taints[name])} if name in taints else {})}
                                 for name, attrs in devices.items()]}}


def hold_through_claim(api: FakeKubeApi, pod: str, device: str, health: str = "") -> AllocatedDevice:
    """Pod `dra/<pod>` (container main) made holding DRA device `device` through its claim `<pod>-gpu`, on the API
    server, with the allocatedResourcesStatus `health` where given; the kubelet's device for it."""
    api.put("resource.k8s.io/v1", "resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": f"{pod}-gpu", "namespace": "dra"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.amd.com", "pool": NODE, "device": device}]}}}})
    made = make_pod("dra", pod, NODE, containers=("main",))
    if health:
        made["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [{
            "name": f"claim:{pod}-gpu/gpu", "resources": [{"resourceID": f"gpu.amd.com/{NODE}/{device}", "health": health}]}]
    api.put("v1", "pods", made)
    return AllocatedDevice("dra", pod, "main", "gpu.amd.com", device, dra=True, claim=f"dra/{pod}-gpu", pool=NODE)
