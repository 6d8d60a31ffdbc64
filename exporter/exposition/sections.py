"""The seam every block of exporter-owned families goes through: a Section serves its rows for one scrape.

A section is one block of the answer (the allocations, the devices' health, the HPC jobs, the status
gauges, the shares, the XIDs) with one small protocol: what it serves for a scrape, the status gauges
it owns, and its own state, which /metrics reports for each section (pod_gpu_exporter_section_up and
_duration_seconds, as node_exporter reports its collectors). The scraper takes the list app.py
registers and names no feature; adding a family is one section and one registration line.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Iterable, NamedTuple, Optional, Protocol, Sequence, Tuple

from exporter.base.logs import log
from exporter.core.attribution import Snapshot
from exporter.exposition import families
from exporter.exposition.families import Family
from exporter.exposition.template import BodyValues
from exporter.exposition.text import escape_label_value

Gauge = Tuple[Family, Optional[object]]  # a status gauge and its one value, None for none yet


class ScrapeView(NamedTuple):
    """What one scrape knows when its sections render, read once and shared by them all."""

    snapshot: Snapshot  # the attribution in use: its mapping, whether the kubelet is up, its age
    identities: frozenset  # the GPUs the rewritten samples named; empty without upstream samples
    upstream_up: bool = False  # whether the vendor's exporter answered this scrape
    malformed: int = 0  # upstream lines dropped from this scrape
    started: float = 0.0  # time.perf_counter() when the scrape began
    gauges: Tuple[Gauge, ...] = ()  # the sections' own status gauges, in registration order
    body: Optional[bytes] = None  # the upstream body this scrape's rows are made with (None: none)
    # Which upstream answer `body` is: a new number for each body rewritten, kept while it is answered again, so
    # that a block reading the body is told a new one from the last without hashing it; 0 with no body.
    answer: int = 0
    values: Optional[BodyValues] = None  # the body's values where it was refilled (see BodyValues), else None


class SectionState(NamedTuple):
    """Whether a section's data could be had at its last refresh, and how long that refresh took."""

    up: bool
    duration_seconds: Optional[float] = None  # None before its first refresh


class Section(Protocol):
    """One block of families. `per_scrape` False: its rows depend only on the mapping, the samples'
    identities and its `key()`, and are kept with the rewrite they were made for (no work on a cached
    scrape); a new `key()` (compared by identity: an immutable value, or a generation) renders them
    again. `per_scrape` True: rendered on every scrape, after the kept blocks."""

    name: str
    per_scrape: bool

    def key(self) -> object:
        """What its kept rows were made from besides the mapping and the identities (None: nothing)."""

    def render(self, view: ScrapeView) -> bytes:
        """Its headers and rows for this scrape; b"" for none."""

    def gauges(self) -> Iterable[Gauge]:
        """The status gauges it owns, written after the common ones, in registration order."""

    def state(self) -> SectionState:
        """Its up/error state and last refresh duration, for /metrics."""


class BaseSection:
    """What most sections share: rows from `_rows`, timed; up from a callable; no key, no gauges."""

    name = ""
    per_scrape = False

    def __init__(self, up: Callable[[], bool] = lambda: True):
        self._up = up
        self._last_seconds: Optional[float] = None

    def key(self) -> object:
        return None

    def render(self, view: ScrapeView) -> bytes:
        started = time.perf_counter()
        rows = self._rows(view)
        self._last_seconds = time.perf_counter() - started
        return rows

    def _rows(self, view: ScrapeView) -> bytes:
        raise NotImplementedError

    def gauges(self) -> Iterable[Gauge]:
        return ()

    def state(self) -> SectionState:
        return SectionState(bool(self._up()), self._last_seconds)


class VendorStatus(NamedTuple):
    """What the status block writes in a vendor's words: its name (pod_gpu_exporter_vendor_info), its own
    gauge for whether its exporter answered (written first, where it has one), and the count of devices no
    sample names, its help naming the vendor's forms that need its driver."""

    vendor: str
    upstream_up: Optional[Family]
    unresolved_devices: Family


class StatusSection(BaseSection):
    """The status gauges every scrape carries, in their fixed order, then those the sections own: first
    the vendor's own name for whether its exporter answered (where it has one), last the vendor-neutral
    one and which vendor is served."""

    name = "status"
    per_scrape = True

    def __init__(self, vendor: Optional[VendorStatus] = None):
        super().__init__()
        self._vendor = vendor
        self._vendor_info = "" if vendor is None else (families.VENDOR_INFO.header +
                                                       f'{families.VENDOR_INFO.name}{{vendor="{escape_label_value(vendor.vendor)}"}} 1\n')

    def _rows(self, view: ScrapeView) -> bytes:
        snapshot, vendor = view.snapshot, self._vendor
        values = [(vendor.upstream_up, int(view.upstream_up))] if vendor and vendor.upstream_up else []
        values += [
            (families.KUBELET_UP, int(snapshot.kubelet_up)),
            (families.MAPPING_AGE, None if snapshot.age_seconds is None else round(snapshot.age_seconds, 3)),
            (families.MALFORMED_LINES, view.malformed),
            *([(vendor.unresolved_devices, len(snapshot.mapping.unresolved))] if vendor else []),
            (families.SCRAPE_DURATION, round(time.perf_counter() - view.started, 6)),
            (families.UPSTREAM_UP, int(view.upstream_up)),
        ]
        return (families.render_status(values) + self._vendor_info + families.render_status(view.gauges)).encode()


