"""The line rewrite of a dcgm-exporter answer for one Mapping: caches per series, a template per body.

Samples are never parsed into numbers and rendered again: prometheus_client's parser/renderer would
rename counters that lack `_total` (dcgm-exporter has several) and reformat value text. Instead each
line is split into name, label text and the rest, judged by the one rule of what is served
(exporter.exposition.line_rule), and written back from the original substrings.
"""

from __future__ import annotations

import io
from typing import Callable, Dict, List, Optional

from exporter.core.identity import SampleDialect
from exporter.core.mapping import Mapping
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import DEFAULT_DIALECT
from exporter.exposition.metadata import FamilyRecord
from exporter.exposition.line_rule import read_line
from exporter.exposition.series import LabelSet, RewriteResult, Series, SeriesBuilder, replace_copy
from exporter.exposition.streamed import rewrite_streamed
from exporter.exposition.template import BodyTemplate, BodyValues
from exporter.exposition.text import cut_short

# The caches of series and label sets keep what the last rewrite used; once they hold more entries
# than twice its lines (plus this slack), a churning upstream (label values new on every scrape) has filled
# them with series that will not come back, and they are cut back to the last rewrite's.
_CACHE_SLACK_ENTRIES = 1024
# Bodies past STREAM_MIN_LINES lines are rewritten a slice at a time without per-line state
# (exporter.exposition.streamed): a line costs ~0.6 KiB of Python objects while it is rewritten, so a foreign
# 8 MiB answer of tiny lines would otherwise need ~330 MiB. Bodies past STREAM_MIN_BYTES keep
# per-line state (and get a template) only while their lines share label sets, as dcgm-exporter's
# do (one set per GPU or MIG instance: 256 on a 25,600-series, 6 MB node); a foreign answer of long
# unique series (kube-state-metrics) needs ~1 KiB a line more for its label sets and is streamed.
STREAM_MIN_BYTES = 4 * 1024 * 1024
STREAM_MIN_LINES = 32_768
LARGE_BODY_MAX_LABEL_SETS = 4096
# At most this many bodies are rewritten line by line without trying a template (see Rewriter).
_MAX_BUILD_BACKOFF = 32
_JOIN_SLICE_LINES = 2048


class _TooManyLabelSets(Exception):
    """A large body's lines do not share label sets: it is streamed instead (see STREAM_MIN_BYTES)."""


class _SeriesCache(dict):
    """A sample's head → its Series (None: the head breaks the format), built at its first lookup.

    From one collection to the next only values change, so all the work on a line's head (checks,
    owner lookup, rendering) is done once and looked up after.
    """

    def __init__(self, build: Callable[[str], Optional[Series]]):
        super().__init__()
        self._build = build

    def __missing__(self, head: str) -> Optional[Series]:
        series = self[head] = self._build(head)
        return series


