"""The sections' protocol: the status block's fixed order with the sections' own gauges after it, and a
list whose kept sections come before the per-scrape ones."""

from __future__ import annotations

import time

import pytest

from exporter.core.attribution import Snapshot
from exporter.core.mapping import EMPTY_MAPPING
from exporter.collectors.hpc_jobs import families as hpc_families
from exporter.collectors.kubernetes import families as kubernetes_families
from exporter.exposition import families
from exporter.vendors.nvidia import NVIDIA
from exporter.exposition.sections import ScrapeView, SectionState, StatusSection, TextSection, check_order


def test_the_status_block_keeps_its_order_and_ends_with_the_sections_gauges():
    view = ScrapeView(Snapshot(EMPTY_MAPPING, False, None), frozenset(), upstream_up=True, malformed=2,
                      started=time.perf_counter(), gauges=((kubernetes_families.KUBERNETES_API_UP, 1),
                                                           (hpc_families.HPC_JOB_FILES_SKIPPED, 3)))
    text = StatusSection(NVIDIA.status).render(view).decode()
    names = [line.split()[0] for line in text.splitlines() if not line.startswith("#")]
    assert names == ["pod_gpu_exporter_dcgm_up", "pod_gpu_exporter_kubelet_up", "pod_gpu_exporter_malformed_lines",
                     "pod_gpu_exporter_unresolved_devices", "pod_gpu_exporter_scrape_duration_seconds",
                     "pod_gpu_exporter_upstream_up", "pod_gpu_exporter_vendor_info{vendor=\"nvidia\"}",
                     "pod_gpu_exporter_kubernetes_api_up", "pod_gpu_exporter_hpc_job_files_skipped"]
    assert families.MAPPING_AGE.header in text  # no mapping yet: its header, no sample
    assert "pod_gpu_exporter_malformed_lines 2\n" in text and text.endswith("pod_gpu_exporter_hpc_job_files_skipped 3\n")


def test_kept_sections_must_come_before_per_scrape_ones_and_names_be_distinct():
    shares = TextSection("process_shares", lambda: b"", lambda: SectionState(True))
    with pytest.raises(ValueError, match="registered before"):
        check_order([StatusSection(NVIDIA.status), _Kept()])
    with pytest.raises(ValueError, match="repeat"):
        check_order([shares, TextSection("process_shares", lambda: b"", lambda: SectionState(True))])
    check_order([_Kept(), StatusSection(NVIDIA.status), shares])


class _Kept(StatusSection):
    name = "kept"
    per_scrape = False
