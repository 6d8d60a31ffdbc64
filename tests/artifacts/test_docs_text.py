"""README.md and docs/ speak to users: no issue numbers or releases they cannot look up, counts that
match their lists, and repository paths that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# docs/architecture.md is for the project's developers, who can follow its references.
USER_DOCS = [REPO_ROOT / "README.md"] + sorted(p for p in (REPO_ROOT / "docs").glob("*.md") if p.name != "architecture.md")
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
# "#12", "issue 10", "issues 10 and 12", "PR 7"; never a link's "(#1-prometheus-…)" anchor.
ISSUE_REFERENCE = re.compile(r"(?<![\w(/#-])#\d+(?![\w-])|\b(?:issues?|PRs?|pull requests?)\s+#?\d+", re.IGNORECASE)
# ("the last version seen" of a watch is fine: it is the software's state, not its history.)
HISTORY = re.compile(r"\b(?:previous|earlier|prior) (?:release|version)s?\b|\blast release\b", re.IGNORECASE)
REPO_PATH = re.compile(r"`((?:exporter|tests|benchmarks|scripts|deploy|protos)/[\w./-]+\.(?:py|yaml|c|sh|json|prom|proto))`")


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_no_issue_numbers_nor_releases_a_user_cannot_look_up(doc):
    text = doc.read_text(encoding="utf-8")
    assert not ISSUE_REFERENCE.findall(text) and not HISTORY.findall(text), (
        ISSUE_REFERENCE.findall(text) + HISTORY.findall(text))


def test_the_patterns_catch_what_they_are_for():
    assert ISSUE_REFERENCE.search("as #12 reports") and ISSUE_REFERENCE.search("the goals of issue 13")
    assert not ISSUE_REFERENCE.search("[docker run](#2-docker-run) and deployment.md#1-prometheus")
    assert HISTORY.search("before (the previous release)") and HISTORY.search("The previous release's cap")


def test_deployment_counts_the_ways_it_lists():
    text = (REPO_ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    announced = re.search(r"^(\w+) ways to run", text, re.MULTILINE | re.IGNORECASE)
    assert announced, "docs/deployment.md no longer announces its ways to run"
    intro = text[announced.end():text.index("\n## ")]
    assert NUMBER_WORDS[announced.group(1).lower()] == len(re.findall(r"^\d+\. ", intro, re.MULTILINE))


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_repository_paths_named_exist(doc):
    missing = [path for path in REPO_PATH.findall(doc.read_text(encoding="utf-8")) if not (REPO_ROOT / path).exists()]
    assert not missing, missing
