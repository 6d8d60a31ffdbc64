"""NVML's XID events: one thread per node registers every GPU for them and waits, each NVML call bounded."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, FrozenSet, NamedTuple, Optional, Tuple

from exporter.base.bounded import BoundedRunner, CallTimeout
from exporter.base.logs import DependencyReporter, LogOnce, log
from exporter.core.identity import GpuIdentity
from exporter.vendors.nvidia.nvml.event_registry import GPU_IS_LOST, TIMEOUT, EventRegistry, Refusal

XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId of an event tied to no MIG instance
# A wait answers within its own timeout on a driver that works; one this much later is taken for a
# wedged driver, and the thread waits on nothing else until that call returns. The slack is generous
# so that a loaded node is not mistaken for a wedged one.
_WAIT_SLACK_SECONDS = 5.0


class XidEvent(NamedTuple):
    device: GpuIdentity  # the GPU (UUID, index, nvidia<minor>); GPU_I_ID set when a MIG instance is named
    xid: str  # the XID as NVML reports it; "999" is NVML's "unknown"


class EventsStatus(NamedTuple):
    up: bool  # at least one GPU is registered and the last wait answered
    lost: FrozenSet[GpuIdentity]  # GPUs NVML answered GPU_IS_LOST for when last registered


class XidEventWatcher:
    """Registers every GPU for XID events on one set and waits on it, on one daemon thread.

    Each NVML call runs on a BoundedRunner: a wait that hangs leaves one stuck call (counted in
    pod_gpu_exporter_nvml_timeouts_total) and this thread backs off until it returns; no scrape or
    refresher ever waits on it. After GPU_IS_LOST or any NVML failure the set is freed and every GPU
    registered again, with a backoff that doubles up to `max_backoff_seconds`. While a GPU is lost (or
    refused for a reason that may pass) the others' events are waited for, and every GPU is
    registered again each `retry_seconds`, which is how a GPU that comes back is seen. While no GPU is
    registered (none on the node, or every one refused) there is nothing to wait on: events are down and
    registration is tried again each `retry_seconds`. A GPU's refusal is logged once while it lasts.
    """

    def __init__(self, open_nvml: Callable[[], tuple], on_event: Callable[[XidEvent], None],
                 wait_seconds: float = 1.0, min_backoff_seconds: float = 1.0, max_backoff_seconds: float = 30.0,
                 retry_seconds: float = 5.0):
        self._open_nvml = open_nvml
        self._on_event = on_event
        self._wait_ms = int(wait_seconds * 1000)
        self._min_backoff, self._max_backoff = min_backoff_seconds, max_backoff_seconds
        self._backoff = min_backoff_seconds
        self._runner = BoundedRunner("nvml-xid-events", wait_seconds + _WAIT_SLACK_SECONDS, "an NVML event wait")
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._registry: Optional[EventRegistry] = None
        self._retry_seconds = retry_seconds
        self._register_again_at: Optional[float] = None  # monotonic; set while a GPU is lost or refused
        self._registered = 0  # GPUs on the current set: with none, nothing is waited on
        self._status = EventsStatus(False, frozenset())  # replaced whole: read without a lock
        self._reporter = DependencyReporter("nvml-events")
        self._odd_events = LogOnce()
        self._refusals = LogOnce()  # keyed by (GPU, error): a refusal is said once while it lasts
        self._refused: Tuple[Refusal, ...] = ()
        self._seen_xids = LogOnce(most=1024)
        self._nvml: Any = None  # the binding, opened once (nvmlInit is reference-counted: never again)

    def status(self) -> EventsStatus:
        return self._status

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvml-xid-events", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 0.2) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._step():
                    self._backoff = self._min_backoff
                    continue
            except CallTimeout as exc:
                self._failed("timeout", "NVML did not answer an event call in time: XID events are not counted "
                             "until it does", exc)
            except Exception as exc:  # NVMLError (GPU_IS_LOST among them), or a driver gone away
                reason = "gpu_lost" if getattr(exc, "value", None) == GPU_IS_LOST else "error"
                self._failed(reason, "NVML event wait failed: XID events are not counted until the GPUs are "
                             "registered again", exc)
            self._stopping.wait(self._backoff)
            self._backoff = min(self._backoff * 2, self._max_backoff)

    def _step(self) -> bool:
        """One registration or one wait; False when the thread should back off before the next."""
        again_at = self._register_again_at
        now = time.monotonic()
        if self._registry is None or (again_at is not None and now >= again_at):
            return self._register()
        if not self._registered:  # a wait on a set without GPUs would only time out (and say up)
            self._stopping.wait(max(0.0, again_at - now))
            return True
        try:
            data = self._runner.run(self._registry.wait, self._wait_ms)
        except self._registry.nvml.NVMLError as exc:
            if exc.value != TIMEOUT:
                raise
            data = None
        self._status = self._status._replace(up=True)
        self._reporter.succeeded("NVML event waits answer again: XID events are counted")
        if data is not None:
            self._deliver(data)
        return True

    def _register(self) -> bool:
        if self._nvml is None:
            nvml, problem = self._runner.run(self._open_nvml)
            if nvml is None:
                self._status = EventsStatus(False, frozenset())
                self._reporter.failed("unavailable", "XID events are not counted: NVML is unavailable", error=problem)
                return False
            self._nvml = nvml
        if self._registry is None:
            self._registry = EventRegistry(self._nvml)
        outcome = self._runner.run(self._registry.register, XID_CRITICAL_ERROR)
        for gpu in sorted(outcome.lost - self._status.lost):
            log("warn", "NVML reports a GPU lost (fallen off the bus or unreachable)", UUID=gpu.uuid, gpu=gpu.gpu)
        for gpu in sorted(self._status.lost - outcome.lost):
            log("info", "a GPU NVML reported lost registers for events again", UUID=gpu.uuid, gpu=gpu.gpu)
        self._log_refusals(outcome.failed)
        self._registered = outcome.registered
        # Up only once a wait answers: a set that is registered may still not deliver.
        self._status = EventsStatus(self._status.up and outcome.registered > 0, outcome.lost)
        retry = bool(outcome.lost or outcome.failed or not outcome.registered)
        self._register_again_at = time.monotonic() + self._retry_seconds if retry else None
        if not outcome.registered:
            self._reporter.failed("none_registered", "XID events are not counted: no GPU is registered for them; "
                                  "registering again later")
        return True

    def _log_refusals(self, refusals: Tuple[Refusal, ...]) -> None:
        """Each GPU's refusal once while it lasts (a GPU refused at every retry is not a line each), and
        once when NVML stops refusing it."""
        for refusal in refusals:
            self._refusals.log(refusal, "warn", "NVML refused XID events on this GPU; registering it again later",
                               gpu=refusal.gpu, error=refusal.error)
        still = {refusal.gpu for refusal in refusals}
        for gpu in sorted({refusal.gpu for refusal in self._refused} - still):
            log("info", "NVML no longer refuses XID events on this GPU", gpu=gpu)
        self._refusals.retain(refusals)
        self._refused = refusals

    def _deliver(self, data: Any) -> None:
        if data.eventType != XID_CRITICAL_ERROR:
            return
        gpu = self._runner.run(self._registry.identity_of, data.device)
        if gpu is None:
            self._odd_events.log("unknown-device", "warn", "an XID event names a GPU not registered; skipped")
            return
        instance = "" if data.gpuInstanceId == NO_INSTANCE else str(data.gpuInstanceId)
        event = XidEvent(gpu._replace(instance=instance), str(data.eventData))
        # The first of each XID on each device is worth a warning; a storm of them is not a log line each.
        fields = dict(UUID=gpu.uuid, gpu=gpu.gpu, GPU_I_ID=instance, xid=event.xid)
        if not self._seen_xids.log((gpu.uuid, instance, event.xid), "warn", "XID event", **fields):
            log("debug", "XID event", **fields)
        self._on_event(event)

    def _failed(self, reason: str, message: str, exc: Exception) -> None:
        self._status = self._status._replace(up=False)
        self._reporter.failed(reason, message, error=str(exc) or type(exc).__name__)
        # After the backoff every GPU is registered on a new set (registering frees the old one), by the
        # same registry: it remembers each GPU's name, for one that is lost by then.
        self._register_again_at = 0.0
