"""The docs render as written: every Markdown table is whole (a header, its delimiter row, rows of the
header's column count, nothing but a blank line after it), and no table row stands outside a table,
where GitHub would print its pipes as text."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = [REPO_ROOT / "README.md"] + sorted((REPO_ROOT / "docs").glob("*.md"))
_DELIMITER = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")
_FENCE = re.compile(r"\s*(```|~~~)")


def _cells(line: str) -> int:
    """A row's cells as GitHub splits them: on every pipe not escaped, inside code spans too."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return len(re.split(r"(?<!\\)\|", inner))


def _prose(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def table_faults(text: str) -> List[str]:
    lines = list(_prose(text))
    faults, index = [], 0
    while index < len(lines):
        number, line = lines[index]
        following = lines[index + 1][1] if index + 1 < len(lines) else ""
        if line.lstrip().startswith("|") and _DELIMITER.fullmatch(following.strip()) and "-" in following:
            columns = _cells(line)
            if _cells(following) != columns:
                faults.append(f"line {number + 1}: delimiter row of {_cells(following)} columns under {columns}")
            index += 2
            while index < len(lines) and lines[index][1].lstrip().startswith("|"):
                row_number, row = lines[index]
                if _cells(row) != columns:
                    faults.append(f"line {row_number}: {_cells(row)} cells in a table of {columns} columns")
                index += 1
            if index < len(lines) and lines[index][1].strip():
                faults.append(f"line {lines[index][0]}: text right after a table (GitHub reads it as a row)")
            continue
        if line.lstrip().startswith("|"):
            faults.append(f"line {number}: a table row outside any table (its pipes show as text)")
        index += 1
    return faults


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_table_is_whole(doc):
    assert table_faults(doc.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_paragraph_inside_a_table_and_a_short_row():
    broken = "| a | b |\n|---|---|\n| 1 | 2 |\n\nA paragraph.\n| 3 | 4 |\n| 5 |\n"
    assert table_faults(broken) == ["line 6: a table row outside any table (its pipes show as text)",
                                    "line 7: a table row outside any table (its pipes show as text)"]
    assert table_faults("| a | b |\n|---|---|\n| 1 | `x|y` |\ntext\n") == [
        "line 3: 3 cells in a table of 2 columns", "line 4: text right after a table (GitHub reads it as a row)"]
    assert table_faults("| a | b |\n|---|---|\n| 1 | `x\\|y` |\n\n```\n| not | a table |\n```\n") == []
