"""The last rewrite kept as a template, so that a new collection with the same series costs a few
passes over the body in C instead of a Python loop over every line.

dcgm-exporter's answers differ from one collection to the next only in their values: every line up
to its last space (its head) is the same, in the same order. When that holds, the new answer's
rewrite is the last rewrite with the new values put where the old ones were. Whether it holds is
checked for the whole body at once (one tuple comparison), and the new values must be plain
numbers; anything else (a new series, a gone GPU, a comment that changed, an odd value) goes the
line-by-line way in exposition.Rewriter, which then leaves the next template.
"""

from __future__ import annotations

import re
from itertools import compress, repeat
from typing import List, Optional, Tuple

# A sample value as the 0.0.4 text format writes it (Go's ParseFloat syntax without hex forms).
# [0-9], not \d, and re.ASCII below: other scripts' digits, or a dotless ı in "inf", are not
# numbers to Prometheus. Each value has exactly one way to match: with `[0-9]+\.?[0-9]*` a run of
# integers had exponentially many, and one bad value at the end of thousands of good ones kept the
# regular expression engine busy for good.
VALUE = r"[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:inf|infinity|nan))"
_PLAIN_VALUE = re.compile(VALUE, re.ASCII)
_PLAIN_VALUE_LINES = re.compile(rb"(?:%s\n)*%s" % (VALUE.encode(), VALUE.encode()))
# Where a line's value goes in the template. No valid value contains it, and a rewrite that holds
# it anywhere else gets no template.
SLOT = b"\x00"
_SLOT_TEXT = SLOT.decode("ascii")


def split_lines(body: bytes) -> Tuple[Tuple[bytes, ...], Tuple[bytes, ...]]:
    """Every line of body cut at its last space: (heads, values), C-level work only."""
    heads, _, values = zip(*map(bytes.rpartition, body.split(b"\n"), repeat(b" ")))
    return heads, values


class BodyTemplate:
    """A body's line-by-line rewrite, refillable with the values of a later body of the same shape.

    Made from what the rewrite recorded for each input line i: the output lines it emitted
    (`out[ends[i-1]:ends[i]]`) and, for a sample, the text after its series (`rests[i]`; None
    for comments, blank and undecodable lines). The template itself is only built once a later
    body turns out to have the same heads, so an upstream whose lines never repeat (timestamps on
    every sample) costs a tuple comparison per scrape, not a template it never uses.
    """

    def __init__(self, body: bytes, out: List[str], ends: List[int], rests: List[Optional[str]],
                 malformed: int, identities: frozenset) -> None:
        self.malformed = malformed
        self.identities = identities
        self._body: Optional[bytes] = body
        self._recorded: Optional[Tuple[List[str], List[int], List[Optional[str]]]] = (out, ends, rests)
        self._heads: Optional[Tuple[bytes, ...]] = None
        self._own_values: Tuple[bytes, ...] = ()
        self._templates: Optional[Tuple[bytes, ...]] = None  # built on the first body of the same shape
        self._is_slot: Tuple[bool, ...] = ()
        self._is_fixed: Tuple[bool, ...] = ()
        self._has_slots = False
        self._fixed_values: List[bytes] = []

    def fill(self, heads: Tuple[bytes, ...], values: Tuple[bytes, ...]) -> Optional[bytes]:
        """The rewrite of a body split into heads and values, or None if this template does not fit."""
        if self._heads is None:
            self._heads, self._own_values = split_lines(self._body)
        if heads != self._heads:
            return None
        if self._templates is None:
            if _SLOT_TEXT in "".join(self._recorded[0]):
                return None  # an output line holds the slot byte itself (a label value with a NUL in it)
            self._build()
        if list(compress(values, self._is_fixed)) != self._fixed_values:
            return None
        if self._has_slots and not _PLAIN_VALUE_LINES.fullmatch(b"\n".join(compress(values, self._is_slot))):
            return None
        return b"".join(map(bytes.replace, self._templates, repeat(SLOT), values))

    def _build(self) -> None:
        out, ends, rests = self._recorded
        templates, is_slot = [], []
        start = 0
        for end, rest in zip(ends, rests):
            value = _slot_value(rest)
            if value is None:  # the whole line must come back as it was to reuse this output
                templates.append("".join([line + "\n" for line in out[start:end]]).encode("utf-8"))
            else:  # every emitted line ends with the value, which the slot replaces
                cut = len(value)
                templates.append("".join([line[:-cut] + _SLOT_TEXT + "\n" for line in out[start:end]]).encode("utf-8"))
            is_slot.append(value is not None)
            start = end
        self._templates = tuple(templates)
        self._is_slot = tuple(is_slot)
        self._is_fixed = tuple(not slot for slot in is_slot)
        self._has_slots = any(is_slot)
        self._fixed_values = list(compress(self._own_values, self._is_fixed))
        self._body = self._recorded = self._own_values = None  # no longer needed: let them go


def _slot_value(rest: Optional[str]) -> Optional[str]:
    """The value of a sample whose `rest` (the text after its series) is blanks, one space and a
    plain value: then the line's last space comes just before its value, as split_lines cuts it,
    and the line's output depends on its head alone."""
    if rest is None:
        return None
    blanks, space, value = rest.rpartition(" ")
    if space and not blanks.strip(" \t") and _PLAIN_VALUE.fullmatch(value):
        return value
    return None
