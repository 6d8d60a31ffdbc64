"""One resource kind kept in step with the API server: list, watch from the list's version, relist on 410.

Works with a lightkube Client it is given; imports nothing of lightkube itself, so that the exporter
with the API off never loads it.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Callable, Iterable, Optional

from exporter.base.logs import DependencyReporter, log

# The server ends each watch after this long (timeoutSeconds) and lightkube opens the next one from
# the last version seen: a connection that died without a FIN is noticed within this bound.
WATCH_SERVER_TIMEOUT_SECONDS = 290
LIST_PAGE_SIZE = 500  # pages keep a 5,000-pod list from being decoded into models all at once
WATCH_CONFIRM_SECONDS = 1.0
_BACKOFF_FIRST_SECONDS = 0.5
_BACKOFF_MAX_SECONDS = 30.0


def describe_failure(exc: BaseException, verb: str, resource: str) -> tuple:
    """(reason, message) for a failed API call: one stable reason word per kind of failure."""
    status = _status_code(exc)
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
    ADDED/MODIFIED/DELETED event. A 410 Gone (the version fell out of the server's window) relists at
    once; any other failure (after reporting it, once per kind) relists after a growing, jittered
    pause. See `healthy` for when the watch counts as up.
    """

    def __init__(self, client, resource, resource_name: str, fields: Optional[dict],
                 on_reset: Callable[[list], None], on_event: Callable[[str, object], None],
                 reporter: Optional[DependencyReporter] = None, namespaced: bool = True, fallback=None):
        self._client = client
        self._resource = resource
        self._fallback = fallback  # () → an older API version's resource, for a server that lacks this one
        self.resource_name = resource_name  # for messages and RBAC hints: "pods", "resourceslices"
        self._fields = fields
        self._on_reset = on_reset
        self._on_event = on_event
        self._namespace = {"namespace": "*"} if namespaced else {}  # "*": lightkube's ALL_NS, every namespace
        self._reporter = reporter or DependencyReporter("kubernetes-api")  # one per watch: logs once per change
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._phase = "list"  # the verb under way, named in a 403 message
        self._listed_at: Optional[float] = None  # None while failing
        self._watch_confirmed = False  # an event arrived since the last list
        self._failed_phase: Optional[str] = None
        self._attempt = 0
        self.lists = 0
        self.relists_after_gone = 0

    @property
    def healthy(self) -> bool:
        """Listed and watching. After a failed watch, a new one counts once it has delivered an event
        or stayed open for WATCH_CONFIRM_SECONDS: a watch that is refused (403) fails within that."""
        listed_at = self._listed_at
        if listed_at is None:
            return False
        return (self._failed_phase != "watch" or self._watch_confirmed
                or time.monotonic() - listed_at >= WATCH_CONFIRM_SECONDS)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.resource_name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()  # the thread is a daemon blocked in a read: it is not joined

    def _run(self) -> None:
        pause = _BACKOFF_FIRST_SECONDS
        while not self._stop.is_set():
            try:
                self._list_then_watch()
                return  # only when stopped: lightkube reopens a watch the server ends, from its last version
            except Exception as exc:  # noqa: BLE001 - every failure is reported and retried, never fatal
                if _status_code(exc) == 410:  # not a failure: the cache stays good until the relist replaces it
                    self.relists_after_gone += 1
                    log("info", "Kubernetes watch version expired (410 Gone): listing again",
                        resource=self.resource_name)
                    continue
                self._listed_at, self._failed_phase, self._attempt = None, self._phase, self._attempt + 1
                if _status_code(exc) == 404 and self._fallback is not None:
                    self._resource, self._fallback = self._fallback(), None
                    log("info", "Kubernetes API does not serve this version: using the older one",
                        resource=self.resource_name, version=self._resource.__module__.rpartition("_")[2])
                    continue
                reason, message = describe_failure(exc, self._phase, self.resource_name)
                self._reporter.failed(f"{self.resource_name}:{reason}", message, resource=self.resource_name)
                if self._stop.wait(pause * random.uniform(0.8, 1.2)):
                    return
                pause = min(pause * 2, _BACKOFF_MAX_SECONDS)

    def _list_then_watch(self) -> None:
        self._phase = "list"
        listing = self._client.list(self._resource, fields=self._fields, chunk_size=LIST_PAGE_SIZE,
                                    **self._namespace)
        objects = list(listing)
        self._on_reset(objects)
        self.lists += 1
        self._watch_confirmed, self._listed_at = False, time.monotonic()
        if self._failed_phase != "watch":
            self._recovered()
        else:  # say so only once the new watch has proved itself
            timer = threading.Timer(WATCH_CONFIRM_SECONDS, self._recovered, (self._attempt,))
            timer.daemon = True
            timer.start()
        events: Iterable = self._client.watch(self._resource, fields=self._fields,
                                              resource_version=listing.resourceVersion,
                                              server_timeout=WATCH_SERVER_TIMEOUT_SECONDS, **self._namespace)
        # Once the watch is open: a failure here is named as a watch failure (RBAC grants them apart).
        self._phase = "watch"
        for event_type, obj in events:
            if self._stop.is_set():
                return
            if not self._watch_confirmed:
                self._watch_confirmed = True
                self._recovered()
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                self._on_event(event_type, obj)
            # BOOKMARK: lightkube has already taken its resourceVersion; nothing else to do.

    def _recovered(self, attempt: Optional[int] = None) -> None:
        if attempt is not None and attempt != self._attempt:
            return  # it failed again meanwhile
        self._failed_phase = None
        self._reporter.succeeded("Kubernetes API answering again", resource=self.resource_name)
