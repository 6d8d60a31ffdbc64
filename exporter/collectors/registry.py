"""The collectors, registered once in one list, and what the framework does with them all (as node_exporter's collector.go)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from exporter.base.errors import ConfigError
from exporter.collectors.collector import Collector, Flag, Hub, PagePart, SourceState
from exporter.collectors.hpc_jobs.collector import HpcJobsCollector
from exporter.collectors.kubernetes.collector import KubernetesCollector
from exporter.collectors.roles import UPSTREAM, Role
from exporter.collectors.vendor import Vendor
from exporter.exposition.families import Family, section_up_family
from exporter.vendors import PENDING_VENDORS, VENDORS

if TYPE_CHECKING:  # `--help` and the flag tables load no section code
    from exporter.exposition.sections import Section

# The sources that know no vendor, one line each. A node's collectors are, in the order their blocks
# are written on /gpu/metrics (kept blocks, then per-scrape ones) and their parts on /metrics: its
# vendor's upstream reader, the cluster context (whose pod index a vendor's collectors may take), the
# vendor's own collectors, then these sources. A new source is a package under collectors/ and one line
# here; a new vendor is a package under vendors/ and one line in vendors.VENDORS.
CONTEXT: Tuple[type, ...] = (KubernetesCollector,)
SOURCES: Tuple[type, ...] = (HpcJobsCollector,)


def collector_kinds(vendor: Vendor) -> Tuple[type, ...]:
    """The collectors of a node of this vendor, in registration order."""
    return (vendor.reader, *CONTEXT, *vendor.collectors, *SOURCES)


# A node of the first registered vendor: what --gpu.vendor auto serves as while nothing says otherwise.
COLLECTORS: Tuple[type, ...] = collector_kinds(VENDORS[0])

# One instance of each collector of every vendor, for what needs no running source: flags, refusals,
# checks, derived values.
_DECLARED: Tuple[Collector, ...] = tuple(kind() for kind in dict.fromkeys(
    kind for vendor in VENDORS for kind in collector_kinds(vendor)))
# pod_gpu_exporter_section_up as /metrics and the reference write it: every collector's sections told.
SECTION_UP: Family = section_up_family({name: source for collector in _DECLARED
                                        for name, source in collector.section_sources.items()})
VENDOR_AUTO = "auto"
VENDOR_CHOICES: Tuple[str, ...] = (VENDOR_AUTO, *(vendor.name for vendor in VENDORS), *PENDING_VENDORS)


def vendor_for(choice: str) -> Vendor:
    """The registered vendor --gpu.vendor names; auto serves as the first registered one."""
    return next((vendor for vendor in VENDORS if vendor.name == choice), VENDORS[0])


def refused_vendor(choice: str) -> Optional[str]:
    """Why this build refuses a vendor --gpu.vendor names, or None when it serves it."""
    return PENDING_VENDORS.get(choice)


def refused_setting(choice: str, values: Mapping[str, object]) -> Optional[Tuple[str, str]]:
    """(Config field, why) of a setting the vendor --gpu.vendor names explicitly cannot serve, or None."""
    vendor = next((vendor for vendor in VENDORS if vendor.name == choice), None)
    for name, (value, why) in (vendor.refused_settings.items() if vendor else ()):
        if values.get(name) == value:
            return name, why
    return None


def collector_flags() -> Tuple[Flag, ...]:
    """Every collector's flags, in registration order."""
    return tuple(flag for collector in _DECLARED for flag in collector.flags)


def demo_flags() -> Tuple[Flag, ...]:
    """Every vendor's flags for `demo`'s simulated node, in registration order."""
    return tuple(flag for vendor in VENDORS for flag in vendor.demo_flags)


def collector_refusals(command: str) -> Dict[str, str]:
    """Config field → why `command` refuses it, over every collector and every vendor's demo flags."""
    refused: Dict[str, str] = {}
    for collector in _DECLARED:
        refused.update(collector.refused.get(command, {}))
    if command != "demo":  # only `demo` has a simulated node
        for vendor in VENDORS:
            refused.update(vendor.demo_refused)
    return refused


def check_collector_settings(command: str, values: Mapping[str, object], origins: Mapping[str, str]) -> None:
    for collector in _DECLARED:
        collector.check(command, values, origins)


