"""The HPC job source's own settings, typed and frozen: what its collector builds from --hpc.job-mapping-dir."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HpcJobsOptions:
    """Where the mapping files are and how much of them is read: the directory is written by job
    prolog scripts, and a runaway script must not cost the exporter its memory or its refresh."""

    directory: str
    max_files: int = 512  # 64 GPUs with 7 MIG instances each, with room to spare
    max_file_bytes: int = 64 * 1024
    max_line_bytes: int = 256  # Slurm's job IDs (array and het-job forms included) are far shorter
    refresh_interval_seconds: float = 5.0  # as often as the kubelet is listed (--kubelet.refresh-interval)
    # A reading that takes longer (a hung network file system) is given up: the last jobs stay served.
    timeout_seconds: float = 5.0
