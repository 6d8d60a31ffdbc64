"""AMD: its kubelet resources and device IDs, its device-metrics-exporter (reader, label dialect, identity and health service) and sysfs, registered as one Vendor."""

from __future__ import annotations

from exporter.base.upstream import UpstreamWords
from exporter.collectors.vendor import Vendor
from exporter.exposition.sections import VendorStatus
from exporter.vendors.amd import families
from exporter.vendors.amd.collectors.identity import AmdIdentityCollector
from exporter.vendors.amd.collectors.reader import AmdExporterCollector
from exporter.vendors.amd.figures import AMD_FIGURES
from exporter.vendors.amd.forms import DEVICE_FORMS

def _identity_socket(config) -> tuple:
    """--gpu.vendor auto: AMD's exporter's identity socket on the node says it is an AMD node."""
    return (config.amd_metrics_socket,)


def _demo_node() -> object:
    """The demo's simulated MI300X node, imported when `demo --gpu.vendor amd` runs only (it starts fake servers)."""
    from exporter.vendors.amd.demo_start import AmdDemoNode

    return AmdDemoNode()


AMD = Vendor(
    name="amd",
    devices=DEVICE_FORMS,
    figures=AMD_FIGURES,
    reader=AmdExporterCollector,
    collectors=(AmdIdentityCollector,),
    upstream_words=UpstreamWords(
        "device-metrics-exporter", "check its version and that --amd.metrics-url points at its /metrics",
        "check its logs, the amdgpu driver and its GPU agent"),
    status=VendorStatus("amd", None, families.UNRESOLVED_DEVICES),
    families=families.FAMILIES,
    upstream_failures=families.AMD_FETCH_FAILURES,
    marker_paths=_identity_socket,
    demo_node=_demo_node,
    refused_settings={
        "sharing_mode": ("process", "per-process shares are read from NVIDIA's NVML; an AMD node (--gpu.vendor amd) "
                                    "serves device-level values only: leave --sharing.mode at device"),
        "health_xid_events": ("on", "XID events are NVIDIA's, read from NVML; an AMD node (--gpu.vendor amd) reports "
                                    "health from AMD's identity service: leave --health.xid-events at auto"),
    },
)
