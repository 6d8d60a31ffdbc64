"""Which HPC (Slurm) jobs run on each GPU, as a workload manager's job-mapping directory says."""

from __future__ import annotations

from typing import NamedTuple, Tuple


class HpcJob(NamedTuple):
    """One job on one GPU or MIG instance, named as dcgm-exporter's samples name the device."""

    gpu: str  # the gpu label: the NVML index the mapping file is named after
    instance: str  # the GPU_I_ID of a MIG instance ("<gpu>.<GPU_I_ID>" files), "" for a whole GPU
    job: str  # one line of the file: the job ID, as the workload manager wrote it


class HpcJobs(NamedTuple):
    """One reading of the directory: the jobs, sorted, and how many mapping files were skipped as bad."""

    jobs: Tuple[HpcJob, ...] = ()
    skipped_files: int = 0


NO_HPC_JOBS = HpcJobs()
