"""What a body being written has said so far about each metric family, as client_golang's text parser tracks it."""

from __future__ import annotations

from typing import Dict, Optional, Set, Tuple

# The sample names a summary (histogram) family `x` takes in besides `x` itself: `x_sum`, `x_count`
# (and `x_bucket`).
_SUMMARY_SUFFIXES = ("sum", "count")
_HISTOGRAM_SUFFIXES = ("sum", "count", "bucket")


class FamilyRecord:
    """The families of one written body, so that no line is written that expfmt would refuse.

    expfmt gathers lines into families by name, in order: a line of `x_sum` or `x_count` joins `x`
    when `x` is already typed summary (`x_bucket` too for a histogram) and no family `x_sum` was
    started first. It refuses a second HELP or TYPE line of a family, a TYPE line after the family's
    first sample (which made it untyped), and in a summary (histogram) a quantile (le) label that is
    not a number. Prometheus' own parser minds none of this, so these are the consumers' strictest.
    """

    def __init__(self) -> None:
        self._types: Dict[str, Optional[str]] = {}  # family name → its type; None while only HELP named it
        self._helped: Set[str] = set()
        self.described: Set[Tuple[str, str]] = set()  # (kind, name) of the HELP/TYPE lines written
        self.sampled: Set[str] = set()  # the names of the samples written

    def _family_of(self, name: str) -> Optional[str]:
        """The family a line of `name` joins; None for a family not yet started."""
        types = self._types
        if name in types:
            return name
        base, _, suffix = name.rpartition("_")
        if base and suffix in _HISTOGRAM_SUFFIXES:
            kind = types.get(base)
            if kind == "histogram" or (kind == "summary" and suffix in _SUMMARY_SUFFIXES):
                return base
        return None

    def _start(self, name: str) -> str:
        family = self._family_of(name)
        if family is None:
            family = name
            self._types[name] = None
        return family

    def note_sample(self, name: str) -> None:
        """A sample of `name` was written. Only its first counts: a name joins the same family each time
        once its first sample did."""
        if name in self.sampled:
            return
        self.sampled.add(name)
        family = self._start(name)
        if self._types[family] is None:
            self._types[family] = "untyped"

    def refuses_bounds(self, name: str, odd_bounds: Tuple[str, ...]) -> bool:
        """Whether a sample of `name` whose labels `odd_bounds` are not numbers may not be written."""
        family = self._family_of(name)
        kind = None if family is None else self._types[family]
        return ("quantile" in odd_bounds and kind == "summary") or ("le" in odd_bounds and kind == "histogram")

    def accepts(self, kind: str, name: str, metric_type: str = "") -> bool:
        """Whether a HELP or TYPE line (`kind`) of `name` may be written; it is recorded if so."""
        family = self._family_of(name)
        if kind == "HELP":
            if family in self._helped:
                return False
            self._helped.add(self._start(name))
        else:
            if family is not None and self._types[family] is not None:
                return False  # a second TYPE, or one after the family's samples
            self._types[self._start(name)] = metric_type
        self.described.add((kind, name))
        return True
