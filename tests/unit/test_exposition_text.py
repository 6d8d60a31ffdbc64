"""exporter.exposition.text: the one label-value escape and the one HELP/TYPE writer, and that they are the only ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition.text import escape_label_value, family_header, render_label_pairs, unescape_label_value

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "exporter"
TEXT_MODULE = PACKAGE_ROOT / "exposition" / "text.py"


def test_family_header_is_help_then_type():
    assert family_header("pod_gpu_x", "What it counts.") == "# HELP pod_gpu_x What it counts.\n# TYPE pod_gpu_x gauge\n"
    assert family_header("pod_gpu_x", "n", "counter").endswith("# TYPE pod_gpu_x counter\n")


def test_help_text_is_escaped_as_the_format_wants():
    header = family_header("x", 'a \\ b\nc "quoted"')
    assert header.splitlines()[0] == '# HELP x a \\\\ b\\nc "quoted"'  # quotes stay: HELP has no \" escape
    family = next(text_string_to_metric_families(header + "x 1\n"))
    assert family.documentation == 'a \\ b\nc "quoted"'


def test_label_pairs_are_escaped_each_and_read_back_as_given():
    pairs = (("plain", "v"), ("tricky", 'say "hi"\\\n'), ("empty", ""))
    text = render_label_pairs(pairs)
    assert text == 'plain="v",tricky="say \\"hi\\"\\\\\\n",empty=""'
    sample = next(text_string_to_metric_families(f"x{{{text}}} 1\n")).samples[0]
    assert sample.labels == dict(pairs)
    assert render_label_pairs(()) == "" and escape_label_value("a\\b") == "a\\\\b"


def test_no_other_module_writes_help_lines_or_escapes_label_values():
    """One writer each: a second copy would drift (an escape forgotten, a HELP line left unescaped)."""
    help_writer = re.compile(r"# (HELP|TYPE) \{")  # an f-string that writes a family's header
    quote_escape = "replace('\"', '\\\\\"')"  # the label-value escape's " → \"
    # base.logs quotes logfmt values the same way: another format, not exposition text.
    allowed = {TEXT_MODULE, PACKAGE_ROOT / "base" / "logs.py"}
    found = [str(path.relative_to(PACKAGE_ROOT)) for path in sorted(PACKAGE_ROOT.rglob("*.py"))
             if (help_writer.search(path.read_text()) and path != TEXT_MODULE)
             or (quote_escape in path.read_text() and path not in allowed)]
    assert found == []


@pytest.mark.parametrize("value", ["", "plain", 'a"b', "back\\slash", "two\nlines", '\\n is not a newline', '\\"'])
def test_unescape_undoes_escape_of_every_value(value):
    assert unescape_label_value(escape_label_value(value)) == value
