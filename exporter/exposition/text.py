"""The Prometheus 0.0.4 text grammar: reading a line's parts, and writing label values and family headers."""

from __future__ import annotations

import math
import re
from typing import Iterable, List, Optional, Tuple

# A sample value as both consumers' parsers read it: Go's strconv.ParseFloat without hex forms or
# underscores (Prometheus' textparse and client_golang's expfmt refuse "p" and "_"). A sign goes with
# numbers and inf only: Go reads "+Inf" but not "+NaN". [0-9], not \d, and re.ASCII where it is
# compiled: other scripts' digits, or a dotless ı in "inf", are not numbers to Prometheus. Each value
# has exactly one way to match: with `[0-9]+\.?[0-9]*` a run of integers had exponentially many, and
# one bad value at the end of thousands of good ones kept the regular expression engine busy for good.
VALUE = r"(?:[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:inf|infinity))|(?i:nan))"
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A label pair; values allow only the three escapes the format defines (\\, \", \n), all that expfmt reads.
_LABEL_PAIR = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\[\\"n])*)"[ \t]*(,|$)')
# ` value[ timestamp]`, with nothing after: expfmt reads a blank after the value as the start of a
# timestamp and one after the timestamp as spurious text. A timestamp is digits only: Prometheus'
# lexer has no sign for it (`-2` fails the scrape). re.ASCII: otherwise case-insensitive inf/nan
# would also match look-alike letters such as the dotless ı, which Prometheus' parser rejects.
_VALUE_AND_TIMESTAMP = re.compile(rf"[ \t]+({VALUE})(?:[ \t]+([0-9]+))?", re.ASCII)
_GO_FLOAT = re.compile(VALUE, re.ASCII)
_INT64_MAX = 2**63 - 1
# Shorter plain integers are always finite doubles (the largest double has 309 digits).
_SHORT_NUMBER = 300
# HELP text allows only the escapes \\ and \n; anything else makes expfmt reject the text.
HELP_LINE = re.compile(r"# HELP[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t](?:[^\\]|\\[\\n])*)?")
# Exactly one blank between the name and the type, and nothing after it: Prometheus takes all that
# follows the name's first blank as the type (" gauge" and "gauge " are unknown types to it).
TYPE_LINE = re.compile(r"# TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t](counter|gauge|histogram|summary|untyped)")
UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape

LabelPairs = Iterable[Tuple[str, str]]  # (label name, value as it is, unescaped)


def decode(body: bytes) -> Tuple[str, bool]:
    """Decode as UTF-8, and whether some bytes were not: they survive as surrogates (UNDECODABLE) so
    that their lines can be dropped."""
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return body.decode("utf-8", errors="surrogateescape"), True


def is_value(text: str) -> bool:
    """Whether text after the labels is ` value[ timestamp]`; most dcgm values are plain integers,
    which are recognised without the regular expression (the same answer, ~3x faster)."""
    # Under 300 characters (_SHORT_NUMBER, written out: this runs once a line) an integer cannot overflow.
    if text[:1] == " " and text[1:].isdigit() and text.isascii() and len(text) < 300:
        return True
    match = _VALUE_AND_TIMESTAMP.fullmatch(text)
    if match is None:
        return False
    value, timestamp = match.groups()
    # Go reads both as 64-bit numbers and fails the whole text on one out of range.
    return is_finite_or_inf(value) and (timestamp is None or len(timestamp) < 19 or int(timestamp) <= _INT64_MAX)


def is_finite_or_inf(value: str) -> bool:
    """False for a VALUE that overflows a double (`1e400`): Go's ParseFloat returns an error for it,
    where Python gives inf. Only long numbers and exponents can overflow."""
    if len(value) < _SHORT_NUMBER and "e" not in value and "E" not in value:
        return True
    return not math.isinf(float(value))


def is_float(text: str) -> bool:
    """Whether a label value is a number to Go's parsers (a summary's quantile, a histogram's le)."""
    return _GO_FLOAT.fullmatch(text) is not None and is_finite_or_inf(text)


def cut_short(tail: str) -> int:
    """1 when what follows a body's last newline is a line cut short (to be dropped and counted)."""
    return 0 if not tail or tail.isspace() else 1


def parse_label_pairs(label_text: str) -> Optional[List[Tuple[str, str, str]]]:
    """Split `a="1",b="2"` into (name, raw value, original text) triples; None if it is not valid."""
    pairs = []
    names = set()
    position, end = 0, len(label_text)
    if not label_text.strip(" \t"):
        return pairs  # `{}` or `{ }`: no labels
    while position < end:
        match = _LABEL_PAIR.match(label_text, position)
        # `__name__` is the metric name's own label: expfmt refuses it, Prometheus fails the scrape.
        if not match or match.group(1) in names or match.group(1) == "__name__":
            return None
        names.add(match.group(1))
        pairs.append((match.group(1), match.group(2), label_text[match.start(1) : match.end(2) + 1]))
        position = match.end()
        if not match.group(3) and position < end:
            return None
    return pairs


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_ESCAPE = re.compile(r'\\([\\"n])')


def unescape_label_value(raw: str) -> str:
    """A label value as `escape_label_value` wrote it (a raw value of parse_label_pairs), its escapes undone."""
    return _ESCAPE.sub(lambda match: "\n" if match.group(1) == "n" else match.group(1), raw) if "\\" in raw else raw


def render_label_pairs(pairs: LabelPairs) -> str:
    """`name="value",…` with every value escaped; "" for no pairs."""
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def family_header(name: str, help_text: str, metric_type: str = "gauge") -> str:
    """The `# HELP` and `# TYPE` lines of a family this exporter writes, each ending in a newline."""
    # HELP text has its own two escapes (no quote): a raw newline would end the line early.
    escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {metric_type}\n"
