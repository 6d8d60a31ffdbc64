"""The HPC job-mapping reader on a folder tree: which names are read, and its bounds."""

from __future__ import annotations

import os

from exporter.core.hpc_jobs import HpcJob
from exporter.sources.hpc_jobs import HpcJobReader, HpcJobsOptions


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
