"""--hpc.job-mapping-dir against the real exporter: dcgm-exporter's job files (whole GPUs and MIG
instances, several jobs on one GPU, bad files) served as one pod_gpu_hpc_job_info row per job per device,
with the dcgm samples themselves never copied per job."""

from __future__ import annotations

import re

from exporter.sources.kubelet import AllocatedDevice
from support.fake_dcgm import FakeDcgmExporter
from support.fixtures import fixture_bytes
from support.scrape_checks import FAST_REFRESH, assert_parses, sample_lines, scrape
from support.waiting import wait_until

A800_MIG = "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom"  # GPU 0: MIG instances 3, 5 and 6; GPUs 1-7 whole
GPU0 = "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418"
GPU1 = "GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6"
_JOB_ROW = re.compile(r'^pod_gpu_hpc_job_info\{(.*)\} 1$', re.MULTILINE)


def _job_rows(text: str):
    return sorted(_JOB_ROW.findall(text))


def _served_with(exporter, needle: str):
    """A scrape's text once it holds `needle`, else None (for wait_until)."""
    text = scrape(exporter).text
    return text if needle in text else None


def _write_jobs(directory, files):
    for name, content in files.items():
        (directory / name).write_bytes(content if isinstance(content, bytes) else content.encode())


def _job_directory(tmp_path, files):
    directory = tmp_path / "jobs"
    directory.mkdir()
    _write_jobs(directory, files)
    return directory


def _start(tmp_path, kubelet, run_exporter, extra=()):
    dcgm = FakeDcgmExporter(fixture_bytes(A800_MIG)).start()
    kubelet.set_devices([AllocatedDevice("hpc", "slurmd-0", "slurmd", "nvidia.com/gpu", GPU1)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--kubernetes.api",
                             "off", "--hpc.job-mapping-dir", str(tmp_path), *FAST_REFRESH, *extra])
    return dcgm, exporter


def test_jobs_on_whole_gpus_and_mig_instances_are_one_row_each(tmp_path, kubelet, run_exporter):
    _write_jobs(tmp_path, {
        "0.3": "7001\n7002\n",  # two jobs on one MIG instance
        "0.5": "7003\n",
        "1": "8001\n8002\n\n8003\n",  # three jobs on a whole GPU; the blank line is no job
        "2": "",  # a GPU no job runs on
        "3": "9" * 300 + "\n",  # a line past the bound: the whole file is skipped
        "4": b"\xff\xfe\x00job\n",  # not UTF-8
        "notes.txt": "not a mapping file\n", "1.tmp": "a writer's temporary file\n",  # names dcgm-exporter ignores
    })
    dcgm, exporter = _start(tmp_path, kubelet, run_exporter)
    try:
        text = wait_until(lambda: _served_with(exporter, "pod_gpu_hpc_job_info{"), describe="the job rows")
        assert _job_rows(text) == sorted([
            f'UUID="{GPU0}",gpu="0",GPU_I_ID="3",hpc_job="7001"', f'UUID="{GPU0}",gpu="0",GPU_I_ID="3",hpc_job="7002"',
            f'UUID="{GPU0}",gpu="0",GPU_I_ID="5",hpc_job="7003"',
            f'UUID="{GPU1}",gpu="1",hpc_job="8001"', f'UUID="{GPU1}",gpu="1",hpc_job="8002"',
            f'UUID="{GPU1}",gpu="1",hpc_job="8003"',
        ])
        assert "pod_gpu_exporter_hpc_job_files_skipped 2\n" in text
        # The samples are dcgm-exporter's, once each, whatever the number of jobs on their GPU.
        upstream = [line for line in sample_lines(fixture_bytes(A800_MIG).decode())]
        served = [line for line in sample_lines(text) if line.startswith("DCGM_")]
        assert len(served) == len(upstream)
        assert not any("hpc_job" in line for line in served)
        assert_parses(text)
    finally:
        dcgm.stop()


def test_a_changed_file_is_served_at_the_next_refresh_and_a_bad_one_logged_once(tmp_path, kubelet, run_exporter):
    _write_jobs(tmp_path, {"1": "8001\n", "5": "x" * 70000})  # "5" is past the 64 KiB bound
    dcgm, exporter = _start(tmp_path, kubelet, run_exporter)
    try:
        wait_until(lambda: 'hpc_job="8001"' in scrape(exporter).text, describe="the first job")
        _write_jobs(tmp_path, {"1": "8004\n", "0.6": "7009\n"})
        text = wait_until(lambda: _served_with(exporter, 'hpc_job="7009"'), describe="the new jobs")
        assert _job_rows(text) == [f'UUID="{GPU0}",gpu="0",GPU_I_ID="6",hpc_job="7009"',
                                   f'UUID="{GPU1}",gpu="1",hpc_job="8004"']
        assert "pod_gpu_exporter_hpc_job_files_skipped 1\n" in text
        skipped = exporter.wait_for_lines("HPC job-mapping file skipped")
        assert len(skipped) == 1 and "file=5" in skipped[0], exporter.stderr_text()
        (tmp_path / "5").unlink()  # the last bad file gone: nothing is skipped
        wait_until(lambda: "pod_gpu_exporter_hpc_job_files_skipped 0\n" in scrape(exporter).text,
                   describe="no file skipped")
    finally:
        dcgm.stop()


