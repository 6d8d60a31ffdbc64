"""/proc/<pid>/cgroup → (pod UID, container ID): cgroup v1 and v2, systemd and cgroupfs drivers,
containerd, CRI-O and cri-dockerd, every QoS class, nested kubelets; read from a fake /proc tree."""

from __future__ import annotations

import pytest

from exporter.sources.procfs import ProcessOwner, parse_cgroup, read_process_owner

UID = "0f5c8a12-3b4d-4e6f-8a9b-0c1d2e3f4a5b"
UID_ = UID.replace("-", "_")
CID = "4b1e2f5a6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071"
WANT = ProcessOwner(UID, CID)

V1_LINES = ("12:pids:{path}\n11:memory:{path}\n10:cpu,cpuacct:{path}\n"
            "9:devices:{path}\n1:name=systemd:{path}\n0::/\n")

# (description, cgroup path): every layout the kubelet and the runtimes produce.
PATHS = [
    ("cgroupfs guaranteed, containerd", f"/kubepods/pod{UID}/{CID}"),
    ("cgroupfs burstable, containerd", f"/kubepods/burstable/pod{UID}/{CID}"),
    ("cgroupfs besteffort, containerd", f"/kubepods/besteffort/pod{UID}/{CID}"),
    ("cgroupfs burstable, CRI-O", f"/kubepods/burstable/pod{UID}/crio-{CID}"),
    ("systemd guaranteed, containerd", f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope"),
    ("systemd burstable, containerd",
     f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope"),
    ("systemd besteffort, CRI-O",
     f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope"),
    ("systemd, cri-dockerd", f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope"),
    ("kubelet in kind (nested)",
     f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
     f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope"),
    ("kubelet inside docker", f"/docker/{'e' * 64}/kubepods/burstable/pod{UID}/{CID}"),
    ("process in a sub-cgroup of its container", f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope/init"),
]


@pytest.mark.parametrize("path", [p for _, p in PATHS], ids=[d for d, _ in PATHS])
def test_cgroup_v2(path):
    assert parse_cgroup(f"0::{path}\n") == WANT


@pytest.mark.parametrize("path", [p for _, p in PATHS], ids=[d for d, _ in PATHS])
def test_cgroup_v1(path):
    assert parse_cgroup(V1_LINES.format(path=path)) == WANT


def test_uppercase_uid_is_lowered_as_the_api_writes_it():
    assert parse_cgroup(f"0::/kubepods/pod{UID.upper()}/{CID}\n") == WANT


@pytest.mark.parametrize("text", [
    "0::/init.scope\n",
    "0::/system.slice/containerd.service\n",
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "12:pids:/\n11:memory:/system.slice/nvidia-persistenced.service\n0::/\n",
    "",
    "garbage without colons\n",
    f"0::/kubepods/podnot-a-uid/{CID}\n",
], ids=["init", "containerd", "user session", "v1 host service", "empty", "garbage", "bad uid"])
def test_host_processes_have_no_owner(text):
    assert parse_cgroup(text) is None


@pytest.mark.parametrize("container", ["", "crio-conmon-" + CID + ".scope", "not-an-id", CID[:12]])
def test_pod_without_a_recognisable_container_keeps_the_pod(container):
    path = f"/kubepods.slice/kubepods-pod{UID_}.slice/{container}".rstrip("/")
    assert parse_cgroup(f"0::{path}\n") == ProcessOwner(UID, "")


def test_read_from_a_proc_tree(tmp_path):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(f"0::/kubepods/burstable/pod{UID}/{CID}\n")
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "cgroup").write_text("0::/init.scope\n")
    assert read_process_owner(str(tmp_path), 4242) == WANT
    assert read_process_owner(str(tmp_path), 1) is None
    with pytest.raises(OSError):
        read_process_owner(str(tmp_path), 777)  # exited, or not visible without hostPID


def test_read_this_process_from_the_real_proc():
    # This test process lives outside any pod on a developer machine or in a CI VM: it must not be
    # taken for one, whatever cgroup version the machine runs.
    import os

    owner = read_process_owner("/proc", os.getpid())
    assert owner is None or len(owner.pod_uid) == 36
