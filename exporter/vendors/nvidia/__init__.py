"""NVIDIA: its kubelet resources and device IDs, dcgm-exporter (reader and label dialect), NVML (shares, XIDs, MIG), registered as one Vendor."""

from __future__ import annotations

from exporter.base.upstream import UpstreamWords
from exporter.collectors.collector import Flag
from exporter.collectors.vendor import Vendor
from exporter.exposition.sections import VendorStatus
from exporter.vendors.nvidia import families
from exporter.vendors.nvidia.collectors.dcgm import DcgmCollector
from exporter.vendors.nvidia.collectors.process_shares import ProcessSharesCollector
from exporter.vendors.nvidia.collectors.xid_events import XidEventsCollector
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from exporter.vendors.nvidia.figures import DCGM_FIGURES
from exporter.vendors.nvidia.nvml.library import OPEN_TIMEOUT_SECONDS, LazyMigResolver


def _lazy_mig_resolver(driver: object) -> LazyMigResolver:
    """MIG-<uuid> device IDs resolved through NVML, opened (and its outcome logged) at the first such ID."""
    return LazyMigResolver(driver)


def _demo_node() -> object:
    """The demo's simulated NVIDIA node, imported when `demo` runs only (it starts fake servers)."""
    from exporter.vendors.nvidia.demo.node import NvidiaDemoNode

    return NvidiaDemoNode()


NVIDIA = Vendor(
    name="nvidia",
    devices=DEVICE_FORMS,
    figures=DCGM_FIGURES,
    reader=DcgmCollector,
    collectors=(ProcessSharesCollector, XidEventsCollector),
    upstream_words=UpstreamWords(
        "dcgm-exporter", "check its version and that the dcgm address points at its /metrics",
        "check its logs, the driver and its DCGM connection"),
    status=VendorStatus("nvidia", families.DCGM_UP, families.UNRESOLVED_DEVICES),
    families=families.FAMILIES,
    upstream_failures=families.DCGM_FETCH_FAILURES,
    driver_timeouts=families.NVML_TIMEOUTS,
    demo_node=_demo_node,
    demo_flags=(Flag("--demo.nvml", "demo_nvml", ("on", "off"), "`demo` only: on = its node also simulates NVML, the host's processes, XIDs and a lost GPU, and serves --sharing.mode process; off = device-level samples only.", "on"),),
    demo_refused={"demo_nvml": "only `demo` simulates NVML"},
    open_resolver=_lazy_mig_resolver,
    resolver_open_seconds=OPEN_TIMEOUT_SECONDS,
)