def test_a_directory_not_there_yet_serves_no_rows_until_it_is(tmp_path, kubelet, run_exporter):
    directory = tmp_path / "jobs"
    dcgm, exporter = _start(directory, kubelet, run_exporter)
    try:
        text = wait_until(lambda: _served_with(exporter, 'pod="slurmd-0"'), describe="attributed samples")
        assert "pod_gpu_hpc_job_info{" not in text and "pod_gpu_exporter_hpc_job_files_skipped 0\n" in text
        directory.mkdir()
        _write_jobs(directory, {"1": "8001\n"})
        wait_until(lambda: 'hpc_job="8001"' in scrape(exporter).text, describe="the job once the directory is there")
        warned = exporter.wait_for_lines("directory cannot be read")
        assert len(warned) == 1, exporter.stderr_text()
    finally:
        dcgm.stop()


def test_jobs_are_served_with_no_kubelet_at_all(tmp_path, socket_dir, run_exporter):
    # The job rows are read by a source of their own: the kubelet, here never there, has no say in them
    # (they were read only after a successful List, and so never served without one).
    dcgm, exporter = _start_without_kubelet(tmp_path, socket_dir, run_exporter)
    try:
        text = wait_until(lambda: _served_with(exporter, "pod_gpu_hpc_job_info{"), describe="the job rows")
        assert _job_rows(text) == [f'UUID="{GPU1}",gpu="1",hpc_job="8001"']
        assert "pod_gpu_exporter_kubelet_up 0\n" in text and "pod_gpu_exporter_hpc_job_files_skipped 0\n" in text
        assert_parses(text)
        # /metrics tells the sections apart: the kubelet's is down, the job directory's up.
        self_metrics = scrape(exporter, "/metrics").text
        assert 'pod_gpu_exporter_section_up{section="allocation"} 0.0' in self_metrics
        assert 'pod_gpu_exporter_section_up{section="hpc_jobs"} 1.0' in self_metrics
        assert 'pod_gpu_exporter_section_duration_seconds{section="hpc_jobs"}' in self_metrics
    finally:
        dcgm.stop()


def test_the_first_answer_carries_the_job_rows(tmp_path, socket_dir, run_exporter):
    # Scrapes that come before the first mapping wait for it, and it waits for the directory's first
    # reading (within its bound): the job rows are never missing from the first answers.
    dcgm, exporter = _start_without_kubelet(tmp_path, socket_dir, run_exporter)
    try:
        assert _job_rows(scrape(exporter).text) == [f'UUID="{GPU1}",gpu="1",hpc_job="8001"']
    finally:
        dcgm.stop()


def _start_without_kubelet(tmp_path, socket_dir, run_exporter):
    """A fake dcgm-exporter and an exporter whose kubelet socket is never there, with job 8001 on GPU 1."""
    jobs = _job_directory(tmp_path, {"1": "8001\n"})
    dcgm = FakeDcgmExporter(fixture_bytes(A800_MIG)).start()
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", str(socket_dir / "absent.sock"),
                             "--kubernetes.api", "off", "--hpc.job-mapping-dir", str(jobs), *FAST_REFRESH])
    return dcgm, exporter


def test_jobs_stay_served_once_the_kubelets_mapping_aged_out(tmp_path, kubelet, run_exporter):
    # Seen: 30 s after the kubelet left, with --kubelet.mapping-max-age 5s, the job rows were gone with
    # the mapping they were kept in.
    jobs = _job_directory(tmp_path, {"1": "8001\n"})
    dcgm, exporter = _start(jobs, kubelet, run_exporter, extra=["--kubelet.mapping-max-age", "1s"])
    try:
        wait_until(lambda: _served_with(exporter, 'pod="slurmd-0"'), describe="attributed samples")
        kubelet.stop()
        text = wait_until(lambda: (lambda t: t if 'pod="slurmd-0"' not in t else None)(scrape(exporter).text),
                          describe="the mapping aged out")
        assert _job_rows(text) == [f'UUID="{GPU1}",gpu="1",hpc_job="8001"']
        _write_jobs(jobs, {"0.3": "7001\n"})  # and the directory is still read meanwhile
        text = wait_until(lambda: _served_with(exporter, 'hpc_job="7001"'), describe="a new job, kubelet gone")
        assert "pod_gpu_exporter_kubelet_up 0\n" in text
    finally:
        dcgm.stop()
