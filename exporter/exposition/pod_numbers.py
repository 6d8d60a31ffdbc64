"""Each pod's numbers on the node: pod_gpu_utilization_ratio (the autoscaling rule's value) and each container's pod_gpu_memory_used_bytes.

A controller that reads the exporter directly (GET a node's /gpu/metrics, keep the pod's series) gets here what
the recording rule namespace_pod:pod_gpu_utilization:ratio computes in Prometheus, from the same answer:
1. where the vendor measures each holder's own use (its holders' utilisation, as --sharing.mode process does),
   the pod's own utilisation summed over its containers and devices, over the GPUs its containers hold
   (pod_gpu_container_allocated_gpus, as written), at most 1;
2. otherwise the mean utilisation of the devices the pod holds, each once: the whole device's percentage / 100,
   else its engine-active ratio (a partition's); none for a pod holding any device that several pods hold, that
   it holds through a replica, or whose utilisation is a partitioned GPU's whole (another holder's work must
   never scale it).
Pure but for the section, which reads the other blocks' data once per scrape and keeps its last rows while they
stay the same objects.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Iterable, Mapping, NamedTuple, Optional, Set, Tuple

from exporter.core.allocated import allocated_gpus
from exporter.core.identity import GpuIdentity, GpuKey, Owner
from exporter.core.mapping import Mapping as GpuMapping
from exporter.exposition.device_figures import DeviceFigures, FigureNames, FigureReader
from exporter.exposition.families import POD_MEMORY, POD_UTILIZATION
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import LABEL_STYLES, identities_by_key, render_owner_labels_within
from exporter.exposition.rows import label_text, render_family
from exporter.exposition.sections import BaseSection, ScrapeView
from exporter.exposition.text import render_label_pairs

Pod = Tuple[str, str]  # (namespace, pod)
_MIB = 1024 * 1024
# Vendors' blank sentinels (huge values for a field they cannot read) are no percentage: the rule drops them.
_MAX_PERCENT = 100.0
# The figures each pod's numbers read: utilisation, and memory for a device held alone.
_FIELDS = ("utilization_percent", "engine_active_ratio", "memory_used_mib")
# One object each, so that rows made without per-holder use, or without an answer, are kept while nothing else moves.
_NO_USES: Mapping = {}
_NO_FIGURES: Dict[GpuIdentity, DeviceFigures] = {}
_CONTAINER = Owner._fields.index("container")  # where an Owner holds what LABEL_STYLES name the container's label


class HolderUse(NamedTuple):
    """What the vendor measures of one holder's own use of one device it holds (None where it does not)."""

    utilization: Optional[float]  # 0-1 of the device's time; None where not measured per holder (a MIG instance)
    memory_bytes: Optional[int]


HolderUses = Mapping[Tuple[GpuIdentity, Owner], HolderUse]  # (device, holder) → its own use, as served now


def written_gpus(gpus: Mapping[Tuple[str, str, str], float]) -> Dict[Tuple[str, str, str], float]:
    """Each container's GPUs as pod_gpu_container_allocated_gpus writes them (12 significant digits): what the
    rule divides by."""
    return {owner: float(f"{count:.12g}") for owner, count in gpus.items()}


def own_utilization(uses: HolderUses, gpus: Mapping[Tuple[str, str, str], float]) -> Dict[Pod, float]:
    """Each pod with a holder's own utilisation: the sum of its containers' over the GPUs its containers hold, at
    most 1 (a pod using more than its share of a shared GPU is fully busy); none where it holds no GPU."""
    used: Dict[Pod, float] = {}
    for (_, owner), use in uses.items():
        if use.utilization is not None:
            pod = (owner.namespace, owner.pod)
            used[pod] = used.get(pod, 0.0) + use.utilization
    held: Dict[Pod, float] = {}
    for (namespace, pod, _), count in gpus.items():
        held[(namespace, pod)] = held.get((namespace, pod), 0.0) + count
    return {pod: min(value / held[pod], 1.0) for pod, value in used.items() if held.get(pod, 0.0) > 0}


