"""One /gpu/metrics response: fetch the vendor exporter's text, rewrite it with the current mapping, add the sections' blocks."""

from __future__ import annotations

import itertools
import threading
import time
from typing import NamedTuple, Optional, Sequence, Tuple

from zlib_ng import zlib_ng

from exporter.base.errors import UpstreamError
from exporter.base.logs import DependencyReporter
from exporter.base.memory import fit_heap_to_answer
from exporter.base.upstream import GENERIC_UPSTREAM, UpstreamWords
from exporter.core.attribution import Attribution, Snapshot
from exporter.core.identity import SampleDialect
from exporter.core.mapping import Mapping
from exporter.exposition.labels import DEFAULT_DIALECT
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.sections import ScrapeView, Section, SectionFailures, SectionState, check_order
from exporter.exposition.series import RewriteResult
from exporter.exposition.template import BodyValues


# zlib-ng's level 2 shrinks the large benchmark node's 1.83 MB answer to 83 KB in ~1.1 ms of CPU,
# where the system zlib's level 1 took ~3.2 ms for 92 KB (zlib-ng's level 1: 0.8 ms, 110 KB).
_GZIP_LEVEL = 2
# One below the default memLevel 8: smaller buffers, which stay in the CPU's caches; compressing the
# 6,400-series answer takes ~10% less CPU for the same size.
_GZIP_MEMORY_LEVEL = 7


class _GzipPrefix:
    """The gzip stream of the parts every answer starts with, compressed once, finished per answer.

    Finishing copies the compressor's state (a few hundred KiB, microseconds) and compresses only
    the answer's own tail, so each answer is still one ordinary gzip member any client can read.
    """

    def __init__(self, parts: Tuple[bytes, ...]):
        self._parts = parts
        self._lock = threading.Lock()
        self._compressed: Optional[Tuple[bytes, object]] = None  # (bytes so far, compressor)

    def finish(self, tail: bytes) -> Tuple[bytes, bytes]:
        with self._lock:  # concurrent first requests wait for one compression instead of each doing it
            if self._compressed is None:
                compressor = zlib_ng.compressobj(_GZIP_LEVEL, zlib_ng.DEFLATED, 16 + zlib_ng.MAX_WBITS,
                                                 _GZIP_MEMORY_LEVEL)
                head = b"".join(compressor.compress(part) for part in self._parts)
                self._compressed = (head, compressor)
        head, compressor = self._compressed
        rest = compressor.copy()
        return head, rest.compress(tail) + rest.flush()


class ScrapeBody:
    """An answer in parts: those scrapes share while upstream and mapping are unchanged, then this
    scrape's own status gauges; the shared parts are neither joined nor compressed again per scrape."""

    def __init__(self, shared: Tuple[bytes, ...], own: bytes = b"", shared_gzip: Optional[_GzipPrefix] = None):
        self.parts = shared + (own,)
        self._own = own
        self._shared_gzip = shared_gzip or _GzipPrefix(shared)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def gzip_parts(self) -> Tuple[bytes, bytes]:
        """The gzip-encoded answer, in parts to be sent one after the other."""
        return self._shared_gzip.finish(self._own)


# Each rewritten answer's number, counted for the whole process: a block that keeps what it read of one answer
# by its number can never take another scraper's answer for it.
_ANSWERS = itertools.count(1)


class _Cached(NamedTuple):
    body: bytes
    mapping: Mapping
    result: RewriteResult
    keys: tuple  # each kept section's key() its rows were made for
    section_rows: bytes  # the kept sections' rows for this rewrite
    shared_gzip: _GzipPrefix  # of result.text + section_rows, what every answer starts with
    number: int  # which body rewritten this is, unique in the process (_ANSWERS): ScrapeView.answer
    values: Optional[BodyValues]  # the body's values where it was refilled: ScrapeView.values


class _SharedFetch:
    """Scrapes that arrive while a fetch is under way wait for that fetch and share its answer.

    However many scrapes come at once, one upstream body at a time is in memory (up to
    --dcgm.max-body-size), not one per scrape; the fetch's own deadline bounds the wait.
    """

    def __init__(self, fetch):
        self._fetch = fetch
        self._lock = threading.Lock()
        self._flight: Optional[dict] = None

    def __call__(self) -> bytes:
        with self._lock:
            flight, leading = self._flight, self._flight is None
            if leading:
                flight = self._flight = {"done": threading.Event()}
        if leading:
            try:
                flight["body"] = self._fetch()
            except BaseException as exc:  # handed to every scrape that waited for it
                flight["error"] = exc
            finally:
                with self._lock:
                    self._flight = None
                flight["done"].set()
        else:
            flight["done"].wait()
        if "error" in flight:
            raise flight["error"]
        return flight["body"]


