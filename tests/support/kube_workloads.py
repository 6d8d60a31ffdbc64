"""Controller chains as the real controllers leave them in the API server, for the workload tests.

Each chain is what its controller's code sets as `controller: true` ownerReferences:
- Deployment → ReplicaSet `<name>-<hash>` → Pod;
- Argo Rollouts: Rollout → ReplicaSet `<name>-<hash>` (the hash changes on every rollout) → Pod;
- CronJob → Job `<name>-<minute>` → Pod;
- JobSet (jobset.x-k8s.io) → Job `<jobset>-<replicated job>-<index>` → Pod;
- LeaderWorkerSet (leaderworkerset.x-k8s.io): LeaderWorkerSet → StatefulSet `<name>` → leader Pod
  `<name>-<group>`; that leader Pod → worker StatefulSet `<name>-<group>` → worker Pods
  `<name>-<group>-<index>` (kubernetes-sigs/lws pkg/controllers/pod_controller.go sets the leader pod
  as the worker StatefulSet's controller);
- StatefulSet → Pod, DaemonSet → Pod; a custom resource owning pods directly (a RayCluster);
- an ownerReference without `controller: true` names no workload.
"""

from __future__ import annotations

from support.fake_kube_api import CUSTOM_KINDS, make_pod
from support.kube_scenario import NODE

RAY = ("ray.io/v1", "rayclusters", "RayCluster")


def serve_custom_kinds(api) -> None:
    for (version, plural), (kind, namespaced) in CUSTOM_KINDS.items():
        api.serve_kind(version, plural, kind, namespaced)
    api.serve_kind(RAY[0], RAY[1], RAY[2])


def put_chains(api, namespace: str = "team"):
    """Every chain above in `namespace`, one pod each on this node; returns [(pod name, (workload kind,
    workload name), pod UID)]."""
    serve_custom_kinds(api)
    owner = api.put_owner
    owner("apps/v1", "deployments", namespace, "web")
    owner("apps/v1", "replicasets", namespace, "web-7d9f", ("Deployment", "web"))
    owner("argoproj.io/v1alpha1", "rollouts", namespace, "trainer")
    owner("apps/v1", "replicasets", namespace, "trainer-7c9d5f8b6", ("Rollout", "trainer"))
    owner("apps/v1", "replicasets", namespace, "rs-only")
    owner("batch/v1", "cronjobs", namespace, "nightly")
    owner("batch/v1", "jobs", namespace, "nightly-28999", ("CronJob", "nightly"))
    owner("batch/v1", "jobs", namespace, "once")
    owner("jobset.x-k8s.io/v1alpha2", "jobsets", namespace, "pretrain")
    owner("batch/v1", "jobs", namespace, "pretrain-workers-0", ("JobSet", "pretrain"))
    owner("leaderworkerset.x-k8s.io/v1", "leaderworkersets", namespace, "llama")
    owner("apps/v1", "statefulsets", namespace, "llama", ("LeaderWorkerSet", "llama"))
    # The leader pod runs on another node: the walk reads it like any other owner.
    api.put("v1", "pods", make_pod(namespace, "llama-0", "gpu-node-2", owner=("StatefulSet", "llama")))
    owner("apps/v1", "statefulsets", namespace, "llama-0", ("Pod", "llama-0"))
    owner("apps/v1", "statefulsets", namespace, "db")
    owner("apps/v1", "daemonsets", namespace, "agent")
    owner(RAY[0], RAY[1], namespace, "ray")
    chains = [
        ("web-7d9f-abcde", ("ReplicaSet", "web-7d9f"), ("Deployment", "web")),
        ("trainer-7c9d5f8b6-x2", ("ReplicaSet", "trainer-7c9d5f8b6"), ("Rollout", "trainer")),
        ("rs-only-xyz", ("ReplicaSet", "rs-only"), ("ReplicaSet", "rs-only")),
        ("nightly-28999-q", ("Job", "nightly-28999"), ("CronJob", "nightly")),
        ("once-q", ("Job", "once"), ("Job", "once")),
        ("pretrain-workers-0-0-k8x", ("Job", "pretrain-workers-0"), ("JobSet", "pretrain")),
        ("llama-1", ("StatefulSet", "llama"), ("LeaderWorkerSet", "llama")),  # a leader on this node
        ("llama-0-1", ("StatefulSet", "llama-0"), ("LeaderWorkerSet", "llama")),  # a worker of group 0
        ("db-0", ("StatefulSet", "db"), ("StatefulSet", "db")),
        ("agent-x1", ("DaemonSet", "agent"), ("DaemonSet", "agent")),
        ("ray-head-q", ("RayCluster", "ray", RAY[0]), ("RayCluster", "ray")),
        ("helper", ("ConfigMap", "settings", "v1", False), ("Pod", "helper")),  # not a controller
        ("bare", None, ("Pod", "bare")),
    ]
    return [(pod, workload, api.put("v1", "pods", make_pod(namespace, pod, NODE, owner=controller))["metadata"]["uid"])
            for pod, controller, workload in chains]
