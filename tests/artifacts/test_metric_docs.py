"""The README's and docs' metric tables against the catalogue of families, both ways: every family the
exporter writes is documented with its type and labels, and no table documents one it does not write."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Tuple

import pytest

from exporter.exposition.families import CATALOGUE, OWNER, STANDARD_COLLECTOR_PREFIXES

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A row documents a family when its first cell starts with one of the exporter's names in backticks.
_FAMILY_CELL = re.compile(r"`(pod_gpu_[a-zA-Z0-9_:]*)(?:\{([^}]*)\})?`")
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class Row(NamedTuple):
    where: str  # page:line
    name: str
    type: str  # "" when the table has no type column
    labels: Tuple[str, ...]
    optional_labels: Tuple[str, ...]


def _cells(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _labels(text: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(always, optional) label names of `a,b[,c]` or `` `a`, [`c`], owner labels ``; brackets mark the
    labels only some samples carry."""
    # "extras…" marks where the pod's extra labels go (test_docs_links_and_labels checks it): no label of its own.
    text = text.replace("`", "").replace("owner labels", ",".join(OWNER)).replace("extras…", "").replace("extras", "")
    if text.strip() in ("", "none"):
        return (), ()
    optional = [name for part in re.findall(r"\[([^\]]*)\]", text) for name in _NAME.findall(part)]
    return tuple(_NAME.findall(re.sub(r"\[[^\]]*\]", "", text))), tuple(optional)


def documented_rows(pages=PAGES) -> Iterator[Row]:
    """Every table row that documents a family: labels from `name{…}` or else from a labels column,
    where `same` repeats the row above's."""
    for page in pages:
        lines = page.read_text().splitlines()
        header: List[str] = []
        labels: Tuple[Tuple[str, ...], Tuple[str, ...]] = ((), ())
        for number, line in enumerate(lines, 1):
            if not line.startswith("|"):
                header, labels = [], ((), ())
                continue
            cells = _cells(line)
            if not header:
                header = [cell.lower() for cell in cells]
                continue
            match = _FAMILY_CELL.match(cells[0])
            if not match:
                continue
            column = dict(zip(header, cells))
            if match.group(2) is not None:
                labels = _labels(match.group(2))
            elif "labels" in column and column["labels"] != "same":
                labels = _labels(column["labels"])
            elif "labels" not in column:
                labels = ((), ())
            where = page.relative_to(ROOT) if ROOT in page.parents else page.name
            yield Row(f"{where}:{number}", match.group(1), column.get("type", ""), *labels)


def standard_collector_rows(pages=PAGES) -> List[str]:
    return [line for page in pages for line in page.read_text().splitlines()
            if line.startswith("| `") and any(line.startswith(f"| `{prefix}") for prefix in STANDARD_COLLECTOR_PREFIXES)]


ROWS = list(documented_rows())
CATALOGUED: Dict[str, object] = {family.name: family for family in CATALOGUE}


def test_the_tables_are_found():
    assert len(ROWS) >= len(CATALOGUE) > 30


@pytest.mark.parametrize("family", CATALOGUE, ids=lambda family: family.name)
def test_every_catalogued_family_is_documented(family):
    assert family.name in {row.name for row in ROWS}, (
        f"{family.name} ({family.endpoint}) is in the catalogue but in no metric table of the README or docs/")


@pytest.mark.parametrize("row", ROWS, ids=lambda row: f"{row.where} {row.name}")
def test_every_documented_family_is_catalogued_with_that_type_and_those_labels(row):
    family = CATALOGUED.get(row.name)
    assert family is not None, f"{row.where} documents {row.name}, which the exporter does not write"
    assert row.type == family.type, f"{row.where}: {row.name} documented as {row.type or 'no type'!r}"
    assert sorted(row.labels) == sorted(family.labels), f"{row.where}: {row.name}'s labels"
    assert sorted(row.optional_labels) == sorted(family.optional_labels), f"{row.where}: {row.name}'s optional labels"


def test_the_standard_collectors_are_said_to_be_prometheus_clients():
    rows = standard_collector_rows()
    assert rows and all("prometheus_client" in row for row in rows)


def test_a_family_left_out_of_the_docs_is_seen(tmp_path):
    """The check itself: a page without one row documents one family fewer, and the rest still parse."""
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `pod_gpu_exporter_kubelet_up`"))
    page = tmp_path / "README.md"
    page.write_text(readme.replace(row + "\n", ""))
    names = {found.name for found in documented_rows([page, *PAGES[1:]])}
    assert "pod_gpu_exporter_kubelet_up" not in names
    assert names == {found.name for found in ROWS} - {"pod_gpu_exporter_kubelet_up"}


def test_labels_are_read_as_the_tables_write_them():
    assert _labels("namespace,pod,container,resource[,UUID,gpu][,claim]") == (
        ("namespace", "pod", "container", "resource"), ("UUID", "gpu", "claim"))
    assert _labels("`UUID`, `gpu`, [`GPU_I_ID`], owner labels") == (("UUID", "gpu") + OWNER, ("GPU_I_ID",))
    assert _labels("none") == ((), ())
