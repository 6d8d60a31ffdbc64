"""PodResourcesClient against FakeKubelet: a real gRPC server on a unix socket playing the kubelet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from exporter.base.errors import KubeletError
from exporter.sources.kubelet import MAX_RECEIVE_BYTES, AllocatedDevice, KubeletOptions, PodResourcesClient
from support.fake_kubelet import FakeKubelet
from support.unix_relay import SlowUnixRelay
from support.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
DRA_DRIVER = "gpu.nvidia.com"

DEVICES = [
    AllocatedDevice("ml", "trainer-0", "main", GPU, "GPU-6f3e1c2a-0000-1111-2222-333344445555"),
    AllocatedDevice("ml", "trainer-0", "main", GPU, "GPU-9a8b7c6d-0000-1111-2222-333344445555"),
    AllocatedDevice("ml", "trainer-0", "sidecar", "nvidia.com/mig-1g.10gb", "MIG-0b2c-4d5e"),
    AllocatedDevice("web", "infer-7d9f", "server", GPU, "GPU-1234abcd-0000-1111-2222-333344445555::3"),
    AllocatedDevice("web", "infer-7d9f", "server", "example.com/fpga", "fpga-2"),
    AllocatedDevice("dra", "claimer", "ctr", DRA_DRIVER, "gpu-0", dra=True, claim="dra/gpu-claim"),
    AllocatedDevice("dra", "claimer", "ctr", DRA_DRIVER, "gpu-1", dra=True, claim="dra/gpu-claim"),
    AllocatedDevice("dra", "claimer", "ctr", DRA_DRIVER, "gpu-2-mig-1-0", dra=True, claim="shared/other"),
]
PLUGIN_DEVICES = [d for d in DEVICES if not d.dra]


def _key(device: AllocatedDevice) -> tuple:
    return (device.namespace, device.pod, device.container, device.resource, device.device_id, device.claim)


def _sorted(devices) -> list[AllocatedDevice]:
    return sorted(devices, key=_key)


@pytest.fixture
def socket_path(tmp_path) -> str:
    return str(tmp_path / "kubelet.sock")


@pytest.fixture
def kubelet(socket_path):
    with FakeKubelet(socket_path) as fake:
        fake.set_devices(DEVICES)
        yield fake


@pytest.fixture
def client(socket_path):
    with PodResourcesClient(KubeletOptions(socket_path, timeout_seconds=5.0)) as pod_resources:
        yield pod_resources


def _reason(client: PodResourcesClient) -> KubeletError:
    with pytest.raises(KubeletError) as caught:
        client.list_devices()
    assert client.socket_path in str(caught.value), "the message must name the socket"
    return caught.value


def test_v1_lists_device_plugin_and_dra_devices(kubelet, client):
    assert _sorted(client.list_devices()) == _sorted(DEVICES)
    assert client.api_version == "v1"
    assert kubelet.list_calls == 1


def test_v1alpha1_only_kubelet_falls_back_and_remembers(socket_path, client):
    with FakeKubelet(socket_path, versions=("v1alpha1",)) as kubelet:
        kubelet.set_devices(DEVICES)
        assert _sorted(client.list_devices()) == _sorted(PLUGIN_DEVICES)  # v1alpha1 has no DRA
        assert client.api_version == "v1alpha1"
        assert kubelet.list_calls == 2  # v1 refused (UNIMPLEMENTED by gRPC itself), then v1alpha1
        client.list_devices()
        assert kubelet.list_calls == 3  # the choice is remembered: no second v1 probe


def test_kubelet_upgrade_is_reprobed_on_the_same_client(socket_path, client):
    with FakeKubelet(socket_path, versions=("v1alpha1",)) as old:
        old.set_devices(DEVICES)
        client.list_devices()
        assert client.api_version == "v1alpha1"
    with FakeKubelet(socket_path) as upgraded:
        upgraded.set_devices(DEVICES)
        assert _sorted(client.list_devices()) == _sorted(DEVICES)
        assert client.api_version == "v1"


def test_absent_socket_says_to_mount_the_folder(client):
    error = _reason(client)
    assert error.reason == "absent"
    assert "not found" in str(error) and "mounted" in str(error)


def test_a_regular_file_is_not_a_socket(socket_path, client):
    Path(socket_path).write_text("not a socket")
    assert _reason(client).reason == "error"


def test_stale_socket_without_a_listener_is_unavailable(socket_path, client):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.close()  # the file stays, nobody listens: a kubelet that died without cleaning up
    assert _reason(client).reason == "unavailable"


def test_same_client_follows_a_restarted_kubelet(socket_path, kubelet, client):
    assert _sorted(client.list_devices()) == _sorted(DEVICES)
    kubelet.stop()
    assert not os.path.exists(socket_path)
    assert _reason(client).reason == "absent"
    moved = [AllocatedDevice("new", "pod-after-restart", "c", GPU, "GPU-after")]
    kubelet.set_devices(moved)
    kubelet.start()
    assert client.list_devices() == moved


def test_restart_between_two_calls_is_invisible(socket_path, kubelet, client):
    client.list_devices()
    kubelet.stop()
    with FakeKubelet(socket_path) as restarted:
        restarted.set_devices(PLUGIN_DEVICES[:1])
        assert client.list_devices() == PLUGIN_DEVICES[:1]


def test_a_kubelet_slow_to_answer_a_connection_is_listed_within_the_timeout(socket_path, kubelet, tmp_path):
    # gRPC gave a connection attempt (its handshake included) only 100 ms: on a busy node, and in the
    # end-to-end tests, a first List failed at once as "kubelet not answering".
    slow = str(tmp_path / "slow.sock")
    with SlowUnixRelay(slow, socket_path, delay_seconds=0.5), \
            PodResourcesClient(KubeletOptions(slow, timeout_seconds=5.0)) as patient:
        assert _sorted(patient.list_devices()) == _sorted(DEVICES)


def test_hanging_kubelet_times_out_and_the_client_recovers(socket_path, kubelet):
    with PodResourcesClient(KubeletOptions(socket_path, timeout_seconds=0.5)) as impatient:
        kubelet.fault = "hang"
        error = _reason(impatient)
        assert error.reason == "timeout"
        assert "--kubelet.timeout" in str(error)
        kubelet.fault = None
        assert _sorted(impatient.list_devices()) == _sorted(DEVICES)


@pytest.mark.parametrize("fault, reason, words", [
    ("rate_limited", "rate_limited", "rate limit"),
    ("unknown", "error", "UNKNOWN"),
    ("unimplemented", "unimplemented", "v1alpha1"),
])
def test_kubelet_faults_become_stable_reasons(kubelet, client, fault, reason, words):
    kubelet.fault = fault
    error = _reason(client)
    assert error.reason == reason
    assert words in str(error)
    assert error.__cause__ is not None, "the gRPC error must be chained"
    kubelet.fault = None
    assert _sorted(client.list_devices()) == _sorted(DEVICES)


def test_response_over_grpc_default_4mib_is_received(kubelet, client):
    assert MAX_RECEIVE_BYTES >= 16 * 2**20
    kubelet.pad_bytes = 5 * 2**20
    devices = client.list_devices()
    assert kubelet.last_response_bytes > 4 * 2**20, "the test's premise: a response above 4 MiB"
    assert _sorted(devices) == _sorted(DEVICES)  # padding pods hold no devices


def test_response_over_our_limit_is_too_large_not_rate_limited(socket_path, kubelet):
    kubelet.pad_bytes = 2 * 2**20
    with PodResourcesClient(KubeletOptions(socket_path, max_receive_bytes=2**20)) as small:
        error = _reason(small)
    assert error.reason == "too_large"
    assert "receive limit" in str(error)


def test_stop_does_not_wait_for_a_hanging_call(kubelet, socket_path):
    kubelet.fault = "hang"
    outcome: list[KubeletError] = []

    def call() -> None:
        with PodResourcesClient(KubeletOptions(socket_path, timeout_seconds=120)) as patient:
            try:
                patient.list_devices()
            except KubeletError as exc:
                outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: kubelet.list_calls == 1, 30, 0.02)
    kubelet.stop()
    caller.join(timeout=30)
    assert not caller.is_alive(), "stop() must release a hanging call"
    assert outcome and outcome[0].reason in ("unavailable", "error")


def test_list_calls_counts_concurrent_clients(kubelet, socket_path):
    def call() -> None:
        with PodResourcesClient(KubeletOptions(socket_path)) as own:
            for _ in range(5):
                own.list_devices()

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert kubelet.list_calls == 20


_UNPRIVILEGED_CHILD = """
import json, os, sys
import grpc, grpc._channel  # loaded while root: the interpreter's own files may be unreadable later
from exporter.sources.kubelet import KubeletOptions, PodResourcesClient
from exporter.base.errors import KubeletError
client = PodResourcesClient(KubeletOptions(sys.argv[1], timeout_seconds=5.0))
os.setgroups([]); os.setgid(65534); os.setuid(65534)
try:
    client.list_devices()
    print(json.dumps({"reason": None}))
