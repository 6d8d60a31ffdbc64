"""exporter.exposition.families: each family one well-formed value, the status writer, and that every
header of both endpoints is written from the catalogue and nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exporter.collectors.catalogue import CATALOGUE
from exporter.exposition.families import MAPPING_AGE, SELF, TELEMETRY, Family, render_status
from exporter.vendors.nvidia.families import DCGM_UP
from exporter.exposition.text import HELP_LINE, TYPE_LINE

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "exporter"
CATALOGUE_MODULE = PACKAGE_ROOT / "exposition" / "families.py"


def test_each_family_is_named_once_and_well_formed():
    names = [family.name for family in CATALOGUE]
    assert len(names) == len(set(names))
    for family in CATALOGUE:
        assert family.type in ("gauge", "counter") and family.endpoint in (TELEMETRY, SELF), family
        assert family.name.endswith("_total") == (family.type == "counter"), family.name
        assert not set(family.labels) & set(family.optional_labels), family.name
        help_line, type_line = family.header.splitlines()
        assert HELP_LINE.fullmatch(help_line) and TYPE_LINE.fullmatch(type_line), family.name


def test_the_header_is_built_once():
    assert DCGM_UP.header is DCGM_UP.header
    assert DCGM_UP.header == f"# HELP {DCGM_UP.name} {DCGM_UP.help}\n# TYPE {DCGM_UP.name} gauge\n"


def test_status_gauges_are_header_then_one_sample_or_none_yet():
    text = render_status([(DCGM_UP, 1), (MAPPING_AGE, None), (Family("x_total", "counter", "X.", SELF), "2.500")])
    assert text == DCGM_UP.header + f"{DCGM_UP.name} 1\n" + MAPPING_AGE.header + (
        "# HELP x_total X.\n# TYPE x_total counter\nx_total 2.500\n")
    assert [family.name for family in text_string_to_metric_families(text)] == [DCGM_UP.name, MAPPING_AGE.name, "x"]


def test_no_module_writes_a_header_but_from_the_catalogue():
    """A family written from anything but its entry would be a second, drifting copy of its help text."""
    by_hand = re.compile(r"\bfamily_header\(")  # the text format's header writer, which only entries call
    # lines naming one of prometheus_client's family classes (for /metrics) outside an import
    client_families = re.compile(r"^(?!from |import ).*?\b(\w+MetricFamily)\b", re.MULTILINE)
    found = {str(path.relative_to(PACKAGE_ROOT)): (len(by_hand.findall(path.read_text())),
                                                   len(client_families.findall(path.read_text())))
             for path in sorted(PACKAGE_ROOT.rglob("*.py")) if path.parent.name != "_gen"}
    assert {path: counts for path, counts in found.items() if counts != (0, 0)} == {
        "exposition/families.py": (1, 1),  # Family.header; client_family, from an entry
        "exposition/text.py": (1, 0),  # its definition
    }
