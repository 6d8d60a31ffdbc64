"""The last rewrite kept as a template, so that a new collection with the same series costs a few
passes over the body in C instead of a Python loop over every line.

dcgm-exporter's answers differ from one collection to the next only in their values: every line up
to its last space is the same, in the same order. When that holds, the new answer's rewrite is the
last rewrite with the new values put where the old ones were. The template keeps the last body and
its rewrite cut into fixed pieces around the values of plain samples (the slots), and a refill is
a handful of C-level passes with no per-line Python work:

1. one regular-expression pass takes what follows the labels on every line, and the values of the
   lines that were plain samples last time are picked out of it;
2. those values put between the last body's fixed pieces must give the new body exactly (one join,
   one comparison): that proves every other byte, comments and heads included, is unchanged;
3. the values must all be plain numbers that the one rule of what is served accepts
   (exporter.exposition.line_rule.are_plain_values): every other line's verdict is the last body's;
4. they are put between the fixed pieces of the last rewrite (one join), once per owner of their line.

Samples without labels (`name 5`) are kept as fixed text: dcgm-exporter sends none, and a body
whose such values change is rewritten line by line.

Anything else (a new series, a gone GPU, a comment that changed, an odd value) goes the line-by-line
way in exporter.exposition.rewriter.Rewriter, which then leaves the next template. A refill makes
only a few containers (a list and two tuples): an earlier template made a tuple per line, which set
the garbage collector off several times per scrape, a third of the refill's cost.
"""

from __future__ import annotations

import re
from itertools import count, islice
from operator import itemgetter
from typing import Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from exporter.exposition.line_rule import are_plain_values
from exporter.exposition.text import VALUE, is_finite_or_inf

_PLAIN_VALUE = re.compile(VALUE, re.ASCII)  # re.ASCII: see VALUE
# What follows the first "} " of a line, up to its newline: a sample's value on dcgm-exporter's
# lines, which all carry labels. Its literal start lets the engine skip from one "} " to the next
# at memchr speed, and only the values become objects: splitting the body into lines instead
# copied all of it into one object a line, and cost twice as much on a 6 MB body. At most 299
# bytes: no plain decimal that short overflows a double (see exporter.exposition.text.is_finite_or_inf),
# and a line with a longer one is fixed text, which a changed value makes the body not fit.
_AFTER_LABELS = re.compile(rb"\} ([^\n]{0,299})\n")
_SHAPES = count(1)  # each template's number: bodies refilled by one template have their values in the same places


class BodyValues(NamedTuple):
    """A refilled body's values, for readers that would otherwise search the body for a few samples: every
    body refilled by one template (one `shape`) has the same bytes around its values, so the value of a given
    line is at the same place in `values` in each, found once (value_places) and then looked up."""

    shape: int  # the template's number
    values: Sequence[bytes]  # what follows the first "} " of each line up to its newline, in the body's order


def value_places(body: bytes) -> List[int]:
    """Where each of BodyValues.values starts in `body`: the place of each value the template reads, in order."""
    return [match.start(1) for match in _AFTER_LABELS.finditer(body)]


def picker(indices: Sequence[int], count: int) -> Callable[[Sequence[bytes]], Sequence[bytes]]:
    """A C-level `lambda items: tuple(items[i] for i in indices)` for `count` items (itemgetter
    returns a bare item, not a tuple, for one index, and takes no empty list); the items themselves
    when that picks every one in order, as on dcgm-exporter's bodies (every line a plain sample of
    one owner): 6,400 lookups fewer per refill at 6,400 series."""
    if len(indices) == count and indices == list(range(count)):
        return _same
    if not indices:
        return lambda items: ()
    if len(indices) == 1:
        only = indices[0]
        return lambda items: (items[only],)
    return itemgetter(*indices)


def _same(items: Sequence[bytes]) -> Sequence[bytes]:
    return items


# How many pieces and gaps a comparison joins at a time (about 1,000 lines, a few hundred KB of dcgm-exporter's).
_COMPARED_ITEMS = 4096


class _Interleaver:
    """Fixed pieces of text with a gap between each two, filled in one join per use."""

    def __init__(self, pieces: List[bytes]) -> None:
        self._buffer: List[bytes] = [b""] * (2 * len(pieces) - 1)
        self._buffer[0::2] = pieces

    def join(self, gaps: Sequence[bytes]) -> bytes:
        self._buffer[1::2] = gaps  # slice assignment: a C-level copy of the references
        return b"".join(self._buffer)

    def matches(self, gaps: Sequence[bytes], text: bytes) -> bool:
        """Whether the pieces with these gaps are `text`, joined and compared a slice at a time: as fast as one
        join, without a second copy of a body of megabytes, whose freed memory a refill's larger answer could not
        reuse (the heap grew by it)."""
        buffer = self._buffer
        buffer[1::2] = gaps
        at = 0
        for start in range(0, len(buffer), _COMPARED_ITEMS):
            part = b"".join(buffer[start : start + _COMPARED_ITEMS])
            if not text.startswith(part, at):
                return False
            at += len(part)
        return at == len(text)


