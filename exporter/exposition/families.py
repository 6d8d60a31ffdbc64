"""What a family is (one value each), the core's families, and the status gauges' writer; every package declares its own beside it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import FrozenSet, Iterable, Mapping, Optional, Tuple

from exporter.exposition.text import family_header

# Where a family is served. The telemetry path is --web.telemetry-path, /gpu/metrics by default.
TELEMETRY = "/gpu/metrics"
SELF = "/metrics"  # the process's own registry, written by prometheus_client from these entries

# What must be on for a family to be served at all is its `modes`, each a switch's words that the
# package switching it declares; a family without any is served in every mode.

# An owner's labels as --labels.style kubernetes names them (legacy: pod_name, pod_namespace,
# container_name), followed on every series that carries them by the pod's extras from the
# Kubernetes API (--labels.extra, --labels.pod-labels, --labels.pod-annotations).
OWNER = ("namespace", "pod", "container")
# /metrics also carries prometheus_client's own standard collectors, process_* and python_*:
# their families are the library's, not the exporter's, and are not catalogued here.
STANDARD_COLLECTOR_PREFIXES = ("process_", "python_")


@dataclass(frozen=True)
class Family:
    """One family: the name its `# TYPE` line carries (a counter's with `_total`), and when it is served."""

    name: str
    type: str  # "gauge" or "counter"
    help: str
    endpoint: str  # TELEMETRY or SELF
    labels: Tuple[str, ...] = ()  # on every sample, in the order written
    optional_labels: Tuple[str, ...] = ()  # on samples where known (a MIG instance's GPU_I_ID, a DRA claim)
    modes: FrozenSet[str] = frozenset()  # all of these on, or it is not served
    needs_samples: bool = False  # its header is written only with a sample (an allocation, a share)
    written: Tuple[str, ...] = ()  # the order rows carry its labels in, when not labels then optional_labels

    @cached_property
    def label_order(self) -> Tuple[str, ...]:
        """Every label name in the order a row writes it (exposition.rows); the OWNER names mark where
        the owner labels go, in whatever names --labels.style gives them, the pod's extras after them."""
        return self.written or self.labels + self.optional_labels

    @cached_property
    def header(self) -> str:
        """Its `# HELP` and `# TYPE` lines, built once."""
        return family_header(self.name, self.help, self.type)


def telemetry_family(name: str, help_text: str, **fields) -> Family:
    return Family(name, fields.pop("type", "gauge"), help_text, TELEMETRY, **fields)


def self_family(name: str, type_: str, help_text: str, labels: Tuple[str, ...] = (), **fields) -> Family:
    return Family(name, type_, help_text, SELF, labels, **fields)


def render_status(values: Iterable[Tuple[Family, Optional[object]]]) -> str:
    """Status gauges: each family's header and its one unlabelled sample, `None` for none yet."""
    return "".join(family.header + ("" if value is None else f"{family.name} {value}\n")
                   for family, value in values)


DEVICE = ("UUID", "gpu")  # a GPU's identity as dcgm-exporter names it; GPU_I_ID too on a MIG instance
DEVICE_ORDER = DEVICE + ("GPU_I_ID",)  # written first on every row about a device, each where known


def device_first(*rest: str) -> dict:
    """The `written` order of a row about a device: its identity labels, then `rest`."""
    return dict(written=DEVICE_ORDER + rest)

# /gpu/metrics, with every scrape, in the order written.
KUBELET_UP = telemetry_family("pod_gpu_exporter_kubelet_up", "1 when the last kubelet PodResources List succeeded, else 0.")
MAPPING_AGE = telemetry_family("pod_gpu_exporter_mapping_age_seconds", "Seconds since the GPU to pod mapping in use was "
                         "listed from the kubelet.")
MALFORMED_LINES = telemetry_family("pod_gpu_exporter_malformed_lines", "Upstream lines dropped from this scrape because "
                             "they break the text format.")
SCRAPE_DURATION = telemetry_family("pod_gpu_exporter_scrape_duration_seconds", "Time this exporter took to answer this "
                             "scrape, upstream fetch included.")
UPSTREAM_UP = telemetry_family("pod_gpu_exporter_upstream_up", "1 when the GPU vendor's exporter answered this scrape, "
                         "else 0 (and no GPU series); the same on every vendor's node.")
VENDOR_INFO = telemetry_family("pod_gpu_exporter_vendor_info", "The GPU vendor this exporter serves on this node (1), as "
                         "--gpu.vendor chose it.", labels=("vendor",))

# /gpu/metrics, the allocations: written before the status gauges, while the kubelet lists any.
ALLOCATION_INFO = telemetry_family(
    "pod_gpu_allocation_info", "A GPU device the kubelet reports as allocated to a container (1 per device).",
    labels=OWNER + ("resource", "device_id"),
    optional_labels=DEVICE + ("GPU_I_ID", "resourceclaim_namespace", "resourceclaim_name"), needs_samples=True)
ALLOCATED_GPUS = telemetry_family(
    "pod_gpu_container_allocated_gpus", "GPUs a container holds: 1 per whole GPU, 1/N per replica of a GPU shared N "
    "ways, a MIG instance's share of its GPU's memory slices.", labels=OWNER, needs_samples=True)

# /gpu/metrics, each pod's numbers for a controller that reads the exporter directly: written last, from what
# the blocks before them hold (exposition/pod_numbers).
POD_UTILIZATION = telemetry_family(
    "pod_gpu_utilization_ratio", "How busy (0-1) the GPUs the pod holds are, as the recording rule "
    "namespace_pod:pod_gpu_utilization:ratio defines it: the pod's own utilisation over the GPUs it holds where "
    "the vendor measures it per holder, else the mean utilisation of the devices it holds alone and whole; none "
    "for a pod holding a device that is shared, or whose utilisation is a whole partitioned GPU's.",
    labels=("namespace", "pod"), needs_samples=True)
POD_MEMORY = telemetry_family(
    "pod_gpu_memory_used_bytes", "GPU memory (bytes) the container uses on the devices it holds: its own where the "
    "vendor measures memory per holder, else the memory used on a device it holds alone; none where a device it "
    "holds is shared and not measured per holder.", labels=OWNER, needs_samples=True)

# /metrics, the process's own counters, in the order written.
SCRAPES = self_family("pod_gpu_exporter_scrapes_total", "counter", "Scrapes of the telemetry path answered.")
REWRITES = self_family("pod_gpu_exporter_rewrites_total", "counter", "Upstream bodies rewritten; the other scrapes reused "
                 "the last rewrite.")
REWRITE_SECONDS = self_family("pod_gpu_exporter_rewrite_seconds_total", "counter", "Time spent rewriting upstream bodies "
                        "(divide by pod_gpu_exporter_rewrites_total for the mean).")
MALFORMED_LINES_TOTAL = self_family("pod_gpu_exporter_malformed_lines_total", "counter", "Upstream lines dropped as "
                              "malformed, over all scrapes.")
LIMITED_LABELS = self_family("pod_gpu_exporter_limited_labels_total", "counter", "Extra labels --labels.limit left off "
                       "series, counted once for each distinct cut (a holder's extras beside as many other labels), "
                       "not per scrape nor per mapping.")
KUBELET_LIST_CALLS = self_family("pod_gpu_exporter_kubelet_list_calls_total", "counter", "PodResources List calls made to "
                           "the kubelet.")
KUBELET_LIST_FAILURES = self_family("pod_gpu_exporter_kubelet_list_failures_total", "counter", "PodResources List calls "
                              "that failed.")
# These two count the listening server's connection slots: served whenever a server serves /metrics.
HTTP_CONNECTIONS_REFUSED = self_family("pod_gpu_exporter_http_connections_refused_total", "counter", "New connections "
                                 "closed at once because every connection slot was answering a request.")
HTTP_IDLE_CONNECTIONS_CLOSED = self_family("pod_gpu_exporter_http_idle_connections_closed_total", "counter", "Idle "
                                     "connections closed to make room for new ones when every slot was taken.")
# Each section of /gpu/metrics (exposition/sections.py), as node_exporter reports its collectors.
def section_up_family(section_sources: Mapping[str, str] = {}) -> Family:
    """pod_gpu_exporter_section_up, its help naming what each section's up stands for: the core's sections'
    sources here, the others' as their collectors declare them (section name -> its source)."""
    told = "; ".join(f"{name}: {source}" for name, source in sorted(section_sources.items()))
    return self_family("pod_gpu_exporter_section_up", "gauge", "1 when the section's source answered at its last "
                       "refresh (allocation: the kubelet; "
                       + (told + "; " if told else "") +
                       "status, the block of the exporter's up gauges such as pod_gpu_exporter_upstream_up, and "
                       "pod_numbers, each pod's numbers made from the other blocks: none, so each reads 1 unless its "
                       "block fails to be written; any other: its own source, read in time) "
                       "and its rows were produced for the last scrape, else 0.", ("section",))


# The core's own; the catalogue and a run's registry write it with every collector's sections told.
SECTION_UP = section_up_family()
SECTION_DURATION = self_family("pod_gpu_exporter_section_duration_seconds", "gauge", "Time the section's last refresh "
                         "took: its source's last reading, or the making of its rows where it has no source of its "
                         "own; none for a section that waits for events, nor for one whose source gauges its own "
                         "refresh duration.", ("section",))
BUILD_INFO = self_family("pod_gpu_exporter_build_info", "gauge", "A constant 1, labelled with the exporter's version and the "
                   "Python version running it.", ("version", "python_version"))

def client_family(family: Family, value: Optional[float] = None):
    """prometheus_client's object for a catalogued family (for /metrics), which writes its header from the
    entry: one unlabelled sample of `value`, or none yet and the family's labels for add_metric. A
    counter's name is given with `_total`, which prometheus_client takes off and writes back on every line."""
    from prometheus_client import core  # only /metrics needs it: `top` reads the catalogue without it

    kind = core.CounterMetricFamily if family.type == "counter" else core.GaugeMetricFamily
    if value is not None:
        return kind(family.name, family.help, value=value)
    return kind(family.name, family.help, labels=list(family.labels))


def gathered(namespace: Mapping[str, object]) -> Tuple[Family, ...]:
    """Every Family of a module's namespace, in the order defined: gathered rather than listed, so that
    none can be defined and left out (a package's FAMILIES is `gathered(globals())`)."""
    return tuple(value for value in list(namespace.values()) if isinstance(value, Family))


# The families every node writes, whatever its vendor and sources: the core's. The catalogue
# (collectors/catalogue) adds each registered vendor's and source's own.
FAMILIES: Tuple[Family, ...] = gathered(globals())
