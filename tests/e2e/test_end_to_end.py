"""The real exporter process between a gRPC kubelet on a unix socket and an HTTP dcgm-exporter."""

from __future__ import annotations

import ctypes
import gzip
import os
import platform
import re
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes, fixture_path
from support.scrape_checks import (
    FAST_REFRESH,
    L4_UUID,
    assert_parses,
    gpu_uuids,
    sample_lines,
    scrape,
    split_sample,
    without_owner_labels,
)
from support.waiting import wait_until

L4 = "dcgm/l4-aws-gpu-operator-default-counters.prom"














@pytest.mark.parametrize(
    "fixture",
    [
        L4,
        "dcgm/lke-rtx4000ada-k8s.prom",
        "dcgm/synth-lke-sample-as-rendered-by-4.8.3-expfmt.prom",
        "dcgm/datadog-fixture-t4-mixed-real-and-curated.prom",
        "dcgm/grid-a100-8c-vgpu-vm-vks.prom",
        "dcgm/repo-derived-4.8.3-escaping-example.prom",
        "dcgm/repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom",
        "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom",
        "dcgm/issue-188-1x-compat-names-empty-pod-labels-excerpt.prom",
    ],
)
def test_every_sample_comes_back_byte_exact_with_owner_labels(fixture, socket_dir, run_exporter):
    body = fixture_bytes(fixture)
    uuids = gpu_uuids(body)
    held = uuids[0].decode() if uuids else "GPU-test-uuid"
    with FakeKubelet(str(socket_dir / "kubelet.sock")) as kubelet, FakeDcgmExporter(body) as dcgm:
        kubelet.set_devices([AllocatedDevice("team-a", 'job "x"', "main", "nvidia.com/gpu", held)])
        exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
        out = scrape(exporter).text

    source = body.decode()
    out_lines = set(out.splitlines())
    for line in source.splitlines():
        if line.startswith("# HELP") or line.startswith("# TYPE"):
            assert line in out_lines, f"HELP/TYPE changed: {line}"
    owner = ',namespace="team-a",pod="job \\"x\\"",container="main"'
    for line in sample_lines(source):
        if "{" not in line:
            assert line in out_lines, f"unlabelled sample changed: {line}"
            continue
        name, labels, rest = split_sample(line)
        kept = without_owner_labels(labels)
        if f'UUID="{held}"' in labels or f'uuid="{held}"' in labels:
            if 'GPU_I_ID="' in labels:
                expected = f"{name}{{{kept}}}{rest}"  # a MIG instance is not the whole GPU the pod holds
            else:
                expected = f"{name}{{{kept}{owner}}}{rest}" if kept else f"{name}{{{owner[1:]}}}{rest}"
        else:
            expected = f"{name}{{{kept}}}{rest}"
        if kept == labels or expected.endswith(f"{owner}}}{rest}"):
            assert expected in out_lines, f"missing or altered:\n in: {line}\nwant: {expected}"
        else:  # upstream owner labels removed: compare the kept labels' text exactly
            assert expected in out_lines, f"upstream owner labels not replaced:\n in: {line}\nwant: {expected}"
    assert_parses(out)


def test_v1alpha1_kubelet_legacy_textfile_and_legacy_labels(socket_dir, run_exporter):
    legacy = fixture_path("legacy/dcgm.prom")
    source = legacy.read_text()
    held, idle = sorted(set(re.findall(r'uuid="(GPU-[^"]+)"', source)))
    with FakeKubelet(str(socket_dir / "kubelet.sock"), versions=("v1alpha1",)) as kubelet:
        kubelet.set_devices([AllocatedDevice("default", "cuda-job", "cuda", "nvidia.com/gpu", held)])
        exporter = run_exporter(["--dcgm.file", str(legacy), "--kubelet.socket", kubelet.socket_path,
                                 "--labels.style", "legacy"])
        out = scrape(exporter).text
        metrics = scrape(exporter, "/metrics").text
    out_lines = set(out.splitlines())
    for line in sample_lines(source):
        if f'uuid="{held}"' in line:
            head, rest = line.rsplit("}", 1)
            # The seed's format: pod_name, pod_namespace, container_name appended in that order.
            assert f'{head},pod_name="cuda-job",pod_namespace="default",container_name="cuda"}}{rest}' in out_lines
        else:
            assert f'uuid="{idle}"' in line
            assert line in out_lines, f"idle GPU sample changed: {line}"
    assert 'pod=""' not in out and "namespace=" not in out.replace("pod_namespace=", "")
    assert "pod_gpu_exporter_kubelet_up 1" in out
    assert "pod_gpu_exporter_kubelet_list_calls_total" in metrics
    assert_parses(out)


