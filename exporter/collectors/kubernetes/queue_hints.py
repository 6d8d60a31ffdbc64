"""Pure: the batch queue an object's own labels and annotations name (Kueue, Volcano, KAI), as a QueueHint."""

from __future__ import annotations

import re
from typing import Optional

from exporter.collectors.kubernetes.labels import QueueHint

# Kueue sets it on the pod for plain pods, Deployments, StatefulSets and LeaderWorkerSets, and only on the
# owner for Job, JobSet, RayJob and the Kubeflow jobs: the owner chain is asked when the pod lacks it.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Volcano's job controller puts the queue on its pods both as a label and as an annotation.
VOLCANO_QUEUE_KEY = "volcano.sh/queue-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
# Other pods Volcano schedules name their PodGroup, whose spec.queue is the queue.
POD_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
# NVIDIA's KAI Scheduler reads it on a pod's top owner, then on the pod (its podgrouper's default
# --queue-label-key); it names a cluster-scoped Queue of scheduling.run.ai.
KAI_QUEUE_LABEL = "kai.scheduler/queue"
# A Kubernetes object name (DNS subdomain): what may become part of a path that is read.
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def queue_hint(labels: Optional[dict], annotations: Optional[dict]) -> Optional[QueueHint]:
    """The queue names in one object's metadata; None when it names none. Values that are not non-empty
    strings (untyped JSON, or a value a webhook wrote wrong) count as absent."""
    labels, annotations = _strings(labels), _strings(annotations)
    hint = QueueHint(
        local_queue=_object_name(labels.get(KUEUE_QUEUE_LABEL, "")),
        volcano_queue=(labels.get(VOLCANO_QUEUE_KEY) or annotations.get(VOLCANO_QUEUE_KEY)
                       or annotations.get(VOLCANO_QUEUE_ANNOTATION) or ""),
        pod_group=_object_name(next((annotations[key] for key in POD_GROUP_ANNOTATIONS if annotations.get(key)), "")),
        kai_queue=_object_name(labels.get(KAI_QUEUE_LABEL, "")),
    )
    return hint if any(hint) else None


def metadata_queue_hint(metadata: dict) -> Optional[QueueHint]:
    """queue_hint of an object's metadata as the API server sends it (an owner's metadata-only read)."""
    return queue_hint(metadata.get("labels"), metadata.get("annotations"))


def _strings(items) -> dict:
    if not isinstance(items, dict):
        return {}
    return {key: value for key, value in items.items() if isinstance(value, str) and value}


def _object_name(value: str) -> str:
    """`value` if it can name an object (it becomes part of the path read), else ""."""
    return value if _OBJECT_NAME.fullmatch(value) else ""
