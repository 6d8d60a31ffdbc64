"""dcgm-exporter's HPC job-mapping directory (--hpc.job-mapping-dir): one file per GPU, one job ID per line."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import List, Optional, Tuple

from exporter.base.logs import LogOnce, log
from exporter.core.hpc_jobs import NO_HPC_JOBS, HpcJob, HpcJobs

# The names dcgm-exporter reads: "<gpu>" for a whole GPU, "<gpu>.<GPU instance ID>" for a MIG
# instance; it ignores every other name (a writer's temporary file, a README), and so do we.
_MAPPING_FILE_NAME = re.compile(r"(0|[1-9][0-9]{0,3})(?:\.(0|[1-9][0-9]{0,3}))?")


@dataclass(frozen=True)
class HpcJobsOptions:
    """Where the mapping files are and how much of them is read: the directory is written by job
    prolog scripts, and a runaway script must not cost the exporter its memory or its refresh."""

    directory: str
    max_files: int = 512  # 64 GPUs with 7 MIG instances each, with room to spare
    max_file_bytes: int = 64 * 1024
    max_line_bytes: int = 256  # Slurm's job IDs (array and het-job forms included) are far shorter


class _BadFile(Exception):
    """A mapping file that cannot be used as a whole; its message says why."""


class HpcJobReader:
    """Reads the whole directory on the mapping refresher; never raises.

    A bad file (too large, a line too long, not UTF-8, unreadable) is skipped as a whole, counted in
    the reading it was skipped from, and logged once while it stays bad. A missing directory is logged
    once (a prolog may create it later) and reads as no jobs.
    """

    def __init__(self, options: HpcJobsOptions):
        self._options = options
        self._bad_logs = LogOnce()

    def read(self) -> HpcJobs:
        try:
            names = sorted(os.listdir(self._options.directory))
        except OSError as exc:
            self._bad_logs.retain(("directory",))
            self._bad_logs.log("directory", "warn", "HPC job-mapping directory cannot be read: no pod_gpu_hpc_job_info "
                               "until it can", directory=self._options.directory, error=exc.strerror or str(exc))
            return NO_HPC_JOBS
        files = [(name, match) for name in names if (match := _MAPPING_FILE_NAME.fullmatch(name))]
        jobs: List[HpcJob] = []
        bad: List[str] = []
        for name, match in files[:self._options.max_files]:
            try:
                jobs.extend(HpcJob(match.group(1), match.group(2) or "", job) for job in self._read_file(name))
            except _BadFile as exc:
                bad.append(name)
                self._bad_logs.log(name, "warn", "HPC job-mapping file skipped", file=name, reason=str(exc))
        self._report_excess(files)
        self._bad_logs.retain(bad + (["excess"] if len(files) > self._options.max_files else []))
        return HpcJobs(tuple(sorted(set(jobs))), len(bad) + max(0, len(files) - self._options.max_files))

    def _read_file(self, name: str) -> Tuple[str, ...]:
        path = os.path.join(self._options.directory, name)
        try:
            # O_NONBLOCK: a named pipe (or a device) with a mapping file's name must not hold the mapping
            # refresher in open() until some writer comes; only a regular file is read.
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise _BadFile(f"unreadable: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise _BadFile("not a regular file")
        with os.fdopen(descriptor, "rb") as handle:
            try:
                data = handle.read(self._options.max_file_bytes + 1)
            except OSError as exc:
                raise _BadFile(f"unreadable: {exc.strerror or exc}") from exc
        if len(data) > self._options.max_file_bytes:
            raise _BadFile(f"larger than {self._options.max_file_bytes} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _BadFile("not UTF-8 text") from exc
        lines = [line.strip() for line in text.splitlines()]
        if any(len(line.encode()) > self._options.max_line_bytes for line in lines):
            raise _BadFile(f"a line longer than {self._options.max_line_bytes} bytes")
        return tuple(line for line in lines if line)

    def _report_excess(self, files: list) -> None:
        extra = len(files) - self._options.max_files
        if extra > 0:
            self._bad_logs.log("excess", "warn", "HPC job-mapping directory holds more files than are read; the rest "
                               "are skipped", directory=self._options.directory, read=self._options.max_files,
                               skipped=extra)


def make_hpc_job_reader(directory: Optional[str]) -> Optional[HpcJobReader]:
    """A reader for --hpc.job-mapping-dir, or None when it is not set."""
    if not directory:
        return None
    log("info", "HPC job mapping on: pod_gpu_hpc_job_info names the jobs in each GPU's file", directory=directory)
    return HpcJobReader(HpcJobsOptions(directory))