def test_upstream_owner_labels_empty_and_stale_are_replaced(socket_dir, run_exporter):
    body = fixture_bytes("dcgm/lke-rtx4000ada-k8s.prom")  # carries container="cuda",namespace="default",pod="cuda-…"
    uuid = gpu_uuids(body)[0].decode()
    empty = fixture_bytes("dcgm/issue-gpu-operator-687-a100-mig-7g79gb-empty-pod-labels-excerpt.prom")
    with FakeKubelet(str(socket_dir / "kubelet.sock")) as kubelet, FakeDcgmExporter(body) as dcgm:
        kubelet.set_devices([AllocatedDevice("prod", "new-owner", "worker", "nvidia.com/gpu", uuid)])
        exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
        stale_out = scrape(exporter).text
        dcgm.body = empty  # idle MIG GPU reported with pod="" by an old dcgm-exporter -k
        empty_out = wait_until(lambda: (lambda t: t if "1410" in t else None)(scrape(exporter).text))
    for line in sample_lines(stale_out):
        if line.startswith("DCGM_"):
            assert line.count("pod=") == 1 and line.count("namespace=") == 1 and line.count("container=") == 1
            assert 'pod="new-owner"' in line and "cuda-75454ffb9f" not in line and "pod_uid" not in line
    dcgm_lines = [line for line in sample_lines(empty_out) if line.startswith("DCGM_")]
    assert dcgm_lines and all('pod=""' not in line and "namespace=" not in line for line in dcgm_lines)


def test_malformed_line_is_dropped_and_counted_rest_served(socket_dir, kubelet, run_exporter):
    lines = fixture_bytes(L4).decode().splitlines()
    middle = len(lines) // 2
    broken = lines[:middle] + ['DCGM_FI_DEV_BROKEN{gpu="0",UUID="unterminated} 1', "not a metric line at all"] + lines[middle:]
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    with FakeDcgmExporter(("\n".join(broken) + "\n").encode()) as dcgm:
        exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
        out = scrape(exporter).text
        metrics = scrape(exporter, "/metrics").text
    assert "DCGM_FI_DEV_BROKEN" not in out and "not a metric" not in out
    assert len([l for l in sample_lines(out) if l.startswith("DCGM_")]) == len(sample_lines("\n".join(lines)))
    assert "pod_gpu_exporter_malformed_lines 2" in out
    assert "pod_gpu_exporter_malformed_lines_total 2.0" in metrics
    assert_parses(out)


def test_upstream_down_then_back(socket_dir, kubelet, run_exporter):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    dcgm = FakeDcgmExporter(fixture_bytes(L4)).start()
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--dcgm.timeout", "1s"])
    assert "pod_gpu_exporter_dcgm_up 1" in scrape(exporter).text
    port = dcgm.url.split(":")[2].split("/")[0]
    dcgm.stop()
    down = scrape(exporter)
    assert down.status_code == 200
    assert "pod_gpu_exporter_dcgm_up 0" in down.text
    assert "DCGM_" not in down.text  # never stale GPU data
    assert 'pod_gpu_allocation_info{namespace="ns",pod="p"' in down.text
    revived = FakeDcgmExporter(fixture_bytes(L4), port=int(port)).start()
    try:
        back = wait_until(lambda: (lambda t: t if "pod_gpu_exporter_dcgm_up 1" in t else None)(scrape(exporter).text))
        assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in back
    finally:
        revived.stop()
    log = exporter.wait_for_log("dcgm-exporter answering again")
    assert log.count("level=warn") == 1


def test_kubelet_socket_absent_at_start_then_appears(socket_dir, dcgm, run_exporter):
    socket_path = str(socket_dir / "kubelet.sock")
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", socket_path] + FAST_REFRESH)
    first = scrape(exporter).text
    assert "pod_gpu_exporter_kubelet_up 0" in first and "pod=" not in first
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in first  # GPU series are served unattributed meanwhile
    with FakeKubelet(socket_path) as kubelet:
        kubelet.set_devices([AllocatedDevice("late", "arrival", "c", "nvidia.com/gpu", L4_UUID)])
        out = wait_until(lambda: (lambda t: t if 'pod="arrival"' in t else None)(scrape(exporter).text))
    assert "pod_gpu_exporter_kubelet_up 1" in out
    exporter.wait_for_log("not found")


