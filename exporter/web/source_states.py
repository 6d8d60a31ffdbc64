"""Each source's state for the node page (up, why not, the age of its data), read from what the process keeps."""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Tuple

from exporter.exposition.sections import Section, SectionState
from exporter.web.node_page import SourceState

# Sections whose state is told under a source's own name below, or that have no source of their own.
_NAMED = {"allocation", "status", "device_health", "process_shares", "xid_events"}
_SECTION_NAMES = {"hpc_jobs": "HPC job files"}


def source_states(attribution, scraper, shares_age_seconds: Optional[float] = None,
                  now: Optional[float] = None) -> Tuple[Tuple[SourceState, ...], Tuple[Tuple[str, str], ...]]:
    """(the states of the sources in use, (name, how to turn it on) of those that are off).

    One adapter over the refresher, the scraper's last fetch and the sections' states: what the page
    needs of the sources, read without asking any of them anything."""
    now = time.monotonic() if now is None else now
    sections = {section.name: section.state() for section in scraper.sections}
    states: List[SourceState] = [_kubelet(attribution), _dcgm(scraper.last_upstream, now)]
    off: List[Tuple[str, str]] = []
    api = sections.get("device_health")
    if api is None:
        off.append(("Kubernetes API", "--kubernetes.api"))
    else:
        states.append(SourceState("Kubernetes API", api.up, None if api.up else
                                  "the watch of this node's pods is not listed and connected (see the log)"))
    nvml = _nvml(sections, shares_age_seconds)
    if nvml is None:
        off.append(("NVML", "--sharing.mode process or --health.xid-events"))
    else:
        states.append(nvml)
    states.extend(_other_sections(scraper.sections, sections))
    return tuple(states), tuple(off)


def _kubelet(attribution) -> SourceState:
    snapshot = attribution.current()
    if snapshot.kubelet_up:
        return SourceState("kubelet", True, None, snapshot.age_seconds)
    reason = attribution.last_error or "no answer yet"
    if snapshot.age_seconds is not None and attribution.mapping_in_use() is None:
        reason += "; its last mapping has aged out (--kubelet.mapping-max-age)"
    return SourceState("kubelet", False, reason, snapshot.age_seconds)


def _dcgm(upstream, now: float) -> SourceState:
    age = None if upstream.answered_at is None else now - upstream.answered_at
    if upstream.error is not None:
        return SourceState("dcgm-exporter", False, upstream.error, age)
    if upstream.body is None:
        return SourceState("dcgm-exporter", False, "no scrape yet: it is read when /gpu/metrics is scraped", None)
    return SourceState("dcgm-exporter", True, "as of the last scrape", age)


def _nvml(sections: Dict[str, SectionState], shares_age_seconds: Optional[float]) -> Optional[SourceState]:
    """NVML's state from its readers: the per-process shares first (they read it every refresh), else
    the XID event thread; None when neither is on."""
    shares, xids = sections.get("process_shares"), sections.get("xid_events")
    if shares is None and xids is None:
        return None
    up = (shares or xids).up
    reason = None if up else ("NVML did not answer the last per-process refresh, or that refresh is stale (see the "
                              "log)" if shares is not None else "no GPU is registered for XID events (see the log)")
    return SourceState("NVML", up, reason, shares_age_seconds if shares is not None else None)


def _other_sections(order: Sequence[Section], states: Dict[str, SectionState]) -> List[SourceState]:
    return [SourceState(_SECTION_NAMES.get(section.name, section.name), states[section.name].up,
                        None if states[section.name].up else "not read within its bound (see the log)")
            for section in order if section.name not in _NAMED]
