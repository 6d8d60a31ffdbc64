"""Properties of the exposition rewriter for generated exposition text and generated kubelet mappings."""

from __future__ import annotations

from typing import Dict, List, Tuple

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition.labels import UPSTREAM_OWNER_LABELS
from exporter.exposition.rewriter import Rewriter
from support.exposition_strategies import (
    SETTINGS,
    appended_owner,
    assert_no_duplicates,
    expected_owners,
    families,
    mappings,
    output_samples,
    owner_pairs,
    render,
    styles,
    value_texts,
)

# ---------------------------------------------------------------- properties


@SETTINGS
@given(families(), mappings, styles)
def test_every_sample_comes_back_unchanged_with_its_owners(document, mapping, style):
    text, samples = document
    result = Rewriter(mapping, style).rewrite(text.encode())
    out = result.text.decode()
    assert result.malformed == 0, "a valid line was dropped"
    list(text_string_to_metric_families(out))  # raises on anything prometheus_client cannot read
    written = output_samples(out)
    assert_no_duplicates(written)
    by_series: Dict[Tuple[str, str], List[Tuple[List[Tuple[str, str]], str]]] = {}
    for name, pairs, rest in written:
        by_series.setdefault(name, []).append((pairs, rest))
    for sample in samples:
        kept = sample.non_owner()
        owners = expected_owners(sample, mapping)
        wanted = [kept + owner_pairs(owner, style) for owner in owners] or [kept]
        found = [pairs for pairs, rest in by_series.get(sample.name, [])
                 if pairs[: len(kept)] == kept and rest == sample.rest() and appended_owner(pairs[len(kept):], style)]
        assert sorted(found) == sorted(wanted), f"{sample} came back as {found}, wanted {wanted}"
    assert len(written) == sum(max(1, len(expected_owners(s, mapping))) for s in samples)


@SETTINGS
@given(families(), mappings, styles, st.data())
def test_repeated_lines_never_repeat_a_series(document, mapping, style, data):
    """An upstream repeating lines, or copying samples per pod (dcgm-exporter -k), still gives each series once."""
    text, samples = document
    lines = text.split("\n")[:-1]  # not splitlines(): U+0085 and friends may sit inside label values
    extra = data.draw(st.lists(st.sampled_from(lines), max_size=6))
    copies = [render(s._replace(labels=[(n, "other") if n in UPSTREAM_OWNER_LABELS else (n, v) for n, v in s.labels]),
                     ",", False) for s in data.draw(st.lists(st.sampled_from(samples), max_size=4))] if samples else []
    # Every line ends with "\n": a last line without it is cut short, dropped and counted.
    result = Rewriter(mapping, style).rewrite("".join(line + "\n" for line in lines + extra + copies).encode())
    out = result.text.decode()
    list(text_string_to_metric_families(out))
    assert_no_duplicates(output_samples(out))
    help_type = [line for line in out.split("\n") if line.startswith(("# HELP", "# TYPE"))]
    assert len(help_type) == len(set(help_type))
    assert result.malformed <= len(extra) + len(copies)


@SETTINGS
@given(st.binary(max_size=3000), mappings, styles)
def test_arbitrary_bytes_never_raise(data, mapping, style):
    result = Rewriter(mapping, style).rewrite(data)
    result.text.decode("utf-8")  # always valid UTF-8 out
    assert result.malformed <= data.count(b"\n") + 1


@SETTINGS
@given(families(), mappings, styles, st.data())
def test_damaged_text_never_raises_and_keeps_the_rest_readable(document, mapping, style, data):
    """Real text with bytes cut, inserted or replaced: never raises, the output still parses."""
    body = bytearray(document[0].encode())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body)))
        change = data.draw(st.sampled_from(["cut", "insert", "replace"]))
        junk = data.draw(st.binary(min_size=1, max_size=8))
        if change == "cut":
            del body[position:position + len(junk)]
        elif change == "insert":
            body[position:position] = junk
        else:
            body[position:position + len(junk)] = junk
    out = Rewriter(mapping, style).rewrite(bytes(body)).text.decode("utf-8")
    list(text_string_to_metric_families(out))
    assert_no_duplicates(output_samples(out))


# Tokens put where a line's value was: plain values, which a warm rewriter refills into its last
# rewrite, and everything that must send it back to the line-by-line way.
NEXT_VALUES = st.one_of(
    value_texts,
    st.sampled_from(["", "1_0", "\t1", "1\t", "1.2.3", ".", "e5", "x", "\x00", "1 2", "ınf", "١", "0x1p3", "1e"]),
)


@SETTINGS
@given(families(), mappings, styles, st.data())
def test_a_warm_rewriter_answers_exactly_as_a_fresh_one(document, mapping, style, data):
    """The template path (exporter.exposition.template) is an optimisation only: after any earlier body, the
    next body's rewrite (text, malformed count, identities) is what a fresh Rewriter makes of it."""
    first = document[0]
    lines = first.split("\n")
    for index, line in enumerate(lines):
        if line and not line.startswith("#") and data.draw(st.booleans()):
            lines[index] = line.rpartition(" ")[0] + " " + data.draw(NEXT_VALUES)
    second = "\n".join(lines)
    if data.draw(st.booleans()):  # sometimes also a line more or less, or a comment changed
        position = data.draw(st.integers(0, len(lines)))
        second = "\n".join(lines[:position] + [data.draw(st.sampled_from(["# HELP x y", "", "x 1", "x{} 2 3"]))]
                           + lines[position + 1:])
    warm = Rewriter(mapping, style)
    warm.rewrite(first.encode())
    assert warm.rewrite(second.encode()) == Rewriter(mapping, style).rewrite(second.encode())