class TextSection(BaseSection):
    """A section whose source renders its own text on a refresher (the shares, the XIDs): served as is
    on every scrape; its state is the source's."""

    per_scrape = True

    def __init__(self, name: str, text: Callable[[], bytes], state: Callable[[], SectionState]):
        super().__init__()
        self.name = name
        self._text = text
        self._source_state = state

    def _rows(self, view: ScrapeView) -> bytes:
        return self._text()

    def state(self) -> SectionState:
        return self._source_state()


class SectionFailures:
    """Runs sections so that one that raises costs only its own block, as a node_exporter collector's
    failure is that collector's `success 0`: its rows are left out of this answer, its state reads down
    until what failed works again, and a step is logged once when it starts failing or fails another way
    (the traceback at debug), never once per scrape.

    Each step of a section (its rows, gauges, key, state) fails and recovers on its own: a key that
    keeps failing is not cleared by rows that work. Safe to call from many request threads at once.
    """

    def __init__(self, what: str = "section", costs: str = "is left out of the answer until it works again") -> None:
        self._what = what  # how the log names what failed: a section, or a part of /metrics
        self._costs = costs  # what its failure costs, as the log says it
        # (name, step) -> the exception type of its failure. A failure is known by its kind, not its
        # message: a message may carry a changing value (a count, a path), and keying on it would log
        # on every scrape. At most sections x steps entries, whatever the messages.
        self._failed: Dict[Tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def render(self, section: Section, view: ScrapeView) -> Optional[bytes]:
        """The section's rows for this scrape, or None when it raised (left out, logged once)."""
        return self.run(section.name, "rows", lambda: section.render(view), lambda: None)

    def gauges(self, section: Section) -> Tuple[Gauge, ...]:
        """The section's own status gauges, or none when asking for them raised."""
        return self.run(section.name, "gauges", lambda: tuple(section.gauges()), tuple)

    def key(self, section: Section) -> object:
        """The section's key(); a failing one gets a new object, so that its rows are made again next time."""
        return self.run(section.name, "key", section.key, object)

    def state(self, section: Section) -> SectionState:
        """Its own state, down while a step of it fails or when asking for its state raises."""
        state = self.run(section.name, "state", section.state, lambda: SectionState(False))
        return state._replace(up=False) if self.is_failing(section.name) else state

    def run(self, name: str, step: str, call: Callable[[], object], fallback: Callable[[], object]):
        """`call()`, or `fallback()` when it raised: any defect in one section (or one collector's answer
        to the node page), and the rest is still served."""
        try:
            result = call()
        except Exception as exc:
            self.failed(name, exc, step)
            return fallback()
        self.succeeded(name, step)
        return result

    def is_failing(self, name: str) -> bool:
        with self._lock:
            return any(failed == name for failed, _ in self._failed)

    def failed(self, name: str, exc: Exception, step: str = "rows") -> None:
        kind, message = type(exc).__name__, f"{type(exc).__name__}: {exc}"
        with self._lock:
            before, self._failed[(name, step)] = self._failed.get((name, step)), kind
        if before != kind:  # it starts failing, or fails another way: once, not once per scrape
            log("error", f"{self._what} {name} failed and {self._costs}",
                **{self._what: name}, step=step, error=message)
            log("debug", f"{self._what} {name} failure", exc_info=(type(exc), exc, exc.__traceback__),
                **{self._what: name}, step=step)

    def succeeded(self, name: str, step: str = "rows") -> None:
        if not self._failed:  # the common case: nothing fails, no lock taken
            return
        with self._lock:
            kind = self._failed.pop((name, step), None)
        if kind is not None:
            log("info", f"{self._what} {name} works again", **{self._what: name}, step=step)


def check_order(sections: Sequence[Section]) -> None:
    """Kept blocks come before per-scrape ones: the kept part of the answer is shared, and compressed
    once, as one prefix."""
    flags = [section.per_scrape for section in sections]
    if flags != sorted(flags):
        raise ValueError("sections kept with the rewrite must be registered before those rendered per scrape")
    names = [section.name for section in sections]
    if len(set(names)) != len(names):
        raise ValueError(f"section names repeat: {names}")
