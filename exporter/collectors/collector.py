"""What one source that can be switched on is to the exporter: the Collector protocol, its flags, its state, and the hub it is handed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, FrozenSet, Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple

from exporter.collectors.roles import MappingContextRole, PodIndex, Role, Upstream

if TYPE_CHECKING:  # `--help` and the flag tables load no section or page code
    from exporter.core.device_ids import DeviceForms
    from exporter.core.identity import GpuIdentity, SampleDialect
    from exporter.exposition.families import Family
    from exporter.exposition.sections import Section
    from exporter.web.page_parts import Block, GpuColumn, HolderFigure


class Kind(NamedTuple):
    """A flag's value kind that its collector parses itself: the metavar --help shows, and the parser
    (raises ValueError with the reason; returns the value held by the Config)."""

    metavar: str
    parse: Callable[[str], object]


class Flag(NamedTuple):
    """One flag: its name (the environment variable follows from it), the Config field it sets, its
    kind (a core kind's name, a tuple of choices, or a Kind), its help, its default, and the default
    --help shows where the value itself would read wrong (decided at run time)."""

    flag: str
    field: str
    kind: object
    help: str
    default: object = None
    shown_default: Optional[str] = None


class SourceState(NamedTuple):
    """One source's state in the one shape /metrics and the node page read."""

    name: str
    up: bool
    reason: Optional[str] = None  # why it is not up, one line; None while up
    age_seconds: Optional[float] = None  # how old its data is; None where it has none (yet)


class PagePart(NamedTuple):
    """What one collector adds to the node page besides its state, as of its last reading (a page view
    asks its source nothing), in the page's generic terms (web/page_parts): each part is built and
    written on its own, so that one that raises costs only itself."""

    devices: FrozenSet[GpuIdentity] = frozenset()  # the GPUs its source sees: each has a row
    columns: Tuple[GpuColumn, ...] = ()  # a cell per GPU under a header
    figures: Tuple[HolderFigure, ...] = ()  # a named value per holder of a GPU
    blocks: Tuple[Block, ...] = ()  # titled tables or lists


@dataclass
class Hub:
    """What the registry hands every collector: the Config, the core's parts, and what one collector
    offers others (by role, never by source: a collector never imports another).

    Filled in two steps: `prepare` (before the core exists) may set the roles the core and others take;
    `build` (after) may read the core and those roles.
    """

    config: Any
    driver: Any = None  # the vendor's driver library binding to use instead of the node's own: None on a real node
    devices: Optional[DeviceForms] = None  # the vendor's device forms: which devices are its GPUs, what each names
    dialect: Optional[SampleDialect] = None  # how the vendor's samples name a device, and our rows name one
    resolve_mig: Optional[Callable] = None  # a partition's device ID → identity, through the vendor's driver
    # What changes whenever the vendor's resolver may resolve the same devices otherwise (a new answer of
    # the service it asks): the mapping is then built again though the kubelet lists the same. None: never.
    resolver_generation: Optional[Callable[[], object]] = None
    upstream: Optional[Upstream] = None  # where the vendor's exporter text is fetched (role UPSTREAM)
    mapping_context: Optional[MappingContextRole] = None  # the core's MappingContext (role MAPPING_CONTEXT), or None
    pod_index: Optional[PodIndex] = None  # the pods on this node while fresh (role POD_INDEX), or None
    attribution: Any = None  # the kubelet refresher (core/attribution), set before build
    label_limit: Any = None  # the one --labels.limit every series about a pod shares, set before build


class Collector:
    """One source that can be switched on. A subclass declares its flags and what each command refuses
    of them, and overrides the steps it takes part in; the framework calls them in this order:
    check and options (at parse time), enabled, prepare (which builds its options), build, before_first_mapping, start,
    then, while serving, sections/self_metrics/state/page_part, and stop."""

    name = ""
    flags: Tuple[Flag, ...] = ()
    # command → {Config field: why that command refuses it}
    refused: Mapping[str, Mapping[str, str]] = {}
    in_mapping = False  # whether `mapping` prepares and starts it (it offers the core's mapping context)
    # Its sections' names -> what answered when one reads up (pod_gpu_exporter_section_up's help tells them)
    section_sources: Mapping[str, str] = {}
    switch = ""  # the flag (and value) that switches it on, which the node page names while it is off
    families: Tuple[Family, ...] = ()  # the families it writes, for the catalogue (a vendor's are the vendor's)
    # The roles it puts on the hub in prepare, those it cannot run without, and those it reads when
    # offered (None otherwise): the registry prepares offerers first and refuses a missing need.
    offers: Tuple[Role, ...] = ()
    needs: Tuple[Role, ...] = ()
    takes: Tuple[Role, ...] = ()

    def check(self, command: str, values: Mapping[str, object], origins: Mapping[str, str]) -> None:
        """Refuse a combination of its parsed values with ConfigError (one line, exit 2)."""

    def options(self, config) -> Optional[object]:
        """Its own settings, typed and frozen (a frozen dataclass of its own), built from the Config's parsed
        flags: ConfigError for a value that cannot be used (e.g. a URL with no host); None where it has none.
        parse_config builds each collector's once, so that a bad value is refused at start-up; the collector
        builds its own from the Config it is handed (prepare), and never reads its flags from the Config again."""
        return None

    def enabled(self, config) -> bool:
        """Whether the Config switches it on."""
        return True

    def prepare(self, hub: Hub) -> Optional[bool]:
        """Make its source (not started); ConfigError for a mistake; may offer roles on the hub. False:
        it turns out off after all (e.g. --kubernetes.api auto finds no cluster)."""
        return True

    def build(self, hub: Hub) -> None:
        """Wire what reads the core (the attribution, the label limit) and the roles others offered."""

    def before_first_mapping(self, hub: Hub) -> Optional[Tuple[Callable[[], object], float]]:
        """A call the first mapping waits for on the refresher's thread, and its bound; None for none."""
        return None

    def start(self) -> None:
        """Start its threads, behind the server, which answers already."""

    def start_for_mapping(self, hub: Hub) -> None:
        """`mapping`: be ready for its one mapping (only a collector that offers the core's mapping context)."""

    def stop(self) -> None:
        """Stop them, within a fraction of a second."""

    def sections(self) -> Sequence[Section]:
        """Its blocks of /gpu/metrics, kept and per-scrape ones: the registry places each by its kind."""
        return ()

    def self_metrics(self) -> Iterable[object]:
        """What it adds to /metrics, as prometheus_client family objects."""
        return ()

    def state(self) -> SourceState:
        return SourceState(self.name, True)

    def page_part(self) -> Optional[PagePart]:
        """What it adds to the node page, from what it already holds; None for nothing."""
        return None

    def announce(self) -> Mapping[str, object]:
        """Fields the 'listening' log line carries about it."""
        return {}
