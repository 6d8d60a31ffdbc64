"""--sharing.mode process against the real exporter process, case by case (tests/support/shared_node.py builds
the node: kubelet, dcgm-exporter, API server, fake NVML in C, fake /proc)."""

from __future__ import annotations

import re

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.proc_tree import ProcTree
from support.scrape_checks import assert_parses, scrape
from support.shared_node import (
    A800_FIXTURE,
    A800_GPU0,
    L4,
    MIB,
    MIG_GI3,
    SHARE_FAMILIES,
    holder_labels,
    series,
    shares_served,
    without_shares,
)
from support.waiting import wait_until


@pytest.mark.parametrize("layout", [
    {"version": 1, "driver": "cgroupfs"},
    {"version": 2, "driver": "systemd"},
    {"version": 2, "driver": "systemd", "runtime": "crio", "qos": "besteffort"},
    {"version": 1, "driver": "systemd", "qos": "guaranteed"},
], ids=["cgroup-v1-cgroupfs", "cgroup-v2-systemd", "cgroup-v2-systemd-crio", "cgroup-v1-systemd"])
def test_three_pods_on_a_time_sliced_gpu_with_zero_one_and_two_processes(gpu_node, layout):
    for name in ("idle", "one", "two", "elsewhere"):
        gpu_node.add_pod(name)
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", f"{L4}::{replica}")
                              for replica, pod in enumerate(("idle", "one", "two"))])
    gpu_node.nvml.gpu(0, L4)
    for pid, pod, used, sm in ((101, "one", 300 * MIB, 20), (201, "two", 1000 * MIB, 30), (202, "two", 24 * MIB, 15),
                               (301, "elsewhere", 7 * MIB, 5)):
        gpu_node.nvml.process(L4, pid, used).sample(L4, pid, sm)
        gpu_node.run_in(pid, pod, **layout)
    gpu_node.nvml.process(L4, 1, 5 * MIB, kind="graphics").write()  # a host process: Xorg
    gpu_node.proc.host_process(1, "0::/system.slice/display-manager.service\n")
    exporter = gpu_node.start()
    text = shares_served(exporter, count=3)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {
        holder_labels("idle"): "0", holder_labels("one"): str(300 * MIB), holder_labels("two"): str(1024 * MIB)}
    assert series(text, "pod_gpu_container_sm_utilization_ratio") == {
        holder_labels("idle"): "0", holder_labels("one"): "0.2", holder_labels("two"): "0.45"}
    # The host's Xorg and the pod that does not hold this GPU are counted, never given to a holder.
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {f'UUID="{L4}",gpu="0"': "2"}
    assert "pod_gpu_exporter_nvml_up 1" in text
    assert_parses(text)


def test_dcgm_samples_are_byte_exact_and_device_mode_is_unchanged(gpu_node, run_exporter):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).energy(L4, 10**6, milliwatts=70_000).process(L4, 10, MIB).write()
    gpu_node.run_in(10, "a")
    process_mode = gpu_node.start()
    device_mode = gpu_node.start(mode="device")
    default_mode = gpu_node.start(mode=None)  # the flag left at its default is device mode
    with_policy = gpu_node.start(mode="device", extra=["--energy.idle-policy", "unattributed"])  # no effect there
    process_text = shares_served(process_mode)
    device_text, default_text, policy_text = (scrape(e).text for e in (device_mode, default_mode, with_policy))
    assert without_shares(process_text) == without_shares(device_text)  # dcgm samples and status untouched
    for text in (device_text, default_text, policy_text):
        assert not any(family in text for family in SHARE_FAMILIES)
    assert without_shares(default_text) == without_shares(device_text) == without_shares(policy_text)
    assert_parses(process_text)


def test_mps_clients_are_each_their_own_pods(gpu_node):
    gpu_node.add_pod("client-a")
    gpu_node.add_pod("client-b")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu.shared", f"{L4}::{replica}")
                              for replica, pod in enumerate(("client-a", "client-b"))])
    gpu_node.nvml.gpu(0, L4)
    gpu_node.nvml.process(L4, 500, 40 * MIB)  # nvidia-cuda-mps-server: the MPS control daemon's, not a holder's
    gpu_node.proc.host_process(500, "0::/system.slice/nvidia-mps.service\n")
    gpu_node.nvml.process(L4, 11, 2000 * MIB, kind="mps").sample(L4, 11, 60)
    gpu_node.nvml.process(L4, 12, 500 * MIB, kind="mps").process(L4, 12, 500 * MIB).sample(L4, 12, 25)  # in 2 lists
    gpu_node.nvml.write()
    gpu_node.run_in(11, "client-a")
    gpu_node.run_in(12, "client-b")
    text = shares_served(gpu_node.start(), count=2)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {
        holder_labels("client-a"): str(2000 * MIB), holder_labels("client-b"): str(500 * MIB)}
    assert series(text, "pod_gpu_container_sm_utilization_ratio") == {
        holder_labels("client-a"): "0.6", holder_labels("client-b"): "0.25"}
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {f'UUID="{L4}",gpu="0"': "1"}


