"""exporter.exposition.template: the refill's value check and the rewriter's patience with templates that never fit."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.core.mapping import build_mapping
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.line_rule import are_plain_values
from exporter.exposition.text import VALUE, is_finite_or_inf
from exporter.sources.kubelet import AllocatedDevice as Device
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS

# Every character the fast decimal check and the regular expression treat differently, so that
# hypothesis builds values near each boundary: digits, dots, signs, exponents, inf/nan letters, blanks.
value_characters = st.sampled_from(list("0123456789.") * 4 + list("+-eEinfatyINFATY _\t\x00١ı"))
values = st.text(value_characters, max_size=8).map(lambda text: text.encode("utf-8"))
PLAIN_VALUE = re.compile(VALUE, re.ASCII)  # the value syntax itself (re.ASCII: see VALUE)


def reference(items) -> bool:
    """The value syntax, within a double's range (`1E309` is a VALUE that Go's parsers refuse)."""
    texts = [item.decode("utf-8") for item in items]
    return all(PLAIN_VALUE.fullmatch(text) and is_finite_or_inf(text) for text in texts)


@settings(max_examples=2000, deadline=None)
@given(st.lists(values, min_size=1, max_size=6))
def test_the_value_check_agrees_with_the_value_syntax(items):
    assert are_plain_values(tuple(items)) == reference(items)


def test_the_decimal_shortcut_refuses_what_is_not_one_decimal():
    for bad in ([b""], [b"."], [b"1.2.3"], [b"1", b"..", b"2"], [b"1", b""], [b"", b"1"], [b"1..2"]):
        assert not are_plain_values(tuple(bad)), bad
    for good in ([b"5."], [b".5"], [b"0"], [b"12", b"3.25", b"7"], [b"-1", b"1e3", b"NaN", b"+Inf"]):
        assert are_plain_values(tuple(good)), good


MAPPING = build_mapping(DEVICE_FORMS, [Device("ns", "p", "c", "nvidia.com/gpu", "0")])


def body(value: int, timestamp: int = 0) -> bytes:
    stamp = f" {timestamp}" if timestamp else ""
    return "".join(f'X{{gpu="0",i="{i}"}} {value + i}{stamp}\n' for i in range(50)).encode()


def test_a_template_is_not_rebuilt_on_every_scrape_of_an_upstream_with_timestamps():
    """Lines with timestamps are fixed text, so every body differs outside the values and no
    template fits; building one costs about a rewrite, so they are tried less and less often."""
    rewriter = Rewriter(MAPPING)
    for scrape in range(200):
        result = rewriter.rewrite(body(scrape, timestamp=1_700_000_000_000 + scrape))
        assert result == Rewriter(MAPPING).rewrite(body(scrape, timestamp=1_700_000_000_000 + scrape))
    assert rewriter.refills == 0
    # 1 + 2 + 4 + 8 + 16 + 32 bodies waited after the first six wasted builds, then 32 after each.
    assert 6 <= rewriter.wasted_template_builds <= 10


def test_refills_resume_once_an_upstream_stops_changing_more_than_values():
    rewriter = Rewriter(MAPPING)
    for scrape in range(100):
        rewriter.rewrite(body(scrape, timestamp=1_700_000_000_000 + scrape))
    steady = [rewriter.rewrite(body(scrape)) for scrape in range(100, 200)]
    assert steady[-1] == Rewriter(MAPPING).rewrite(body(199))
    assert rewriter.refills >= 100 - 32 - 2  # at most one full wait, a rewrite and a build


def test_a_template_that_fits_is_built_once_and_refilled_after():
    rewriter = Rewriter(MAPPING)
    for scrape in range(20):
        rewriter.rewrite(body(scrape))
    assert (rewriter.refills, rewriter.wasted_template_builds) == (19, 0)


@pytest.mark.parametrize("lines, refilled", [
    # "} " inside a label value: the value does not follow the first "} ", so the line is fixed text.
    (['X{gpu="0",a="} "} {v}', 'X{gpu="0",a="b"} {v}'], False),
    (['# HELP X has } and } in it', 'X{gpu="0"} {v}'], True),  # a comment's "} " is fixed text
    (['X {v}', 'X{gpu="0"} {v}'], False),  # a sample without labels is fixed text too
    (['X{gpu="0"} 1', 'X{gpu="0",i="1"} {v}'], True),  # fixed values that do not change are fine
    (['X{gpu="0"} {v}', 'Y{gpu="0"} {v}', 'last{gpu="0"} 7'], True),  # no newline after the last line
])
def test_what_counts_as_a_value_to_refill(lines, refilled):
    def text(value):
        return "\n".join(lines).replace("{v}", value).encode() + (b"" if "last" in lines[-1] else b"\n")
    rewriter = Rewriter(MAPPING)
    rewriter.rewrite(text("1"))
    result = rewriter.rewrite(text("2"))
    assert result == Rewriter(MAPPING).rewrite(text("2"))
    assert rewriter.refills == int(refilled)