def check_collector_options(config) -> None:
    """Every collector's options built once from this Config, so that a value none can use is refused at
    start-up (ConfigError) rather than when its collector is prepared."""
    for collector in _DECLARED:
        collector.options(config)


def preparation_order(collectors: Sequence[Collector]) -> List[Collector]:
    """The collectors in registration order, except that one taking a role comes after every collector
    offering it (a role offered by none is left to the check that follows preparation)."""
    ordered: List[Collector] = []
    waiting = list(collectors)
    while waiting:
        placed = set(id(collector) for collector in ordered)
        ready = next((collector for collector in waiting if all(
            id(offerer) in placed for offerer in waiting if offerer is not collector
            and set(offerer.offers) & set(collector.needs + collector.takes))), waiting[0])
        ordered.append(ready)
        waiting.remove(ready)
    return ordered


def _check_offered(hub: Hub, collector: Collector) -> None:
    """A prepared collector's offers are on the hub and keep their protocol (a defect, not a usage mistake)."""
    for role in collector.offers:
        value = getattr(hub, role.name)
        if value is not None and not isinstance(value, role.protocol):
            raise TypeError(f"collector {collector.name} offers {role} as {type(value).__name__}, "
                            f"which is no {role.protocol.__name__}")


def _refuse_missing_roles(prepared: Sequence[Collector], framework_needs: Sequence[Role]) -> None:
    offered = {role for collector in prepared for role in collector.offers}
    needers = [("the exporter", role) for role in framework_needs]
    needers += [(f"collector {collector.name}", role) for collector in prepared for role in collector.needs]
    for who, role in needers:
        if role not in offered:
            raise ConfigError(f"{who} needs the {role} role, which no collector switched on offers: check the "
                              f"flags that switch collectors on and --gpu.vendor")


class Registry:
    """The collectors of one run: those the Config switches on, prepared, built, started and stopped
    together; their sections, their parts of /metrics and every source's state, the core's included."""

    section_up = SECTION_UP  # what /metrics writes pod_gpu_exporter_section_up with

    def __init__(self, config, collectors: Optional[Sequence[Collector]] = None, driver: object = None):
        """`driver`: the binding of the vendor's driver library to use instead of the node's own (the
        demo's simulation enters here, as a real node's library would)."""
        self.vendor = vendor_for(getattr(config, "gpu_vendor", VENDOR_AUTO))
        self.hub = Hub(config, driver=driver, devices=self.vendor.devices, dialect=self.vendor.figures.dialect)
        candidates = [kind() for kind in collector_kinds(self.vendor)] if collectors is None else list(collectors)
        self._all = candidates
        self._active = [collector for collector in candidates if collector.enabled(config)]
        from exporter.exposition.sections import SectionFailures  # here, not at the top: --help loads no section code

        # What a collector answers for the node page (its state, its page part), each run so that one
        # that raises costs its own row, never the page.
        self._answers = SectionFailures("collector")

    def prepare(self, only: Callable[[Collector], bool] = lambda collector: True,
                needs: Sequence[Role] = (UPSTREAM,)) -> Hub:
        """Each active collector's source made, not started, those offering a role before those taking it
        (ConfigError: a usage mistake, or a role that `needs` — the framework's — or a collector needs and
        no collector switched on offers)."""
        # The device IDs only the vendor's driver names (its partitions), resolved at the first such ID.
        if self.vendor.open_resolver is not None:
            self.hub.resolve_mig = self.vendor.open_resolver(self.hub.driver)
        chosen = [collector for collector in self._active if only(collector)]
        prepared = [collector for collector in preparation_order(chosen) if collector.prepare(self.hub) is not False]
        for collector in prepared:
            _check_offered(self.hub, collector)
        _refuse_missing_roles(prepared, needs)
        self._active = [collector for collector in chosen if collector in prepared]  # registration order kept
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
        waits = [wait for wait in (collector.before_first_mapping(self.hub) for collector in self._active) if wait]
        # The first mapping may open the vendor's driver too, for its partition resolver.
        bound = sum(seconds for _, seconds in waits) + self.vendor.resolver_open_seconds
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
