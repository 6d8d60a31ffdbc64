"""One rule decides whether an upstream line is served: the line-by-line, streamed and refill rewrites all follow it."""

from __future__ import annotations

from typing import List, Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.core.mapping import build_mapping
from exporter.exposition.line_rule import read_line
from exporter.exposition.metadata import FamilyRecord
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.series import SeriesBuilder
from exporter.exposition.streamed import rewrite_streamed
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device

UUID0 = "GPU-be839661-c0f5-7452-284b-b875666df60c"
LABELS = f'gpu="0",UUID="{UUID0}"'
SAMPLE = f"DCGM_X{{{LABELS}}}"
DEVICES = [Device("n", "p", "c", "nvidia.com/gpu", UUID0)]
BEFORE = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    f'DCGM_FI_DEV_GPU_TEMP{{{LABELS},device="nvidia0"}} 41\n'
    "# TYPE DCGM_S summary\n"
).encode()
AFTER = (
    "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
    "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
    f'DCGM_FI_DEV_POWER_USAGE{{{LABELS},device="nvidia0"}} 71.5\n'
).encode()

# Good and bad lines of every kind a parser minds: values, timestamps, names, labels, comments, bytes.
# (Whether a series repeats one written before is each rewrite's own record, tested with it.)
VALUES = ["1", "0", "71.5", "1.", ".5", "+5", "-5", "1e3", "1E-400", "1.7976931348623157e308", "1e309", "-1E+309",
          "9" * 299, "9" * 400, "+Inf", "-inf", "Infinity", "NaN", "nan", "+NaN", "-nan", ".", "1.2.3", "1..2", "",
          "1_0", "0x1p3", "١", "ınf", "e5", "1e", "5\r", "\t5", "5 ", "5\t", "1 2 3", "x"]
TIMESTAMPS = ["0", "1700000000000", "9223372036854775807", "9223372036854775808", "0002", "-2", "+2", "1.5"]
LINES: List[bytes] = (
    [f"{SAMPLE} {value}".encode() for value in VALUES]
    + [f"{SAMPLE} 1 {timestamp}".encode() for timestamp in TIMESTAMPS]
    + [line.encode() for line in [
        f"{SAMPLE}\t1", f"{SAMPLE}  1", f"  {SAMPLE} 1", f"\t{SAMPLE} 1", f"{SAMPLE}1", f"{SAMPLE}",
        f"DCGM_X {{{LABELS}}} 1", f'DCGM_X{{{LABELS},x="a\x00b"}} 1', f'DCGM_X{{{LABELS},x="a\\qb"}} 1',
        f'DCGM_X{{{LABELS},x="a\\"b\\\\c\\nd"}} 1', f'DCGM_X{{{LABELS},gpu="1"}} 1',
        f'DCGM_X{{__name__="y",{LABELS}}} 1',
        f"DCGM_X{{{LABELS},}} 1", f'DCGM_X{{{LABELS} x="1"}} 1', "DCGM_X{} 1", "DCGM_X 1", "DCGM_X 1 2", "0DCGM 1",
        "DCGM_X} 1", "pod_gpu_exporter_dcgm_up 1", f"pod_gpu_container_allocated_gpus{{{LABELS}}} 1",
        f'DCGM_S{{{LABELS},quantile="0.5"}} 1', f'DCGM_S{{{LABELS},quantile="x"}} 1',
        f'DCGM_S_sum{{{LABELS},quantile="x"}} 1', f'DCGM_X{{{LABELS},le="x"}} 1',
        "", " ", "\t", "\x0c", "# a comment", "#", "# HELP", "# TYPE", "# HELP DCGM_X", "# HELP DCGM_X text",
        '# HELP DCGM_X say \\"hi\\"', "# HELP DCGM_X text \\", "# HELP DCGM_FI_DEV_GPU_TEMP again",
        "# TYPE DCGM_X gauge", "# TYPE DCGM_X\tgauge", "# TYPE DCGM_X  gauge", "# TYPE DCGM_X gauge ",
        "# TYPE DCGM_X GAUGE", "# TYPE DCGM_X", "# TYPE DCGM_FI_DEV_GPU_TEMP counter", "# TYPE DCGM_S_count gauge",
        "#\x00 TYPE DCGM_X auge", "#x HELP DCGM_X", "#\x00\tTYPE : gauge",
        "# TYPE pod_gpu_exporter_dcgm_up gauge", "  # TYPE DCGM_X gauge",
    ]]
    + [f"{SAMPLE} 1".encode() + raw for raw in (b"\xff", b"\xc3", b"\xed\xa0\x80")]
    + [f'DCGM_X{{{LABELS},x="'.encode() + raw + b'"} 1' for raw in (b"\xff", b"\xc3\xa9")]
)


def mapping():
    return build_mapping(DEVICE_FORMS, DEVICES)


def by_the_rule(line: bytes) -> Optional[List[str]]:
    """What read_line serves of `line` after BEFORE's lines: the lines written, or None when it is dropped."""
    builder, record, out = SeriesBuilder(mapping()), FamilyRecord(), []
    for earlier in BEFORE.decode().splitlines():
        series, rest, _ = read_line(earlier, builder.build_series, record, out)
        if series is not None:
            record.note_sample(series.name)
    try:
        text: Optional[str] = line.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    written = len(out)
    series, rest, dropped = read_line(text, builder.build_series, record, out)
    if dropped:
        return None
    return out[written:] + ([] if series is None else series.lines(rest))


def line_by_line(body: bytes):
    return Rewriter(mapping()).rewrite(body)


def streamed(body: bytes):
    return rewrite_streamed(SeriesBuilder(mapping()), body, 64)


def refilled(body: bytes):
    """The rewrite of body by a rewriter holding a template of body with a plain value on the line
    tested, so that the refill judges the line's value itself: it serves it, or sends the body the
    line-by-line way."""
    line = body[len(BEFORE) : -len(AFTER) - 1]
    plain = line[: line.rfind(b"} ") + 2] + b"1" if b"} " in line else line
    rewriter = Rewriter(mapping())
    for _ in range(2):  # the second one builds the template
        rewriter.rewrite(BEFORE + plain + b"\n" + AFTER)
    return rewriter.rewrite(body)


@pytest.mark.parametrize("rewrite", [line_by_line, streamed, refilled])
@pytest.mark.parametrize("line", LINES, ids=[repr(line)[2:-1][:60] for line in LINES])
def test_every_path_serves_or_drops_a_line_as_the_rule_decides(line, rewrite):
    served = by_the_rule(line)
    result = rewrite(BEFORE + line + b"\n" + AFTER)
    without = line_by_line(BEFORE + AFTER)
    assert result.malformed == without.malformed + (served is None)
    after = AFTER.decode().split("\n")[0]
    lines = "".join(f"{out}\n" for out in served or [])
    assert result.text.decode() == without.text.decode().replace(after, lines + after)


@pytest.mark.parametrize("comment", [b"#\x00 TYPE : auge", b"#x HELP DCGM_X", b"#\x00\x0bTYPE DCGM_X gauge"])
def test_a_comment_prometheus_client_reads_as_help_or_type_is_dropped_and_counted(comment):
    """prometheus_client takes a comment's second token as its keyword whatever its first is: served,
    `#\x00 TYPE : auge` failed its whole parse (found by the damaged-text property test)."""
    result = Rewriter(mapping(), "kubernetes").rewrite(comment + b"\n: 1\n")
    assert result.malformed == 1
    assert [family.name for family in text_string_to_metric_families(result.text.decode())] == [":"]
