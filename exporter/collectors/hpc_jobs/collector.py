"""dcgm-exporter's HPC job-mapping directory as a collector: --hpc.job-mapping-dir, its reader and its section."""

from __future__ import annotations

import functools
import os
from typing import Mapping, Optional

from exporter.base.errors import ConfigError
from exporter.collectors.collector import Collector, Flag, Hub, SourceState
from exporter.collectors.hpc_jobs.families import FAMILIES, SWITCH
from exporter.collectors.hpc_jobs.options import HpcJobsOptions


class HpcJobsCollector(Collector):
    """The jobs each GPU runs, as a job-mapping directory lists them; served whatever the kubelet does."""

    name = "hpc_jobs"
    switch = SWITCH
    section_sources = {"hpc_jobs": "the job directory read in time"}
    families = FAMILIES
    flags = (
        Flag("--hpc.job-mapping-dir", "hpc_job_mapping_dir", "text", "Directory of HPC job-mapping files in the GPU exporter's format (a file per GPU named <gpu> or <gpu>.<GPU_I_ID>, one job ID per line, e.g. written by a Slurm prolog): serves pod_gpu_hpc_job_info per job per device."),
    )
    refused = {
        "demo": {"hpc_job_mapping_dir": "the demo writes its own job-mapping folder, for its simulated Slurm job, "
                                        "and removes it at exit"},
        "mapping": {"hpc_job_mapping_dir": "HPC jobs are served as pod_gpu_hpc_job_info, never printed by it"},
    }

    def __init__(self) -> None:
        self._source = None
        self._dialect = None  # the vendor's labels for a device, for its rows

    def check(self, command: str, values: Mapping[str, object], origins: Mapping[str, str]) -> None:
        """A file is a mistake; a directory not there yet is not (a job prolog may create it; the reader says so)."""
        directory = values.get("hpc_job_mapping_dir")
        if directory and os.path.exists(directory) and not os.path.isdir(directory):
            raise ConfigError(f"--hpc.job-mapping-dir: {directory} is not a directory")

    def options(self, config) -> Optional[HpcJobsOptions]:
        """The directory, read as often as the kubelet is listed; None without --hpc.job-mapping-dir."""
        directory = config.hpc_job_mapping_dir
        if not directory:
            return None
        return HpcJobsOptions(directory, refresh_interval_seconds=config.kubelet_refresh_interval_seconds)

    def enabled(self, config) -> bool:
        return self.options(config) is not None

    def prepare(self, hub: Hub) -> bool:
        from exporter.collectors.hpc_jobs.source import make_hpc_job_source

        self._source = make_hpc_job_source(self.options(hub.config))
        self._dialect = hub.dialect
        return True

    def before_first_mapping(self, hub: Hub):
        """The first reading awaited, so that the first answers carry its rows."""
        return functools.partial(self._source.wait_first, self._source.timeout_seconds), self._source.timeout_seconds

    def start(self) -> None:
        self._source.start()

    def stop(self) -> None:
        self._source.stop(timeout_seconds=0.2)

    def sections(self):
        from exporter.collectors.hpc_jobs.section import HpcJobsSection

        return (HpcJobsSection(self._source.current, self._source.state, *([self._dialect] if self._dialect else [])),)

    def state(self) -> SourceState:
        up = self._source.state().up
        return SourceState(self.name, up, None if up else self._source.failure() or "not read yet",
                           self._source.age_seconds())
