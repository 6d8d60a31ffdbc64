"""Generated upstream bodies (real dcgm-exporter lines and mutations of them): whatever is served, promtool parses."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.core.mapping import build_mapping
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.series import SeriesBuilder
from exporter.exposition.streamed import rewrite_streamed
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device
from support.fixtures import FIXTURES_DIR

REAL_LINES = [line for path in sorted((FIXTURES_DIR / "dcgm").glob("*.prom"))
              for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
SAMPLES = [line for line in REAL_LINES if not line.startswith("#")]
UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"  # the L4 fixture's GPU: its lines get owner labels
MAPPING = build_mapping(DEVICE_FORMS, [Device("ns", "pod", "ctr", "nvidia.com/gpu", UUID)])

# Each piece is one a parser may mind somewhere: blanks, quotes and escapes, structure, signs.
PIECES = [" ", "\t", "  ", "\\", "\\\\", '\\"', "\\n", "\\q", '"', "{", "}", ",", "=", "#", "-", "+", ".", "e",
          "\x00", "\r", "_", ":", "0", "é"]
TIMESTAMPS = ["0", "1700000000000", "-2", "-0", "+2", "1.5", "-1.1", "1e3", "0x10", "9223372036854775807",
              "9223372036854775808", "0002", ""]
VALUES = ["NaN", "+NaN", "-nan", "+Inf", "-inf", "Infinity", "-infinity", "1e400", "-1E309", "1e-400", "0x1p3",
          "1_0", ".5", "5.", "1e", ".", "+5", "١", "ınf", "9" * 400, "1.7976931348623157e308"]
TYPES = ["gauge", "counter", "summary", "histogram", "untyped", "GAUGE", "gauge ", " gauge", "gaugeish", ""]
NAMES = ["DCGM_FI_X", "s", "s_sum", "s_count", "h", "h_bucket", "h_count", "h_sum", "0bad", "a:b", "__name__", "é"]
LABELS = ['quantile="0.5"', 'quantile="x"', 'le="+Inf"', 'le="1"', 'le="x"', '__name__="y"', 'a="1",a="2"',
          'a="\\q"', 'a="1",', ',', 'a="1" b="2"', 'a="\x00"', "", "a = \"1\" "]
BLANKS = [" ", "\t", "  ", " \t"]


def mutated_real_line(draw) -> str:
    line = draw(st.sampled_from(REAL_LINES))
    position = draw(st.integers(0, len(line)))
    if draw(st.booleans()):
        return line[:position] + draw(st.sampled_from(PIECES)) + line[position:]
    return line[:position] + line[position + 1 :]  # a character gone


def timestamped_sample(draw) -> str:
    sample = draw(st.sampled_from(SAMPLES))
    timestamp = draw(st.sampled_from(TIMESTAMPS))
    return sample + draw(st.sampled_from(BLANKS)) + timestamp + draw(st.sampled_from(["", " ", "\t"]))


def odd_value(draw) -> str:
    sample = draw(st.sampled_from(SAMPLES))
    return sample[: sample.rindex(" ")] + draw(st.sampled_from(BLANKS)) + draw(st.sampled_from(VALUES))


def metadata(draw) -> str:
    kind = draw(st.sampled_from(["HELP", "TYPE"]))
    text = draw(st.sampled_from(TYPES)) if kind == "TYPE" else draw(st.sampled_from(
        ["text", "a \\\\ b", "a \\n b", 'a \\" b', "a \\q b", "trailing \\", "", "  lead", "nul \x00"]))
    prefix = draw(st.sampled_from(["# ", "#", "#\t", "#  "]))
    return f"{prefix}{kind}{draw(st.sampled_from(BLANKS))}{draw(st.sampled_from(NAMES))}" + (
        draw(st.sampled_from(["", " ", "\t", "  "])) + text if text or draw(st.booleans()) else "")


def odd_sample(draw) -> str:
    name = draw(st.sampled_from(NAMES))
    labels = draw(st.sampled_from(LABELS))
    return f"{name}{{{labels}}} {draw(st.sampled_from(['1', '2.5', 'NaN']))}"


MUTATIONS = [mutated_real_line, timestamped_sample, odd_value, metadata, odd_sample]


@st.composite
def upstream_bodies(draw) -> bytes:
    lines = draw(st.lists(st.sampled_from(REAL_LINES), min_size=5, max_size=40))
    for _ in range(draw(st.integers(1, 12))):
        mutation = draw(st.sampled_from(MUTATIONS))
        lines.insert(draw(st.integers(0, len(lines))), mutation(draw))
    return ("\n".join(lines) + "\n").encode("utf-8")


def promtool_errors(text: bytes) -> str:
    """promtool's message when client_golang's text parser refuses text; "" when it parses."""
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=60)
    # 0 = clean, 3 = lint findings only (dcgm names always lint); 1 = a parse error.
    return "" if result.returncode in (0, 3) else (result.stdout + result.stderr).decode(errors="replace")


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None and not os.environ.get("CI"), reason="promtool is not installed")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(upstream_bodies())
def test_every_served_body_parses_with_client_golang(body):
    assert PROMTOOL is not None, "promtool is required in CI (apt-get install prometheus)"
    served = Rewriter(MAPPING).rewrite(body).text
    assert promtool_errors(served) == "", served.decode(errors="replace")
    # The streamed rewrite (huge answers) drops what the line-by-line one drops.
    assert rewrite_streamed(SeriesBuilder(MAPPING), body, 256).text == served
