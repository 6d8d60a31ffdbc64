"""The GPU → owner Mapping, refreshed from the kubelet in the background; scrapes only read it."""

from __future__ import annotations

import threading
import time
from typing import Callable, NamedTuple, Optional, Sequence

from exporter.base.errors import KubeletError
from exporter.base.logs import DependencyReporter, LogOnce, log
from exporter.core.device_ids import DeviceForms
from exporter.core.identity import MigResolver
from exporter.core.mapping import EMPTY_MAPPING, DeviceLike, Mapping, MappingContext, build_mapping
from exporter.core.refresher import Refresher


class Snapshot(NamedTuple):
    """What a scrape needs to know about attribution, read in one step."""

    mapping: Mapping
    kubelet_up: bool  # the last List succeeded
    age_seconds: Optional[float]  # since the mapping in use was listed; None when there is none


class Attribution:
    """Keeps the last good Mapping fresh; at most one List call per refresh interval, whatever the scrape rate.

    The kubelet rate-limits PodResources for every client on the node (100 rps, burst 10), so scrapes
    must never call it: a background thread lists every `refresh_interval_seconds`, and when a List
    fails the last good mapping is kept for up to `max_age_seconds` before samples go unattributed —
    pods come and go, and a stale owner is worse than none.
    """

    def __init__(
        self,
        list_devices: Callable[[], Sequence[DeviceLike]],
        forms: DeviceForms,
        refresh_interval_seconds: float,
        max_age_seconds: float,
        resolve_mig: MigResolver | None = None,
        clock: Callable[[], float] = time.monotonic,
        describe: str = "kubelet",
        context: Optional[MappingContext] = None,
        offered: Optional[Callable[[list], Optional[dict]]] = None,
        resolver_generation: Optional[Callable[[], object]] = None,
    ):
        self._list_devices = list_devices
        self._forms = forms  # the vendor's device forms: which devices are its GPUs, and what each names
        self._max_age = max_age_seconds
        self._resolve_mig = resolve_mig
        self._context = context  # the Kubernetes API's DRA keys and extra labels, when it is in use
        self._offered = offered  # devices → the replicas offered per shared GPU (core.offered)
        # What changes when the resolver may resolve the same devices otherwise (Hub.resolver_generation).
        self._resolver_generation = resolver_generation
        self._built_generation: object = None  # its value when the installed mapping was built
        self._clock = clock
        self._reporter = DependencyReporter("kubelet")
        self._describe = describe
        self._lock = threading.Lock()
        self._mapping: Mapping = EMPTY_MAPPING
        self._listed_at: Optional[float] = None
        self._up = False
        self._expired_log = LogOnce()  # the warning that the mapping aged out, once per outage
        self._unresolved_log = LogOnce()  # unresolved device IDs, once while each stays unresolved
        self._refresher = Refresher("kubelet-refresher", self.refresh, refresh_interval_seconds, "the GPU mapping")
        self._first_wait = 0.0  # how long a scrape waits for the first refresh (see start)
        self.list_calls = 0
        self.list_failures = 0
        self._built_from: Optional[tuple] = None  # the devices the installed mapping was built from

    def refresh(self) -> bool:
        """List once and install the new mapping; on failure keep the last good one. Returns success."""
        self.list_calls += 1
        try:
            devices = self._list_devices()
            offered = self._offered(devices) if self._offered is not None else None
            devices = tuple(devices)  # a copy of our own: the lister may reuse its list
            generation = self._resolver_generation() if self._resolver_generation is not None else None
            if self._unchanged(devices, offered) and generation == self._built_generation:
                mapping = self._mapping
            else:
                mapping = build_mapping(self._forms, devices, self._resolve_mig, self._context, offered)
                self._built_from, self._built_generation = devices, generation
        except KubeletError as exc:
            if self._refresher.stopping:
                return False  # cut short by shutting down: not the kubelet's failure
            self.list_failures += 1
            with self._lock:
                self._up = False
            self._reporter.failed(exc.reason, str(exc), socket=self._describe)
            return False
        with self._lock:
            changed = mapping != self._mapping
            if not changed:
                # Keep the installed object: scrape caches are keyed on its identity, and nearly every
                # refresh lists exactly what the last one did.
                mapping = self._mapping
            self._mapping, self._listed_at, self._up = mapping, self._clock(), True
        self._expired_log.forget("expired")
        self._reporter.succeeded(f"{self._describe} answering again")
        if changed:
            self._log_mapping(mapping)
        return True

    def _unchanged(self, devices: tuple, offered: Optional[dict]) -> bool:
        """Whether `devices` equal those the installed mapping was built from, so that building it again
        would give the same mapping: not with the Kubernetes API, whose labels and DRA devices change on
        their own, not while devices are unresolved (NVML may resolve them now), and not when the
        replicas offered per shared GPU changed. Compared by value; it costs one identity check per
        device when the lister hands back the very devices again (the kubelet client does, for an
        unchanged answer)."""
        return (self._context is None and not self._mapping.unresolved and self._up
                and (offered or {}) == (self._mapping.offered or {}) and devices == self._built_from)

    def current(self) -> Snapshot:
        with self._lock:
            mapping, listed_at, up = self._mapping, self._listed_at, self._up
        if listed_at is None:
            return Snapshot(EMPTY_MAPPING, up, None)
        age = self._clock() - listed_at
        # Only a failing kubelet ages a mapping out: while Lists succeed it is as fresh as the last
        # one, even when --kubelet.refresh-interval is longer than --kubelet.mapping-max-age.
        if not up and age > self._max_age:
            self._expired_log.log(
                "expired", "warn", "kubelet unreachable for too long: GPU samples are served without owner labels "
                "until it answers", mapping_age_seconds=round(age, 1), max_age_seconds=self._max_age)
            return Snapshot(EMPTY_MAPPING, up, age)
        return Snapshot(mapping, up, age)

    def failure(self) -> Optional[str]:
        """Why the last List failed, in one line; None while the kubelet answers."""
        return self._reporter.failure

    def mapping_in_use(self) -> Optional[Mapping]:
        """The mapping scrapes attribute by, or None while there is none to trust: before the kubelet's
        first answer, and once the last good one has aged out. A per-process reader must then tell no
        holder, rather than take every process for one running on a GPU nobody gave it."""
        with self._lock:
            mapping, listed_at, up = self._mapping, self._listed_at, self._up
        if listed_at is None or (not up and self._clock() - listed_at > self._max_age):
            return None
        return mapping

    def start(self, before_first: Optional[Callable[[], object]] = None, first_wait_seconds: float = 0.0) -> None:
        """Refresh once, then every interval, in a daemon thread; returns at once.

        Scrapes wait up to `first_wait_seconds` for the first refresh (`wait_first_refresh`),
        so that the first scrape is attributed when the kubelet answers, while a kubelet that hangs
        the first List keeps neither the server nor a SIGTERM waiting. `before_first` runs on the
        refresher's thread before the first List.
        """
        self._first_wait = first_wait_seconds
        self._refresher.start(before_first=before_first)

    def refresh_soon(self) -> None:
        """List and build the mapping again now, not at the end of the interval: what a device resolves to
        has changed (a vendor's resolver learnt something new)."""
        self._refresher.wake()

    def wait_first_refresh(self) -> None:
        """Block a scrape until the first refresh is done, at most the bound given to `start`."""
        if self._first_wait > 0:
            self._refresher.wait_first(self._first_wait)

    def stop(self, timeout_seconds: float = 2.0) -> None:
        self._refresher.stop(timeout_seconds)

    def _log_mapping(self, mapping: Mapping) -> None:
        pods = {(a.owner.namespace, a.owner.pod) for a in mapping.allocations}
        log("info", "GPU mapping updated", allocations=len(mapping.allocations), pods=len(pods),
            unresolved=len(mapping.unresolved))
        # Warn about a device when it first turns up unresolved, not again on every change of the
        # mapping while it stays allocated; the unresolved_devices gauge carries the ongoing state.
        self._unresolved_log.retain(mapping.unresolved)
        new = [device for device in sorted(set(mapping.unresolved)) if self._unresolved_log.first(device)]
        if new:
            log("warn", f"some allocated GPU devices cannot be matched to {self._forms.samples}; they are listed in "
                "pod_gpu_allocation_info without UUID and counted in pod_gpu_exporter_unresolved_devices",
                device_ids=",".join(new))
