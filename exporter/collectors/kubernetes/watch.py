"""One resource kind kept in step with the API server: list, watch from the list's version, relist on 410.

Works with a lightkube Client it is given; imports nothing of lightkube itself, so that the exporter
with the API off never loads it. Every request is paced (pacing.RequestBudget), every watch read
with bounds (stream), every object checked before it reaches the cache (objects).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, NamedTuple, Optional, Protocol

from exporter.base.logs import DependencyReporter, LogOnce, log
from exporter.collectors.kubernetes.objects import Skipped
from exporter.collectors.kubernetes.pacing import Backoff, RequestBudget
from exporter.collectors.kubernetes.status import WatchStatus, frozen_counts
from exporter.collectors.kubernetes.stream import (WatchLineTooLong, WatchSilent, decode_event, decode_object,
                                                event_version, list_pages, watch_lines)
from exporter.collectors.kubernetes.watch_health import WatchHealth

# The server ends each watch after this long (timeoutSeconds) and the next one opens from the last
# version seen (an event's or a bookmark's).
WATCH_SERVER_TIMEOUT_SECONDS = 290
LIST_PAGE_SIZE = 500  # pages keep a 5,000-pod list from being decoded into models all at once
# Bookmarks are asked for (allowWatchBookmarks), and the API server sends one about every minute even
# when nothing changes: a watch silent for this long is dropped and the resource listed again.
WATCH_SILENCE_SECONDS = 150.0
# A watch the server ends this soon having sent nothing is reopened after a backoff pause (a server
# shutting down ends its watches); the third in a row is a failure, reported, and the resource relisted.
_WATCH_USEFUL_SECONDS = 10.0
_EARLY_ENDS_TOLERATED = 3


class WatchEndedEarly(Exception):
    def __init__(self):
        super().__init__(f"the server ended {_EARLY_ENDS_TOLERATED} watches in a row at once, sending nothing")


class WatchVersionExpired(Exception):
    """A 410 Gone after a watch since the list worked: the version fell out of the server's window. Not a
    failure: the cache stays good until the relist, made at once."""


class WatchedStore(Protocol):
    """What a ListWatch keeps in step with the API server (client-go's cache.Store, reduced)."""

    def replace(self, objects: list, complete: bool) -> None:
        """A full list. `complete` is False when an object of this node was skipped as malformed: it is
        absent from the list, though not deleted."""

    def add(self, obj) -> None:
        """An ADDED event."""

    def update(self, obj) -> None:
        """A MODIFIED event."""

    def delete(self, obj) -> None:
        """A DELETED event."""


class _WatchEnd(NamedTuple):
    """How one watch request ended: the last version seen, whether it was useful, and what it raised."""

    version: str
    useful: bool  # it delivered something, or stayed open _WATCH_USEFUL_SECONDS
    error: Optional[BaseException] = None


def describe_failure(exc: BaseException, verb: str, resource: str) -> tuple:
    """(reason, message) for a failed API call: one stable reason word per kind of failure."""
    status = _status_code(exc)
    for kind, reason in ((WatchSilent, "silent"), (WatchLineTooLong, "too_large"), (WatchEndedEarly, "ended_early")):
        if isinstance(exc, kind):
            return reason, f"Kubernetes {verb} of {resource}: {exc}"
    if status == 410:
        return "expired", f"Kubernetes API answered 410 Gone to a fresh {verb} of {resource}: {exc}"
    if status == 401:
        return "unauthorized", (f"Kubernetes API refused our credentials (401) to {verb} {resource}: check the "
                                "service-account token or the kubeconfig's user")
    if status == 403:
        return "forbidden", (f"Kubernetes API forbids {verb} on {resource} (403): the exporter's ClusterRole needs "
                             f"verb '{verb}' on '{resource}' (the chart's ClusterRole: docs/kubernetes.md#rbac)")
    if status == 404:
        return "not_found", f"Kubernetes API answered 404 Not Found to {verb} {resource}: {exc}"
    if status is not None:
        return "status", f"Kubernetes API answered {status} to {verb} {resource}: {exc}"
    return "unreachable", f"Kubernetes API unreachable for {verb} {resource}: {type(exc).__name__}: {exc}"


def _status_code(exc: BaseException) -> Optional[int]:
    status = getattr(exc, "status", None)
    code = getattr(status, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None) if response is not None else None


class ListWatch:
    """Runs list + watch for one resource in a daemon thread and keeps a WatchedStore in step.

    Objects that fail `check` (or cannot be decoded) are skipped and counted in `skipped`; a line that is no
    event ends the watch, counted in `dropped`, and the next one starts from the last good version. A 410 Gone
    after a working watch relists at once; any other failure (after reporting it, once per kind) relists
    after a growing, jittered pause, reset by a watch that works. `healthy` (watch_health) says when the
    watch counts as up; `status()` is a snapshot of it and of the counters, for any thread.
    """

    def __init__(self, client, resource, resource_name: str, fields: Optional[dict], store: WatchedStore,
                 reporter: Optional[DependencyReporter] = None, namespaced: bool = True, fallback=None,
                 check: Optional[Callable[[object], None]] = None, silence_seconds: float = WATCH_SILENCE_SECONDS):
        self._client = client
        self._resource = resource
        self._fallback = fallback  # () → an older API version's resource, for a server that lacks this one
        self.resource_name = resource_name  # for messages and RBAC hints: "pods", "resourceslices"
        self._selector = {"fieldSelector": ",".join(f"{k}={v}" for k, v in fields.items())} if fields else {}
        self._store = store
        self._check = check
        self._silence = silence_seconds
        self._namespace = "*" if namespaced else None  # "*": lightkube's ALL_NS, every namespace
        self._reporter = reporter or DependencyReporter("kubernetes-api")  # one per watch: logs once per change
        self._health = WatchHealth(
            lambda: self._reporter.succeeded("Kubernetes API answering again", resource=self.resource_name))
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._budget = RequestBudget()
        self._backoff = Backoff()
        self._counts_lock = threading.Lock()  # the counters are written by the watch thread, copied by status()
        self.lists = 0
        self.skipped: Dict[str, int] = {}  # reason → objects left out of the cache
        self.dropped: Dict[str, int] = {}  # reason → watch connections we closed (silent, too_large, undecodable)
        self._skips_logged = LogOnce()  # once per reason (a proxy that ignores fieldSelector sends many), and undecodable

    @property
    def requests(self) -> int:
        """List and watch requests made (pages of a list count as one)."""
        return self._budget.taken

    @property
    def healthy(self) -> bool:
        """Listed and watching (see watch_health.WatchHealth for when a new watch counts after a failed one)."""
        return self._health.healthy

    def status(self) -> WatchStatus:
        with self._counts_lock:
            return WatchStatus(self.resource_name, self.requests, frozen_counts(self.dropped),
                               frozen_counts(self.skipped))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.resource_name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()  # the thread is a daemon blocked in a read (at most the silence bound): not joined

    def _run(self) -> None:
        while not self._stop.is_set():
            verb = "list"  # the request under way, named in a failure's message (RBAC grants them apart)
            try:
                if not self._budget.take(self._stop):
                    return
                version = self._list()
                verb = "watch"
                self._watch(version)
                return  # only when stopped
            except Exception as exc:  # noqa: BLE001 - every failure is reported and retried, never fatal
                if self._stop.is_set():
                    return  # a stream cut after stop() was asked is the shutdown (the API going too), no outage
                if self._failed(exc, verb) and self._stop.wait(self._backoff.next_pause()):
                    return

    def _failed(self, exc: BaseException, verb: str) -> bool:
        """Record a failure; True when a pause is due before the next list."""
        if isinstance(exc, WatchVersionExpired):
            log("info", "Kubernetes watch version expired (410 Gone): listing again", resource=self.resource_name)
            return False
        dropped = isinstance(exc, (WatchSilent, WatchLineTooLong))
        if dropped:
            self._count(self.dropped, "silent" if isinstance(exc, WatchSilent) else "too_large")
        self._health.failed(verb, dropped)
        if _status_code(exc) == 404 and self._fallback is not None:
            self._resource, self._fallback = self._fallback(), None
            log("info", "Kubernetes API does not serve this version: using the older one",
                resource=self.resource_name, version=self._resource.__module__.rpartition("_")[2])
            return False
        reason, message = describe_failure(exc, verb, self.resource_name)
        self._reporter.failed(f"{self.resource_name}:{reason}", message, resource=self.resource_name)
        return True

    def _list(self) -> str:
        """List every object into the store; returns the list's version, which the watch starts from."""
        version, objects, malformed = "", [], self.skipped.get("malformed", 0)
        for version, items in list_pages(self._client, self._resource, self._namespace, self._selector,
                                         LIST_PAGE_SIZE):
            objects += filter(None, map(self._decoded, items))
        self._store.replace(objects, complete=self.skipped.get("malformed", 0) == malformed)
        self.lists += 1
        self._health.listed()
        return version

    def _watch(self, version: str) -> None:
        """Watch requests one after the other from `version`, until stopped (returns) or failed (raises)."""
        worked = False  # a watch since the list was useful: a 410 then is the window moving on
        early_ends = 0
        while self._budget.take(self._stop):
            self._health.watch_opened()
            end = self._watch_once(version)
            version, worked = end.version, worked or end.useful
            if end.useful:
                self._backoff.reset()
            if end.error is not None:
                if worked and _status_code(end.error) == 410:
                    raise WatchVersionExpired() from end.error
                raise end.error
            if self._stop.is_set():
                return
            early_ends = 0 if end.useful else early_ends + 1
            if early_ends >= _EARLY_ENDS_TOLERATED:
                raise WatchEndedEarly()
            if early_ends and self._stop.wait(self._backoff.next_pause()):
                return

    def _watch_once(self, version: str) -> _WatchEnd:
        """One watch request from `version` until the server ends it or it fails (the error is returned,
        so that whether the request was useful is known either way)."""
        params = {**self._selector, "resourceVersion": version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_SERVER_TIMEOUT_SECONDS)}
        opened, delivered = time.monotonic(), False
        try:
            for line in watch_lines(self._client, self._resource, self._namespace, params, self._silence):
                if self._stop.is_set():
                    break
                try:
                    event_type, raw = decode_event(line)  # an ERROR event (410) is raised from here
                except ValueError as exc:  # msgspec's errors are ValueErrors: a line that is no event
                    # The change it stood for is unknown: skipping it would lose that change until the
                    # next relist. Ending the watch replays it from the last good version, as client-go's
                    # StreamWatcher does (a 410 then relists).
                    self._undecodable(exc)
                    break
                if not delivered:
                    delivered = True
                    self._health.line_arrived()
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    obj = self._decoded(raw)
                    if obj is not None:
                        self._deliver(event_type, obj)
                version = event_version(raw) or version  # BOOKMARK: only its version
        except Exception as exc:  # noqa: BLE001 - handed to _watch, which raises it
            return _WatchEnd(version, self._useful(delivered, opened), exc)
        return _WatchEnd(version, self._useful(delivered, opened))

    @staticmethod
    def _useful(delivered: bool, opened: float) -> bool:
        return delivered or time.monotonic() - opened >= _WATCH_USEFUL_SECONDS

    def _decoded(self, raw: bytes):
        """The object of the raw JSON, or None (counted) when it cannot be decoded or fails the check."""
        try:
            obj = decode_object(raw, self._resource)
            if self._check is not None:
                self._check(obj)
            return obj
        except Skipped as skipped:
            self._skip(skipped.reason, str(skipped))
        except Exception as exc:  # noqa: BLE001 - msgspec's errors, or a model that is not what we read
            self._skip("malformed", f"{type(exc).__name__}: {exc}")
        return None

    def _deliver(self, event_type: str, obj) -> None:
        try:
            if event_type == "ADDED":
                self._store.add(obj)
            elif event_type == "MODIFIED":
                self._store.update(obj)
            else:
                self._store.delete(obj)
        except Exception as exc:  # noqa: BLE001 - the object passed its checks: a failing store is our bug
            # Not a malformed object, so not counted as one; the watch goes on, as client-go's reflector
            # does when its store refuses an event (a relist would feed the same object to the same store).
            self._skips_logged.log(("store", type(exc).__name__), "error",
                                   "Kubernetes watch event not taken by the cache (a bug of the exporter); "
                                   "watching on, logged once", resource=self.resource_name, event=event_type,
                                   detail=f"{type(exc).__name__}: {exc}"[:200])

    def _undecodable(self, exc: BaseException) -> None:
        self._count(self.dropped, "undecodable")
        self._skips_logged.log("undecodable", "warn", "Kubernetes watch line is no event: watching again from the "
                               "last version seen (counted in pod_gpu_exporter_kubernetes_watch_dropped_total)",
                               resource=self.resource_name, detail=f"{type(exc).__name__}: {exc}"[:200])

    def _skip(self, reason: str, detail: str) -> None:
        self._count(self.skipped, reason)
        self._skips_logged.log(reason, "warn",
                               "Kubernetes object skipped (counted in pod_gpu_exporter_kubernetes_objects_skipped_total)",
                               resource=self.resource_name, reason=reason, detail=detail[:200])

    def _count(self, counts: Dict[str, int], reason: str) -> None:
        with self._counts_lock:
            counts[reason] = counts.get(reason, 0) + 1
