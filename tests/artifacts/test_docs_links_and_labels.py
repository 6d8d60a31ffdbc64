"""README.md and docs/*.md against what they point at and what the exporter serves: every internal link
reaches a file that exists (and its #anchor a heading there), and every documented label list or example
line of a family the exporter writes names its labels in the order the exporter serves them, with the
pod's extra labels where the exporter puts them: right after `container`. The order is the catalogue's
(exporter/exposition/families.py); which families carry the extras, and that the catalogue's order is
what is served, come from the demo's real output."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

import pytest
import requests

from exporter.collectors.catalogue import CATALOGUE
from exporter.exposition.families import OWNER
from support.demo_process import start_demo
from support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FAMILIES = {family.name: family for family in CATALOGUE}

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"(?<!\!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
# A family's label list as docs write it: `name{a,b[,c],extras…}` (names) or `name{a="x",b="y"}` (an example).
_LABELLED = re.compile(r"\b(pod_gpu_[a-z0-9_]+)\{([^{}\n]*)\}")
_EXAMPLE_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?|<[^>]*>")

EXTRAS = "extras"  # where the pod's extra labels go, in a documented list: "extras", "extras…"
# The extras, in the order they are written (collectors/kubernetes/labels.extra_label_pairs).
EXTRA_ORDER = ("pod_uid", "workload_kind", "workload", "cluster_queue", "local_queue", "label_", "annotation_")
LEGACY = {"pod_namespace": "namespace", "pod_name": "pod", "container_name": "container"}


# --- links -----------------------------------------------------------------------------------------
def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code: what renders as links and headings."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, inline markup and punctuation gone, spaces → '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set:
    """Every anchor of a page's headings; a repeated heading's get -1, -2… as on GitHub."""
    seen: Dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading.replace("`", ""))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> List[str]:
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if ROOT in linked.parents else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with that anchor in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_internal_links_and_anchors_resolve(page):
    assert not broken_links(page), broken_links(page)


def test_slugs_and_broken_links_are_found_as_github_makes_them(tmp_path):
    assert slug("Each holder's own share (--sharing.mode process)") == "each-holders-own-share---sharingmode-process"
    assert slug("DRA devices: identified by their ResourceSlice") == "dra-devices-identified-by-their-resourceslice"
    assert slug("1. Prometheus (`kubectl create -f prometheus/`)") == "1-prometheus-kubectl-create--f-prometheus"
    page = tmp_path / "page.md"
    page.write_text("# Top\n## Top\n[a](#top-1) [b](#gone) [c](missing.md) `[d](#in-code)`\n```\n[e](#fenced)\n```\n")
    assert broken_links(page) == ["#gone: no heading with that anchor in page.md",
                                  f"missing.md: no file {tmp_path / 'missing.md'}"]


# --- documented label lists ------------------------------------------------------------------------
class Listed(NamedTuple):
    where: str  # page:line
    family: str
    names: Tuple[str, ...]  # in the order written; EXTRAS where a list says "extras"
    example: bool  # an example line (name="value" pairs), not a list of names


def documented_lists(pages=PAGES) -> Iterator[Listed]:
    for page in pages:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for family, inside in _LABELLED.findall(line):
                if family not in FAMILIES:
                    continue  # docs/architecture.md's worked example of a family to add
                where = f"{page.relative_to(ROOT) if ROOT in page.parents else page.name}:{number}"
                if '="' in inside:
                    yield Listed(where, family, tuple(_EXAMPLE_PAIR.findall(inside)), True)
                else:
                    yield Listed(where, family, _listed_names(inside), False)


def _listed_names(inside: str) -> Tuple[str, ...]:
    inside = inside.replace("owner labels", ",".join(OWNER))
    names = []
    for token in _NAME.findall(inside):
        if token.startswith("extras") or token.startswith("<"):
            names.append(EXTRAS)
        else:
            names.append(token.rstrip("*"))
    return tuple(names)


@pytest.fixture(scope="module")
def demo_lists() -> Dict[str, List[Tuple[str, ...]]]:
    """family → the label names of each of its samples in the demo's /gpu/metrics, once the demo serves its
    whole picture (the per-process shares, and the queue extras it sets on every holder)."""
    demo = start_demo()
    try:
        text = wait_until(lambda: _complete(requests.get(demo.url(), timeout=10).text), timeout_seconds=60,
                          interval=0.5, describe="the demo's shares and every allocation with its queue")
    finally:
        demo.stop()
    served: Dict[str, List[Tuple[str, ...]]] = {}
    for line in text.splitlines():
        match = re.match(r"(pod_gpu_[a-z0-9_]+)\{(.*)\} \S+$", line)
        if match:
            served.setdefault(match.group(1), []).append(tuple(_EXAMPLE_PAIR.findall(match.group(2))))
    return served


def _complete(text: str) -> str:
    holders = [line for line in text.splitlines() if line.startswith(("pod_gpu_allocation_info{",
                                                                      "pod_gpu_container_sm_utilization_ratio{"))]
    whole = any(line.startswith("pod_gpu_container_sm_utilization_ratio{") for line in holders)
    return text if whole and all("cluster_queue=" in line for line in holders) else ""


def _carrying_extras(demo_lists) -> set:
    return {family for family, lists in demo_lists.items() if any("cluster_queue" in names for names in lists)}


def served_order(family: str, carries_extras: bool) -> Tuple[str, ...]:
    """The catalogue's order of a family's labels, with EXTRAS right after its last owner label (`container`, or
    `pod` on a family about pods) where it carries them."""
    order = list(FAMILIES[family].label_order)
    if carries_extras:
        order.insert(max(order.index(name) for name in ("pod", "container") if name in order) + 1, EXTRAS)
    return tuple(order)


def _position(name: str, order: Tuple[str, ...]) -> Optional[Tuple[int, int]]:
    name = LEGACY.get(name, name)
    if name in order:
        return order.index(name), 0
    extra = next((i for i, prefix in enumerate(EXTRA_ORDER) if name == prefix or
                  (prefix.endswith("_") and name.startswith(prefix))), None)
    if extra is not None and EXTRAS in order:
        return order.index(EXTRAS), extra + 1
    return None


def misordered(listed: Listed, order: Tuple[str, ...]) -> Optional[str]:
    """Why a documented list is not what the exporter serves, or None when it is."""
    positions = []
    for name in listed.names:
        position = _position(name, order)
        if position is None:
            return f"{listed.where}: {listed.family} is served with no label {name!r} (served: {','.join(order)})"
        positions.append(position)
    if positions != sorted(positions) or len(set(positions)) != len(positions):
        return f"{listed.where}: {listed.family}{{{','.join(listed.names)}}} is served as {{{','.join(order)}}}"
    if not listed.example and EXTRAS in order and EXTRAS not in listed.names:
        return f"{listed.where}: {listed.family}{{{','.join(listed.names)}}} leaves out the extra labels it carries"
    return None


def test_the_catalogue_order_is_what_the_demo_serves(demo_lists):
    carried = _carrying_extras(demo_lists)
    assert {"pod_gpu_allocation_info", "pod_gpu_container_allocated_gpus", "pod_gpu_container_energy_joules_total"} <= carried
    for family, lists in demo_lists.items():
        order = served_order(family, family in carried)
        for names in lists:
            assert misordered(Listed("demo", family, names, True), order) is None, (family, names, order)


def test_every_documented_label_list_is_in_the_served_order(demo_lists):
    carried = _carrying_extras(demo_lists)
    found = list(documented_lists())
    assert len(found) > 20 and any(listed.example for listed in found)
    wrong = [reason for listed in found
             if (reason := misordered(listed, served_order(listed.family, listed.family in carried)))]
    assert not wrong, "\n".join(wrong)


def test_a_misordered_or_short_list_is_seen(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('`pod_gpu_allocation_info{namespace,pod,container,resource,device_id,UUID,gpu,extras…}`\n'
                    'pod_gpu_allocation_info{namespace="a",pod="b",container="c",gpu="0",cluster_queue="q"} 1\n'
                    '`pod_gpu_container_allocated_gpus{namespace,pod,container}`\n'
                    'pod_gpu_container_allocated_gpus{namespace="a",pod="b",container="c"} 1\n'
                    '`pod_gpu_allocation_info{namespace,pod,container,extras,resource,device_id[,UUID]}`\n'
                    'pod_gpu_device_taint{gpu="1",key="k",value="",effect="None"} 1\n')
    reasons = [misordered(listed, served_order(listed.family, listed.family != "pod_gpu_device_taint"))
               for listed in documented_lists([page])]
    assert [reason is not None for reason in reasons] == [True, True, True, False, False, False], reasons