class Rewriter:
    """Rewrites scrapes for one Mapping; series repeat between scrapes (only values move), so the
    work on everything but the value is done once per series and cached."""

    def __init__(self, mapping: Mapping, style: str = "kubernetes", mode: str = "samples",
                 limit: Optional[LabelLimit] = None, dialect: SampleDialect = DEFAULT_DIALECT):
        self._builder = SeriesBuilder(mapping, style, mode, limit, dialect)
        self.mapping = mapping
        self.style = style
        self._label_sets: Dict[str, Optional[LabelSet]] = {}
        self._series = _SeriesCache(self._build_series)
        self._template: Optional[BodyTemplate] = None
        # How rewrites were made. A refill gives the very bytes a line-by-line rewrite would, at a
        # fraction of the cost, so only these counts tell the two apart: benchmarks/perf.py checks
        # that it timed refills, and tests that a body took the way it should.
        self.refills = 0  # rewrites done by refilling the last body's template (see exporter.exposition.template)
        self.wasted_template_builds = 0  # templates built for a body they then did not fit
        # Building a template costs about a line-by-line rewrite. An upstream whose every body differs
        # in more than values (timestamps, churning series) would pay it on every scrape for nothing,
        # so a template that does not fit the very body it was built for makes the next ones wait.
        self._bodies_before_next_build = 0
        self._build_backoff = 0
        self._label_set_budget: Optional[int] = None  # while a large body is rewritten line by line
        self._replaced = False  # whether the body being rewritten replaced a copy's lines
        # The values of the last body rewritten, where it was refilled (for readers of a few of its samples,
        # exporter.exposition.template.BodyValues); None where it was rewritten line by line.
        self.last_values: Optional[BodyValues] = None

    def rewrite(self, body: bytes) -> RewriteResult:
        self.last_values = None  # the last body's let go before this one is read
        template = self._template
        if template is not None:
            built_now = not template.built and self._bodies_before_next_build == 0 and template.may_fit(body)
            if built_now:
                # A fitting template answers without the caches; they would only speed up the next
                # line-by-line rewrite, which mostly follows a new mapping (and a new Rewriter) anyway.
                # Let them go first: the cut pieces take about as much memory again.
                self._series.clear()
                self._label_sets = {}
                template.build()
            refilled = template.fill(body) if template.built else None
            if refilled is not None:  # the same series as last time, new plain values: no line loop
                self.refills += 1
                self._build_backoff = 0
                text, self.last_values = refilled
                return RewriteResult(text, template.malformed, template.identities)
            if built_now:  # built for this body in vain
                self.wasted_template_builds += 1
                self._build_backoff = min(2 * self._build_backoff or 1, _MAX_BUILD_BACKOFF)
                self._bodies_before_next_build = self._build_backoff
            elif not template.built:
                self._bodies_before_next_build = max(0, self._bodies_before_next_build - 1)
        if len(body) <= STREAM_MIN_BYTES:
            return self._rewrite_lines(body)
        self._label_set_budget = LARGE_BODY_MAX_LABEL_SETS
        try:
            return self._rewrite_lines(body)
        except _TooManyLabelSets:
            self._series.clear()
            self._label_sets = {}
            return self._rewrite_streamed(body)
        finally:
            self._label_set_budget = None

    def _rewrite_streamed(self, body: bytes) -> RewriteResult:
        self._template = None
        return rewrite_streamed(self._builder, body)

    def _rewrite_lines(self, body: bytes) -> RewriteResult:
        """The rewrite, line by line; what became of each line is kept as the next template."""
        out: List[str] = []
        ends: List[int] = []  # for each input line, len(out) once it was done
        rests: List[Optional[str]] = []  # for each input line that is a sample, the text after its series
        malformed = 0
        record = FamilyRecord()  # what the lines written so far said about their families
        sampled = record.sampled  # metric names with samples written
        written: Dict[str, Series] = {}  # the series written so far, by key
        self._replaced = False
        line_count = body.count(b"\n")
        if line_count > STREAM_MIN_LINES:
            return self._rewrite_streamed(body)
        # Each line is decoded on its own as the loop reaches it: the whole body decoded and split
        # beforehand held two more copies of it (12 MiB at 25,600 series) at the rewrite's peak.
        start = 0
        series_of = self._series.__getitem__  # a C-level call for a series seen before
        for _ in range(line_count):
            end = body.index(b"\n", start)
            try:
                line = body[start:end].decode("utf-8")
            except UnicodeDecodeError:
                line = None  # not UTF-8: dropped
            start = end + 1
            series, rest, dropped = read_line(line, series_of, record, out)
            if series is None:
                malformed += dropped
            elif series.key not in written:  # most lines: written here, without a call
                written[series.key] = series
                name = series.name
                if name not in sampled:
                    record.note_sample(name)
                if series.variants is None:
                    out.append(name + rest)
                else:
                    for labels in series.variants:
                        out.append(f"{name}{{{labels}}}{rest}")
            else:
                malformed += self._repeat(series, rest, out, written)
            ends.append(len(out))
            rests.append(rest)
        # What follows the last newline: "" in a whole answer; anything else was cut short (a value
        # "71" may have arrived as "7"), so it is never served. Kept as a line of its own (no
        # output) so that the template's lines still match the body's.
        malformed += cut_short(body[start:].decode("utf-8", errors="surrogateescape"))
        ends.append(len(out))
        rests.append(None)
        line = None
        identities = frozenset(series.identity for series in written.values() if series.identity is not None)
        text = _joined_lines(out)
        out = None  # the template reads the output lines back from the text: no need to keep both
        # A copy's lines replaced by a later line's (see _repeat) no longer end in their own
        # line's value, which a template needs: such a body is rewritten line by line each time.
        self._template = None if self._replaced else BodyTemplate(body, text, ends, rests, malformed, identities)
        self._trim_caches(line_count, written)
        return RewriteResult(text, malformed, identities)

    def _trim_caches(self, lines: int, written: Dict[str, Series]) -> None:
        """Cut the caches back to the series of this rewrite once they hold twice as many entries as
        it had lines: bounded by what one answer needs, whatever label values do from scrape to
        scrape. (By lines, not series: per-pod copies from dcgm-exporter -k are heads of their own.)"""
        if len(self._series) > 2 * lines + _CACHE_SLACK_ENTRIES:
            # Not the heads of samples without labels (`name{}` is written back as it came, with its braces).
            self._series.clear()
            self._series.update((series.head, series) for series in written.values() if series.variants is not None)
            self._label_sets = {}

    def _repeat(self, series: Series, rest: str, out: List[str], written: Dict[str, Series]) -> int:
        """A sample of a series already written: 1 when it must be dropped as malformed, else 0.

        The text format allows each series (name + labels) once; Prometheus rejects repeats within a
        scrape. A repeated line (an upstream sending a family twice) is malformed; lines that differ
        only in upstream owner labels (dcgm-exporter -k copies samples per pod) become the same
        series once ours replace them, so the first is kept and the rest dropped without complaint.
        """
        first = written[series.key]
        # The device-level sample wins over dcgm-exporter's attributed copies (Series.attributed),
        # in whatever order they come.
        if first.attributed and not series.attributed:
            replace_copy(out, first.lines("")[0].__eq__, series.lines(rest))
            written[series.key] = series
            self._replaced = True
            return 0
        return int(first.dropped == series.dropped)  # the same line again, or a copy (Series.dropped)

    def _build_series(self, head: str) -> Optional[Series]:
        return self._builder.build_series(head, self._label_set)

    def _label_set(self, label_text: str) -> Optional[LabelSet]:
        try:
            return self._label_sets[label_text]
        except KeyError:
            pass
        if self._label_set_budget is not None and len(self._label_sets) >= self._label_set_budget:
            raise _TooManyLabelSets()
        label_set = self._label_sets[label_text] = self._builder.build_label_set(label_text)
        return label_set


def _joined_lines(out: List[str]) -> bytes:
    """`"\n".join(out + [""]).encode()`, a slice of lines at a time: the whole answer as text beside
    its bytes was the rewrite's peak (another 7 MiB at 25,600 series). BytesIO hands over its own
    buffer, trimmed, rather than a copy."""
    buffer = io.BytesIO()
    for start in range(0, len(out), _JOIN_SLICE_LINES):
        buffer.write(("\n".join(out[start : start + _JOIN_SLICE_LINES]) + "\n").encode("utf-8"))
    return buffer.getvalue()

