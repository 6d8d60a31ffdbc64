"""The demo node beyond the kubelet: its pods on an API server, its processes under /proc, its Slurm job's mapping file."""

from __future__ import annotations

import threading
from pathlib import Path

from exporter.demo.kube_api import FakeKubeApi
from exporter.demo.kube_objects import make_pod, write_kubeconfig
from exporter.demo.workload import (CLUSTER_QUEUE, DRA_DRIVER, DRA_GPU, DRA_TAINT, HPC_JOBS, KAI_PARENT_QUEUE,
                                    NODE_NAME, SIMULATED_PODS, SIMULATED_PROCESSES, SimulatedPod, gpu_uuid,
                                    pod_named)
from exporter.collectors.kubernetes.queue_hints import KAI_QUEUE_LABEL

# resource.k8s.io/v1 (Kubernetes 1.34 and later) carries the ResourceSlice of NVIDIA's DRA driver.
SERVED_APIS = ("v1", "apps/v1", "resource.k8s.io/v1")
# Kueue's CRDs as a Kueue 0.16 installation serves them: the exporter reads LocalQueues at v1beta2.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_KINDS = (("localqueues", "LocalQueue", True), ("clusterqueues", "ClusterQueue", False),
               ("workloads", "Workload", True))
# KAI Scheduler's queues: cluster-scoped, in a tree by spec.parentQueue.
KAI_API = "scheduling.run.ai/v2"


class DemoKubeApi(FakeKubeApi):
    """The API server, telling the simulated node when the exporter has its pods: it lists them, then watches."""

    def __init__(self):
        super().__init__(served_versions=SERVED_APIS)
        for plural, kind, namespaced in KUEUE_KINDS:
            self.serve_kind(KUEUE_API, plural, kind, namespaced=namespaced)
        self.serve_kind(KAI_API, "queues", "Queue", namespaced=False)
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
            # KAI reads its queue label on the top owner: the Deployment, not the ReplicaSet or the pod.
            labels = {"app": deployment, **({KAI_QUEUE_LABEL: pod.kai_queue} if pod.kai_queue else {})}
            api.put_owner("apps/v1", "deployments", pod.namespace, deployment, labels=labels)
            api.put_owner("apps/v1", "replicasets", pod.namespace, name, owner=("Deployment", deployment))
        else:  # Kueue's queue label goes on a StatefulSet and its pod template alike
            api.put_owner("apps/v1", "statefulsets", pod.namespace, name, labels=pod.labels)
        api.put("v1", "pods", pod_object(pod))
    for namespace, name in sorted({(pod.namespace, pod.local_queue) for pod in SIMULATED_PODS if pod.local_queue}):
        api.put(KUEUE_API, "localqueues", local_queue_object(namespace, name))
    kai_queues = sorted({pod.kai_queue for pod in SIMULATED_PODS if pod.kai_queue})
    api.put(KAI_API, "queues", kai_queue_object(KAI_PARENT_QUEUE, children=kai_queues))
    for name in kai_queues:
        api.put(KAI_API, "queues", kai_queue_object(name, parent=KAI_PARENT_QUEUE))
    api.put("resource.k8s.io/v1", "resourceslices", resource_slice_object())
    write_kubeconfig(str(kubeconfig), api.url)
    return api


def local_queue_object(namespace: str, name: str) -> dict:
    """A LocalQueue a pod names, pointing at the ClusterQueue whose quota it draws on, with the status Kueue keeps."""
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": CLUSTER_QUEUE, "stopPolicy": "None"},
            "status": {"admittedWorkloads": 1, "reservingWorkloads": 1, "pendingWorkloads": 0}}


def kai_queue_object(name: str, parent: str = "", children=()) -> dict:
    """A KAI Scheduler Queue with a GPU quota, under `parent`; a parent lists its `children` as KAI's queue
    controller does."""
    spec = {"displayName": name, "resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1},
                                               "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                               "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}},
            **({"parentQueue": parent} if parent else {})}
    return {"apiVersion": KAI_API, "kind": "Queue", "metadata": {"name": name}, "spec": spec,
            "status": {"childQueues": list(children)} if children else {}}


def resource_slice_object() -> dict:
    """The ResourceSlice NVIDIA's DRA driver publishes for this node: GPU 3, with the attributes it writes and
    its taint (the exporter matches the device to dcgm's samples by its `uuid`)."""
    device = {"name": f"gpu-{DRA_GPU}",
              "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid(DRA_GPU)},
                             "index": {"int": DRA_GPU}, "minor": {"int": DRA_GPU},
                             "productName": {"string": "NVIDIA L4"}, "brand": {"string": "Nvidia"},
                             "architecture": {"string": "Ada Lovelace"}, "cudaComputeCapability": {"version": "8.9.0"},
                             "driverVersion": {"version": "580.105.8"}, "cudaDriverVersion": {"version": "13.0.0"},
                             "pcieBusID": {"string": f"0000:{0x31 + DRA_GPU:02X}:00.0"}},
              "capacity": {"memory": {"value": "23034Mi"}},
              "taints": [dict(DRA_TAINT)]}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE_NAME}-{DRA_DRIVER}-q7m2x"},
            "spec": {"driver": DRA_DRIVER, "nodeName": NODE_NAME, "devices": [device],
                     "pool": {"name": NODE_NAME, "generation": 1, "resourceSliceCount": 1}}}


def pod_object(pod: SimulatedPod) -> dict:
    """The Pod as the API server returns it, with the runtime's container IDs and the kubelet's report of
    each allocated device's health (status.containerStatuses[].allocatedResourcesStatus)."""
    obj = make_pod(pod.namespace, pod.name, NODE_NAME, labels=pod.labels, owner=pod.owner,
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


def write_hpc_job_files(folder: Path) -> None:
    """<folder>/<gpu> for every GPU a Slurm job was given, one job ID per line, as a job prolog writes them
    for dcgm-exporter's --hpc-job-mapping-dir: what --hpc.job-mapping-dir reads."""
    folder.mkdir(parents=True, exist_ok=True)
    for gpu, jobs in HPC_JOBS.items():
        (folder / str(gpu)).write_text("".join(f"{job}\n" for job in jobs))
