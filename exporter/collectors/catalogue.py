"""The catalogue of every family the exporter writes itself, assembled from the packages that own them (as kube-state-metrics assembles its generators)."""

from __future__ import annotations

from typing import Tuple

from exporter.collectors.registry import CONTEXT, SECTION_UP, SOURCES
from exporter.exposition.families import FAMILIES as CORE_FAMILIES
from exporter.exposition.families import Family
from exporter.vendors import VENDORS


def _assembled() -> Tuple[Family, ...]:
    """The core's families, each registered vendor's, then each vendor-free source's; a name two vendors
    share (the same family in each one's words) is catalogued once, as the first registered one writes it."""
    found = {}
    for family in (*CORE_FAMILIES, *(f for vendor in VENDORS for f in vendor.families),
                   *(f for kind in (*CONTEXT, *SOURCES) for f in kind.families)):
        # The core's section_up is catalogued as the registry writes it: every collector's sections told.
        found.setdefault(family.name, SECTION_UP if family.name == SECTION_UP.name else family)
    return tuple(found.values())


# Every entry, in that order: the docs' test and the served-families test go by this tuple.
CATALOGUE: Tuple[Family, ...] = _assembled()