def device_busy(identity: GpuIdentity, figures: Optional[DeviceFigures], by_mode: bool = False) -> Optional[float]:
    """One device's utilisation (0-1): its percentage where a whole device reports one within 0-100, else its
    engine-active ratio; None where it reports neither, or where its figures are a partitioned GPU's whole.
    A whole device is one without a partition instance, or, `by_mode` (a vendor whose samples say how their GPU
    is partitioned, FigureNames.partition_mode_label), one whose GPU is not partitioned."""
    if figures is None or figures.partitioned:
        return None
    percent = figures.utilization_percent
    whole = by_mode or not identity.instance
    if whole and percent is not None and percent <= _MAX_PERCENT:
        return percent / 100.0
    return figures.engine_active_ratio


def held_devices_utilization(mapping: GpuMapping, identities: Iterable[GpuIdentity],
                             figures: Mapping[GpuIdentity, DeviceFigures], by_mode: bool = False) -> Dict[Pod, float]:
    """Each pod holding only devices of its own, none of them a partitioned GPU's: the mean utilisation of those
    that report one, each once however many of its containers hold it."""
    values: Dict[Pod, float] = {}
    for pod, devices in _pods_alone(mapping, identities).items():
        busy = []
        for device in devices:
            device_figures = figures.get(device)
            if device_figures is not None and device_figures.partitioned:
                break  # another holder's work is in a partitioned GPU's utilisation: no number for this pod
            value = device_busy(device, device_figures, by_mode)
            if value is not None:
                busy.append(value)
        else:
            if busy:
                values[pod] = sum(busy) / len(busy)
    return values


def pod_utilization(mapping: GpuMapping, identities: Iterable[GpuIdentity], figures: Mapping[GpuIdentity, DeviceFigures],
                    uses: HolderUses, gpus: Mapping[Tuple[str, str, str], float], by_mode: bool = False) -> Dict[Pod, float]:
    """Each pod's number: its own utilisation where measured (the rule's first source), else its devices'."""
    held = held_devices_utilization(mapping, identities, figures, by_mode)
    return {**held, **own_utilization(uses, written_gpus(gpus))} if uses else held


def container_memory(mapping: GpuMapping, identities: Iterable[GpuIdentity], figures: Mapping[GpuIdentity, DeviceFigures],
                     uses: HolderUses) -> Dict[Owner, float]:
    """Each container's GPU memory used (bytes) over the devices it holds: its own where measured per holder, else
    the device's where it is the device's only holder (held whole, not through a replica); no value for a
    container holding a device it shares that is not measured per holder, or one that reports no memory."""
    # A holder's use by each key its device can be claimed by: the vendor's driver may name a device with fewer
    # labels than its exporter's samples do.
    use_by_key = {(key, owner): use for (device, owner), use in uses.items() for key in device.keys()}
    values: Dict[Owner, float] = {}
    for owner, held in _containers_devices(mapping, identities).items():
        parts = [_memory_of(device, owner, use_by_key, figures, alone) for device, alone in held]
        if parts and None not in parts:
            values[owner] = float(sum(parts))
    return values


def _memory_of(device: object, owner: Owner, use_by_key: Mapping[Tuple[GpuKey, Owner], HolderUse],
               figures: Mapping[GpuIdentity, DeviceFigures], alone: bool) -> Optional[float]:
    if not isinstance(device, GpuIdentity):
        return None  # no sample names it: nothing is known of its memory
    use = next((use_by_key[(key, owner)] for key in device.keys() if (key, owner) in use_by_key), None) if use_by_key else None
    if use is not None and use.memory_bytes is not None:
        return use.memory_bytes
    device_figures = figures.get(device)
    if alone and device_figures is not None and device_figures.memory_used_mib is not None:
        return device_figures.memory_used_mib * _MIB
    return None


# What only a new mapping or a new set of devices in the answer changes, worked out once for the last (mapping,
# identities) asked about, while every scrape with new values asks again (the work cost as much as reading the
# answer's figures): (mapping, identities, what → its result). One pair only, so no older mapping is kept alive.
_kept_for: Tuple[object, object, Dict[str, object]] = (None, None, {})


def _kept(mapping: GpuMapping, identities: Iterable[GpuIdentity], what: str, make: Callable[[], object]):
    """`make()` for this mapping and these identities, worked out once while they stay the same objects."""
    global _kept_for
    kept_mapping, kept_identities, results = _kept_for  # one tuple, read and replaced whole: safe across threads
    if kept_mapping is not mapping or kept_identities is not identities:
        results = {}
        _kept_for = (mapping, identities, results)
    result = results.get(what)
    if result is None:
        result = results[what] = make()
    return result


