"""ProcessShares refresh by refresh (real nvidia-ml-py over the fake NVML, a fake /proc tree): what is
served, when it is withheld, and that each reason is logged once."""

from __future__ import annotations

import re
import threading
import time

from exporter.core.mapping import build_mapping
from exporter.vendors.nvidia.shares.compute import PodContainers
from exporter.vendors.nvidia.shares.process_shares import ProcessShares, ProcessSharesOptions
from exporter.vendors.nvidia.nvml.library import open_nvml
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.clocks import ManualClock
from support.devices import Device
from support.proc_tree import ProcTree
from support.waiting import wait_until

UUID = "GPU-11111111-2222-3333-4444-555555555555"
UID = "0f5c8a12-3b4d-4e6f-8a9b-0c1d2e3f4a5b"
CID = "ab" * 32
PODS = {UID: PodContainers("ml", "a", {CID: "main"})}
MAPPING = build_mapping(DEVICE_FORMS, [Device("ml", "a", "main", "nvidia.com/gpu", UUID + "::0"),
                         Device("ml", "b", "main", "nvidia.com/gpu", UUID + "::1")])
MEMORY_A = f'pod_gpu_container_memory_used_bytes{{UUID="{UUID}",gpu="0",namespace="ml",pod="a",container="main"}}'
UNATTRIBUTED = f'pod_gpu_exporter_unattributed_processes{{UUID="{UUID}",gpu="0"}}'


def make_shares(proc_root, pods=PODS, clock=None):
    return ProcessShares(ProcessSharesOptions(str(proc_root), 5.0, "kubernetes"), open_nvml, lambda: MAPPING,
                         lambda: pods, clock=clock or ManualClock())


def lines(shares):
    return shares.text().decode().splitlines()


def nvml_up(shares) -> str:
    (line,) = [line for line in lines(shares) if line.startswith("pod_gpu_exporter_nvml_up ")]
    return line.rpartition(" ")[2]


def test_a_lone_process_that_exits_mid_refresh_is_unattributed_not_a_missing_host_pid(nvml_node, tmp_path, log_stream):
    nvml_node.gpu(0, UUID).process(UUID, 10, 4096).write()
    proc = ProcTree(tmp_path / "proc")  # NVML listed PID 10; its /proc entry is already gone
    shares = make_shares(proc.root)
    shares.refresh()
    assert f"{MEMORY_A} 0" in lines(shares) and f"{UNATTRIBUTED} 1" in lines(shares)
    nvml_node.lines.pop()
    nvml_node.write()  # the driver lets it go too
    shares.refresh()
    assert f"{UNATTRIBUTED} 0" in lines(shares)
    assert "hostPID" not in log_stream.getvalue()


def test_without_host_pids_nothing_is_served_and_the_reason_is_logged_once(nvml_node, tmp_path, log_stream):
    nvml_node.gpu(0, UUID).process(UUID, 10, 4096).write()
    proc = ProcTree(tmp_path / "proc")
    shares = make_shares(proc.root)
    for _ in range(5):
        shares.refresh()
    assert nvml_up(shares) == "1"
    assert not any(line.startswith("pod_gpu_container_") for line in lines(shares))
    assert log_stream.getvalue().count("hostPID: true") == 1
    proc.container_process(10, UID, CID)  # now deployed with hostPID
    shares.refresh()
    assert f"{MEMORY_A} 4096" in lines(shares)
    assert log_stream.getvalue().count("host processes visible again") == 1


def test_shares_older_than_two_intervals_are_withheld(nvml_node, tmp_path):
    nvml_node.gpu(0, UUID).process(UUID, 10, 4096).write()
    ProcTree(tmp_path / "proc").container_process(10, UID, CID)
    clock = ManualClock()
    shares = make_shares(tmp_path / "proc", clock=clock)
    shares.refresh()
    clock.now += 10.0  # two intervals: still served
    assert f"{MEMORY_A} 4096" in lines(shares) and "pod_gpu_exporter_nvml_up 1" in lines(shares)
    clock.now += 0.1  # the refresher has stalled (a hung NVML call)
    assert nvml_up(shares) == "0" and MEMORY_A not in shares.text().decode()


def test_without_the_pod_index_no_share_is_served(nvml_node, tmp_path, log_stream):
    nvml_node.gpu(0, UUID).process(UUID, 10, 4096).write()
    ProcTree(tmp_path / "proc").container_process(10, UID, CID)
    shares = make_shares(tmp_path / "proc", pods=None)
    for _ in range(3):
        shares.refresh()
    assert nvml_up(shares) == "1" and "pod_gpu_container_" not in shares.text().decode()
    assert log_stream.getvalue().count("need the Kubernetes API") == 1


def test_nvml_that_cannot_list_gpus_reads_nvml_up_0(nvml_node, tmp_path, log_stream):
    nvml_node.gpu(0, UUID).process(UUID, 10, 4096).fail("nvmlDeviceGetCount", 15).write()
    ProcTree(tmp_path / "proc").container_process(10, UID, CID)
    shares = make_shares(tmp_path / "proc")
    shares.refresh()
    shares.refresh()
    assert lines(shares)[:3] == ["# HELP pod_gpu_exporter_nvml_up 1 when NVML answered the last per-process refresh "
                                 "(--sharing.mode process), else 0.", "# TYPE pod_gpu_exporter_nvml_up gauge",
                                 "pod_gpu_exporter_nvml_up 0"]
    assert re.fullmatch(r"pod_gpu_exporter_process_shares_refresh_duration_seconds \d+\.\d+", lines(shares)[-1])
    assert log_stream.getvalue().count("NVML failed") == 1 and "GPU is lost" in log_stream.getvalue()


def test_start_does_not_wait_for_a_hung_driver_and_refreshes_on_its_own_thread(tmp_path):
    release, threads = threading.Event(), []

    def hung_nvml():  # NVML calls have no timeout: a hung driver blocks the NVML worker, never the caller
        threads.append(threading.current_thread().name)
        release.wait(10)
        return None, "driver gone"

    shares = ProcessShares(ProcessSharesOptions(str(tmp_path), 0.01, "kubernetes"), hung_nvml, lambda: MAPPING,
                           lambda: PODS)
    started = time.monotonic()
    shares.start()
    assert time.monotonic() - started < 1
    try:
        wait_until(lambda: threads)
        release.set()
        wait_until(lambda: len(threads) >= 3)  # then every interval
    finally:
        release.set()
        shares.stop()
    assert set(threads) == {"process-shares-nvml"}  # the refresher's NVML worker, never the caller's thread


def test_the_refresh_duration_is_served_once_not_again_as_a_section_duration(nvml_node, tmp_path):
    nvml_node.gpu(0, UUID).write()
    shares = make_shares(ProcTree(tmp_path / "proc").root)
    shares.refresh()
    assert any(line.startswith("pod_gpu_exporter_process_shares_refresh_duration_seconds ") for line in lines(shares))
    assert shares.state().up and shares.state().duration_seconds is None