class BodyTemplate:
    """A body's line-by-line rewrite, refillable with the values of a later body of the same shape.

    Made from the rewrite's answer `text` and what it recorded for each input line i: the output
    lines it emitted (lines ends[i-1] to ends[i] of `text`) and, for a sample, the text after its
    series (`rests[i]`; None for comments, blank and undecodable lines). The rewriter has the pieces cut (build) only once a
    later body with as many lines arrives: cutting costs about a line-by-line rewrite.
    """

    def __init__(self, body: bytes, text: bytes, ends: List[int], rests: List[Optional[str]],
                 malformed: int, identities: frozenset) -> None:
        self.malformed = malformed
        self.identities = identities
        self.shape = next(_SHAPES)
        self._body: Optional[bytes] = body
        self._recorded: Optional[Tuple[bytes, List[int], List[Optional[str]]]] = (text, ends, rests)
        self._line_count = body.count(b"\n") + 1
        self._token_count = 0
        self._pick_slots: Callable[[Sequence[bytes]], Sequence[bytes]] = tuple
        self._pick_outputs: Callable[[Sequence[bytes]], Sequence[bytes]] = tuple
        self._input: Optional[_Interleaver] = None  # set by build()
        self._output: Optional[_Interleaver] = None

    @property
    def built(self) -> bool:
        return self._input is not None

    def may_fit(self, body: bytes) -> bool:
        """Whether body has as many lines as the last one: worth building this template for."""
        return body.count(b"\n") + 1 == self._line_count

    def fill(self, body: bytes) -> Optional[Tuple[bytes, BodyValues]]:
        """The rewrite of body and its values, or None if this template does not fit it; build() first."""
        tokens = _AFTER_LABELS.findall(body)
        if len(tokens) != self._token_count:
            return None
        values = self._pick_slots(tokens)
        if not self._input.matches(values, body):
            return None  # some byte other than a sample's value changed
        if values and not are_plain_values(values):
            return None
        return self._output.join(self._pick_outputs(values)), BodyValues(self.shape, tokens)

    def build(self) -> None:
        """Cut the last body and its rewrite into fixed pieces around the values of plain samples."""
        text, ends, rests = self._recorded
        body = self._body
        token_at = {match.start(1): number for number, match in enumerate(_AFTER_LABELS.finditer(body))}
        input_pieces: List[bytes] = []
        output_pieces: List[bytes] = []
        slot_tokens: List[int] = []  # for each slot, the number of its token in the body
        output_slots: List[int] = []  # for each value written out, the slot it comes from
        pending_input: List[bytes] = []
        pending_output: List[bytes] = []
        start = offset = 0
        output_lines = _lines(text)
        for line, end, rest in zip(_lines(body), ends, rests):
            value = _slot_value(rest)
            emitted = list(islice(output_lines, end - start))
            # A plain value is ASCII: as many bytes as characters.
            token = None if value is None else token_at.get(offset + len(line) - len(value))
            start, offset = end, offset + len(line) + 1
            if token is None:  # no plain value right after the labels: fixed text on both sides
                pending_input.append(line + b"\n")
                pending_output.extend([output + b"\n" for output in emitted])
                continue
            input_pieces.append(b"".join(pending_input) + line[: len(line) - len(value)])
            pending_input = [b"\n"]
            slot_tokens.append(token)
            for output in emitted:  # each output line ends with the value, which becomes a gap
                output_pieces.append(b"".join(pending_output) + output[: len(output) - len(value)])
                pending_output = [b"\n"]
                output_slots.append(len(slot_tokens) - 1)
        # The last line has no newline after it (it is normally empty): take back the one added.
        input_pieces.append(b"".join(pending_input)[:-1])
        output_pieces.append(b"".join(pending_output))
        self._token_count = len(token_at)
        self._input = _Interleaver(input_pieces)
        self._output = _Interleaver(output_pieces)
        self._pick_slots = picker(slot_tokens, len(token_at))
        self._pick_outputs = picker(output_slots, len(slot_tokens))
        self._body = self._recorded = None  # no longer needed: let them go


def _lines(body: bytes) -> Iterator[bytes]:
    """`body.split(b"\n")` one line at a time: the whole list beside the pieces cut from it held
    another copy of the body while the template was built."""
    start = 0
    while True:
        end = body.find(b"\n", start)
        if end < 0:
            yield body[start:]
            return
        yield body[start:end]
        start = end + 1


def _slot_value(rest: Optional[str]) -> Optional[str]:
    """The value of a sample whose `rest` (the text after its series) is blanks, one space and a
    plain value: then the line's last space comes just before its value, the value is the line's
    last token, and the line's output depends on the rest of the line alone."""
    if rest is None:
        return None
    blanks, space, value = rest.rpartition(" ")
    if space and not blanks.strip(" \t") and _PLAIN_VALUE.fullmatch(value) and is_finite_or_inf(value):
        return value
    return None
