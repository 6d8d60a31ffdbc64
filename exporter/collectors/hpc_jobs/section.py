"""pod_gpu_hpc_job_info: one row per HPC job per GPU or MIG instance, to join the GPU exporter's samples on."""

from __future__ import annotations

from typing import Callable, Iterable

from exporter.collectors.hpc_jobs.families import HPC_JOB_FILES_SKIPPED, HPC_JOB_INFO
from exporter.collectors.hpc_jobs.jobs import HpcJobs
from exporter.core.identity import GpuIdentity, GpuKey, SampleDialect
from exporter.exposition.labels import DEFAULT_DIALECT, gpu_label_pairs, identities_by_key
from exporter.exposition.sections import BaseSection, Gauge, ScrapeView, SectionState
from exporter.exposition.rows import label_text, render_family

def render_hpc_jobs(hpc_jobs: HpcJobs, identities: Iterable[GpuIdentity],
                    dialect: SampleDialect = DEFAULT_DIALECT) -> str:
    """`pod_gpu_hpc_job_info{[UUID,]gpu[,GPU_I_ID],hpc_job} 1` per job per device, the device named by the
    vendor's labels (`dialect`: on AMD gpu_id, gpu_partition_id and gpu_uuid, the file named by the gpu_id).

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
    rows = ((label_text(HPC_JOB_INFO, dict(hpc_job=job), device=gpu_label_pairs(identity, dialect)), 1)
            for identity, job in found if identity is not None)
    return render_family(HPC_JOB_INFO, rows)


class HpcJobsSection(BaseSection):
    """The job rows, kept with the rewrite until the jobs change (`current` hands the same value while
    they do not): read by a source of their own, so served whatever the kubelet does. It owns
    pod_gpu_exporter_hpc_job_files_skipped."""

    name = "hpc_jobs"

    def __init__(self, current: Callable[[], HpcJobs], state: Callable[[], SectionState],
                 dialect: SampleDialect = DEFAULT_DIALECT):
        super().__init__()
        self._current = current
        self._source_state = state
        self._dialect = dialect  # the vendor's labels for a device

    def key(self) -> object:
        return self._current()

    def _rows(self, view: ScrapeView) -> bytes:
        return render_hpc_jobs(self._current(), view.identities, self._dialect).encode()

    def gauges(self) -> Iterable[Gauge]:
        return ((HPC_JOB_FILES_SKIPPED, self._current().skipped_files),)

    def state(self) -> SectionState:
        return SectionState(*self._source_state())  # the source's own tuple: sources may not import sections
