"""The labels this exporter adds to a series: its owner's, in a label style, and its GPU's identity."""

from __future__ import annotations

from typing import Tuple

from exporter.core.identity import GpuIdentity, Owner
from exporter.exposition.text import LabelPairs, render_label_pairs

LABEL_STYLES = {
    # Owner field order follows each style's tradition: the seed appended pod_name, pod_namespace,
    # container_name; dcgm-exporter -k and kube-state-metrics readers expect namespace, pod, container.
    "kubernetes": (("namespace", 0), ("pod", 1), ("container", 2)),
    "legacy": (("pod_name", 1), ("pod_namespace", 0), ("container_name", 2)),
}

# Owner labels that an upstream dcgm-exporter run with -k (or --use-old-namespace) may already carry.
# They are removed from every sample so ours are the only ones: never duplicated, never stale.
UPSTREAM_OWNER_LABELS = frozenset(
    {"namespace", "pod", "container", "pod_uid", "pod_name", "pod_namespace", "container_name"}
)


def check_label_style(style: str) -> None:
    if style not in LABEL_STYLES:
        raise ValueError(f"unknown label style {style!r}")


def render_owner_labels(owner: Owner, style: str, extra_labels: LabelPairs = ()) -> str:
    """The `name="value",…` text appended for an owner, in the style's order, then its pod's extra
    labels from the Kubernetes API (Mapping.extra_labels), if any."""
    pairs = [(name, owner[index]) for name, index in LABEL_STYLES[style]]
    pairs += extra_labels
    return render_label_pairs(pairs)


def gpu_label_pairs(identity: GpuIdentity) -> Tuple[Tuple[str, str], ...]:
    """UUID, gpu and GPU_I_ID as dcgm-exporter names them, each only when known: what a series this
    exporter writes about a GPU carries, so that it joins dcgm's samples in PromQL."""
    named = (("UUID", identity.uuid), ("gpu", identity.gpu), ("GPU_I_ID", identity.instance))
    return tuple((name, value) for name, value in named if value)
