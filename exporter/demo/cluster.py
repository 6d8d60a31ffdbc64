"""The demo node beyond the kubelet, whatever its GPUs: its pods and queues on an API server, its Slurm job's mapping file."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Dict, Iterable, Mapping, NamedTuple, Tuple

from exporter.demo.kube_api import FakeKubeApi
from exporter.demo.kube_objects import make_pod, write_kubeconfig
from exporter.collectors.kubernetes.queue_hints import KAI_QUEUE_LABEL, KUEUE_QUEUE_LABEL

# The simulated cluster's queues, the same whichever vendor's node runs: a pod queued through Kueue names
# the LocalQueue team-ml, which draws on the cq-research ClusterQueue's quota; a Deployment may name the
# KAI Scheduler Queue "inference", a leaf under "org".
LOCAL_QUEUE = "team-ml"
CLUSTER_QUEUE = "cq-research"
KAI_QUEUE = "inference"
KAI_PARENT_QUEUE = "org"


class SimulatedPod(NamedTuple):
    namespace: str
    name: str
    owner: Tuple[str, str]  # (kind, name) of its controller
    containers: Tuple[str, ...]
    # resource → {device ID: "Healthy" | "Unhealthy"}: the kubelet's allocatedResourcesStatus
    health: Dict[str, Dict[str, str]]
    local_queue: str = ""  # the Kueue LocalQueue it was submitted to (KUEUE_QUEUE_LABEL), in its namespace
    kai_queue: str = ""  # the KAI Scheduler Queue its Deployment names (KAI_QUEUE_LABEL on the top owner only)

    @property
    def labels(self) -> Dict[str, str]:
        """The labels of the pod and of its controller, as its manifest sets them."""
        return {"app": self.owner[1], **({KUEUE_QUEUE_LABEL: self.local_queue} if self.local_queue else {})}

    @property
    def uid(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod-gpu-demo/{self.namespace}/{self.name}"))

    def container_id(self, container: str) -> str:
        """The runtime's 64-hex container ID, as containerStatuses[].containerID names it after "containerd://"."""
        return (uuid.uuid5(uuid.NAMESPACE_URL, f"{self.uid}/{container}").hex * 2)[:64]


class SimulatedCluster(NamedTuple):
    """What a vendor's simulated node puts on the API server: the node's name, its pods, and the
    ResourceSlices its DRA driver publishes."""

    node_name: str
    pods: Tuple[SimulatedPod, ...]
    resource_slices: Tuple[dict, ...] = ()


# resource.k8s.io/v1 (Kubernetes 1.34 and later) carries the ResourceSlices of a vendor's DRA driver.
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


def start_api_server(kubeconfig: Path, cluster: SimulatedCluster) -> DemoKubeApi:
    """An API server on loopback holding the simulated pods, their controllers and queues, and the node's
    ResourceSlices; `kubeconfig` points at it."""
    api = DemoKubeApi().start()
    pods = cluster.pods
    for pod in pods:
        kind, name = pod.owner
        if kind == "ReplicaSet":  # a Deployment's pod: ReplicaSet, then Deployment
            deployment = pod.name
            # KAI reads its queue label on the top owner: the Deployment, not the ReplicaSet or the pod.
            labels = {"app": deployment, **({KAI_QUEUE_LABEL: pod.kai_queue} if pod.kai_queue else {})}
            api.put_owner("apps/v1", "deployments", pod.namespace, deployment, labels=labels)
            api.put_owner("apps/v1", "replicasets", pod.namespace, name, owner=("Deployment", deployment))
        else:  # Kueue's queue label goes on a StatefulSet and its pod template alike
            api.put_owner("apps/v1", "statefulsets", pod.namespace, name, labels=pod.labels)
        api.put("v1", "pods", pod_object(pod, cluster.node_name))
    for namespace, name in sorted({(pod.namespace, pod.local_queue) for pod in pods if pod.local_queue}):
        api.put(KUEUE_API, "localqueues", local_queue_object(namespace, name))
    kai_queues = sorted({pod.kai_queue for pod in pods if pod.kai_queue})
    api.put(KAI_API, "queues", kai_queue_object(KAI_PARENT_QUEUE, children=kai_queues))
    for name in kai_queues:
        api.put(KAI_API, "queues", kai_queue_object(name, parent=KAI_PARENT_QUEUE))
    for resource_slice in cluster.resource_slices:
        api.put("resource.k8s.io/v1", "resourceslices", resource_slice)
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


def pod_object(pod: SimulatedPod, node_name: str) -> dict:
    """The Pod as the API server returns it, with the runtime's container IDs and the kubelet's report of
    each allocated device's health (status.containerStatuses[].allocatedResourcesStatus)."""
    obj = make_pod(pod.namespace, pod.name, node_name, labels=pod.labels, owner=pod.owner,
                   containers=pod.containers, uid=pod.uid)
    for status in obj["status"]["containerStatuses"]:
        status["containerID"] = f"containerd://{pod.container_id(status['name'])}"
        if pod.health:
            status["allocatedResourcesStatus"] = [
                {"name": resource, "resources": [{"resourceID": device, "health": health}
                                                 for device, health in devices.items()]}
                for resource, devices in pod.health.items()]
    return obj


def write_job_mapping_files(folder: Path, jobs_by_gpu: Mapping[int, Iterable[str]]) -> None:
    """<folder>/<gpu> for every GPU a Slurm job was given, one job ID per line, as a job prolog writes them
    (the upstream exporter's job-mapping folder convention): what --hpc.job-mapping-dir reads."""
    folder.mkdir(parents=True, exist_ok=True)
    for gpu, jobs in jobs_by_gpu.items():
        (folder / str(gpu)).write_text("".join(f"{job}\n" for job in jobs))
