"""The demo node as the exporter finds it beyond the kubelet: its pods on an API server, and its processes under a /proc tree."""

from __future__ import annotations

import threading
from pathlib import Path

from exporter.demo.kube_api import FakeKubeApi
from exporter.demo.kube_objects import make_pod, write_kubeconfig
from exporter.demo.workload import NODE_NAME, SIMULATED_PODS, SIMULATED_PROCESSES, SimulatedPod, pod_named

# resource.k8s.io/v1 is served with no ResourceSlice: DRA stays unused, as on a cluster whose GPUs all go
# through device plugins (a 404 there would be logged as a warning a newcomer need not read).
SERVED_APIS = ("v1", "apps/v1", "resource.k8s.io/v1")


class DemoKubeApi(FakeKubeApi):
    """The API server, telling the simulated node when the exporter has its pods: it lists them, then watches."""

    def __init__(self):
        super().__init__(served_versions=SERVED_APIS)
        self.pods_watched = threading.Event()

    def _answer_watch(self, handler, plural: str, since: int) -> bool:
        if plural == "pods":
            self.pods_watched.set()
        return False


def start_api_server(kubeconfig: Path) -> DemoKubeApi:
    """An API server on loopback holding the simulated pods and their controllers; `kubeconfig` points at it."""
    api = DemoKubeApi().start()
    for pod in SIMULATED_PODS:
        kind, name = pod.owner
        if kind == "ReplicaSet":  # a Deployment's pod: ReplicaSet, then Deployment
            deployment = pod.name
            api.put_owner("apps/v1", "deployments", pod.namespace, deployment)
            api.put_owner("apps/v1", "replicasets", pod.namespace, name, owner=("Deployment", deployment))
        else:
            api.put_owner("apps/v1", "statefulsets", pod.namespace, name)
        api.put("v1", "pods", pod_object(pod))
    write_kubeconfig(str(kubeconfig), api.url)
    return api


def pod_object(pod: SimulatedPod) -> dict:
    """The Pod as the API server returns it, with the runtime's container IDs and the kubelet's report of
    each allocated device's health (status.containerStatuses[].allocatedResourcesStatus)."""
    obj = make_pod(pod.namespace, pod.name, NODE_NAME, labels={"app": pod.owner[1]}, owner=pod.owner,
                   containers=pod.containers, uid=pod.uid)
    for status in obj["status"]["containerStatuses"]:
        status["containerID"] = f"containerd://{pod.container_id(status['name'])}"
        if pod.health:
            status["allocatedResourcesStatus"] = [
                {"name": resource, "resources": [{"resourceID": device, "health": health}
                                                 for device, health in devices.items()]}
                for resource, devices in pod.health.items()]
    return obj


def write_proc_tree(root: Path) -> None:
    """<root>/<pid>/cgroup for every simulated GPU process, as the host's /proc shows them (cgroup v2, systemd
    driver, containerd): what --sharing.proc-root reads to tell each process's pod and container."""
    for process in SIMULATED_PROCESSES:
        if process.pod is None:
            path = "/system.slice/ollama.service"
        else:
            pod = pod_named(*process.pod)
            pod_slice = f"kubepods-burstable-pod{pod.uid.replace('-', '_')}.slice"
            path = f"/kubepods.slice/kubepods-burstable.slice/{pod_slice}/cri-containerd-{pod.container_id(process.container)}.scope"
        folder = root / str(process.pid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup").write_text(f"0::{path}\n")
