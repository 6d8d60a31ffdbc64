"""One resource kind kept in step with the API server: list, watch from the list's version, relist on 410.

Works with a lightkube Client it is given; imports nothing of lightkube itself, so that the exporter
with the API off never loads it. Every request is paced (pacing.RequestBudget), every watch read
with bounds (stream), every object checked before it reaches the cache (objects).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Optional

from exporter.base.logs import DependencyReporter, log
from exporter.sources.kubernetes.objects import Skipped
from exporter.sources.kubernetes.pacing import Backoff, RequestBudget
from exporter.sources.kubernetes.stream import (WatchLineTooLong, WatchSilent, decode_event, decode_object,
                                                event_version, list_pages, watch_lines)

# The server ends each watch after this long (timeoutSeconds) and the next one opens from the last
# version seen (an event's or a bookmark's).
WATCH_SERVER_TIMEOUT_SECONDS = 290
LIST_PAGE_SIZE = 500  # pages keep a 5,000-pod list from being decoded into models all at once
WATCH_CONFIRM_SECONDS = 1.0
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
                             f"verb '{verb}' on '{resource}' (see daemonset.yaml)")
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
    """Runs list + watch for one resource in a daemon thread and feeds a cache through two callbacks.

    `on_reset(objects)` replaces the cache with a full list; `on_event(type, object)` applies one
    ADDED/MODIFIED/DELETED event. Objects that fail `check` (or cannot be decoded) are skipped and
    counted in `skipped`. A 410 Gone after a working watch relists at once; any other failure (after
    reporting it, once per kind) relists after a growing, jittered pause, reset by a watch that works.
    See `healthy` for when the watch counts as up.
    """

    def __init__(self, client, resource, resource_name: str, fields: Optional[dict],
                 on_reset: Callable[[list], None], on_event: Callable[[str, object], None],
                 reporter: Optional[DependencyReporter] = None, namespaced: bool = True, fallback=None,
                 check: Optional[Callable[[object], None]] = None, silence_seconds: float = WATCH_SILENCE_SECONDS):
        self._client = client
        self._resource = resource
        self._fallback = fallback  # () → an older API version's resource, for a server that lacks this one
        self.resource_name = resource_name  # for messages and RBAC hints: "pods", "resourceslices"
        self._selector = {"fieldSelector": ",".join(f"{k}={v}" for k, v in fields.items())} if fields else {}
        self._on_reset = on_reset
        self._on_event = on_event
        self._check = check
        self._silence = silence_seconds
        self._namespace = "*" if namespaced else None  # "*": lightkube's ALL_NS, every namespace
        self._reporter = reporter or DependencyReporter("kubernetes-api")  # one per watch: logs once per change
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._budget = RequestBudget()
        self._backoff = Backoff()
        self._phase = "list"  # the verb under way, named in a 403 message
        self._listed_at: Optional[float] = None  # None while failing
        self._watch_opened_at: Optional[float] = None  # when the latest watch request was sent
        self._watch_confirmed = False  # an event arrived since the last list
        self._failed_phase: Optional[str] = None
        self._needs_event = False  # after a silent or dropped watch, only an event proves the next one
        self._useful = False  # the last watch delivered something or stayed open a while
        self._worked = False  # a watch since the last list was useful: a 410 then is the window moving on
        self._attempt = 0
        self.lists = 0
        # Whether the last list handed on every object of this node it held: one skipped as malformed
        # is absent from it, though not deleted.
        self.list_complete = True
        self.relists_after_gone = 0
        self.skipped: Dict[str, int] = {}  # reason → objects left out of the cache
        self.dropped: Dict[str, int] = {}  # reason → watch connections we closed (silent, too_large)
        self._skip_logged: set = set()

    @property
    def requests(self) -> int:
        """List and watch requests made (pages of a list count as one)."""
        return self._budget.taken

    @property
    def healthy(self) -> bool:
        """Listed and watching. After a failed watch, a new one counts once it has delivered an event or
        (unless the failed one fell silent or was dropped) stayed open for WATCH_CONFIRM_SECONDS: a
        watch that is refused (403) fails within that."""
        opened_at = self._watch_opened_at
        if self._listed_at is None:
            return False
        return (self._failed_phase != "watch" or self._watch_confirmed
                or (not self._needs_event and opened_at is not None
                    and time.monotonic() - opened_at >= WATCH_CONFIRM_SECONDS))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.resource_name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()  # the thread is a daemon blocked in a read (at most the silence bound): not joined

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list_then_watch()
                return  # only when stopped
            except Exception as exc:  # noqa: BLE001 - every failure is reported and retried, never fatal
                if not self._failed(exc):
                    continue
                if self._stop.wait(self._backoff.next_pause()):
                    return

    def _failed(self, exc: BaseException) -> bool:
        """Record a failure; True when a pause is due before the next list."""
        if isinstance(exc, (WatchSilent, WatchLineTooLong)):
            reason = "silent" if isinstance(exc, WatchSilent) else "too_large"
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            self._needs_event = True
        if _status_code(exc) == 410 and self._phase == "watch" and self._worked:
            # Not a failure: the version fell out of the server's window; the cache stays good until the relist.
            self.relists_after_gone += 1
            log("info", "Kubernetes watch version expired (410 Gone): listing again", resource=self.resource_name)
            return False
        self._listed_at, self._failed_phase, self._attempt = None, self._phase, self._attempt + 1
        if _status_code(exc) == 404 and self._fallback is not None:
            self._resource, self._fallback = self._fallback(), None
            log("info", "Kubernetes API does not serve this version: using the older one",
                resource=self.resource_name, version=self._resource.__module__.rpartition("_")[2])
            return False
        reason, message = describe_failure(exc, self._phase, self.resource_name)
        self._reporter.failed(f"{self.resource_name}:{reason}", message, resource=self.resource_name)
        return True

    def _list_then_watch(self) -> None:
        self._phase, self._useful, self._worked = "list", False, False
        if not self._budget.take(self._stop):
            return
        version, objects, malformed = "", [], self.skipped.get("malformed", 0)
        for version, items in list_pages(self._client, self._resource, self._namespace, self._selector,
                                         LIST_PAGE_SIZE):
            objects += filter(None, map(self._decoded, items))
        self.list_complete = self.skipped.get("malformed", 0) == malformed
        self._on_reset(objects)
        self.lists += 1
        self._watch_confirmed, self._watch_opened_at, self._listed_at = False, None, time.monotonic()
        if self._failed_phase != "watch":
            self._recovered()
        # From here a failure is named as a watch failure (RBAC grants them apart).
        self._phase = "watch"
        early_ends = 0
        while self._budget.take(self._stop):
            if self._watch_opened_at is None and self._failed_phase == "watch" and not self._needs_event:
                # say so only once the new watch has proved itself
                timer = threading.Timer(WATCH_CONFIRM_SECONDS, self._recovered, (self._attempt,))
                timer.daemon = True
                timer.start()
            self._watch_opened_at = time.monotonic()
            version = self._watch_once(version)
            if self._stop.is_set():
                return
            early_ends = 0 if self._useful else early_ends + 1
            if early_ends >= _EARLY_ENDS_TOLERATED:
                raise WatchEndedEarly()
            if early_ends and self._stop.wait(self._backoff.next_pause()):
                return

    def _watch_once(self, version: str) -> str:
        """One watch request from `version` until the server ends it; returns the last version seen."""
        params = {**self._selector, "resourceVersion": version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_SERVER_TIMEOUT_SECONDS)}
        opened, self._useful = time.monotonic(), False
        try:
            for line in watch_lines(self._client, self._resource, self._namespace, params, self._silence):
                if self._stop.is_set():
                    return version
                try:
                    event_type, raw = decode_event(line)  # an ERROR event (410) is raised from here
                except ValueError as exc:  # msgspec's errors are ValueErrors: a line that is no event
                    self._skip("malformed", f"{type(exc).__name__}: {exc}")
                    continue
                if not self._useful:
                    self._useful = True
                    self._confirmed()
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    obj = self._decoded(raw)
                    if obj is not None:
                        self._deliver(event_type, obj)
                version = event_version(raw) or version  # BOOKMARK: only its version
        finally:
            if time.monotonic() - opened >= _WATCH_USEFUL_SECONDS:
                self._useful = True
            if self._useful:
                self._worked = True
                self._backoff.reset()
        return version

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
            self._on_event(event_type, obj)
        except Exception as exc:  # noqa: BLE001 - one odd object must never stop the watch
            self._skip("malformed", f"{type(exc).__name__}: {exc}")

    def _skip(self, reason: str, detail: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if reason not in self._skip_logged:  # once per reason: a proxy that ignores fieldSelector sends many
            self._skip_logged.add(reason)
            log("warn", "Kubernetes object skipped (counted in pod_gpu_exporter_kubernetes_objects_skipped_total)",
                resource=self.resource_name, reason=reason, detail=detail[:200])

    def _confirmed(self) -> None:
        self._needs_event = False
        if not self._watch_confirmed:
            self._watch_confirmed = True
            self._recovered()

    def _recovered(self, attempt: Optional[int] = None) -> None:
        if attempt is not None and attempt != self._attempt:
            return  # it failed again meanwhile
        self._failed_phase = None
        self._reporter.succeeded("Kubernetes API answering again", resource=self.resource_name)
