"""dcgm-exporter's HPC job-mapping directory (--hpc.job-mapping-dir): one file per GPU, one job ID per line,
read on a refresher of its own, each reading within a bound, whatever the kubelet does."""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from typing import List, NamedTuple, Optional, Tuple

from exporter.base.bounded import BoundedRunner, CallTimeout
from exporter.base.logs import DependencyReporter, LogOnce, log
from exporter.collectors.hpc_jobs.jobs import NO_HPC_JOBS, HpcJob, HpcJobs
from exporter.collectors.hpc_jobs.options import HpcJobsOptions
from exporter.core.refresher import Refresher

# The names dcgm-exporter reads: "<gpu>" for a whole GPU, "<gpu>.<GPU instance ID>" for a MIG
# instance; it ignores every other name (a writer's temporary file, a README), and so do we.
_MAPPING_FILE_NAME = re.compile(r"(0|[1-9][0-9]{0,3})(?:\.(0|[1-9][0-9]{0,3}))?")


class _BadFile(Exception):
    """A mapping file that cannot be used as a whole; its message says why."""


class HpcJobReader:
    """Reads the whole directory; never raises.

    A bad file (too large, a line too long, not UTF-8, unreadable, not a regular file, one fstat fails
    on) is skipped as a whole, counted in the reading it was skipped from, and logged once while it
    stays bad. A missing directory is logged once (a prolog may create it later) and reads as no jobs.
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
        try:
            regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
        except OSError as exc:  # a failing file system: this file is skipped, the others still read
            os.close(descriptor)
            raise _BadFile(f"unreadable: {exc.strerror or exc}") from exc
        if not regular:
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


class HpcJobsState(NamedTuple):
    """The last reading's outcome: whether it was done in time, and how long it took."""

    up: bool
    duration_seconds: Optional[float]  # None before the first reading


class HpcJobSource:
    """The job-mapping directory, read every `refresh_interval_seconds` on a thread of its own.

    Its jobs are the kubelet's concern in no way: they are served while the kubelet is down, before it
    first answers and after its mapping aged out. A reading that does not return within
    `timeout_seconds` (the file system hangs) is given up and the last jobs are kept; while it still
    has not returned no other starts (one stuck thread at most, as with the dcgm textfile).
    """

    def __init__(self, options: HpcJobsOptions):
        self._reader = HpcJobReader(options)
        self._runner = BoundedRunner("hpc-job-reader", options.timeout_seconds,
                                     f"reading the HPC job-mapping directory {options.directory}", counted=False)
        self._reporter = DependencyReporter("hpc-job-mapping-dir")
        self._directory = options.directory
        self._refresher = Refresher("hpc-job-refresher", self.refresh, options.refresh_interval_seconds,
                                    "the HPC job mapping")
        self._lock = threading.Lock()
        self.timeout_seconds = options.timeout_seconds  # a reading's bound, so also the wait for the first
        self._jobs: HpcJobs = NO_HPC_JOBS
        self._state = HpcJobsState(False, None)  # up once a reading was done in time
        self._read_at: Optional[float] = None  # time.monotonic() of the last reading done in time

    def refresh(self) -> bool:
        """Read the directory once within the bound; on a timeout keep the last jobs. Returns success."""
        started = time.perf_counter()
        try:
            jobs = self._runner.run(self._reader.read)
        except CallTimeout as exc:
            self._reporter.failed("timeout", str(exc), directory=self._directory)
            with self._lock:
                self._state = HpcJobsState(False, time.perf_counter() - started)
            return False
        self._reporter.succeeded("HPC job-mapping directory read in time again", directory=self._directory)
        with self._lock:
            if jobs != self._jobs:  # the same value kept: scrape caches compare it by identity
                self._jobs = jobs
            self._state = HpcJobsState(True, time.perf_counter() - started)
            self._read_at = time.monotonic()
        return True

    def current(self) -> HpcJobs:
        """The last jobs read: an immutable value, the same object while they are unchanged."""
        with self._lock:
            return self._jobs

    def state(self) -> HpcJobsState:
        with self._lock:
            return self._state

    def failure(self) -> Optional[str]:
        """Why the last reading was given up, in one line; None while readings are done in time."""
        return self._reporter.failure

    def age_seconds(self) -> Optional[float]:
        """Since the last reading done in time; None before the first."""
        with self._lock:
            read_at = self._read_at
        return None if read_at is None else time.monotonic() - read_at

    def start(self) -> None:
        self._refresher.start()

    def wait_first(self, timeout_seconds: float) -> bool:
        return self._refresher.wait_first(timeout_seconds)

    def stop(self, timeout_seconds: float = 2.0) -> None:
        self._refresher.stop(timeout_seconds)


def make_hpc_job_source(options: Optional[HpcJobsOptions]) -> Optional[HpcJobSource]:
    """The source of --hpc.job-mapping-dir, not started, or None when it is not set."""
    if options is None:
        return None
    log("info", "HPC job mapping on: pod_gpu_hpc_job_info names the jobs in each GPU's file", directory=options.directory)
    return HpcJobSource(options)