def _pods_alone(mapping: GpuMapping, identities: Iterable[GpuIdentity]) -> Dict[Pod, Tuple[GpuIdentity, ...]]:
    """Each pod that holds no device another pod holds, nor one through a replica: the devices it holds that the
    samples name (read only)."""
    def make():
        held, holders, replicas = _holdings(mapping, identities, lambda owner: (owner.namespace, owner.pod))
        shared = set(replicas)
        shared.update(device for device, pods in holders.items() if len(pods) > 1)
        return {pod: tuple(device for device in devices if isinstance(device, GpuIdentity))
                for pod, devices in held.items() if not devices & shared}
    return _kept(mapping, identities, "pods alone", make)


def _containers_devices(mapping: GpuMapping,
                        identities: Iterable[GpuIdentity]) -> Dict[Owner, Tuple[Tuple[object, bool], ...]]:
    """Each container: the devices it holds, each with whether the container is its only holder, holding it whole
    (not through a replica) (read only)."""
    def make():
        devices, holders, replicas = _holdings(mapping, identities, lambda owner: owner)
        return {owner: tuple((device, len(holders[device]) == 1 and device not in replicas) for device in held)
                for owner, held in devices.items()}
    return _kept(mapping, identities, "containers' devices", make)


def _holdings(mapping: GpuMapping, identities: Iterable[GpuIdentity], holder_of: Callable[[Owner], object]):
    """(holder → the devices it holds, device → its holders, the devices held through a replica), a holder being
    what `holder_of` makes of each owner (its pod, or the container itself). A device is named as its allocation
    row names it: the sample's identity its key claims, else the key itself."""
    by_key = identities_by_key(identities)
    held: Dict[object, Set[object]] = {}
    holders: Dict[object, Set[object]] = {}
    replicas: Set[object] = set()
    for allocation in mapping.allocations:
        device, holder = _device_of(allocation.key, by_key), holder_of(allocation.owner)
        held.setdefault(holder, set()).add(device)
        holders.setdefault(device, set()).add(holder)
        if _is_replica(mapping, allocation.device_id):
            replicas.add(device)
    return held, holders, replicas


def _is_replica(mapping: GpuMapping, device_id: str) -> bool:
    """Whether a device ID is one replica of a GPU offered several times (time-slicing, MPS, a fraction)."""
    return mapping.forms is not None and mapping.forms.replica_of(device_id) is not None


def _device_of(key: Optional[GpuKey], by_key: Mapping[GpuKey, GpuIdentity]) -> object:
    return by_key.get(key, key) if key is not None else None


def render_pod_numbers(mapping: GpuMapping, utilization: Mapping[Pod, float], memory: Mapping[Owner, float],
                       style: str, limit: Optional[LabelLimit] = None) -> str:
    """Both families' rows, pods and containers in order, each with its pod's extra labels as every series
    about a pod carries them (cut to --labels.limit)."""
    texts = _label_texts(mapping, style, limit)
    rows = [(texts.pod(pod), f"{utilization[pod]:.12g}") for pod in sorted(utilization)]
    memory_rows = [(texts.container(owner), _number(memory[owner])) for owner in sorted(memory)]
    return render_family(POD_UTILIZATION, rows) + render_family(POD_MEMORY, memory_rows)


class _LabelTexts:
    """Each pod's and container's label text for one mapping, style and limit, made at its first use: the same on
    every scrape until the mapping changes, while the values move."""

    def __init__(self, mapping: GpuMapping, style: str, limit: Optional[LabelLimit]):
        self._mapping, self._style, self._limit = mapping, style, limit
        self._pods: Dict[Pod, str] = {}
        self._containers: Dict[Owner, str] = {}

    def pod(self, pod: Pod) -> str:
        text = self._pods.get(pod)
        if text is None:
            text = self._pods[pod] = label_text(POD_UTILIZATION, {}, _pod_labels(self._mapping, pod, self._style,
                                                                                 self._limit))
        return text

    def container(self, owner: Owner) -> str:
        text = self._containers.get(owner)
        if text is None:
            extras = self._mapping.extra_labels.get((owner.namespace, owner.pod), ())
            text = self._containers[owner] = label_text(POD_MEMORY, {}, render_owner_labels_within(
                owner, self._style, extras, self._limit, 0))
        return text


_last_label_texts: Optional[_LabelTexts] = None


