"""Whether an upstream line may be served: the one rule the line-by-line, streamed and refill rewrites apply.

Every line served must be read alike by Prometheus 2.42's scrape parser and client_golang's text
parser (expfmt): one refusing a line fails the whole scrape (Prometheus) or the whole text (expfmt).
A line's own grammar is in exporter.exposition.text, what earlier lines of the body allow in
exporter.exposition.metadata.FamilyRecord; this module puts them together once:

- `read_line` judges one decoded line; the line-by-line rewrite (exporter.exposition.rewriter) and
  the streamed one (exporter.exposition.streamed) call it for every line, and differ only in what
  they keep between lines (a series is served once: each keeps its own record of those written);
- `are_plain_values` is the same rule for the values a refill (exporter.exposition.template) puts
  back between a body's unchanged text, all at once: it accepts a subset of what `read_line`
  accepts after the same series, and a value it refuses sends the body the line-by-line way.
"""

from __future__ import annotations

import re
from typing import Callable, List, Optional, Sequence, Tuple

from exporter.exposition.metadata import FamilyRecord
from exporter.exposition.series import Series, is_reserved_name, split_unlabelled
from exporter.exposition.text import HELP_LINE, TYPE_LINE, VALUE, is_finite_or_inf, is_value

# A sample's head (`name{labels}`) → its Series, None when the head breaks the format; a rewrite's
# cache or SeriesBuilder.build_series.
SeriesOf = Callable[[str], Optional[Series]]
# (series, rest, dropped): see read_line
Verdict = Tuple[Optional[Series], Optional[str], int]

_SKIPPED: Verdict = (None, None, 0)
_UNDECODABLE: Verdict = (None, None, 1)


def read_line(line: Optional[str], series_of: SeriesOf, record: FamilyRecord, out: List[str]) -> Verdict:
    """What one upstream line, decoded (None: its bytes were not UTF-8), may be served as.

    - a sample both parsers accept: (its series, the text after the series, 0); the caller writes it
      unless it repeats a series already written, and then records it (`record.note_sample`);
    - a comment: put in `out` when both accept it: (None, None, 1 when it was dropped else 0);
    - a blank line: (None, None, 0);
    - anything else: (None, the text after the series, 1): dropped and counted.
    """
    if line is None:
        return _UNDECODABLE
    if not line or line.isspace():
        return _SKIPPED
    if line[0] in " \t":
        line = line.lstrip(" \t")  # the format allows leading blanks; Prometheus skips them
    if line[0] == "#":
        return None, None, copy_comment(line, record, out)
    close = line.rfind("}")
    if close < 0:
        series, rest = split_unlabelled(line)
    else:
        series, rest = series_of(line[: close + 1]), line[close + 1 :]
    if series is None or not is_value(rest):
        return None, rest, 1
    if series.odd_bounds and record.refuses_bounds(series.name, series.odd_bounds):
        return None, rest, 1
    return series, rest, 0


def copy_comment(line: str, record: FamilyRecord, out: List[str]) -> int:
    """Keep HELP/TYPE lines as written; return 1 when the line must be dropped as malformed.

    `record` holds what the lines written so far said about their families; it is updated.
    """
    if line.startswith(("# HELP ", "# HELP\t")):
        match = HELP_LINE.fullmatch(line)
        kind = "HELP"
    elif line.startswith(("# TYPE ", "# TYPE\t")):
        match = TYPE_LINE.fullmatch(line)
        kind = "TYPE"
    elif _read_as_metadata(line):
        # `# HELP` with nothing after it (an upstream line cut short), or `#\x00 TYPE x auge`, is a
        # plain comment to Prometheus, but prometheus_client's parser reads it as a HELP/TYPE line and
        # fails the whole text on it: dropped like any line that breaks a parser.
        return 1
    else:
        out.append(line)  # any other comment is allowed by the format and harmless
        return 0
    if not match or is_reserved_name(match.group(1)):
        return 1
    name = match.group(1)
    # A family described twice (an upstream repeating itself) would fail every parser downstream;
    # the first description wins (its samples are kept unless they repeat a series).
    if (kind, name) in record.described:
        return 0
    # A TYPE line after its family's samples, or a second HELP or TYPE of a family under another name
    # (`x_sum` of a summary `x`): expfmt rejects the text for it (see FamilyRecord).
    if not record.accepts(kind, name, match.group(2) if kind == "TYPE" else ""):
        return 1
    out.append(line)
    return 0


# prometheus_client splits a comment on ASCII whitespace and takes its second token as the keyword,
# whatever the first token is ("#", "#\x00", "#x"): the line `#\x00 TYPE x auge` is a TYPE line to it.
_ASCII_BLANKS = re.compile(r"[ \t\r\x0b\x0c]+")
_METADATA_KEYWORDS = (["HELP"], ["TYPE"])


def _read_as_metadata(line: str) -> bool:
    """Whether some parser reads this comment (no valid HELP/TYPE line) as a HELP or TYPE line."""
    return (line[1:].split(None, 1)[:1] in _METADATA_KEYWORDS
            or _ASCII_BLANKS.split(line.strip(), 2)[1:2] in _METADATA_KEYWORDS)


# The values of lines `name{labels} value`, one a line: VALUE, the very syntax is_value reads.
_PLAIN_VALUE_LINES = re.compile(rb"(?:%s\n)*%s" % (VALUE.encode(), VALUE.encode()))
_TWO_DOTS = re.compile(rb"\.[0-9]*\.")
_EXPONENT_VALUES = re.compile(rb"[^\n]*[eE][^\n]*")


def are_plain_values(values: Sequence[bytes]) -> bool:
    """Whether read_line accepts every item as the whole text after a series, one space before it
    (` value`, as dcgm-exporter writes each sample): VALUE, within a double's range.

    dcgm-exporter writes integers and decimals (`%f`) almost only, so those are told in a few
    C-level passes over the values joined (a run of digits with at most one dot, not the dot alone,
    is a VALUE, and none of the at most 299 bytes a refill takes overflows); the regular expression,
    which costs ~0.15 µs a value even when it matches, only sees bodies with signs, exponents, inf or
    nan.
    """
    joined = b"\n".join(values)
    if joined.translate(None, b"0123456789.\n"):
        if _PLAIN_VALUE_LINES.fullmatch(joined) is None:
            return False
        # `1e400` is a VALUE that Go's parsers refuse (out of range), where Python reads inf.
        return not (b"e" in joined or b"E" in joined) or all(
            is_finite_or_inf(value.decode("ascii")) for value in _EXPONENT_VALUES.findall(joined))
    framed = b"\n" + joined + b"\n"  # so that the first and last value are framed like the rest
    return not (b"\n\n" in framed or b"\n.\n" in framed or _TWO_DOTS.search(joined))
