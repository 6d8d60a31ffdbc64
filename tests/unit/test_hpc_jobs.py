"""The HPC job-mapping reader on a folder tree: which names are read, and its bounds."""

from __future__ import annotations

import errno
import os
import threading
import time

from exporter.collectors.hpc_jobs.jobs import HpcJob
from exporter.collectors.hpc_jobs.source import HpcJobReader, HpcJobSource, HpcJobsOptions


def test_reads_gpu_and_mig_instance_files_and_ignores_other_names(tmp_path):
    for name, text in {"0": "11\n12\n11\n", "3.2": " 31 \n\n", "03": "x\n", "1.tmp": "x\n", "README": "x\n"}.items():
        (tmp_path / name).write_text(text)
    read = HpcJobReader(HpcJobsOptions(str(tmp_path))).read()
    assert read.jobs == (HpcJob("0", "", "11"), HpcJob("0", "", "12"), HpcJob("3", "2", "31"))
    assert read.skipped_files == 0


def test_files_past_the_bounds_are_skipped_whole_and_counted(tmp_path):
    (tmp_path / "0").write_text("1\n" + "2" * 20 + "\n")  # a line over 16 bytes
    (tmp_path / "1").write_text("1\n" * 40)  # over 64 bytes
    (tmp_path / "2").write_text("ok\n")
    for index in range(3, 6):  # three more files than the four read
        (tmp_path / str(index)).write_text("late\n")
    options = HpcJobsOptions(str(tmp_path), max_files=4, max_file_bytes=64, max_line_bytes=16)
    read = HpcJobReader(options).read()
    assert read.jobs == (HpcJob("2", "", "ok"), HpcJob("3", "", "late"))  # "0"-"3" read, in sorted order
    assert read.skipped_files == 2 + 2  # "0" and "1", and the two files past the count


def test_a_missing_directory_is_no_jobs(tmp_path):
    read = HpcJobReader(HpcJobsOptions(str(tmp_path / "absent"))).read()
    assert read.jobs == () and read.skipped_files == 0


def test_a_named_pipe_or_folder_with_a_mapping_files_name_is_skipped_without_waiting(tmp_path):
    # open() of a FIFO blocks until a writer comes: it would stop the mapping refresher for good.
    os.mkfifo(tmp_path / "0")
    (tmp_path / "1").mkdir()
    (tmp_path / "2").write_text("ok\n")
    read = HpcJobReader(HpcJobsOptions(str(tmp_path))).read()
    assert read.jobs == (HpcJob("2", "", "ok"),)
    assert read.skipped_files == 2


def test_a_file_fstat_fails_on_is_skipped_and_counted_and_the_others_read(tmp_path, monkeypatch):
    # A failing file system (EIO from fstat) once aborted the whole mapping refresh, kubelet's List and all.
    for name in ("0", "1"):
        (tmp_path / name).write_text(f"job-{name}\n")
    failing = os.open(tmp_path / "0", os.O_RDONLY)
    bad_inode = os.fstat(failing).st_ino
    os.close(failing)
    real_fstat = os.fstat

    def fstat(descriptor):
        result = real_fstat(descriptor)
        if result.st_ino == bad_inode:
            raise OSError(errno.EIO, "Input/output error")
        return result

    monkeypatch.setattr(os, "fstat", fstat)  # the standard library's, standing in for a failing disk
    read = HpcJobReader(HpcJobsOptions(str(tmp_path))).read()
    assert read.jobs == (HpcJob("1", "", "job-1"),)
    assert read.skipped_files == 1


def test_a_reading_that_hangs_is_given_up_within_the_bound_and_the_last_jobs_kept(tmp_path, monkeypatch):
    (tmp_path / "0").write_text("7001\n")
    source = HpcJobSource(HpcJobsOptions(str(tmp_path), timeout_seconds=0.2))
    assert source.refresh() and source.current().jobs == (HpcJob("0", "", "7001"),)
    release = threading.Event()
    real_listdir = os.listdir

    def hanging_listdir(path):  # a hung network file system
        release.wait(10)
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", hanging_listdir)
    try:
        started = time.monotonic()
        assert not source.refresh()
        assert time.monotonic() - started < 2
        assert source.current().jobs == (HpcJob("0", "", "7001"),) and not source.state().up
        assert not source.refresh()  # refused at once while the stuck reading has not returned
    finally:
        release.set()
