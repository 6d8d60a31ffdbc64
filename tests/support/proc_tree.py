"""A fake /proc tree: one <pid>/cgroup file per process, in the layouts real nodes produce."""

from __future__ import annotations

import shutil
from pathlib import Path


def cgroup_text(pod_uid: str, container_id: str, version: int = 2, driver: str = "systemd",
                runtime: str = "containerd", qos: str = "burstable") -> str:
    """The /proc/<pid>/cgroup text of a container's process."""
    if driver == "systemd":
        scope = {"containerd": "cri-containerd", "crio": "crio"}[runtime] + f"-{container_id}.scope"
        pod = pod_uid.replace("-", "_")
        parent = "/kubepods.slice" + ("" if qos == "guaranteed" else f"/kubepods-{qos}.slice")
        pod_slice = "kubepods" + ("" if qos == "guaranteed" else f"-{qos}") + f"-pod{pod}.slice"
        path = f"{parent}/{pod_slice}/{scope}"
    else:
        leaf = container_id if runtime == "containerd" else f"crio-{container_id}"
        path = "/kubepods" + ("" if qos == "guaranteed" else f"/{qos}") + f"/pod{pod_uid}/{leaf}"
    if version == 2:
        return f"0::{path}\n"
    return "".join(f"{n}:{c}:{path}\n" for n, c in ((12, "pids"), (11, "memory"), (4, "cpu,cpuacct"), (2, "devices"))) + "0::/\n"


class ProcTree:
    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def container_process(self, pid: int, pod_uid: str, container_id: str, **layout) -> "ProcTree":
        return self._write(pid, cgroup_text(pod_uid, container_id, **layout))

    def host_process(self, pid: int, cgroup: str = "0::/system.slice/some-gpu-daemon.service\n") -> "ProcTree":
        return self._write(pid, cgroup)

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid), ignore_errors=True)

    def _write(self, pid: int, text: str) -> "ProcTree":
        (self.root / str(pid)).mkdir(exist_ok=True)
        (self.root / str(pid) / "cgroup").write_text(text)
        return self
