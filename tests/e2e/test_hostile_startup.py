"""Hostile start-up and NVML, against the real exporter process: a driver whose nvmlInit or MIG lookups hang
(the fake libnvidia-ml.so.1 in C, loaded by the real nvidia-ml-py), an API server that never answers its first
list, and SIGTERM in each phase of start-up."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.exporter_process import exporter_command, exporter_env, start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kube_api import write_kubeconfig
from support.fixtures import fixture_bytes
from support.kube_scenario import H100, UUID0, UUID1, UUID3
from support.nvml_node import NODE_ENV, FakeNode
from support.raw_tcp import RawTcpServer
from support.scrape_checks import scrape
from support.waiting import wait_until

MIG13 = "MIG-7c1d2e3f-4a5b-5c6d-9e0f-a1b2c3d4e5f6"  # GPU 0's GPU instance 13, as NVML names it
MIG11 = "MIG-0b1c2d3e-4f50-5162-a3b4-c5d6e7f80912"  # GPU 0's instance 11
HANG_MS = 30_000  # far longer than any bound the exporter sets: only a bound lets it carry on
SHUTDOWN_SECONDS = 2.0  # docs/operations.md, Request limits: SIGTERM ends the process within 2 s, code 0
WHOLE = AllocatedDevice("web", "whole-a", "c", "nvidia.com/gpu", UUID1)
LATER = AllocatedDevice("web", "whole-b", "c", "nvidia.com/gpu", UUID3)
ON_MIG = AllocatedDevice("ml", "on-mig", "c", "nvidia.com/mig-1g.10gb", MIG13)
ON_MIG11 = AllocatedDevice("ml", "on-mig-11", "c", "nvidia.com/mig-1g.10gb", MIG11)


@pytest.fixture
def h100():
    with FakeDcgmExporter(fixture_bytes(H100)) as dcgm:
        yield dcgm


def nvml_env(library: Path, node: FakeNode) -> dict:
    return {"LD_LIBRARY_PATH": str(library.parent), NODE_ENV: str(node.path)}


def base_args(kubelet, dcgm, *extra):
    return ["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--kubelet.refresh-interval", "200ms",
            "--kubernetes.api", "off", *extra]


def attributed(exporter, pod: str) -> bool:
    try:
        text = requests.get(exporter.url(), timeout=10).text
    except requests.RequestException:
        return False
    return any(line.startswith("DCGM_") and f'pod="{pod}"' in line for line in text.splitlines())


def test_a_hung_mig_lookup_does_not_stop_attribution_of_the_other_gpus(kubelet, h100, fake_nvml_library, tmp_path,
                                                                        run_exporter):
    # Every MIG lookup hangs (nvmlDeviceGetHandleByUUID): the exporter starts on a node without MIG
    # devices, so NVML is not opened until one turns up.
    node = FakeNode(tmp_path / "nvml-node.txt").gpu(0, UUID0).mig(0, 11, MIG11).mig(0, 13, MIG13)
    node.hang("nvmlDeviceGetHandleByUUID", HANG_MS).write()
    kubelet.set_devices([WHOLE])
    exporter = run_exporter(base_args(kubelet, h100), env=nvml_env(fake_nvml_library, node))
    wait_until(lambda: attributed(exporter, "whole-a"))
    # Two MIG devices whose lookups hang (the second is refused at once while the first still
    # hangs), and a new whole GPU's pod.
    kubelet.set_devices([WHOLE, ON_MIG, ON_MIG11, LATER])
    started = time.monotonic()
    # The new pod's samples are attributed while the lookup still hangs (bounded at 2 s), not after it.
    wait_until(lambda: attributed(exporter, "whole-b"), timeout_seconds=HANG_MS / 1000 / 2)
    assert time.monotonic() - started < HANG_MS / 1000 / 2
    text = requests.get(exporter.url(), timeout=10).text
    assert "pod_gpu_exporter_unresolved_devices 2" in text  # the MIG devices: unresolved, never guessed
    assert not any('pod="on-mig' in line for line in text.splitlines() if line.startswith("DCGM_"))
    log = exporter.wait_for_log("did not return in time")
    assert log.count("did not return in time") == 1, log  # the first timeout at warn, the rest at debug
    metrics = requests.get(exporter.url("/metrics"), timeout=10).text
    assert re.search(r"(?m)^pod_gpu_exporter_nvml_timeouts_total [1-9]", metrics), metrics


def test_a_hung_nvml_init_delays_neither_serving_nor_attribution(kubelet, h100, fake_nvml_library, tmp_path):
    node = FakeNode(tmp_path / "nvml-node.txt").gpu(0, UUID0).mig(0, 13, MIG13).hang("nvmlInit", HANG_MS).write()
    kubelet.set_devices([WHOLE, ON_MIG])  # the MIG device makes the first refresh open NVML
    started = time.monotonic()
    exporter = start_exporter(base_args(kubelet, h100), env=nvml_env(fake_nvml_library, node),
                              timeout_seconds=HANG_MS / 1000 / 2)
    try:
        assert requests.get(exporter.url("/healthz"), timeout=10).status_code == 200
        wait_until(lambda: attributed(exporter, "whole-a"), timeout_seconds=HANG_MS / 1000 / 2)
        assert time.monotonic() - started < HANG_MS / 1000 / 2  # nvmlInit still hangs
        exporter.wait_for_log("nvmlInit (for MIG lookups) did not return in time")
    finally:
        exporter.stop()


def test_a_hung_process_shares_read_is_bounded_and_reported(kubelet, h100, fake_nvml_library, tmp_path,
                                                            run_exporter):
    node = FakeNode(tmp_path / "nvml-node.txt").gpu(0, UUID1)
    node.hang("nvmlDeviceGetComputeRunningProcesses", HANG_MS).write()
    kubelet.set_devices([WHOLE])
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    exporter = run_exporter(base_args(kubelet, h100, "--sharing.mode", "process", "--sharing.proc-root",
                                      str(proc_root)), env=nvml_env(fake_nvml_library, node))
    exporter.wait_for_log("reason=timeout", "dependency=nvml", timeout_seconds=HANG_MS / 1000 / 2)
    text = requests.get(exporter.url(), timeout=10).text
    assert "pod_gpu_exporter_nvml_up 0" in text and attributed(exporter, "whole-a")
    # Later refreshes go on, each refused at once while the read still hangs: no thread per refresh.
    wait_until(lambda: nvml_timeouts(exporter) >= 3)
    assert threads_of(exporter.proc.pid) < 30


def nvml_timeouts(exporter) -> float:
    metrics = requests.get(exporter.url("/metrics"), timeout=10).text
    match = re.search(r"(?m)^pod_gpu_exporter_nvml_timeouts_total (\S+)$", metrics)
    return float(match.group(1)) if match else 0.0


def threads_of(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def _silent_api() -> RawTcpServer:
    """An API server that accepts connections and never answers: the first pod list never comes."""
    held = []  # kept open (and so unanswered) until the test ends
    server = RawTcpServer(held.append)
    server.held = held
    return server


def _close(api: RawTcpServer) -> None:
    api.close()
    for conn in api.held:
        conn.close()


def test_an_api_that_never_lists_delays_neither_serving_nor_attribution(kubelet, h100, tmp_path):
    api = _silent_api()
    kubelet.set_devices([WHOLE])
    args = [a for a in base_args(kubelet, h100, "--kubelet.timeout", "30s") if a not in ("--kubernetes.api", "off")]
    args += ["--kubernetes.kubeconfig", write_kubeconfig(str(tmp_path / "kubeconfig"), api.url),
             "--kubernetes.node-name", "gpu-node-1"]
    started = time.monotonic()
    try:
        exporter = start_exporter(args, timeout_seconds=HANG_MS / 1000 / 2)  # it waited 30 s (--kubelet.timeout)
        try:
            assert requests.get(exporter.url("/healthz"), timeout=10).status_code == 200
            text = requests.get(exporter.url(), timeout=30).text
            assert time.monotonic() - started < HANG_MS / 1000 / 2
            assert any(line.startswith("DCGM_") and 'pod="whole-a"' in line for line in text.splitlines())
            assert "pod_gpu_exporter_kubernetes_api_up 0" in text and api.connections >= 1
        finally:
            exporter.stop()
    finally:
        _close(api)


def _popen(args, env):
    args = list(args) + ["--web.listen-address", "127.0.0.1:0"]
    return subprocess.Popen(exporter_command() + args, env=exporter_env(env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("phase", ["nvml-init-mig", "nvml-init-process-shares", "api-first-list",
                                   "serving-with-nvml-hung"])
def test_sigterm_in_each_start_up_phase_exits_0_within_2s_with_a_log_line(kubelet, h100, fake_nvml_library,
                                                                           tmp_path, phase):
    node = FakeNode(tmp_path / "nvml-node.txt").gpu(0, UUID0).mig(0, 13, MIG13)
    api = _silent_api()
    args = base_args(kubelet, h100, "--kubelet.timeout", "30s")
    kubelet.set_devices([WHOLE])
    if phase == "nvml-init-mig":
        node.hang("nvmlInit", HANG_MS)
        kubelet.set_devices([WHOLE, ON_MIG])
    elif phase == "nvml-init-process-shares":
        node.hang("nvmlInit", HANG_MS)
    elif phase == "serving-with-nvml-hung":
        node.hang("nvmlDeviceGetComputeRunningProcesses", HANG_MS)
    if phase in ("nvml-init-process-shares", "serving-with-nvml-hung"):
        (tmp_path / "proc").mkdir()
        args += ["--sharing.mode", "process", "--sharing.proc-root", str(tmp_path / "proc")]
    if phase == "api-first-list":
        args = [a for a in args if a not in ("--kubernetes.api", "off")]
        args += ["--kubernetes.kubeconfig", write_kubeconfig(str(tmp_path / "kubeconfig"), api.url),
                 "--kubernetes.node-name", "gpu-node-1"]
    node.write()
    proc = _popen(args, nvml_env(fake_nvml_library, node))
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        # Inside the hang (30 s): the first list is asked for and never answered, or the NVML call has begun.
        if phase == "api-first-list":
            wait_until(lambda: api.connections >= 1)
        else:
            hung = "nvmlDeviceGetComputeRunningProcesses" if phase == "serving-with-nvml-hung" else "nvmlInit"
            wait_until(lambda: hung in node.hanging(), describe=f"{hung} hanging")
        assert proc.poll() is None, "".join(lines)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(HANG_MS / 1000)
        except subprocess.TimeoutExpired:
            pass
        seconds = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _close(api)
    reader.join(5)
    log = "".join(lines)
    assert proc.returncode == 0, (proc.returncode, log)
    assert seconds < SHUTDOWN_SECONDS, (seconds, log)
    assert 'msg="shutting down" signal=SIGTERM' in log and "msg=stopped" in log, log


def test_a_crash_in_a_c_library_leaves_every_threads_python_stack_in_the_log(kubelet, dcgm):
    # SIGSEGV is what a fault in grpcio, protobuf, msgspec or NVML raises: the log must say where.
    log = ""
    # faulthandler reads every thread's frames without stopping them: a thread that is closing a
    # socket or importing at that moment can cut the dump short (no "Current thread" part), which is
    # the interpreter's limit and not what this test is about; such a run is tried again, twice at most.
    for _attempt in range(3):
        log = _crash_log(kubelet, dcgm)
        if "Current thread 0x" in log:
            break
    assert "Fatal Python error: Segmentation fault" in log, log
    assert re.search(r'File ".*exporter/web/server\.py", line \d+ in serve_until_stopped', log), log


def _crash_log(kubelet, dcgm) -> str:
    """The log of an exporter crashed by SIGSEGV once its first refresh answered a scrape."""
    exporter = start_exporter(["--kubelet.socket", kubelet.socket_path, "--dcgm.url", dcgm.url,
                               "--kubernetes.api", "off"])
    wait_until(lambda: "pod_gpu_exporter_kubelet_up 1" in scrape(exporter).text, 20, 0.05,
               "a scrape after the first refresh")
    assert exporter.stop(signal.SIGSEGV) == -signal.SIGSEGV
    return exporter.stderr_text()
