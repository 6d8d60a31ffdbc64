"""The Kubernetes source's own settings, typed: what app.py hands it, so that it never reads the whole Config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from exporter.collectors.kubernetes.labels import LabelSpec
from exporter.collectors.kubernetes.watch import WATCH_SILENCE_SECONDS


@dataclass(frozen=True)
class KubernetesOptions:
    """--kubernetes.* and --labels.extra/pod-labels/pod-annotations, plus how long the pod cache outlives a
    failing watch (--kubelet.mapping-max-age: a stale mapping and stale extras expire together)."""

    api: str = "auto"  # auto, on or off (--kubernetes.api)
    kubeconfig: Optional[str] = None  # None: the pod's service account
    node_name: Optional[str] = None  # None: env NODE_NAME, else the host name
    labels: LabelSpec = LabelSpec()
    grace_seconds: float = 60.0
    watch_silence_seconds: float = WATCH_SILENCE_SECONDS