def _label_texts(mapping: GpuMapping, style: str, limit: Optional[LabelLimit]) -> _LabelTexts:
    """The label texts of the last mapping rendered, or new ones for another mapping, style or limit."""
    global _last_label_texts
    texts = _last_label_texts
    if texts is None or texts._mapping is not mapping or texts._style != style or texts._limit is not limit:
        texts = _last_label_texts = _LabelTexts(mapping, style, limit)
    return texts


def _pod_labels(mapping: GpuMapping, pod: Pod, style: str, limit: Optional[LabelLimit]) -> str:
    """The pod's owner labels in the style's names and order, without the container's, then the pod's extras."""
    owner = Owner(*pod, "")
    pairs = tuple((name, owner[index]) for name, index in LABEL_STYLES[style] if index != _CONTAINER)
    extras = tuple(mapping.extra_labels.get(pod, ()))
    if limit is not None:
        extras = limit.fit(extras, 0, len(pairs)) or ()
    return render_label_pairs(pairs + extras)


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


class PodNumbersSection(BaseSection):
    """Both families for every scrape, from what the other blocks hold: the mapping and the GPUs the samples
    named, the upstream answer's figures (read once per answer), the vendor's per-holder use as its own block
    serves it now, and the allocation block's GPU counts. Rendered after every other block."""

    name = "pod_numbers"
    per_scrape = True

    def __init__(self, style: str, limit: Optional[LabelLimit], figures: FigureNames,
                 gpu_memory_mib: Callable[[], Mapping[str, float]],
                 holder_uses: Callable[[], Optional[HolderUses]] = lambda: None):
        super().__init__()
        self._style = style  # --labels.style
        self._limit = limit  # --labels.limit, shared with every series about a pod
        self._names = figures  # the vendor's names of its utilisation and memory figures
        self._gpu_memory_mib = gpu_memory_mib  # what the allocation block counts memory-shared GPUs by
        self._holder_uses = holder_uses
        self._figures: Tuple[int, Dict[GpuIdentity, DeviceFigures]] = (0, {})  # (ScrapeView.answer, its figures)
        self._reader = FigureReader(figures, _FIELDS)
        self._lock = threading.Lock()
        self._last: Tuple[tuple, bytes] = ((), b"")  # (what the rows were made from, the rows)
        self._allocated: Tuple[tuple, dict] = ((None, None), {})  # ((mapping, GPU memory sizes), each container's GPUs)

    def _rows(self, view: ScrapeView) -> bytes:
        mapping = view.snapshot.mapping
        if not mapping.allocations:
            return b""
        figures = self._figures_of(view)
        uses = self._holder_uses() or _NO_USES
        gpu_memory = self._gpu_memory_mib()
        made_from = (mapping, view.identities, figures, uses, gpu_memory)
        if _same(made_from, self._last[0]):
            return self._last[1]
        gpus = self._gpus(mapping, gpu_memory)
        by_mode = bool(self._names.partition_mode_label)
        rows = render_pod_numbers(mapping, pod_utilization(mapping, view.identities, figures, uses, gpus, by_mode),
                                  container_memory(mapping, view.identities, figures, uses),
                                  self._style, self._limit).encode()
        self._last = (made_from, rows)
        return rows

    def _gpus(self, mapping: GpuMapping, gpu_memory: Mapping[str, float]) -> Dict[Tuple[str, str, str], float]:
        """Each container's GPUs as the allocation block counts them: worked out again only for a new mapping or
        new GPU memory sizes, not for each answer's new values."""
        made_from, gpus = self._allocated
        if made_from[0] is not mapping or made_from[1] is not gpu_memory:
            gpus = allocated_gpus(mapping.allocations, mapping.forms, mapping.offered or {}, dict(gpu_memory))
            self._allocated = ((mapping, gpu_memory), gpus)
        return gpus

    def _figures_of(self, view: ScrapeView) -> Dict[GpuIdentity, DeviceFigures]:
        """The answer's device figures, read once per answer (scrapes that come together read it once), from the
        refill's values where it was refilled."""
        if view.body is None:
            return _NO_FIGURES
        with self._lock:
            known_answer, known = self._figures
            if not view.answer or view.answer != known_answer:  # 0: a body not numbered, read each time
                known = self._reader.read(view.body, view.values)
                self._figures = (view.answer, known)
        return known


def _same(made_from: tuple, before: tuple) -> bool:
    return len(made_from) == len(before) and all(a is b for a, b in zip(made_from, before))
