"""pod_gpu_hpc_job_info: one row per HPC job per GPU or MIG instance, to join dcgm's samples on."""

from __future__ import annotations

from typing import Callable, Iterable

from exporter.collectors.hpc_jobs.families import HPC_JOB_FILES_SKIPPED, HPC_JOB_INFO
from exporter.collectors.hpc_jobs.jobs import HpcJobs
from exporter.core.identity import GpuIdentity, GpuKey
from exporter.exposition.labels import gpu_label_pairs, identities_by_key
from exporter.exposition.sections import BaseSection, Gauge, ScrapeView, SectionState
from exporter.exposition.rows import label_text, render_family

def render_hpc_jobs(hpc_jobs: HpcJobs, identities: Iterable[GpuIdentity]) -> str:
    """`pod_gpu_hpc_job_info{[UUID,]gpu[,GPU_I_ID],hpc_job} 1` per job per device.

    dcgm-exporter's own --hpc-job-mapping-dir copies every sample once per job; one row per job instead
    lets PromQL join any series on (gpu, GPU_I_ID) or UUID, at the cost of one series per job. The UUID
    comes from the upstream samples with the file's gpu index (and GPU_I_ID): a job on a device no sample
    names (dcgm-exporter down, a file for a GPU the node lacks) has nothing to join and no row.
    """
    if not hpc_jobs.jobs:
        return ""
    by_key = identities_by_key(identities)
    found = ((by_key.get(GpuKey("gpu", job.gpu, job.instance)), job.job)  # the file is named by dcgm's gpu label
             for job in hpc_jobs.jobs)
    return render_family(HPC_JOB_INFO, ((label_text(HPC_JOB_INFO, dict(gpu_label_pairs(identity), hpc_job=job)), 1)
                                        for identity, job in found if identity is not None))


class HpcJobsSection(BaseSection):
    """The job rows, kept with the rewrite until the jobs change (`current` hands the same value while
    they do not): read by a source of their own, so served whatever the kubelet does. It owns
    pod_gpu_exporter_hpc_job_files_skipped."""

    name = "hpc_jobs"

    def __init__(self, current: Callable[[], HpcJobs], state: Callable[[], SectionState]):
        super().__init__()
        self._current = current
        self._source_state = state

    def key(self) -> object:
        return self._current()

    def _rows(self, view: ScrapeView) -> bytes:
        return render_hpc_jobs(self._current(), view.identities).encode()

    def gauges(self) -> Iterable[Gauge]:
        return ((HPC_JOB_FILES_SKIPPED, self._current().skipped_files),)

    def state(self) -> SectionState:
        return SectionState(*self._source_state())  # the source's own tuple: sources may not import sections
