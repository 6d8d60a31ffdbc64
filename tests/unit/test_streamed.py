"""The streamed rewrite of large answers gives exactly what the line-by-line rewrite gives."""

from __future__ import annotations

import ast
import gc
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from exporter.core.mapping import build_mapping
from exporter.exposition import streamed
from exporter.exposition.rewriter import STREAM_MIN_BYTES, STREAM_MIN_LINES, Rewriter
from exporter.exposition.series import SeriesBuilder
from exporter.exposition.streamed import rewrite_streamed
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.exposition_strategies import SETTINGS, families, mappings, styles


def both(mapping, style: str, body: bytes, slice_bytes: int):
    streamed = rewrite_streamed(SeriesBuilder(mapping, style), body, slice_bytes)
    # A new rewriter has no template, and these bodies are far below STREAM_MIN_BYTES and
    # STREAM_MIN_LINES: its first rewrite is the line-by-line one.
    lined = Rewriter(mapping, style).rewrite(body)
    return streamed, lined


# What a rewriter may keep of a streamed body once its answer is let go: nothing per line (the template
# and cached series of the large bodies below are tens of thousands of blocks).
NOTHING_PER_LINE_BLOCKS = 2000


class KeptBlocks:
    """Counts the memory blocks allocated inside `with` and still held after it (sys.getallocatedblocks:
    cheap, unlike tracing every allocation of a rewrite)."""

    def __enter__(self) -> "KeptBlocks":
        gc.collect()
        self._before = sys.getallocatedblocks()
        return self

    def __exit__(self, *exc_info) -> None:
        gc.collect()
        self.count = sys.getallocatedblocks() - self._before


@SETTINGS
@given(families(), mappings, styles, st.data())
def test_streamed_equals_line_by_line(document, mapping, style, data):
    text, _ = document
    lines = text.split("\n")[:-1]
    extra = data.draw(st.lists(st.sampled_from(lines), max_size=4)) if lines else []
    tail = data.draw(st.sampled_from(["", "cut_short 7", "  ", "# HELP x"]))
    body = ("".join(line + "\n" for line in lines + extra) + tail).encode()
    streamed, lined = both(mapping, style, body, data.draw(st.integers(1, 200)))
    assert streamed == lined


@SETTINGS
@given(st.binary(max_size=2000), mappings, styles, st.integers(1, 300))
def test_streamed_equals_line_by_line_on_any_bytes(data, mapping, style, slice_bytes):
    streamed, lined = both(mapping, style, data, slice_bytes)
    assert streamed == lined


def test_a_body_past_the_line_limit_takes_the_streamed_way_and_keeps_no_template():
    uuid = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
    mapping = build_mapping(DEVICE_FORMS, [AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", uuid)])
    lines = [f'm{{UUID="{uuid}",i="{number}"}} {number}' for number in range(STREAM_MIN_LINES + 1)]
    body = ("\n".join(lines) + "\n").encode()
    owners = 'namespace="ns",pod="p",container="c"'
    expected = "".join(line.replace("} ", "," + owners + "} ") + "\n" for line in lines)
    rewriter = Rewriter(mapping)
    with KeptBlocks() as kept:
        result = rewriter.rewrite(body)
        assert result.text.decode() == expected
        assert result.malformed == 0 and [identity.uuid for identity in result.identities] == [uuid]
        del result
    assert kept.count < NOTHING_PER_LINE_BLOCKS  # nothing per line kept


def large_body(label_sets: int, value: int) -> bytes:
    """Over STREAM_MIN_BYTES and under STREAM_MIN_LINES: long lines over `label_sets` label sets."""
    pad = "x" * 200
    lines = [f'family_{number % 97}_{number // (97 * label_sets)}{{gpu="{number % label_sets}",pad="{pad}"}} {value + number}'
             for number in range(20_000)]
    body = ("\n".join(lines) + "\n").encode()
    assert len(body) > STREAM_MIN_BYTES and len(lines) < STREAM_MIN_LINES
    return body


def test_a_large_body_whose_lines_share_label_sets_keeps_per_line_state_and_refills():
    """Like a 25,600-series dcgm-exporter node (6 MB, one label set per GPU or MIG instance)."""
    mapping = build_mapping(DEVICE_FORMS, [AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", "0")])
    rewriter = Rewriter(mapping)
    with KeptBlocks() as kept:
        rewriter.rewrite(large_body(256, 1))
    assert kept.count > NOTHING_PER_LINE_BLOCKS  # the count the streamed cases rely on sees per-line state
    second = rewriter.rewrite(large_body(256, 2))
    assert rewriter.refills == 1
    assert second == rewrite_streamed(SeriesBuilder(mapping), large_body(256, 2))


def test_a_large_body_of_unique_label_sets_is_streamed_after_all():
    """Like kube-state-metrics behind a wrong --dcgm.url: ~1 KiB more a line for its label sets."""
    mapping = build_mapping(DEVICE_FORMS, [AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", "0")])
    rewriter = Rewriter(mapping)
    with KeptBlocks() as kept:
        result = rewriter.rewrite(large_body(20_000, 1))
        assert result == rewrite_streamed(SeriesBuilder(mapping), large_body(20_000, 1))
        del result
    assert kept.count < NOTHING_PER_LINE_BLOCKS


def test_the_streamed_rewrite_uses_only_public_names_of_the_exposition():
    """It once imported seven private names of the rewriter and called two of its private methods:
    a change inside the line rewrite then broke the streamed one, and the two modules imported each other."""
    tree = ast.parse(Path(streamed.__file__).read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("exporter.") for alias in node.names]
    private_calls = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                     and node.attr.startswith("_") and not node.attr.startswith("__")
                     and not (isinstance(node.value, ast.Name) and node.value.id == "self")]
    assert imported and not [name for name in imported if name.startswith("_")]
    assert not [name for name in imported if name == "Rewriter"] and private_calls == []