def test_kubelet_restart_with_new_mapping(socket_dir, dcgm, run_exporter):
    socket_path = str(socket_dir / "kubelet.sock")
    kubelet = FakeKubelet(socket_path).start()
    kubelet.set_devices([AllocatedDevice("ns", "before", "c", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", socket_path] + FAST_REFRESH)
    assert 'pod="before"' in scrape(exporter).text
    kubelet.stop()  # the socket file is deleted, as when the kubelet restarts
    during = scrape(exporter).text
    assert 'pod="before"' in during  # the last good mapping is kept meanwhile
    restarted = FakeKubelet(socket_path)
    restarted.set_devices([AllocatedDevice("ns", "after", "c", "nvidia.com/gpu", L4_UUID)])
    with restarted:
        out = wait_until(lambda: (lambda t: t if 'pod="after"' in t else None)(scrape(exporter).text))
    assert 'pod="before"' not in out


def test_stale_mapping_dropped_after_max_age(socket_dir, dcgm, run_exporter):
    socket_path = str(socket_dir / "kubelet.sock")
    kubelet = FakeKubelet(socket_path).start()
    kubelet.set_devices([AllocatedDevice("ns", "gone", "c", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", socket_path,
                             "--kubelet.mapping-max-age", "1s"] + FAST_REFRESH)
    assert 'pod="gone"' in scrape(exporter).text
    kubelet.stop()
    out = wait_until(lambda: (lambda t: t if 'pod="gone"' not in t else None)(scrape(exporter).text))
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in out and "pod_gpu_exporter_kubelet_up 0" in out


def test_concurrent_scrapes_do_not_call_the_kubelet(socket_dir, kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path,
                             "--kubelet.refresh-interval", "1m"])
    calls_before = kubelet.list_calls
    with ThreadPoolExecutor(max_workers=50) as pool:
        bodies = list(pool.map(lambda _: scrape(exporter).text, range(50)))
    assert all('pod="p"' in body for body in bodies)
    assert kubelet.list_calls - calls_before <= 2
    assert kubelet.list_calls <= 3


def test_routes_content_type_and_gzip(socket_dir, kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    plain = scrape(exporter, headers={"Accept-Encoding": "identity"})
    assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in plain.headers
    raw = requests.get(exporter.url(), headers={"Accept-Encoding": "gzip"}, stream=True, timeout=10)
    assert raw.headers["Content-Encoding"] == "gzip"
    unzipped = gzip.decompress(raw.raw.read()).decode()
    assert sample_lines(unzipped)[:5] == sample_lines(plain.text)[:5]
    assert "process_resident_memory_bytes" in scrape(exporter, "/metrics").text
    assert scrape(exporter, "/healthz").text == "ok\n"
    assert "/gpu/metrics" in scrape(exporter, "/").text
    assert requests.get(exporter.url("/nope"), timeout=10).status_code == 404
    assert requests.post(exporter.url(), data=b"x", timeout=10).status_code == 405
    assert requests.head(exporter.url(), timeout=10).status_code == 200


def test_sigterm_exits_cleanly(socket_dir, kubelet, dcgm, run_exporter):
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    scrape(exporter)
    assert exporter.stop(signal.SIGTERM, timeout_seconds=10) == 0
    assert "msg=stopped" in exporter.stderr_text()


# tgkill(2): a signal to one thread of a process; what the kernel may do with a SIGTERM sent to the process.
_TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())


@pytest.mark.skipif(_TGKILL is None or not sys.platform.startswith("linux"),
                    reason="tgkill's number is known on Linux x86_64 and aarch64")
def test_a_signal_taken_by_another_thread_still_stops_the_exporter_at_once(socket_dir, kubelet, dcgm, run_exporter):
    # The main thread sleeps in select() for connections; a SIGTERM the kernel hands to another thread
    # (gRPC's, a refresher's) ran its handler only when a connection came, never on an idle node.
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    pid = exporter.proc.pid
    others = [int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid]
    assert others, "the exporter runs threads besides its main one"
    assert ctypes.CDLL(None, use_errno=True).syscall(_TGKILL, pid, others[0], signal.SIGTERM) == 0
    assert exporter.proc.wait(timeout=5) == 0
    assert 'msg="shutting down" signal=SIGTERM' in exporter.stderr_text()


def test_sigint_exits_cleanly(socket_dir, kubelet, dcgm, run_exporter):
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    assert exporter.stop(signal.SIGINT, timeout_seconds=10) == 0
