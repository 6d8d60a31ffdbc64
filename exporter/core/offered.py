"""The time-slicing replicas the kubelet offers per GPU, asked only on nodes that share GPUs, and not every refresh."""

from __future__ import annotations

import time
from typing import Callable, Dict, Iterable, Optional, Tuple

from exporter.base.errors import KubeletError
from exporter.base.logs import LogOnce
from exporter.core.allocated import count_offered
from exporter.core.device_ids import DeviceForms

# Replica counts change only when a device plugin is reconfigured: asking once a minute keeps a
# second kubelet call off most refreshes (the kubelet rate-limits all its PodResources clients).
MAX_AGE_SECONDS = 60.0


class OfferedReplicas:
    """Called by the refresher with the devices just listed: (resource, GPU) → replicas offered, or
    None when unknown (no replica held, or a kubelet that refuses GetAllocatableResources)."""

    def __init__(self, list_offered: Callable[[], Iterable[Tuple[str, str]]], forms: DeviceForms,
                 clock: Callable[[], float] = time.monotonic, max_age_seconds: float = MAX_AGE_SECONDS):
        self._list_offered = list_offered
        self._forms = forms  # which device IDs are replicas, and of which GPU
        self._clock = clock
        self._max_age = max_age_seconds
        self._counts: Optional[Dict[Tuple[str, str], int]] = None
        self._asked_at: Optional[float] = None
        # The GPUs the last answer covers, or was asked about: a GPU outside them is new on the node
        # and worth an early question; one inside them is not (a refusal, or an answer that lacks it,
        # would otherwise send the question again on every refresh).
        self._known: set = set()
        self._failure_log = LogOnce()  # the refusal, once until an answer comes
        self.calls = 0

    def __call__(self, devices) -> Optional[Dict[Tuple[str, str], int]]:
        replica_of = self._forms.replica_of
        held = {(d.resource, replica_of(d.device_id)) for d in devices if not d.dra and replica_of(d.device_id)}
        if not held:
            return None
        now = self._clock()
        # Asked again when stale, or when a replica of a GPU neither in the last answer nor held
        # when it was asked is held.
        if self._asked_at is None or now - self._asked_at >= self._max_age or not held <= self._known:
            self._asked_at = now
            self._counts = self._ask()
            self._known = held | set(self._counts or {})
        return self._counts

    def _ask(self) -> Optional[Dict[Tuple[str, str], int]]:
        self.calls += 1
        try:
            counts = count_offered(self._list_offered(), self._forms)
        except KubeletError as exc:
            self._failure_log.log(
                "refused", "warn", "the kubelet does not list the GPU replicas it offers (GetAllocatableResources): "
                "a shared GPU counts in pod_gpu_container_allocated_gpus as split among the replicas held",
                error=str(exc))
            return None
        self._failure_log.forget("refused")
        return counts