def test_a_mig_instance_shared_by_two_pods(gpu_node):
    gpu_node.add_pod("small-a")
    gpu_node.add_pod("small-b")
    # MIG-<uuid> device IDs (R470+): resolved to GPU 0's GI 3 through the same fake NVML.
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/mig-2g.20gb.shared", f"{MIG_GI3}::{i}")
                              for i, pod in enumerate(("small-a", "small-b"))])
    gpu_node.nvml.gpu(0, A800_GPU0).mig(0, 3, MIG_GI3).mig(0, 5, "MIG-5f5f5f5f-6a6a-7b7b-8c8c-9d9d9d9d9d9d")
    gpu_node.nvml.process(MIG_GI3, 21, 3000 * MIB).process(MIG_GI3, 22, 900 * MIB).write()
    gpu_node.run_in(21, "small-a")
    gpu_node.run_in(22, "small-b")
    text = shares_served(gpu_node.start(A800_FIXTURE), count=2)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {
        holder_labels("small-a", A800_GPU0, instance="3"): str(3000 * MIB),
        holder_labels("small-b", A800_GPU0, instance="3"): str(900 * MIB)}
    assert "pod_gpu_container_sm_utilization_ratio" not in text  # NVML: NOT_SUPPORTED on MIG instances
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {
        f'UUID="{A800_GPU0}",gpu="0",GPU_I_ID="3"': "0", f'UUID="{A800_GPU0}",gpu="0",GPU_I_ID="5"': "0"}
    # The dcgm samples of GI 3 carry both owners, device-level, as in device mode.
    assert re.search(r'GPU_I_ID="3".*pod="small-a"', text) and re.search(r'GPU_I_ID="3".*pod="small-b"', text)
    assert_parses(text)


def test_a_pid_that_exits_mid_refresh_is_given_to_no_one(gpu_node):
    gpu_node.add_pod("a")
    gpu_node.add_pod("b")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", f"{L4}::{i}")
                              for i, pod in enumerate(("a", "b"))])
    gpu_node.nvml.gpu(0, L4).process(L4, 10, 100 * MIB).process(L4, 20, 200 * MIB).write()
    gpu_node.run_in(10, "a")
    gpu_node.run_in(20, "b")
    exporter = gpu_node.start()
    shares_served(exporter, count=2)
    gpu_node.proc.remove(20)  # pod b's process exited: NVML still listed it, its /proc entry is gone

    def b_dropped():
        text = scrape(exporter).text
        return text if series(text, "pod_gpu_container_memory_used_bytes").get(holder_labels("b")) == "0" else None

    text = wait_until(b_dropped)
    assert series(text, "pod_gpu_container_memory_used_bytes")[holder_labels("a")] == str(100 * MIB)
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {f'UUID="{L4}",gpu="0"': "1"}
    gpu_node.nvml.lines.remove(f"process {L4} compute 20 {200 * MIB}")
    gpu_node.nvml.write()  # the driver has let it go too
    wait_until(lambda: series(scrape(exporter).text, "pod_gpu_exporter_unattributed_processes")
               == {f'UUID="{L4}",gpu="0"': "0"})


def test_without_nvml_the_mode_serves_nvml_up_0_until_the_driver_appears(gpu_node):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.run_in(10, "a")
    exporter = gpu_node.start()  # no gpu_node file: the fake answers nvmlInit with DRIVER_NOT_LOADED
    text = wait_until(lambda: (t := scrape(exporter).text) and "pod_gpu_exporter_nvml_up 0" in t and t)
    assert "pod_gpu_container_memory_used_bytes" not in text
    assert 'pod="a"' in text and "pod_gpu_exporter_dcgm_up 1" in text  # dcgm samples still attributed
    # nvml_up 0 is served before the first refresh has run too: wait until it has found no driver.
    exporter.wait_for_log("NVML unavailable")
    gpu_node.nvml.gpu(0, L4).process(L4, 10, 64 * MIB).write()  # the GPU operator installs the driver
    text = shares_served(exporter)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {holder_labels("a"): str(64 * MIB)}
    assert "pod_gpu_exporter_nvml_up 1" in text
    log = exporter.stderr_text()
    assert log.count("NVML unavailable") == 1 and "Driver Not Loaded" in log


