"""No needless work: the Scraper rewrites an upstream body once per change of body or mapping."""

from __future__ import annotations

import gzip
import zlib

import pytest

from exporter.core.attribution import Attribution
from exporter.collectors.hpc_jobs.jobs import HpcJob, HpcJobs
from exporter.exposition.allocation import AllocationSection
from exporter.collectors.hpc_jobs.section import HpcJobsSection
from exporter.vendors.nvidia import NVIDIA
from exporter.exposition.sections import SectionState, StatusSection
from exporter.vendors.nvidia.dcgm.file_source import FileSource
from exporter.vendors.nvidia.dcgm.options import DcgmFileOptions
from exporter.sources.kubelet import AllocatedDevice
from exporter.web.scrape import ScrapeBody, Scraper
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from exporter.vendors.nvidia.figures import DCGM_FIGURES
from support.fixtures import fixture_bytes

L4 = fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom")
L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


class Kubelet:
    """What the refresher lists: a plain list that a test changes between refreshes."""

    def __init__(self, devices):
        self.devices = list(devices)

    def list_devices(self):
        return list(self.devices)


@pytest.fixture
def node(tmp_path):
    path = tmp_path / "dcgm.prom"
    path.write_bytes(L4)
    kubelet = Kubelet([AllocatedDevice("ml", "trainer-0", "pytorch", "nvidia.com/gpu", L4_UUID)])
    attribution = Attribution(kubelet.list_devices, DEVICE_FORMS, refresh_interval_seconds=60, max_age_seconds=600)
    attribution.refresh()
    sections = [AllocationSection("kubernetes", None, lambda: True, DCGM_FIGURES), StatusSection(NVIDIA.status)]
    return path, kubelet, attribution, Scraper(FileSource(DcgmFileOptions(str(path))), attribution, "kubernetes",
                                               sections)


def test_unchanged_body_and_mapping_are_rewritten_once(node):
    _, _, _, scraper = node
    first, second = scraper.scrape(), scraper.scrape()
    assert b'pod="trainer-0"' in first
    assert scraper.rewrites == 1 and scraper.scrapes == 2
    assert _without_status(first) == _without_status(second)


def test_an_equal_mapping_from_a_new_kubelet_list_keeps_the_rewrite(node):
    _, _, attribution, scraper = node
    scraper.scrape()
    attribution.refresh()  # the same devices again: a new, equal, Mapping object
    scraper.scrape()
    assert scraper.rewrites == 1


def test_a_new_body_or_new_owners_are_rewritten(node):
    path, kubelet, attribution, scraper = node
    scraper.scrape()
    path.write_bytes(L4.replace(b"} 210\n", b"} 1410\n"))  # values move, as with every dcgm collection
    moved = scraper.scrape()
    assert scraper.rewrites == 2 and b"} 1410\n" in moved
    kubelet.devices = [AllocatedDevice("ml", "trainer-1", "pytorch", "nvidia.com/gpu", L4_UUID)]
    attribution.refresh()
    reowned = scraper.scrape()
    assert scraper.rewrites == 3
    assert b'pod="trainer-1"' in reowned and b'pod="trainer-0"' not in reowned


def test_gzip_answer_is_one_member_that_decodes_to_the_plain_answer(node):
    _, _, _, scraper = node
    for _ in range(2):  # the second answer reuses the compressed shared part
        body = scraper.scrape_body()
        compressed = b"".join(body.gzip_parts())
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        assert inflater.decompress(compressed) == bytes(body)
        assert inflater.eof and inflater.unused_data == b""  # one member: no reliance on multi-member support
        assert gzip.decompress(compressed) == bytes(body)


def test_plain_bytes_answer_has_the_same_parts_and_gzip():
    body = ScrapeBody((b"a 1\n", b"b 2\n"), b"c 3\n")
    assert bytes(body) == b"a 1\nb 2\nc 3\n" and len(body) == 12
    assert gzip.decompress(b"".join(body.gzip_parts())) == b"a 1\nb 2\nc 3\n"


def _without_status(answer: bytes) -> bytes:
    # The status gauges (scrape duration, mapping age) change on every scrape by design.
    return answer.split(b"# HELP pod_gpu_exporter_dcgm_up", 1)[0]


def test_new_hpc_jobs_are_served_at_once_without_rewriting_the_body(node):
    # A kept section with a source of its own: its rows follow its data (a new value, compared by
    # identity) while the rewrite of the unchanged body and mapping is kept.
    path, _, attribution, _ = node
    jobs = [HpcJobs((HpcJob("0", "", "7001"),))]
    hpc = HpcJobsSection(lambda: jobs[0], lambda: SectionState(True, 0.0))
    scraper = Scraper(FileSource(DcgmFileOptions(str(path))), attribution, "kubernetes",
                      [AllocationSection("kubernetes", None, lambda: True, DCGM_FIGURES), hpc, StatusSection(NVIDIA.status)])
    assert b'hpc_job="7001"' in scraper.scrape()
    jobs[0] = HpcJobs((HpcJob("0", "", "7002"),), 1)
    answer = scraper.scrape()
    assert b'hpc_job="7002"' in answer and b'hpc_job="7001"' not in answer
    assert b"pod_gpu_exporter_hpc_job_files_skipped 1\n" in answer
    compressed = gzip.decompress(b"".join(scraper.scrape_body().gzip_parts()))  # its shared prefix made again
    assert b'hpc_job="7002"' in compressed and b'hpc_job="7001"' not in compressed
    assert scraper.rewrites == 1
