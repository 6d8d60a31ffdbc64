"""The HPC jobs' families: the jobs on each device, and the files skipped reading them."""

from __future__ import annotations

from typing import Tuple

from exporter.exposition.families import Family, device_first, gathered, telemetry_family

# What must be on for these to be served.
SWITCH = "--hpc.job-mapping-dir"  # its collector's switch
HPC_JOBS = f"{SWITCH} set"

# /gpu/metrics with --hpc.job-mapping-dir: the jobs on each GPU, rows to join on, never copies of samples.
HPC_JOB_INFO = telemetry_family(
    "pod_gpu_hpc_job_info", "An HPC job running on this GPU or MIG instance, from its file in --hpc.job-mapping-dir "
    "(1 per job per device).", labels=("gpu", "hpc_job"), optional_labels=("UUID", "GPU_I_ID"),
    modes=frozenset({HPC_JOBS}), needs_samples=True, **device_first("hpc_job"))
HPC_JOB_FILES_SKIPPED = telemetry_family(
    "pod_gpu_exporter_hpc_job_files_skipped", "Files of --hpc.job-mapping-dir skipped at the last refresh: too large, "
    "a line too long, not UTF-8, unreadable, not a regular file, or past the file count read.",
    modes=frozenset({HPC_JOBS}))

FAMILIES: Tuple[Family, ...] = gathered(globals())
