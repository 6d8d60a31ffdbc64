"""Lines that Prometheus' scrape parser or client_golang's expfmt would refuse are dropped and counted, on every path."""

from __future__ import annotations

import pytest

from exporter.core.mapping import build_mapping
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.series import SeriesBuilder
from exporter.exposition.streamed import rewrite_streamed
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device

UUID0 = "GPU-be839661-c0f5-7452-284b-b875666df60c"
BODY = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID0}",device="nvidia0",Hostname="n1"}} 41\n'
    "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
    "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
    f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="{UUID0}",device="nvidia0",Hostname="n1"}} 71.5\n'
)
SAMPLE = f'DCGM_X{{gpu="0",UUID="{UUID0}"}}'
DEVICES = [Device("n", "p", "c", "nvidia.com/gpu", UUID0)]

# Each was seen to fail a scrape of Prometheus 2.42 (target down) or `promtool check metrics` (expfmt).
REFUSED = {
    "TYPE with a trailing blank": "# TYPE DCGM_X gauge ",
    "TYPE with a trailing tab": "# TYPE DCGM_X gauge\t",
    "TYPE with two blanks before the type": "# TYPE DCGM_X  gauge",
    "TYPE in capitals": "# TYPE DCGM_X GAUGE",
    "HELP with a quote escaped": '# HELP DCGM_X say \\"hi\\"',
    "HELP ending in a backslash": "# HELP DCGM_X text \\",
    "value followed by a blank": f"{SAMPLE} 1 ",
    "value followed by a tab": f"{SAMPLE} 1\t",
    "timestamp followed by a blank": f"{SAMPLE} 1 1700000000000 ",
    "negative timestamp": f"{SAMPLE} 0 -2",
    "negative zero timestamp": f"{SAMPLE} 0 -0",
    "timestamp with a plus": f"{SAMPLE} 0 +2",
    "fractional timestamp": f"{SAMPLE} 0 -1.1",
    "timestamp past int64": f"{SAMPLE} 0 9223372036854775808",
    "NaN with a sign": f"{SAMPLE} +NaN",
    "nan with a minus": f"{SAMPLE} -nan",
    "value out of range": f"{SAMPLE} 1e400",
    "value of 400 digits": f"{SAMPLE} {'9' * 400}",
    "hex value": f"{SAMPLE} 0x1p3",
    "__name__ label": f'DCGM_X{{__name__="DCGM_Y",gpu="0",UUID="{UUID0}"}} 1',
}

ACCEPTED = {
    "TYPE with a tab": "# TYPE DCGM_X\tgauge",
    "HELP with blanks before its text": "# HELP DCGM_X   text",
    "HELP without text": "# HELP DCGM_X",
    "largest timestamp": f"{SAMPLE} 1 9223372036854775807",
    "timestamp with leading zeros": f"{SAMPLE} 1 0002",
    "signed Inf": f"{SAMPLE} -Inf",
    "Infinity": f"{SAMPLE} +infinity",
    "value that underflows to 0": f"{SAMPLE} 1e-400",
    "largest double": f"{SAMPLE} 1.7976931348623157e308",
    "HELP with a NUL": "# HELP DCGM_X a\x00b",
    "comment with a NUL": "# a comment \x00 here",
    "label value with a NUL": f'DCGM_X{{gpu="0",UUID="{UUID0}",x="a\x00b"}} 1',
    "quantile of an untyped family": f'DCGM_X{{gpu="0",UUID="{UUID0}",quantile="x"}} 1',
}


def line_by_line(body: str):
    return Rewriter(build_mapping(DEVICE_FORMS, DEVICES)).rewrite(body.encode())


def streamed(body: str):
    return rewrite_streamed(SeriesBuilder(build_mapping(DEVICE_FORMS, DEVICES)), body.encode(), 64)