class _Previous(NamedTuple):
    """What a rewrite may reuse of the last one: not its body or text, which are let go first."""

    mapping: Mapping
    identities: frozenset
    keys: tuple
    section_rows: bytes

    @classmethod
    def of(cls, cached: Optional[_Cached]) -> Optional["_Previous"]:
        if cached is None:
            return None
        return cls(cached.mapping, cached.result.identities, cached.keys, cached.section_rows)


class Scraper:
    """Builds scrape responses; safe to call from many request threads at once.

    The answer is the rewritten samples, then each section's block in the order registered: the kept
    sections' rows (made with the rewrite, and kept with it), then the per-scrape ones. The scraper
    knows the sections only by their protocol.
    """

    def __init__(self, source, attribution: Attribution, labels_style: str, sections: Sequence[Section] = (),
                 labels_mode: str = "samples", label_limit: Optional[LabelLimit] = None,
                 upstream_words: UpstreamWords = GENERIC_UPSTREAM, dialect: SampleDialect = DEFAULT_DIALECT):
        check_order(sections)
        self._words = upstream_words  # how the logs name the vendor's exporter, and what to check
        self._dialect = dialect  # how the vendor's samples name a device and their own holder
        self._source = source
        self.sections = tuple(sections)
        self._kept = tuple(section for section in self.sections if not section.per_scrape)
        self._per_scrape = tuple(section for section in self.sections if section.per_scrape)
        self._mode = labels_mode  # --labels.mode: owners on the samples, or only on the allocation rows
        # --labels.limit, and its count of labels left off (shared with the sections' series)
        self.label_limit = label_limit or LabelLimit(None)
        self._shared_fetch = _SharedFetch(source.fetch)
        self._attribution = attribution
        self._style = labels_style
        self._reporter = DependencyReporter(upstream_words.name)
        # What its answers hold, reported apart from whether it answers: a node can serve garbage or
        # no GPU samples for hours, and that too must be logged once, not on every scrape.
        self._content_reporter = DependencyReporter(upstream_words.name)
        # A section that raises is left out of the answer, down on /metrics, and logged once.
        self.failures = SectionFailures()
        self._lock = threading.Lock()
        self._rewrite_lock = threading.Lock()
        self._rewriter: Optional[Rewriter] = None
        self._cached: Optional[_Cached] = None
        self.scrapes = 0
        self.rewrites = 0  # upstream bodies actually rewritten (the rest were answered from the cache)
        self.rewrite_seconds = 0.0  # time spent in those rewrites, garbage collection included
        self.upstream_failures = 0
        self.malformed_lines = 0
        # dcgm-exporter's last answer, for the node page (which never fetches): the kept body, the first
        # copy of an unchanged answer, so no second body is held between scrapes; None before any, and
        # while a new body is rewritten (the last one is let go then, as the cached rewrite is).
        self.last_body: Optional[bytes] = None

    def scrape(self) -> bytes:
        return bytes(self.scrape_body())

    def scrape_body(self) -> ScrapeBody:
        self._attribution.wait_first_refresh()  # at start-up only: a mapping in the making
        started = time.perf_counter()
        snapshot = self._attribution.current()
        body = self._fetch()
        malformed, identities, kept_body, answer, values = 0, frozenset(), None, 0, None
        if body is not None:
            cached = self._rewrite(body, snapshot)
            self.last_body = cached.body
            shared, shared_gzip = (cached.result.text, cached.section_rows), cached.shared_gzip
            malformed, identities, kept_body = cached.result.malformed, cached.result.identities, cached.body
            answer, values = cached.number, cached.values
            self._report_content(cached.result)
        else:
            # Without upstream samples there is nothing to join, but allocations are still known.
            shared = (self._kept_rows(ScrapeView(snapshot, identities))[0],)
            shared_gzip = None
        with self._lock:
            self.scrapes += 1
            self.malformed_lines += malformed
        gauges = tuple(gauge for section in self.sections for gauge in self.failures.gauges(section))
        view = ScrapeView(snapshot, identities, body is not None, malformed, started, gauges, kept_body, answer, values)
        own = b"".join(rows for rows in (self.failures.render(section, view) for section in self._per_scrape)
                       if rows is not None)
        return ScrapeBody(shared, own, shared_gzip)

    def section_states(self) -> Tuple[Tuple[str, SectionState], ...]:
        """Each section's name and state, down while its rows fail (for /metrics)."""
        return tuple((section.name, self.failures.state(section)) for section in self.sections)

    def _fetch(self) -> Optional[bytes]:
        try:
            body = self._shared_fetch()
        except UpstreamError as exc:
            with self._lock:
                self.upstream_failures += 1
            self._reporter.failed(exc.reason, str(exc), source=self._source.describe())
            return None
        self._reporter.succeeded(f"{self._words.name} answering again", source=self._source.describe())
        return body

    def _report_content(self, result: RewriteResult) -> None:
        source, words = self._source.describe(), self._words
        if result.malformed:
            self._content_reporter.failed(
                "malformed", f"{words.name} at {source} sent {result.malformed} lines that break the Prometheus "
                f"text format; they are dropped and counted in pod_gpu_exporter_malformed_lines: {words.malformed_hint}",
                source=source)
        elif not result.identities:
            self._content_reporter.failed(
                "no_gpu_samples", f"{words.name} at {source} answered without any GPU sample: it may not "
                f"see the GPUs ({words.no_samples_hint})", source=source)
        else:
            self._content_reporter.succeeded(f"{words.name} sends well-formed GPU samples again", source=source)

    def _rewrite(self, body: bytes, snapshot: Snapshot) -> _Cached:
        # dcgm-exporter refreshes its values every 30 s by default while Prometheus may scrape far more
        # often: an unchanged body under an unchanged mapping is answered from the last rewrite. The
        # lock makes scrapes arriving together (an HA pair of Prometheus servers) rewrite it once.
        mapping = snapshot.mapping
        keys = tuple(self.failures.key(section) for section in self._kept)
        with self._rewrite_lock:
            cached = self._cached
            if cached is None or cached.mapping is not mapping or cached.body != body:
                # Let the last body and its rewrite go before the new rewrite is built: at most one
                # of each in memory, whatever their size.
                previous, cached, self._cached, self.last_body = _Previous.of(cached), None, None, None
                started = time.perf_counter()
                cached = self._cached = self._rewritten(body, snapshot, keys, previous, next(_ANSWERS))
                self.rewrite_seconds += time.perf_counter() - started
                self.rewrites += 1
            elif not _same(keys, cached.keys):
                # A kept section's key() changed (its own data is new): its rows again, the rewrite kept.
                rows, failed = self._kept_rows(ScrapeView(snapshot, cached.result.identities, body=body))
                cached = self._cached = cached._replace(
                    keys=_retried(keys) if failed else keys, section_rows=rows, shared_gzip=_GzipPrefix((cached.result.text, rows)))
            return cached

    def _rewritten(self, body: bytes, snapshot: Snapshot, keys: tuple, previous: Optional[_Previous],
                   number: int) -> _Cached:
        mapping = snapshot.mapping
        rewriter = self._rewriter
        if rewriter is None or rewriter.mapping is not mapping:
            rewriter = self._rewriter = Rewriter(mapping, self._style, self._mode, self.label_limit, self._dialect)
        result = rewriter.rewrite(body)
        fit_heap_to_answer(len(result.text), len(body))
        if (previous is not None and previous.mapping is mapping and previous.identities == result.identities
                and _same(previous.keys, keys)):
            rows = previous.section_rows  # new values of the same GPUs, held by the same pods
        else:
            rows, failed = self._kept_rows(ScrapeView(snapshot, result.identities, body=body))
            keys = _retried(keys) if failed else keys
        return _Cached(body, mapping, result, keys, rows, _GzipPrefix((result.text, rows)), number,
                       rewriter.last_values)

    def _kept_rows(self, view: ScrapeView) -> Tuple[bytes, bool]:
        """The kept sections' rows: what the mapping and the sections' own data add to the samples, joined
        to the identities the samples carried, and so kept with the rewrite they were made for; and
        whether one of them failed (its block left out)."""
        made = [self.failures.render(section, view) for section in self._kept]
        return b"".join(rows for rows in made if rows is not None), None in made


_RETRY = object()


def _retried(keys: tuple) -> tuple:
    """Keys that match no scrape's: rows kept without a failed section's block are made again on the
    next scrape (the failure is retried, never cached), while the rewrite itself is kept."""
    return keys + (_RETRY,)


def _same(keys: tuple, other: tuple) -> bool:
    """Whether two tuples of section keys are the very same objects (immutable values, compared by identity)."""
    return len(keys) == len(other) and all(key is previous for key, previous in zip(keys, other))
