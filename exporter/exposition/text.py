"""The Prometheus 0.0.4 text grammar: reading a line's parts, and writing label values and family headers."""

from __future__ import annotations

import re
from typing import Iterable, List, Optional, Tuple

# A sample value as the 0.0.4 text format writes it (Go's ParseFloat syntax without hex forms).
# [0-9], not \d, and re.ASCII where it is compiled: other scripts' digits, or a dotless ı in "inf",
# are not numbers to Prometheus. Each value has exactly one way to match: with `[0-9]+\.?[0-9]*` a
# run of integers had exponentially many, and one bad value at the end of thousands of good ones
# kept the regular expression engine busy for good.
VALUE = r"[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:inf|infinity|nan))"
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A label pair; values allow only the three escapes the format defines (\\, \", \n).
_LABEL_PAIR = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\[\\"n])*)"[ \t]*(,|$)')
# re.ASCII: otherwise case-insensitive inf/nan would also match look-alike letters such as the
# dotless ı, which Prometheus' parser rejects.
_VALUE_AND_TIMESTAMP = re.compile(rf"[ \t]+{VALUE}(?:[ \t]+[-+]?[0-9]+)?[ \t]*", re.ASCII)
# HELP text allows only the escapes \\ and \n; anything else makes the Go parser reject the scrape.
HELP_LINE = re.compile(r"# HELP[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t](?:[^\\]|\\[\\n])*)?")
TYPE_LINE = re.compile(r"# TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]+(counter|gauge|histogram|summary|untyped)[ \t]*")
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
    if text[:1] == " " and text[1:].isdigit() and text.isascii():
        return True
    return _VALUE_AND_TIMESTAMP.fullmatch(text) is not None


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
        if not match or match.group(1) in names:
            return None
        names.add(match.group(1))
        pairs.append((match.group(1), match.group(2), label_text[match.start(1) : match.end(2) + 1]))
        position = match.end()
        if not match.group(3) and position < end:
            return None
    return pairs


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_label_pairs(pairs: LabelPairs) -> str:
    """`name="value",…` with every value escaped; "" for no pairs."""
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def family_header(name: str, help_text: str, metric_type: str = "gauge") -> str:
    """The `# HELP` and `# TYPE` lines of a family this exporter writes, each ending in a newline."""
    # HELP text has its own two escapes (no quote): a raw newline would end the line early.
    escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {metric_type}\n"
