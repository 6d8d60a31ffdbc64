"""pod_gpu_allocation_info: one series per GPU device the kubelet reports as allocated."""

from __future__ import annotations

from typing import Dict, Iterable, Optional

from exporter.core.identity import GpuIdentity, GpuKey
from exporter.core.mapping import Mapping
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import LABEL_STYLES, gpu_label_pairs, render_owner_labels
from exporter.exposition.text import family_header, render_label_pairs

ALLOCATION_INFO = "pod_gpu_allocation_info"
_HELP = "A GPU device the kubelet reports as allocated to a container (1 per device)."


def render_allocation_info(mapping: Mapping, identities: Iterable[GpuIdentity], style: str,
                           limit: Optional[LabelLimit] = None) -> str:
    """`pod_gpu_allocation_info{owner…,resource,device_id[,UUID,gpu,GPU_I_ID]} 1` for every allocation.

    UUID, gpu and GPU_I_ID come from the upstream sample that matched the device, so an index-strategy
    device ("0") still gets its UUID and a UUID device its index, for joins in PromQL. With
    --labels.mode join these rows are the only place a GPU's holders are named. `limit`
    (--labels.limit) cuts the extras as on the samples; the row's own labels always stay.
    """
    if not mapping.allocations:
        return ""
    by_key = _identities_by_key(identities)
    lines = [family_header(ALLOCATION_INFO, _HELP)]
    for allocation in mapping.allocations:
        owner = allocation.owner
        pairs = [("resource", allocation.resource), ("device_id", allocation.device_id)]
        identity = by_key.get(allocation.key) if allocation.key else None
        if identity is not None:
            pairs += gpu_label_pairs(identity)
        extra = mapping.extra_labels.get((owner.namespace, owner.pod), ())
        if limit is not None:
            extra = limit.fit(extra, len(pairs), len(LABEL_STYLES[style])) or ()
        labels = render_owner_labels(owner, style, extra) + "," + render_label_pairs(pairs)
        lines.append(f"{ALLOCATION_INFO}{{{labels}}} 1\n")
    return "".join(lines)


def _identities_by_key(identities: Iterable[GpuIdentity]) -> Dict[GpuKey, GpuIdentity]:
    by_key: Dict[GpuKey, GpuIdentity] = {}
    for identity in sorted(identities):  # sorted: the same choice on every scrape
        for key in identity.keys():
            by_key.setdefault(key, identity)
    return by_key
