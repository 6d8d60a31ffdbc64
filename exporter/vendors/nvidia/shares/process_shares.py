"""--sharing.mode process: NVML + /proc read in the background; scrapes only take the last rendered text."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Protocol, Tuple

from exporter.base.bounded import BoundedRunner, CallTimeout
from exporter.base.logs import DependencyReporter
from exporter.core.mapping import Mapping
from exporter.core.refresher import Refresher
from exporter.exposition.families import render_status
from exporter.vendors.nvidia.families import NVML_UP, PROCESS_SHARES_REFRESH_DURATION
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.sections import SectionState
from exporter.vendors.nvidia.shares.compute import PodIndex, Shares, compute_shares, pod_index
from exporter.vendors.nvidia.shares.options import ProcessSharesOptions
from exporter.vendors.nvidia.shares.ledger import ShareLedger
from exporter.vendors.nvidia.shares.render import render_shares, render_unallocated
from exporter.vendors.nvidia.nvml.processes import DeviceProcesses, NvmlError, NvmlProcessReader
from exporter.sources.procfs import ProcessOwner, read_process_owner

# The per-process SM samples asked of NVML go back at least this far, so a short refresh interval
# still finds the driver's latest sample.
_MIN_SAMPLE_WINDOW_SECONDS = 1.0
# NVML has no timeouts: opening it, or one pass over the node's GPUs, is waited for this long at most
# (a pass is a few calls per GPU, milliseconds on a healthy driver); past it the refresh reports
# nvml_up 0 and the call is left to finish on its own thread.
NVML_TIMEOUT_SECONDS = 5.0


class _Rendered(NamedTuple):
    text: bytes  # the share series of one refresh ("" when they could not be had)
    nvml_up: bool
    at: float  # monotonic time of the refresh
    duration_seconds: float
    shares: Optional[Shares] = None  # what the text was rendered from, for the node page


class ProcessShares:
    """Keeps each holder's share of its GPUs fresh, one refresh per interval on its own thread.

    Needs three things; without one it serves what it can and says once why:
    NVML (`open_nvml`, retried every refresh: a GPU operator may install the driver after we start),
    the host's processes under `proc_root` (hostPID or the host's /proc mounted), and the pod index
    (`pod_index()`: pod UID → names, from the Kubernetes API; None while unavailable).
    Shares older than two intervals are withheld rather than served stale.
    """

    def __init__(self, options: ProcessSharesOptions, open_nvml: Callable[[], tuple],
                 current_mapping: Callable[[], Optional[Mapping]], pod_index: Callable[[], Optional[PodIndex]],
                 clock: Callable[[], float] = time.monotonic, read_energy: bool = True,
                 label_limit: Optional[LabelLimit] = None):
        self._open_nvml = open_nvml
        self._current_mapping = current_mapping
        self._pod_index = pod_index
        self._proc_root = options.proc_root
        self._interval = options.interval_seconds
        self._style = options.labels_style
        self._label_limit = label_limit  # --labels.limit, shared with the scrapes' own series
        self._clock = clock
        self._read_energy = read_energy  # off only in benchmarks, to measure what energy costs
        self._ledger = ShareLedger(options.idle_policy)
        self._label_cache: Dict[tuple, str] = {}  # label texts written under self._labelled_mapping
        self._labelled_mapping: Optional[Mapping] = None
        self._unallocated_labels: Dict[tuple, str] = {}  # label texts of the last refresh's unallocated series
        self._reader: Optional[NvmlProcessReader] = None
        self._nvml_calls = BoundedRunner("process-shares-nvml", NVML_TIMEOUT_SECONDS, "NVML (per-process shares)")
        self._invisible_refreshes = 0  # refreshes in a row in which none of NVML's PIDs could be seen
        self._nvml_reporter = DependencyReporter("nvml")
        self._procs_reporter = DependencyReporter("host-processes")
        self._api_reporter = DependencyReporter("kubernetes-api")
        self._rendered: Optional[_Rendered] = None  # replaced whole, so a scrape reads it without a lock
        self._refresher = Refresher("process-shares-refresher", self.refresh, self._interval,
                                    "per-process GPU shares")

    def refresh(self) -> None:
        """Read NVML and /proc once and install the rendered series (or none, when they cannot be had)."""
        started = time.perf_counter()
        devices = self._read_devices()
        text, shares = ("", None) if devices is None else self._render(devices)
        self._rendered = _Rendered(text.encode(), devices is not None, self._clock(), time.perf_counter() - started,
                                   shares)

    def text(self) -> bytes:
        """What a scrape appends: the share series while fresh, nvml_up, and the last refresh's duration."""
        rendered = self._rendered
        series, up = (rendered.text, rendered.nvml_up) if self._fresh(rendered) else (b"", False)
        status = [(NVML_UP, int(up))]
        if rendered is not None:
            status.append((PROCESS_SHARES_REFRESH_DURATION, f"{rendered.duration_seconds:.6f}"))
        return series + render_status(status).encode()

    def state(self) -> SectionState:
        """Whether NVML answered the last refresh, while it is fresh. No duration: the refresh's own is
        served as pod_gpu_exporter_process_shares_refresh_duration_seconds, and said once."""
        rendered = self._rendered
        if rendered is None:
            return SectionState(False, None)
        return SectionState(rendered.nvml_up and self._fresh(rendered), None)

    def age_seconds(self) -> Optional[float]:
        """How old the shares served are: since the last refresh; None before the first."""
        rendered = self._rendered
        return None if rendered is None else max(0.0, self._clock() - rendered.at)

    def reading(self) -> Optional[Shares]:
        """The last refresh's shares while fresh (as its series are served); None before one or once stale."""
        rendered = self._rendered
        return rendered.shares if self._fresh(rendered) else None

    def _fresh(self, rendered: Optional[_Rendered]) -> bool:
        """Whether the last refresh is recent enough to serve: two intervals at most (one missed)."""
        return rendered is not None and self._clock() - rendered.at <= 2 * self._interval

    def start(self) -> None:
        """Refresh now and then every interval, all on the refresher's thread (NVML's calls on a worker
        of their own, waited for at most NVML_TIMEOUT_SECONDS): a hung driver must keep neither the
        server from serving the dcgm samples nor a SIGTERM from ending the process."""
        self._refresher.start()

    def stop(self, timeout_seconds: float = 2.0) -> None:
        self._refresher.stop(timeout_seconds)

    def _read_devices(self) -> Optional[List[DeviceProcesses]]:
        try:
            return self._read_devices_bounded()
        except CallTimeout as exc:
            self._nvml_reporter.failed("timeout", "NVML did not answer in time: per-process GPU shares are not "
                                       "served until it does; dcgm samples are unaffected", error=str(exc))
            return None

    def _read_devices_bounded(self) -> Optional[List[DeviceProcesses]]:
        if self._reader is None:
            nvml, problem = self._nvml_calls.run(self._open_nvml)
            if nvml is None:
                self._nvml_reporter.failed("unavailable", "NVML unavailable: per-process GPU shares are not served; "
                                           "dcgm samples are unaffected", error=problem)
                return None
            self._reader = NvmlProcessReader(nvml, max(self._interval, _MIN_SAMPLE_WINDOW_SECONDS),
                                             read_energy=self._read_energy)
        try:
            devices = self._nvml_calls.run(self._reader.read)
        except NvmlError as exc:
            self._nvml_reporter.failed(exc.reason, "NVML failed: per-process GPU shares are not served until it "
                                       "answers again", error=str(exc))
            return None
        self._nvml_reporter.succeeded("NVML answering: per-process GPU shares are served")
        return devices

    def _render(self, devices: List[DeviceProcesses]) -> Tuple[str, Optional[Shares]]:
        pods = self._pod_index()
        if pods is None:
            self._api_reporter.failed("unavailable", "per-process GPU shares need the Kubernetes API (pod UIDs and "
                                      "container IDs): none is served until it answers (see --kubernetes.api)")
            return "", None
        self._api_reporter.succeeded("Kubernetes API pod index available: per-process GPU shares are served")
        owners = self._process_owners(devices)
        mapping = self._current_mapping()
        if owners is None or mapping is None:
            return "", None  # None: no kubelet answer yet, or the last one aged out; no share can be told
        shares = compute_shares(devices, mapping, owners, pods)
        counters = self._ledger.update(shares, pods, self._clock())
        if mapping is not self._labelled_mapping:  # holders or their extra labels may have changed
            self._label_cache, self._labelled_mapping = {}, mapping
        return (render_shares(shares, self._style, mapping.extra_labels, counters, self._label_cache,
                              self._label_limit) + render_unallocated(shares, self._style, self._unallocated_labels),
                shares)

    def _process_owners(self, devices: List[DeviceProcesses]) -> Optional[Dict[int, Optional[ProcessOwner]]]:
        """PID → cgroup owner for every process NVML listed that can be seen; None when this is not the
        host's PID namespace (no hostPID): then no share can be told and none is served."""
        pids = {pid for entry in devices for pid in entry.memory_bytes}
        owners: Dict[int, Optional[ProcessOwner]] = {}
        for pid in pids:
            try:
                owners[pid] = read_process_owner(self._proc_root, pid)
            except OSError:
                continue  # exited since NVML listed it: counted as unattributed, given to no one
        # Not one of NVML's PIDs visible: the processes exited since NVML listed them (once), or this
        # PID namespace is not the host's (again on the next refresh, which NVML lists anew).
        self._invisible_refreshes = self._invisible_refreshes + 1 if pids and not owners else 0
        if self._invisible_refreshes >= 2:
            self._procs_reporter.failed(
                "invisible", "none of the processes NVML reports is visible under --sharing.proc-root: run the pod "
                "with hostPID: true, or mount the host's /proc and point --sharing.proc-root at it; per-process "
                "GPU shares are not served meanwhile", proc_root=self._proc_root, processes=len(pids))
            return None
        if self._invisible_refreshes == 0:
            self._procs_reporter.succeeded("host processes visible again", proc_root=self._proc_root)
        return owners


class FreshPods(Protocol):
    """The Kubernetes source's pod index role (collectors.kubernetes.roles.KubernetesPods)."""

    def pods(self) -> Optional[Dict[Tuple[str, str], Any]]:
        """(namespace, pod) → its PodInfo, while the pod store is fresh; else None."""


def pod_index_source(pods: Optional[FreshPods]) -> Callable[[], Optional[PodIndex]]:
    """pod_index() for ProcessShares from the Kubernetes API's pod index (None when the API is off)."""
    def current() -> Optional[PodIndex]:
        pods_now = pods.pods() if pods is not None else None
        return None if pods_now is None else pod_index(pods_now.items())

    return current

