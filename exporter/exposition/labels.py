"""The labels this exporter adds to a series: its owner's, in a label style, and its GPU's identity in the vendor's dialect."""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from exporter.core.identity import GpuIdentity, GpuKey, Owner, SampleDialect
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.text import LabelPairs, render_label_pairs

LABEL_STYLES = {
    # Owner field order follows each style's tradition: the seed appended pod_name, pod_namespace,
    # container_name; dcgm-exporter -k and kube-state-metrics readers expect namespace, pod, container.
    "kubernetes": (("namespace", 0), ("pod", 1), ("container", 2)),
    "legacy": (("pod_name", 1), ("pod_namespace", 0), ("container_name", 2)),
}
LABEL_STYLE_NAMES = tuple(LABEL_STYLES)  # --labels.style's choices, the first its default

# dcgm-exporter's own attribution, as its Kubernetes mapping writes it (the names in its
# internal/pkg/transformation/const.go): the container it believes holds the GPU (-k, or
# --use-old-namespace), pod_uid (--kubernetes-enable-pod-uid, and always on its per-pod copies),
# vgpu (the time-slicing replica, --kubernetes-virtual-gpus) and the DRA claim
# (--kubernetes-enable-dra). Ours replaces it, so these are removed from every sample, attributed or
# not; two samples that differ only in them are copies of one series (see SeriesBuilder).
UPSTREAM_OWNER_LABELS = frozenset({
    "namespace", "pod", "container", "pod_uid", "pod_name", "pod_namespace", "container_name", "vgpu",
    "dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name",
    "dra_mig_profile", "dra_mig_device_uuid",
})

# What a caller that names no vendor gets (a test, a tool reading text written before vendors): the
# labels every series was named by before a node could serve another vendor. A serving node always hands
# in its vendor's own dialect (Vendor.figures.dialect).
DEFAULT_DIALECT = SampleDialect(
    uuid_labels=("UUID", "uuid"), index_label="gpu", device_label="device", instance_label="GPU_I_ID",
    partition_label="", written=(("uuid", "UUID"), ("gpu", "gpu"), ("instance", "GPU_I_ID")),
    naming=("UUID", "gpu"), upstream_owner_labels=UPSTREAM_OWNER_LABELS)


def check_label_style(style: str) -> None:
    if style not in LABEL_STYLES:
        raise ValueError(f"unknown label style {style!r}")


def owner_label_pairs(owner: Owner, style: str, extra_labels: LabelPairs = ()) -> Tuple[Tuple[str, str], ...]:
    """The (name, value) pairs added for an owner, in the style's order, then its pod's extra labels
    from the Kubernetes API (Mapping.extra_labels), if any."""
    return tuple([(name, owner[index]) for name, index in LABEL_STYLES[style]]) + tuple(extra_labels)


def render_owner_labels(owner: Owner, style: str, extra_labels: LabelPairs = ()) -> str:
    """The `name="value",…` text appended for an owner (owner_label_pairs)."""
    return render_label_pairs(owner_label_pairs(owner, style, extra_labels))


def render_owner_labels_within(owner: Owner, style: str, extra_labels: LabelPairs, limit: Optional[LabelLimit],
                               own_labels: int) -> str:
    """render_owner_labels for a series we write ourselves (an allocation row, a share), its pod's
    extra labels cut to `limit` (--labels.limit) beside the series' `own_labels` other labels, which
    always stay, as do the owner labels: with the limit at least 12 they always fit."""
    if limit is not None:
        extra_labels = limit.fit(tuple(extra_labels), own_labels, len(LABEL_STYLES[style])) or ()
    return render_owner_labels(owner, style, extra_labels)


def gpu_label_pairs(identity: GpuIdentity, dialect: SampleDialect = DEFAULT_DIALECT) -> Tuple[Tuple[str, str], ...]:
    """The device's labels as the vendor's samples name them (SampleDialect.written: UUID, gpu and GPU_I_ID
    on NVIDIA), each only when known: what a series this exporter writes about a GPU carries, so that it
    joins the vendor's samples in PromQL."""
    named = ((label, getattr(identity, field)) for field, label in dialect.written)
    return tuple((name, value) for name, value in named if value)


def identities_by_key(identities: Iterable[GpuIdentity]) -> Dict[GpuKey, GpuIdentity]:
    """Each key the samples' identities can be claimed by → the identity; sorted first, so that a key two
    identities share goes to the same one on every scrape."""
    by_key: Dict[GpuKey, GpuIdentity] = {}
    for identity in sorted(identities):
        for key in identity.keys():
            by_key.setdefault(key, identity)
    return by_key


def device_label_pairs(key: Optional[GpuKey], by_key: Dict[GpuKey, GpuIdentity],
                       dialect: SampleDialect = DEFAULT_DIALECT) -> Tuple[Tuple[str, str], ...]:
    """The labels (gpu_label_pairs) of a device the mapping resolved to `key`: the sample's identity that
    `key` claims (identities_by_key), else the one name the key itself gives. Every series naming a held device
    (its allocation rows, its health) takes them from here, so that rules join them on the device even
    when no sample carried it (dcgm-exporter down, a GPU gone from its answer).

    A key by device name ("nvidia0") gives no UUID or gpu, and then no GPU_I_ID either: an instance ID
    alone would match the same instance of another GPU.
    """
    if key is None:
        return ()
    identity = by_key.get(key)
    if identity is not None:
        return gpu_label_pairs(identity, dialect)
    label = dialect.label_for(key.label)
    if key.label not in dialect.naming or not label:
        return ()
    instance = next((name for field, name in dialect.written if field == "instance"), "")
    return ((label, key.value),) + (((instance, key.instance),) if key.instance and instance else ())


def naming_labels(dialect: SampleDialect) -> frozenset:
    """The labels whose value alone tells one device from another on our rows (UUID and gpu on NVIDIA)."""
    return frozenset(dialect.label_for(kind) for kind in dialect.naming) - {""}
