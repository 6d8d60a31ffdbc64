"""The fake libnvidia-ml.so.1 (tests/support/fake_nvml/fake_nvml.c), built with the system compiler, and the
node file it answers from."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import List

from support.deploy_tools import missing_tool

SOURCE = Path(__file__).resolve().parent / "fake_nvml" / "fake_nvml.c"
LIBRARY_NAME = "libnvidia-ml.so.1"
NODE_ENV = "FAKE_NVML_NODE"


def build_fake_nvml(directory: Path) -> Path:
    """Compile the fake into DIRECTORY/libnvidia-ml.so.1 (SONAME set, so dlopen by name finds it)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        missing_tool("a C compiler (cc)", "apt-get install gcc libc6-dev (.ci/run does)")
    target = directory / LIBRARY_NAME
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", f"-Wl,-soname,{LIBRARY_NAME}",
                    "-o", str(target), str(SOURCE)], check=True, capture_output=True, text=True)
    return target


def preload(library: Path) -> None:
    """Load the fake into this process, so pynvml's CDLL("libnvidia-ml.so.1") gets it by SONAME."""
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


class FakeNode:
    """A node for the fake NVML: GPUs, MIG instances, processes and utilisation samples, as a file."""

    def __init__(self, path: Path):
        self.path = path
        self.lines: List[str] = []

    def gpu(self, index: int, uuid: str, minor: int = None, utilization: bool = True) -> "FakeNode":
        options = ("" if minor is None else f" minor={minor}") + ("" if utilization else " utilization=no")
        self.lines.append(f"gpu {index} {uuid}{options}")
        return self

    def mig(self, gpu_index: int, instance: int, uuid: str, slices: int = None, profile: int = None,
            start: int = None) -> "FakeNode":
        """A MIG device: its GPU instance spans `slices` memory slices from `start`, of profile ID `profile`."""
        options = {"slices": slices, "profile": profile, "start": start}
        self.lines.append(f"mig {gpu_index} {instance} {uuid}"
                          + "".join(f" {name}={value}" for name, value in options.items() if value is not None))
        return self

    def energy(self, gpu_uuid: str, millijoules: int, milliwatts: int = 0) -> "FakeNode":
        """The board's total energy; a later call for the same GPU replaces it (the counter moves), and
        with `milliwatts` it also grows by itself, as a board drawing that power."""
        self.lines = [line for line in self.lines if not line.startswith(f"energy {gpu_uuid} ")]
        self.lines.append(f"energy {gpu_uuid} {millijoules}" + (f" {milliwatts}" if milliwatts else ""))
        return self

    def process(self, device_uuid: str, pid: int, used_bytes: int, kind: str = "compute") -> "FakeNode":
        self.lines.append(f"process {device_uuid} {kind} {pid} {used_bytes}")
        return self

    def sample(self, device_uuid: str, pid: int, sm_percent: int, age_ms: int = 0) -> "FakeNode":
        self.lines.append(f"sample {device_uuid} {pid} {sm_percent} {age_ms}")
        return self

    def fail(self, function: str, code: int, device_uuid: str = "") -> "FakeNode":
        self.lines.append(f"fail {function} {code} {device_uuid}".rstrip())
        return self

    def hang(self, function: str, milliseconds: int) -> "FakeNode":
        self.lines.append(f"hang {function} {milliseconds}")
        return self

    def xid(self, gpu_uuid: str, xid: int, gpu_instance: int = None) -> "FakeNode":
        """An XID event on that GPU (on one of its MIG instances with `gpu_instance`), delivered at once to
        a wait of a set that registered the GPU: appended to the events file, never rewritten."""
        line = f"xid {gpu_uuid} {xid}" + ("" if gpu_instance is None else f" {gpu_instance}")
        with self.path.with_name(self.path.name + ".events").open("a") as events:
            events.write(line + "\n")
        return self

    def hanging(self) -> List[str]:
        """The entry points whose injected hang has begun, in order (the fake notes each as it starts)."""
        try:
            return self.path.with_name(self.path.name + ".hanging").read_text().split()
        except FileNotFoundError:
            return []

    def write(self) -> "FakeNode":
        # Written to a temporary file and renamed: the exporter may read it at any moment.
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text("\n".join(self.lines) + "\n")
        temporary.replace(self.path)
        return self
