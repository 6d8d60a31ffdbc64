"""pod_gpu_allocation_info (one series per allocated GPU device) and pod_gpu_container_allocated_gpus (GPUs per container)."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from exporter.core.allocated import allocated_gpus
from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import Mapping
from exporter.exposition import families
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import device_label_pairs, identities_by_key, render_owner_labels_within
from exporter.exposition.sections import BaseSection, ScrapeView
from exporter.exposition.text import render_label_pairs

ALLOCATION_INFO = families.ALLOCATION_INFO.name
ALLOCATED_GPUS = families.ALLOCATED_GPUS.name
# The labels kube-state-metrics' kube_pod_resourceclaim_info names a pod's claim with, for joins.
CLAIM_NAMESPACE, CLAIM_NAME = "resourceclaim_namespace", "resourceclaim_name"


def render_allocation_info(mapping: Mapping, identities: Iterable[GpuIdentity], style: str,
                           limit: Optional[LabelLimit] = None) -> str:
    """`pod_gpu_allocation_info{owner…,resource,device_id[,UUID,gpu,GPU_I_ID][,resourceclaim_…]} 1` for
    every allocation, then `pod_gpu_container_allocated_gpus` for every container holding any.

    UUID, gpu and GPU_I_ID come from the upstream sample that matched the device, so an index-strategy
    device ("0") still gets its UUID and a UUID device its index, for joins in PromQL; a device no sample
    carried keeps the name its device ID gives (labels.device_label_pairs), as its health rows do. With
    --labels.mode join these rows are the only place a GPU's holders are named. `limit`
    (--labels.limit) cuts the extras as on the samples; the row's own labels always stay.
    """
    if not mapping.allocations:
        return ""
    by_key = identities_by_key(identities)
    lines = [families.ALLOCATION_INFO.header]
    for allocation in mapping.allocations:
        owner = allocation.owner
        pairs = [("resource", allocation.resource), ("device_id", allocation.device_id)]
        pairs += device_label_pairs(allocation.key, by_key)
        if allocation.claim:
            claim_namespace, _, claim_name = allocation.claim.partition("/")
            pairs += [(CLAIM_NAMESPACE, claim_namespace), (CLAIM_NAME, claim_name)]
        labels = _owner_labels(mapping, owner, style, limit, len(pairs))
        lines.append(f"{ALLOCATION_INFO}{{{labels},{render_label_pairs(pairs)}}} 1\n")
    return "".join(lines) + _render_allocated_gpus(mapping, style, limit)


def _render_allocated_gpus(mapping: Mapping, style: str, limit: Optional[LabelLimit]) -> str:
    totals = allocated_gpus(mapping.allocations, mapping.offered)
    if not totals:
        return ""
    lines = [families.ALLOCATED_GPUS.header]
    for owner in sorted(totals):
        labels = _owner_labels(mapping, Owner(*owner), style, limit, 0)
        # 12 significant digits: 1/3 + 1/3 + 1/3 reads back as 1, not 0.9999999999999999.
        lines.append(f"{ALLOCATED_GPUS}{{{labels}}} {totals[owner]:.12g}\n")
    return "".join(lines)


def _owner_labels(mapping: Mapping, owner: Owner, style: str, limit: Optional[LabelLimit], own_labels: int) -> str:
    return render_owner_labels_within(owner, style, mapping.extra_labels.get((owner.namespace, owner.pod), ()),
                                      limit, own_labels)



class AllocationSection(BaseSection):
    """The allocation rows, kept with the rewrite they were made for; up while the kubelet answers."""

    name = "allocation"

    def __init__(self, style: str, limit: Optional[LabelLimit], kubelet_up: Callable[[], bool]):
        super().__init__(kubelet_up)
        self._style = style  # --labels.style
        self._limit = limit  # --labels.limit, shared with every series written about a pod

    def _rows(self, view: ScrapeView) -> bytes:
        return render_allocation_info(view.snapshot.mapping, view.identities, self._style, self._limit).encode()