def test_without_host_pids_or_the_api_no_share_is_guessed(gpu_node, tmp_path):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).process(L4, 10, 64 * MIB).write()
    gpu_node.run_in(10, "a")
    own_pids = ProcTree(tmp_path / "own-pid-namespace").host_process(1, "0::/\n")  # what a pod without hostPID sees
    no_host_pids = gpu_node.start(extra=["--sharing.proc-root", str(own_pids.root)])
    no_api = gpu_node.start(api=False)
    for exporter, why in ((no_host_pids, "hostPID"), (no_api, "need the Kubernetes API")):
        exporter.wait_for_log(why)
        text = scrape(exporter).text
        assert "pod_gpu_exporter_nvml_up 1" in text and "pod_gpu_container_memory_used_bytes" not in text
        assert 'pod="a"' in text  # dcgm samples unaffected
    assert no_host_pids.stderr_text().count("hostPID") == 1  # said once, not per refresh
    assert no_api.stderr_text().count("need the Kubernetes API") == 1


def test_share_series_carry_the_apis_extra_labels_like_allocation_info(gpu_node):
    pod = gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).process(L4, 10, MIB).sample(L4, 10, 40).write()
    gpu_node.run_in(10, "a")
    exporter = gpu_node.start(extra=["--labels.extra", "pod_uid"])
    uid = pod["metadata"]["uid"]
    want = holder_labels("a") + f',pod_uid="{uid}"'

    def with_extras():
        text = scrape(exporter).text
        return text if want in series(text, "pod_gpu_container_memory_used_bytes") else None

    text = wait_until(with_extras)
    assert series(text, "pod_gpu_container_sm_utilization_ratio") == {want: "0.4"}
    info = series(text, "pod_gpu_allocation_info")
    assert any(f'container="main",pod_uid="{uid}"' in labels for labels in info), info  # after the owner labels, as here


def test_a_hung_nvml_never_holds_up_the_dcgm_samples(gpu_node):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).process(L4, 10, MIB).hang("nvmlDeviceGetCount", 60_000).write()  # a wedged driver
    gpu_node.run_in(10, "a")
    exporter = gpu_node.start()  # its first refresh is stuck in NVML from the start
    text = scrape(exporter).text
    assert 'pod="a"' in text and "pod_gpu_exporter_dcgm_up 1" in text
    assert "pod_gpu_exporter_nvml_up 0" in text and "pod_gpu_container_memory_used_bytes" not in text


def test_a_proc_root_that_is_not_a_directory_stops_start_up_with_exit_2(tmp_path):
    import subprocess

    from support.exporter_process import REPO_ROOT, exporter_command, exporter_env

    result = subprocess.run(exporter_command() + ["--sharing.mode", "process", "--sharing.proc-root", str(tmp_path / "none")],
                            cwd=str(REPO_ROOT), env=exporter_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"pod-gpu-metrics-exporter: error: --sharing.proc-root: {tmp_path / 'none'} is not a directory (mount the "
        "host's /proc there read-only, or run with hostPID: true and keep /proc)"]


def test_share_series_keep_to_the_label_limit_like_every_other_series(gpu_node):
    limit = 14
    label_keys = [f"team.example.com/k{index:02d}" for index in range(40)]
    gpu_node.add_pod("a", labels={key: f"value-{index}" for index, key in enumerate(label_keys)})
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).process(L4, 10, MIB).sample(L4, 10, 40).write()
    gpu_node.run_in(10, "a")
    exporter = gpu_node.start(extra=["--labels.extra", "pod_uid", "--labels.pod-labels",
                                     "|".join(re.escape(key) for key in label_keys), "--labels.limit", str(limit)])

    def with_shares():
        text = scrape(exporter).text
        return text if series(text, "pod_gpu_container_sm_utilization_ratio") else None

    text = wait_until(with_shares)
    names_of = {labels: re.findall(r'([A-Za-z_]\w*)="', labels)
                for family in SHARE_FAMILIES + ("pod_gpu_allocation_info",) for labels in series(text, family)}
    assert names_of and all(len(names) <= limit for names in names_of.values()), names_of
    memory = next(iter(series(text, "pod_gpu_container_memory_used_bytes")))
    kept = [name for name in names_of[memory] if name.startswith("label_")]
    # The share series' own labels are few (UUID, gpu), so the pod labels fill it to the limit, in order.
    assert len(names_of[memory]) == limit and "pod_uid" in names_of[memory]
    assert kept == [f"label_team_example_com_k{index:02d}" for index in range(len(kept))] and kept, memory
    assert_parses(text)
