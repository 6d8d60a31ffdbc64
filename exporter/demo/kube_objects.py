"""Kubernetes objects as the API server returns them (pods, ownerReferences) and a kubeconfig pointing at a fake server."""

from __future__ import annotations

import json
import uuid
from typing import Optional

# (api version, plural) → (kind, namespaced): what discovery lists; `FakeKubeApi.serve_kind` adds more.
BUILT_IN_KINDS = {
    ("v1", "pods"): ("Pod", True), ("v1", "namespaces"): ("Namespace", False),
    ("apps/v1", "replicasets"): ("ReplicaSet", True), ("apps/v1", "deployments"): ("Deployment", True),
    ("apps/v1", "statefulsets"): ("StatefulSet", True), ("apps/v1", "daemonsets"): ("DaemonSet", True),
    ("batch/v1", "jobs"): ("Job", True), ("batch/v1", "cronjobs"): ("CronJob", True),
    ("resource.k8s.io/v1", "resourceslices"): ("ResourceSlice", False),
    ("resource.k8s.io/v1", "resourceclaims"): ("ResourceClaim", True),
    ("resource.k8s.io/v1beta1", "resourceslices"): ("ResourceSlice", False),
    ("resource.k8s.io/v1beta1", "resourceclaims"): ("ResourceClaim", True),
}
# The custom resources of the controllers GPU clusters run, as their CRDs name them.
CUSTOM_KINDS = {
    ("argoproj.io/v1alpha1", "rollouts"): ("Rollout", True),
    ("jobset.x-k8s.io/v1alpha2", "jobsets"): ("JobSet", True),
    ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"): ("LeaderWorkerSet", True),
}


def write_kubeconfig(path: str, server_url: str, token: Optional[str] = None, token_file: Optional[str] = None) -> str:
    """A kubeconfig (JSON is valid YAML) pointing at the fake server; `token_file` as a service account's."""
    user = {"token": token} if token else {"tokenFile": token_file} if token_file else {}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
        "users": [{"name": "fake", "user": user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }
    with open(path, "w") as handle:
        json.dump(config, handle)
    return path


def make_pod(namespace: str, name: str, node: str, labels=None, annotations=None, owner=None,
             containers=("main",), uid: Optional[str] = None, phase: str = "Running", init_containers=()) -> dict:
    """A Pod object as the API server returns it (the fields the exporter reads, and those a client
    library requires); `owner` is (kind, name[, apiVersion[, controller]]) of its owner."""
    pod_uid = uid or str(uuid.uuid4())
    meta = {"name": name, "namespace": namespace, "uid": pod_uid, "labels": dict(labels or {}),
            "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(*owner)]
    statuses = [{"name": c, "image": "registry.example.com/app:1", "imageID": "", "ready": True, "restartCount": 0,
                 "containerID": f"containerd://{uuid.uuid5(uuid.NAMESPACE_OID, pod_uid + c).hex}"} for c in containers]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": c, "image": "registry.example.com/app:1"} for c in containers],
                     **({"initContainers": [{"name": c, "image": "registry.example.com/app:1"} for c in init_containers]}
                        if init_containers else {})},
            "status": {"phase": phase, "containerStatuses": statuses}}


def owner_reference(kind: str, name: str, api: Optional[str] = None, controller: bool = True) -> dict:
    """An ownerReference to (kind, name); the apiVersion of a well-known kind unless `api` says."""
    known = {kind: version for (version, _), (kind, _) in {**BUILT_IN_KINDS, **CUSTOM_KINDS}.items()}
    return {"apiVersion": api or known.get(kind, "example.com/v1"), "kind": kind, "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_OID, kind + name)), "controller": controller,
            "blockOwnerDeletion": True}
