"""Kueue, Volcano and KAI Scheduler on the fake API server: their CRDs served, LocalQueues, PodGroups, KAI Queues
and the pods queued in them."""

from __future__ import annotations

from support.fake_kube_api import make_pod, owner_reference
from support.kube_scenario import NODE

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PLURALS = {"localqueues": "LocalQueue", "clusterqueues": "ClusterQueue", "workloads": "Workload"}
VOLCANO = "scheduling.volcano.sh/v1beta1"
KAI = "scheduling.run.ai/v2"
KAI_LABEL = "kai.scheduler/queue"

# pod → (cluster_queue, local_queue) it must be labelled with, for the pods put_queued_pods makes.
EXPECTED = {
    "plain-0": ("cq-research", "lq-research"),  # the Kueue label on the pod itself
    "train-x7k2p": ("cq-research", "lq-train"),  # the label only on its Job
    "sweep-0-abc12": ("cq-vision", "lq-vision"),  # the label only on the JobSet above its Job
    "vc-worker-0": ("q-vision", ""),  # a vcjob pod: volcano.sh/queue-name
    "pg-member": ("q-batch", ""),  # a PodGroup named by scheduling.k8s.io/group-name
    "pg-default": ("default", ""),  # a PodGroup with no spec.queue: Volcano's default queue
    "lost-0": ("", ""),  # a LocalQueue that does not exist
    "kai-infer-0": ("team-a", ""),  # KAI's label on the pod: a leaf Queue (its parent is "org")
    "kai-train-0": ("team-b", ""),  # KAI's label on the Job, the pod's top owner, which outranks the pod's
    "kai-lost-0": ("", ""),  # a KAI Queue that does not exist
    "idle-0": ("", ""),  # in no queue
}


def serve_kueue(api, version: str = "kueue.x-k8s.io/v1beta2") -> None:
    """Kueue's CRDs installed, served at `version` only (the other version's paths answer 404)."""
    for plural, kind in KUEUE_PLURALS.items():
        api.serve_kind(version, plural, kind, namespaced=plural != "clusterqueues")


def serve_kai(api) -> None:
    """KAI Scheduler's Queue CRD and a parent queue with two leaves, as KAI's queue controller keeps them."""
    api.serve_kind(KAI, "queues", "Queue", namespaced=False)
    put_kai_queue(api, "org", children=("team-a", "team-b"))
    put_kai_queue(api, "team-a", parent="org")
    put_kai_queue(api, "team-b", parent="org")


def put_kai_queue(api, name: str, parent=None, children=()) -> None:
    spec = {"resources": {"gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1}},
            **({"parentQueue": parent} if parent else {})}
    api.put(KAI, "queues", {"apiVersion": KAI, "kind": "Queue", "metadata": {"name": name}, "spec": spec,
                            "status": {"childQueues": list(children)} if children else {}})


def serve_volcano(api) -> None:
    api.serve_kind(VOLCANO, "podgroups", "PodGroup")
    api.serve_kind(VOLCANO, "queues", "Queue", namespaced=False)


def put_local_queue(api, version: str, namespace: str, name: str, cluster_queue: str) -> None:
    api.put(version, "localqueues", {"apiVersion": version, "kind": "LocalQueue",
                                     "metadata": {"name": name, "namespace": namespace},
                                     "spec": {"clusterQueue": cluster_queue}, "status": {"admittedWorkloads": 1}})


def put_pod_group(api, namespace: str, name: str, queue=None) -> None:
    spec = {"minMember": 1, **({"queue": queue} if queue else {})}
    api.put(VOLCANO, "podgroups", {"apiVersion": VOLCANO, "kind": "PodGroup",
                                   "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def _owner(api, version: str, plural: str, kind: str, namespace: str, name: str, labels=None, owner=None) -> None:
    meta = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(*owner)]
    api.put(version, plural, {"apiVersion": version, "kind": kind, "metadata": meta, "spec": {"parallelism": 1}})


def put_queued_pods(api, namespace: str = "team") -> list:
    """The pods of EXPECTED (and their Jobs, JobSet and PodGroups); returns their names."""
    api.serve_kind("jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet")
    _owner(api, "batch/v1", "jobs", "Job", namespace, "train", labels={KUEUE_LABEL: "lq-train"})
    _owner(api, "jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet", namespace, "sweep", labels={KUEUE_LABEL: "lq-vision"})
    _owner(api, "batch/v1", "jobs", "Job", namespace, "sweep-0", owner=("JobSet", "sweep"))
    _owner(api, "batch/v1", "jobs", "Job", namespace, "kai-train", labels={KAI_LABEL: "team-b"})
    put_pod_group(api, namespace, "pg-1", "q-batch")
    put_pod_group(api, namespace, "pg-2")
    pods = {
        "plain-0": {"labels": {KUEUE_LABEL: "lq-research"}},
        "train-x7k2p": {"owner": ("Job", "train")},
        "sweep-0-abc12": {"owner": ("Job", "sweep-0")},
        "vc-worker-0": {"labels": {"volcano.sh/queue-name": "q-vision"},
                        "annotations": {"volcano.sh/queue-name": "q-vision", "scheduling.k8s.io/group-name": "vc-pg"}},
        "pg-member": {"annotations": {"scheduling.k8s.io/group-name": "pg-1"}},
        "pg-default": {"annotations": {"scheduling.volcano.sh/group-name": "pg-2"}},
        "lost-0": {"labels": {KUEUE_LABEL: "lq-missing"}},
        "kai-infer-0": {"labels": {KAI_LABEL: "team-a"}},
        "kai-train-0": {"labels": {KAI_LABEL: "team-a"}, "owner": ("Job", "kai-train")},
        "kai-lost-0": {"labels": {KAI_LABEL: "no-such-queue"}},
        "idle-0": {},
    }
    for name, fields in pods.items():
        api.put("v1", "pods", make_pod(namespace, name, NODE, **fields))
    return list(pods)


def put_local_queues(api, version: str = "kueue.x-k8s.io/v1beta2", namespace: str = "team") -> None:
    put_local_queue(api, version, namespace, "lq-research", "cq-research")
    put_local_queue(api, version, namespace, "lq-train", "cq-research")
    put_local_queue(api, version, namespace, "lq-vision", "cq-vision")
