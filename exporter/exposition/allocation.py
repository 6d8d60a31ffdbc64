"""pod_gpu_allocation_info (one series per allocated GPU device) and pod_gpu_container_allocated_gpus (GPUs per container)."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from exporter.core.allocated import allocated_gpus, memory_shared_gpus
from exporter.core.identity import GpuIdentity, Owner, SampleDialect
from exporter.core.mapping import Mapping
from exporter.exposition import families
from exporter.exposition.device_figures import FigureNames
from exporter.exposition.gpu_memory import framebuffer_mib
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import DEFAULT_DIALECT, device_label_pairs, identities_by_key, render_owner_labels_within
from exporter.exposition.sections import BaseSection, ScrapeView
from exporter.exposition.rows import label_text, render_family

# The labels kube-state-metrics' kube_pod_resourceclaim_info names a pod's claim with, for joins.
CLAIM_NAMESPACE, CLAIM_NAME = "resourceclaim_namespace", "resourceclaim_name"


def render_allocation_info(mapping: Mapping, identities: Iterable[GpuIdentity], style: str,
                           limit: Optional[LabelLimit] = None, gpu_memory_mib: Optional[dict] = None,
                           dialect: SampleDialect = DEFAULT_DIALECT) -> str:
    """`pod_gpu_allocation_info{owner…,resource,device_id[,UUID,gpu,GPU_I_ID][,resourceclaim_…]} 1` for
    every allocation, then `pod_gpu_container_allocated_gpus` for every container holding any.

    UUID, gpu and GPU_I_ID come from the upstream sample that matched the device, so an index-strategy
    device ("0") still gets its UUID and a UUID device its index, for joins in PromQL; a device no sample
    carried keeps the name its device ID gives (labels.device_label_pairs), as its health rows do. With
    --labels.mode join these rows are the only place a GPU's holders are named. `limit`
    (--labels.limit) cuts the extras as on the samples; the row's own labels always stay. `gpu_memory_mib`
    (UUID → MiB) gives the memory shares of HAMi devices that limit memory alone. The device's labels
    are the vendor's (`dialect`: UUID, gpu and GPU_I_ID on NVIDIA).
    """
    by_key = identities_by_key(identities)
    rows = []
    for allocation in mapping.allocations:
        device = device_label_pairs(allocation.key, by_key, dialect)
        values = dict(resource=allocation.resource, device_id=allocation.device_id)
        if allocation.claim:
            values[CLAIM_NAMESPACE], _, values[CLAIM_NAME] = allocation.claim.partition("/")
        # The row's own labels always stay; the owner's extras are cut beside them (--labels.limit).
        owner = _owner_labels(mapping, allocation.owner, style, limit, len(values) + len(device))
        rows.append((label_text(families.ALLOCATION_INFO, values, owner, device), 1))
    return render_family(families.ALLOCATION_INFO, rows) + _render_allocated_gpus(mapping, style, limit, gpu_memory_mib)


def _render_allocated_gpus(mapping: Mapping, style: str, limit: Optional[LabelLimit],
                           gpu_memory_mib: Optional[dict]) -> str:
    totals = allocated_gpus(mapping.allocations, mapping.forms, mapping.offered or {}, gpu_memory_mib)
    # 12 significant digits: 1/3 + 1/3 + 1/3 reads back as 1, not 0.9999999999999999.
    return render_family(families.ALLOCATED_GPUS, ((label_text(families.ALLOCATED_GPUS, {}, _owner_labels(
        mapping, Owner(*owner), style, limit, 0)), f"{totals[owner]:.12g}") for owner in sorted(totals)))


def _owner_labels(mapping: Mapping, owner: Owner, style: str, limit: Optional[LabelLimit], own_labels: int) -> str:
    return render_owner_labels_within(owner, style, mapping.extra_labels.get((owner.namespace, owner.pod), ()),
                                      limit, own_labels)


class AllocationSection(BaseSection):
    """The allocation rows, kept with the rewrite they were made for; up while the kubelet answers."""

    name = "allocation"

    def __init__(self, style: str, limit: Optional[LabelLimit], kubelet_up: Callable[[], bool], figures: FigureNames):
        super().__init__(kubelet_up)
        self._figures = figures  # the vendor's names of its memory figures and its dialect
        self._style = style  # --labels.style
        self._limit = limit  # --labels.limit, shared with every series written about a pod
        # UUID → framebuffer MiB of the GPUs HAMi shares by memory alone, as dcgm-exporter last reported it:
        # a GPU's memory does not change, so the shares stay while dcgm-exporter is down.
        self._gpu_memory: dict = {}

    def _rows(self, view: ScrapeView) -> bytes:
        mapping = view.snapshot.mapping
        wanted = memory_shared_gpus(mapping.allocations)
        missing = wanted - self._gpu_memory.keys()
        if missing and view.body:
            known = {uuid: mib for uuid, mib in self._gpu_memory.items() if uuid in wanted}  # the others are gone
            self._gpu_memory = {**known, **framebuffer_mib(view.body, missing, self._figures)}
        return render_allocation_info(mapping, view.identities, self._style, self._limit, self._gpu_memory,
                                      self._figures.dialect).encode()