def refilled(body: str):
    """The rewrite of body by a template built from body with other values."""
    rewriter = Rewriter(build_mapping(DEVICE_FORMS, DEVICES))
    first = body.replace("} 41\n", "} 40\n").replace("} 71.5\n", "} 70\n")
    rewriter.rewrite(first.encode())
    rewriter.rewrite(first.encode())  # builds the template
    result = rewriter.rewrite(body.encode())
    assert rewriter.refills == 2
    return result


REWRITES = [line_by_line, streamed, refilled]


@pytest.mark.parametrize("rewrite", REWRITES)
@pytest.mark.parametrize("what", sorted(REFUSED))
def test_a_line_either_parser_refuses_is_dropped_and_counted(what, rewrite):
    line = REFUSED[what]
    body = BODY.replace("# HELP DCGM_FI_DEV_POWER", line + "\n# HELP DCGM_FI_DEV_POWER")
    result = rewrite(body)
    assert result.malformed == 1
    assert result.text.decode() == line_by_line(BODY).text.decode()


@pytest.mark.parametrize("rewrite", REWRITES)
@pytest.mark.parametrize("what", sorted(ACCEPTED))
def test_a_line_both_parsers_accept_is_served(what, rewrite):
    line = ACCEPTED[what]
    body = BODY.replace("# HELP DCGM_FI_DEV_POWER", line + "\n# HELP DCGM_FI_DEV_POWER")
    result = rewrite(body)
    assert result.malformed == 0
    assert result.text.decode().count("\n") == body.count("\n")


@pytest.mark.parametrize("rewrite", [line_by_line, streamed])
@pytest.mark.parametrize("lines, kept", [
    # expfmt counts x_sum and x_count as x's own lines once x is a summary (x_bucket too for a histogram).
    (["# HELP s x", "# TYPE s summary", "# HELP s_sum y"], 2),
    (["# TYPE s summary", "# TYPE s_count gauge"], 1),
    (["# TYPE h histogram", "h_bucket{le=\"1\"} 1", "# TYPE h_bucket counter"], 2),
    (["# TYPE s summary", 's{quantile="x"} 1', 's{quantile="0.5"} 1'], 2),
    (["# TYPE s summary", 's_sum{quantile="x"} 1'], 1),
    (["# TYPE h histogram", 'h_bucket{le="x"} 1', 'h_bucket{le="+Inf"} 1'], 2),
    (["# TYPE h histogram", 'h_count{le="x"} 1'], 1),
    # A family x_sum started before x was typed keeps its own name: nothing is refused.
    (["s_sum 1", "# TYPE s summary", 's_sum{quantile="x"} 1'], 3),
    (["# TYPE s gauge", 's{quantile="x"} 1', "# TYPE s_sum gauge"], 3),
    (["# TYPE s summary", 's_bucket{le="x"} 2'], 2),
])
def test_families_are_tracked_as_expfmt_gathers_them(lines, kept, rewrite):
    body = "\n".join(lines) + "\n"
    result = rewrite(body)
    assert result.malformed == len(lines) - kept
    assert result.text.decode().count("\n") == kept


def test_a_second_refill_after_a_dropped_line_drops_it_again():
    body = BODY + f"{SAMPLE} 1 -2\n"
    rewriter = Rewriter(build_mapping(DEVICE_FORMS, DEVICES))
    results = [rewriter.rewrite(body.replace(" 41\n", f" {value}\n").encode()) for value in (40, 41, 42)]
    assert rewriter.refills == 2
    assert [result.malformed for result in results] == [1, 1, 1]
    assert all(" 1 -2\n" not in result.text.decode() for result in results)


@pytest.mark.parametrize("value", ["1e400", "-1E+309", "+NaN", "1 "])
def test_a_refill_with_a_value_go_refuses_goes_line_by_line_and_drops_it(value):
    rewriter = Rewriter(build_mapping(DEVICE_FORMS, DEVICES))
    for _ in range(2):
        rewriter.rewrite(BODY.encode())
    result = rewriter.rewrite(BODY.replace("} 41\n", f"}} {value}\n").encode())
    assert rewriter.refills == 1  # the second rewrite only
    assert result.malformed == 1 and f"}} {value}\n" not in result.text.decode()
