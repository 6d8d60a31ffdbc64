"""The collectors, registered once in one list, and what the framework does with them all (as node_exporter's collector.go)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from exporter.collectors.collector import Collector, Flag, Hub, PagePart, SourceState
from exporter.collectors.dcgm import DcgmReader
from exporter.collectors.hpc_jobs import HpcJobsCollector
from exporter.collectors.kubernetes import KubernetesApi
from exporter.collectors.process_shares import ProcessSharesCollector
from exporter.collectors.xid_events import XidEventsCollector

if TYPE_CHECKING:  # `--help` and the flag tables load no section code
    from exporter.exposition.sections import Section

# Every source that can be switched on, one line each, in the order their blocks are written on
# /gpu/metrics (kept blocks, then per-scrape ones) and their parts on /metrics. A new source is a
# package under sources/ (and shares/ for what it computes), a module here in collectors/, and one
# line in this list.
COLLECTORS: Tuple[type, ...] = (
    DcgmReader,
    KubernetesApi,
    ProcessSharesCollector,
    XidEventsCollector,
    HpcJobsCollector,
)

# One instance of each for what needs no running source: flags, refusals, checks, derived values.
_DECLARED: Tuple[Collector, ...] = tuple(kind() for kind in COLLECTORS)

# The NVML binding every collector that reads NVML is handed: None, the driver's library, on a real
# node; the demo registers its simulation here before it serves, and nothing else differs.
_nvml_binding: List[object] = [None]


def register_nvml(binding: object) -> None:
    """Use `binding` (an object with the nvidia-ml-py functions) instead of the driver's library; None restores it."""
    _nvml_binding[0] = binding


def collector_flags() -> Tuple[Flag, ...]:
    """Every collector's flags, in registration order."""
    return tuple(flag for collector in _DECLARED for flag in collector.flags)


def collector_refusals(command: str) -> Dict[str, str]:
    """Config field → why `command` refuses it, over every collector."""
    refused: Dict[str, str] = {}
    for collector in _DECLARED:
        refused.update(collector.refused.get(command, {}))
    return refused


def check_collector_settings(command: str, values: Mapping[str, object], sources: Mapping[str, str]) -> None:
    for collector in _DECLARED:
        collector.check(command, values, sources)


def derive_collector_settings(config) -> Dict[str, object]:
    derived: Dict[str, object] = {}
    for collector in _DECLARED:
        derived.update(collector.derive(config))
    return derived


class Registry:
    """The collectors of one run: those the Config switches on, prepared, built, started and stopped
    together; their sections, their parts of /metrics and every source's state, the core's included."""

    def __init__(self, config, collectors: Optional[Sequence[Collector]] = None):
        self.hub = Hub(config, nvml=_nvml_binding[0])
        candidates = [kind() for kind in COLLECTORS] if collectors is None else list(collectors)
        self._all = candidates
        self._active = [collector for collector in candidates if collector.enabled(config)]
        from exporter.exposition.sections import SectionFailures  # here, not at the top: --help loads no section code

        # What a collector answers for the node page (its state, its page part), each run so that one
        # that raises costs its own row, never the page.
        self._answers = SectionFailures("collector")

    def prepare(self, only: Callable[[Collector], bool] = lambda collector: True) -> Hub:
        """Each active collector's source made, not started (ConfigError: a usage mistake)."""
        from exporter.sources.nvml.library import LazyMigResolver

        # MIG-<uuid> device IDs resolved through NVML, opened (and its outcome logged) at the first such ID.
        self.hub.resolve_mig = LazyMigResolver(self.hub.nvml)
        self._active = [collector for collector in self._active if only(collector) and collector.prepare(self.hub)
                        is not False]
        return self.hub

    def build(self, attribution, label_limit) -> None:
        self.hub.attribution, self.hub.label_limit = attribution, label_limit
        for collector in self._active:
            collector.build(self.hub)

    def sections(self, core_kept: Sequence[Section], status: Section) -> List[Section]:
        """The blocks of /gpu/metrics in the order written: the core's kept ones, the collectors' kept ones,
        the status gauges, the collectors' per-scrape ones."""
        theirs = [section for collector in self._active for section in collector.sections()]
        return ([*core_kept, *(section for section in theirs if not section.per_scrape), status,
                 *(section for section in theirs if section.per_scrape)])

    def before_first_mapping(self) -> Tuple[Optional[Callable[[], None]], float]:
        """What the first mapping waits for, in turn on the refresher's thread, and how long that may take."""
        from exporter.sources.nvml.library import OPEN_TIMEOUT_SECONDS

        waits = [wait for wait in (collector.before_first_mapping(self.hub) for collector in self._active) if wait]
        # The first mapping may open NVML too, for the MIG resolver (a MIG-<uuid> device ID).
        bound = sum(seconds for _, seconds in waits) + OPEN_TIMEOUT_SECONDS
        if not waits:
            return None, bound

        def in_turn() -> None:
            for call, _ in waits:
                call()
        return in_turn, bound

    def start(self) -> None:
        for collector in self._active:
            collector.start()

    def start_for_mapping(self) -> None:
        for collector in self._active:
            collector.start_for_mapping(self.hub)

    def stop(self) -> None:
        for collector in self._active:
            collector.stop()

    def self_metrics_parts(self) -> Tuple[Tuple[str, Callable], ...]:
        """Each active collector's part of /metrics, by its name."""
        return tuple((collector.name, collector.self_metrics) for collector in self._active)

    def states(self) -> List[SourceState]:
        """Every source's state: the core kubelet mapping's first, then each registered collector's (one
        that is off reads down, "off")."""
        states = [self._kubelet_state()]
        for collector in self._all:
            states.append(self._state_of(collector) if collector in self._active
                          else SourceState(collector.name, False, "off"))
        return states

    def switches(self) -> Dict[str, str]:
        """Each registered collector's name → the flag that switches it on, where it declares one."""
        return {collector.name: collector.switch for collector in self._all if collector.switch}

    def page_parts(self) -> List[Tuple[str, PagePart]]:
        """What each active collector adds to the node page, by its name, in registration order (one that
        raises adds nothing)."""
        parts = [(collector.name, self._answers.run(collector.name, "page_part", collector.page_part, lambda: None))
                 for collector in self._active]
        return [(name, part) for name, part in parts if part is not None]

    def _state_of(self, collector: Collector) -> SourceState:
        return self._answers.run(collector.name, "state", collector.state,
                                 lambda: SourceState(collector.name, False, "its state could not be read (see the log)"))

    def _kubelet_state(self) -> SourceState:
        attribution = self.hub.attribution
        if attribution is None:
            return SourceState("kubelet", False, "not started")
        snapshot = attribution.current()
        return SourceState("kubelet", snapshot.kubelet_up,
                           None if snapshot.kubelet_up else attribution.failure() or "not listed yet",
                           snapshot.age_seconds)

    def announce(self) -> Dict[str, object]:
        fields: Dict[str, object] = {}
        for collector in self._active:
            fields.update(collector.announce())
        return fields
