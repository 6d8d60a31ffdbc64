"""AMD's demo node started for `demo --gpu.vendor amd`: its exporter over HTTP, its identity service on a unix socket, its sysfs tree, its pods."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Dict, List, Tuple

from exporter.demo.cluster import LOCAL_QUEUE, KAI_QUEUE, SimulatedCluster, SimulatedPod
from exporter.demo.fake_upstream import FakeUpstreamExporter
from exporter.demo.simulated_node import DemoServing
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.amd.demo_exporter import SimulatedAmdExporter
from exporter.vendors.amd.demo_identity import DemoIdentityService
from exporter.vendors.amd.demo_node import (CPX_GPU, CPX_RESOURCE, HOLDERS, NIC_ADDRESS, NIC_RESOURCE, NODE_NAME,
                                            SPX_RESOURCE, UNHEALTHY_AFTER_SECONDS, UNHEALTHY_GPU_ID, allocations,
                                            demo_gpus, demo_sysfs_specs, identity_states, offered)
from exporter.vendors.amd.demo_sysfs import write_sysfs

# Each holder's controller (kind, name), and the queue it came through: trainer-amd-0 through Kueue, llm-amd-a's
# Deployment naming a KAI Scheduler Queue, as on the NVIDIA demo node.
_OWNERS: Dict[Tuple[str, str], Tuple[str, str]] = {
    ("ml-team", "trainer-amd-0"): ("StatefulSet", "trainer-amd"),
    ("inference", "llm-amd-a"): ("ReplicaSet", "llm-amd-a-6c8d9"),
    ("inference", "llm-amd-b"): ("ReplicaSet", "llm-amd-b-4f7b2"),
    ("inference", "small-model-a"): ("ReplicaSet", "small-model-a-59d7c"),
    ("research", "notebook-7f9c"): ("StatefulSet", "notebook-7f9c"),
    ("research", "notebook-31aa"): ("StatefulSet", "notebook-31aa"),
    ("batch", "embed-0"): ("StatefulSet", "embed"), ("batch", "embed-1"): ("StatefulSet", "embed"),
    ("batch", "embed-2"): ("StatefulSet", "embed"),
    ("networking", "rdma-bench"): ("StatefulSet", "rdma-bench"),
}
_QUEUES = {("ml-team", "trainer-amd-0"): (LOCAL_QUEUE, ""), ("inference", "llm-amd-a"): ("", KAI_QUEUE)}


def demo_pods() -> Tuple[SimulatedPod, ...]:
    """The pods of the AMD node's holders (and the NIC's), each with its devices' health as its status reports it."""
    health: Dict[Tuple[str, str, str], Dict[str, Dict[str, str]]] = {}
    for device in allocations():
        health.setdefault((device.namespace, device.pod, device.container), {}).setdefault(
            device.resource, {})[device.device_id] = "Healthy"
    pods = []
    for (namespace, pod, container), resources in health.items():
        local_queue, kai_queue = _QUEUES.get((namespace, pod), ("", ""))
        pods.append(SimulatedPod(namespace, pod, _OWNERS[(namespace, pod)], (container,), resources,
                                 local_queue, kai_queue))
    return tuple(pods)


class AmdDemoNode:
    """The simulated MI300X node (exporter.demo.simulated_node.SimulatedNode): seven whole GPUs under
    amd.com/spx_nps1, one in CPX mode whose eight partitions are amd.com/cpx_nps1 devices of different pods."""

    @property
    def cluster(self) -> SimulatedCluster:
        return SimulatedCluster(NODE_NAME, demo_pods())

    def allocations(self) -> List[AllocatedDevice]:
        return allocations()

    def offered(self) -> List[Tuple[str, str]]:
        return offered()

    def start(self, workdir: Path, api, config, stack: ExitStack) -> DemoServing:
        """The sysfs tree, the identity service (its health moving with the exporter's clock) and the exporter."""
        sysfs = workdir / "sys"
        write_sysfs(str(sysfs), demo_sysfs_specs())
        simulation = SimulatedAmdExporter()
        identity = DemoIdentityService(str(workdir / "amd-metrics-exporter.sock"),
                                       states=lambda: identity_states(simulation.elapsed_seconds))
        identity.start()
        stack.callback(identity.stop)
        # Answering as AMD's does (client_golang's promhttp): 4 KiB chunks, gzip for a client that asks for it.
        exporter = FakeUpstreamExporter(simulation.render, name="AMD's device-metrics-exporter", promhttp=True)
        exporter.start()
        stack.callback(exporter.stop)
        settings = dict(amd_metrics_url=exporter.url, amd_metrics_socket=identity.socket_path,
                        amd_sysfs_root=str(sysfs))
        # `mapping` meets each device with its gpu_id through the same socket and sysfs tree.
        mapping_flags = ("--amd.metrics-socket", identity.socket_path, "--amd.sysfs-root", str(sysfs))
        return DemoServing(settings, lambda url: simulated_text(exporter.url, identity.socket_path),
                           mapping_flags=mapping_flags)


def simulated_text(exporter_url: str, socket_path: str) -> str:
    """The banner's lines after the kubelet's: AMD's exporter and identity service, the GPUs and who holds them."""
    gpus = demo_gpus()
    cpx_ids = [gpu.gpu_id for gpu in gpus if gpu.spec.index == CPX_GPU]
    idle = sorted((gpu.gpu_id for gpu in gpus if gpu.gpu_id not in HOLDERS), key=int)
    held = "\n".join(f"  gpu_id {gpu_id:<3} {'/'.join(HOLDERS[gpu_id])}"
                     for gpu_id in sorted(HOLDERS, key=int))
    return f"""\
           AMD's device-metrics-exporter at {exporter_url}, serving 8 AMD Instinct MI300X GPUs,
           values moving; its identity and health service (gRPC) on {socket_path};
           the node's sysfs (render nodes, partitions, KFD topology) and a Kubernetes API server:
  GPUs 0-6 whole, as {SPX_RESOURCE} (by PCI address); GPU {CPX_GPU} in CPX mode, its partitions gpu_id
  {cpx_ids[0]}-{cpx_ids[-1]} as {CPX_RESOURCE} (the first by its GPU's address, the rest amdgpu_xcp_<N>):
{held}
  idle: gpu_id {", ".join(idle)} (served without owner labels); a pod also holds an AMD NIC
  ({NIC_RESOURCE} {NIC_ADDRESS}), which is no GPU; gpu_id {UNHEALTHY_GPU_ID} turns unhealthy about
  {UNHEALTHY_AFTER_SECONDS:g} s in (gpu_health 0, pod_gpu_device_health_status)

"""