except KubeletError as exc:
    print(json.dumps({"reason": exc.reason, "message": str(exc)}))
"""


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop to uid 65534")
def test_unprivileged_user_gets_permission_reason():
    # Like the real kubelet socket: root-owned, mode 0755, in a folder anyone may traverse. The
    # child drops privileges itself (after starting as root) because this interpreter may live
    # under a folder uid 65534 cannot read; tmp_path is not world-traversable either.
    folder = tempfile.mkdtemp(prefix="podres-perm-")
    try:
        os.chmod(folder, 0o755)
        path = os.path.join(folder, "kubelet.sock")
        with FakeKubelet(path) as kubelet:
            kubelet.set_devices(DEVICES)
            os.chmod(path, 0o755)
            child = subprocess.run([sys.executable, "-c", _UNPRIVILEGED_CHILD, path], cwd=REPO_ROOT,
                                   capture_output=True, text=True, timeout=60)
            assert child.returncode == 0, child.stderr
            result = json.loads(child.stdout)
            assert result["reason"] == "permission", result
            assert path in result["message"] and "root" in result["message"]
            assert kubelet.list_calls == 0
    finally:
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)


def test_an_unchanged_answer_is_read_once(kubelet, client):
    # The answer is compared as bytes: reading it into devices again would cost several times the
    # List itself, every refresh interval, on a node whose allocations rarely change.
    first = client.list_devices()
    assert client.list_devices() is first and kubelet.list_calls == 2
    # The same pods in another order, as a real kubelet lists them (from a Go map).
    kubelet.set_devices(sorted(DEVICES, key=lambda device: device.pod))
    assert client.list_devices() is first
    kubelet.set_devices(PLUGIN_DEVICES)
    changed = client.list_devices()
    assert changed is not first and _sorted(changed) == _sorted(PLUGIN_DEVICES)
    assert client.list_devices() is changed
