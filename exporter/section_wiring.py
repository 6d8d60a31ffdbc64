"""The sections of /gpu/metrics, registered in one list from the sources that are on (see exporter.exposition.sections)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

from exporter.config import Config
from exporter.core.attribution import Attribution
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.sections import Section

if TYPE_CHECKING:  # for the annotations only: each is imported where the source it wires is on
    from exporter.shares.process_shares import ProcessShares
    from exporter.shares.xid_events import XidEvents
    from exporter.sources.hpc_jobs import HpcJobSource
    from exporter.sources.kubernetes.roles import KubernetesLifecycle


def build_sections(config: Config, attribution: Attribution, label_limit: LabelLimit,
                   kubernetes: Optional[KubernetesLifecycle], hpc_jobs: Optional[HpcJobSource],
                   shares: Optional[ProcessShares], xids: Optional[XidEvents]) -> List[Section]:
    """The blocks of exporter-owned families, in the order they are written: one line each, those that
    are off left out (see docs/architecture.md, "Adding a family")."""
    from exporter.exposition.allocation import AllocationSection
    from exporter.exposition.health import DeviceHealthSection
    from exporter.exposition.hpc_jobs import HpcJobsSection
    from exporter.exposition.sections import StatusSection, TextSection

    def on(source, section):  # a section whose source is off (None) is not registered
        return None if source is None else section(source)

    registered = [
        AllocationSection(config.labels_style, label_limit, lambda: attribution.current().kubelet_up),
        on(kubernetes, lambda api: DeviceHealthSection(lambda: api.up)),
        on(hpc_jobs, lambda source: HpcJobsSection(source.current, source.state)),
        StatusSection(),
        on(shares, lambda source: TextSection("process_shares", source.text, source.state)),
        on(xids, lambda source: TextSection("xid_events", source.text, source.state)),
    ]
    return [section for section in registered if section is not None]
