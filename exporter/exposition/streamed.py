"""The rewrite of answers too large to keep per-line state for, a slice of lines at a time.

A wrong --dcgm.url (kube-state-metrics, another exporter) or a runaway upstream can send up to
--dcgm.max-body-size of lines that never repeat. The line-by-line rewrite in exporter.exposition.rewriter
keeps, per line, the objects its template and caches need (~0.6 KiB for a tiny line), so such an
answer is rewritten here instead: ~4,000 lines at a time, nothing cached, no template left. What
stays in memory while it runs is the output and two hashes per series (for repeat detection),
two ints more for a series upstream attributed (which a later device-level sample replaces).
The output is the same as the line-by-line rewrite's (tests/unit/test_streamed.py).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from exporter.exposition.metadata import FamilyRecord
from exporter.exposition.line_rule import read_line
from exporter.exposition.series import RewriteResult, Series, SeriesBuilder, replace_copy
from exporter.exposition.text import UNDECODABLE, cut_short, decode

_SLICE_BYTES = 64 * 1024  # ~4,000 tiny lines at most: a few MiB of objects alive at once


class _StreamState:
    """What the rewrite keeps from one slice to the next."""

    def __init__(self) -> None:
        self.malformed = 0
        self.record = FamilyRecord()  # as in exporter.exposition.rewriter.Rewriter._rewrite_lines
        self.identities: set = set()
        self.parts: List[bytes] = []  # the slices rewritten so far
        # hash(series key) -> hash(its first line's replaced pairs): two ints per series instead of
        # its strings. A collision can at worst drop a distinct series as a repeat (odds ~1e-8 at
        # 500,000 series, the most an 8 MiB answer holds).
        self._written: Dict[int, int] = {}
        # hash(series key) -> (slice number, hash of its first output) of series written from an
        # upstream-attributed copy, which a later device-level sample replaces (as
        # Rewriter._repeat does); two ints again, for -k answers attribute every GPU line.
        self._copies: Dict[int, Tuple[int, int]] = {}

    def first_write(self, series: Series, out: List[str], rest: str) -> bool:
        """Whether the series is not yet written (then it is recorded); counts exact repeats, and puts
        a device-level sample in place of an attributed copy written before it."""
        # As the rewriter decides: the same key and the same replaced pairs (Series.dropped).
        key, head = hash(series.key), hash(series.dropped)
        first = self._written.get(key)
        if first is None:
            self._written[key] = head
            if series.attributed:
                self._copies[key] = (len(self.parts), hash(series.lines("")[0]))
            return True
        copy = self._copies.get(key)
        if copy is not None and not series.attributed:
            del self._copies[key]
            self._written[key] = head
            number, first = copy

            def is_first(head: str) -> bool:
                return hash(head) == first

            if number == len(self.parts):  # written in this slice
                replace_copy(out, is_first, series.lines(rest))
            else:
                lines = self.parts[number].decode("utf-8").split("\n")
                replace_copy(lines, is_first, series.lines(rest))
                self.parts[number] = "\n".join(lines).encode("utf-8")
            return False
        self.malformed += int(first == head)
        return False


def rewrite_streamed(builder: SeriesBuilder, body: bytes, slice_bytes: int = _SLICE_BYTES) -> RewriteResult:
    """The rewrite of body with the builder's mapping and style, `slice_bytes` of lines at a time."""
    state = _StreamState()
    parts = state.parts
    position, size = 0, len(body)
    while position < size:
        end = body.rfind(b"\n", position, position + slice_bytes)
        if end < 0:  # one line longer than a slice
            end = body.find(b"\n", position)
        if end < 0:  # the last line, without its newline: cut short
            state.malformed += cut_short(body[position:].decode("utf-8", errors="replace"))
            break
        parts.append(_rewrite_slice(builder, body[position:end], state))
        position = end + 1
    return RewriteResult(b"".join(parts), state.malformed, frozenset(state.identities))


def _rewrite_slice(builder: SeriesBuilder, chunk: bytes, state: _StreamState) -> bytes:
    text, maybe_undecodable = decode(chunk)
    out: List[str] = []
    record = state.record
    for line in text.split("\n"):
        if maybe_undecodable and UNDECODABLE.search(line):
            line = None  # not UTF-8: dropped
        # Nothing cached: these answers' lines do not repeat.
        series, rest, dropped = read_line(line, builder.build_series, record, out)
        if series is None:
            state.malformed += dropped
        elif state.first_write(series, out, rest):
            record.note_sample(series.name)
            if series.identity is not None:
                state.identities.add(series.identity)
            out.extend(series.lines(rest))
    return "".join([line + "\n" for line in out]).encode("utf-8")
