"""Pure: which Kubernetes labels to add for a pod (--labels.*), named, sanitised and ordered by the contract."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, NamedTuple, Optional, Pattern, Tuple

EXTRA_CHOICES = ("pod_uid", "workload", "queue")
_INVALID_NAME_CHARACTER = re.compile(r"[^a-zA-Z0-9_]")


class QueueHint(NamedTuple):
    """What an object's metadata names of its batch queue (queue_hints.py): a Kueue LocalQueue, a Volcano
    Queue, a Volcano PodGroup whose spec names the queue, or a KAI Scheduler Queue. Empty strings where it
    names none."""

    local_queue: str = ""
    volcano_queue: str = ""
    pod_group: str = ""
    kai_queue: str = ""


class PodInfo(NamedTuple):
    """What the exporter keeps of one pod from the API server; small, so 5,000 pods stay cheap.

    Only the allow-listed labels and annotations are kept. `containers` (name, containerID) is kept
    for per-process attribution, which tells containers apart by the ID in /proc/<pid>/cgroup.
    """

    uid: str
    labels: Tuple[Tuple[str, str], ...]  # (key, value), allow-listed, sorted by key
    annotations: Tuple[Tuple[str, str], ...]
    controller: Optional[Tuple[str, str, str]]  # (apiVersion, kind, name) of the controlling ownerReference
    containers: Tuple[Tuple[str, str], ...]  # (container name, "containerd://…"), once started
    ended: bool = False  # phase Succeeded or Failed: its containers have stopped for good
    queue: Optional[QueueHint] = None  # with --labels.extra queue: what the pod's own metadata says of its queue
    # The containers' status.allocatedResourcesStatus entries (core.health.ResourceHealth), for device health.
    resource_health: tuple = ()
    # status.extendedResourceClaimStatus (extended_resources.ExtendedResourceClaim): which requests of the claim
    # the scheduler made for the pod each container's extended resources became; None for nearly every pod.
    extended_claim: Optional[tuple] = None
    # HAMi's record of the GPUs each container really got (core.hami): (container, (HamiDevice, …)) pairs.
    hami: tuple = ()
    hami_error: str = ""  # why its HAMi annotation could not be read ("" when read, or when there is none)


@dataclass(frozen=True)
class LabelSpec:
    """--labels.extra, --labels.pod-labels and --labels.pod-annotations."""

    pod_uid: bool = False
    workload: bool = False
    queue: bool = False
    pod_labels: Optional[Pattern] = None
    pod_annotations: Optional[Pattern] = None

    @property
    def enabled(self) -> bool:
        return self.pod_uid or self.workload or self.queue or self.pod_labels is not None or self.pod_annotations is not None


def extra_choices(text: str) -> frozenset:
    """The entries of --labels.extra; raises ValueError naming an unknown one."""
    chosen = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(chosen - set(EXTRA_CHOICES))
    if unknown:
        raise ValueError(f"unknown extra label {unknown[0]!r} (choose from {', '.join(EXTRA_CHOICES)})")
    return chosen


def label_spec(extra: str, pod_labels: Optional[str], pod_annotations: Optional[str]) -> LabelSpec:
    """The LabelSpec of --labels.extra, --labels.pod-labels and --labels.pod-annotations (checked before: a bad
    value raises ValueError here too)."""
    chosen = extra_choices(extra)
    return LabelSpec(
        pod_uid="pod_uid" in chosen,
        workload="workload" in chosen,
        queue="queue" in chosen,
        pod_labels=compile_key_pattern(pod_labels) if pod_labels else None,
        pod_annotations=compile_key_pattern(pod_annotations) if pod_annotations else None,
    )


def compile_key_pattern(text: str) -> Pattern:
    """A label/annotation key regex, matched against the whole key (like kube-state-metrics' allow-lists)."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {text!r}: {exc}") from None


def allowed_items(items: Optional[Dict[str, str]], pattern: Optional[Pattern]) -> Tuple[Tuple[str, str], ...]:
    """The (key, value) pairs whose key the pattern fully matches, sorted by key."""
    if pattern is None or not items:
        return ()
    return tuple(sorted((key, value) for key, value in items.items() if pattern.fullmatch(key)))


def sanitise_label_name(key: str) -> str:
    """kube-state-metrics' rule: every character outside [a-zA-Z0-9_] becomes '_'."""
    return _INVALID_NAME_CHARACTER.sub("_", key)


def extra_label_pairs(spec: LabelSpec, pod: PodInfo, workload: Optional[Tuple[str, str]],
                      queues: Optional[Tuple[str, str]] = None) -> Tuple[Tuple[str, str], ...]:
    """(name, value) of pod_uid, workload_kind, workload, cluster_queue, local_queue, label_…, annotation_…,
    in the contract's order.

    `workload` is (kind, name) and `queues` (cluster queue, local queue), each None when not known yet
    (then its labels are left out rather than guessed). Values are as the API gives them: the
    exposition escapes what it writes.
    """
    pairs: List[Tuple[str, str]] = []
    if spec.pod_uid:
        pairs.append(("pod_uid", pod.uid))
    if spec.workload and workload is not None:
        pairs += [("workload_kind", workload[0]), ("workload", workload[1])]
    if spec.queue and queues is not None:
        pairs += [("cluster_queue", queues[0]), ("local_queue", queues[1])]
    pairs += _prefixed("label_", pod.labels)
    pairs += _prefixed("annotation_", pod.annotations)
    return tuple(pairs)


def _prefixed(prefix: str, items: Iterable[Tuple[str, str]]) -> list:
    """Sanitised names sorted; when two keys sanitise to one name (`a.b` and `a_b`), the first key in
    sorted order wins: a repeated label name would make the whole scrape invalid."""
    named: Dict[str, str] = {}
    for key, value in sorted(items):
        named.setdefault(prefix + sanitise_label_name(key), value)
    return sorted(named.items())
