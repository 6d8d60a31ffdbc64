"""Hostile --dcgm.file writers against the real exporter process: one that rewrites the file in place and pauses
in the middle of a write, one that truncates it and pauses after the first half. A torn or cut body must never
be served; a file renamed into place is served at once, also by a writer that renames many times a second from
the exporter's start."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import List

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.fixtures import fixture_bytes
from support.scrape_checks import L4_UUID
from support.waiting import wait_until

L4 = fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom")
PAUSE_SECONDS = 0.3  # the writer's pause in the middle of a write
IDLE_SECONDS = 1.6  # between two writes: longer than the settle window (1 s), so settled reads happen
RUN_SECONDS = 12.0


def version(marker: str) -> bytes:
    """The L4 scrape with every sample's value set to `marker`: versions of one size, told apart by value."""
    lines = [line if line.startswith("#") or not line else line.rsplit(" ", 1)[0] + " " + marker
             for line in L4.decode().split("\n")]
    return "\n".join(lines).encode()


VERSIONS = (version("1111"), version("2222"))
SAMPLES = sum(1 for line in VERSIONS[0].decode().splitlines() if line.startswith("DCGM_"))


class _BackgroundWriter:
    """Writes `path` on a thread until the `with` block ends, alternating the two versions; `writes` counts them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._write(VERSIONS[self.writes % 2])
            self.writes += 1
            self._stop.wait(self._pause())

    def _write(self, body: bytes) -> None:
        raise NotImplementedError

    def _pause(self) -> float:
        raise NotImplementedError


class _InPlaceWriter(_BackgroundWriter):
    """Rewrites `path` in place, pausing in the middle of each write."""

    def __init__(self, path: Path, how: str) -> None:
        super().__init__(path)
        self.how = how

    def _write(self, body: bytes) -> None:
        if self.how == "overwrite":  # over the old text: half new, half old while paused
            cut = len(body) // 2
        else:  # truncate, then the first half of the lines: a cut body ending at a line boundary
            cut = body.index(b"\n", len(body) // 2) + 1
        with open(self.path, "r+b" if self.how == "overwrite" else "wb", buffering=0) as handle:
            handle.write(body[:cut])
            self._stop.wait(PAUSE_SECONDS)
            handle.write(body[cut:])

    def _pause(self) -> float:
        return IDLE_SECONDS


def served_samples(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.startswith("DCGM_")]


@pytest.mark.parametrize("how", ["overwrite", "truncate"])
def test_a_file_rewritten_in_place_is_never_served_torn_or_cut(kubelet, run_exporter, tmp_path, how):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    path = tmp_path / "dcgm.prom"
    path.write_bytes(VERSIONS[1])
    exporter = run_exporter(["--dcgm.file", str(path), "--kubelet.socket", kubelet.socket_path,
                             "--dcgm.timeout", "5s"])
    served, torn, down = 0, [], 0
    with _InPlaceWriter(path, how) as writer:
        deadline = time.monotonic() + RUN_SECONDS
        while time.monotonic() < deadline:
            text = requests.get(exporter.url(), timeout=30).text
            if re.search(r"(?m)^pod_gpu_exporter_dcgm_up 0$", text):
                down += 1
                continue
            served += 1
            values = {line.rsplit(" ", 1)[1] for line in served_samples(text)}
            if len(served_samples(text)) != SAMPLES or len(values) != 1:
                torn.append(text)
            time.sleep(0.03)
    assert writer.writes >= 4
    assert served >= 5, (served, down)  # settled versions are served, not only refused
    assert not torn, f"{len(torn)} of {served} served bodies were torn or cut:\n{torn[0][:2000]}"


def test_a_file_renamed_into_place_is_served_at_once(kubelet, run_exporter, tmp_path):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    path = tmp_path / "dcgm.prom"
    path.write_bytes(VERSIONS[0])
    os.utime(path, ns=(time.time_ns() - 10**10, time.time_ns() - 10**10))  # written 10 s ago: settled
    exporter = run_exporter(["--dcgm.file", str(path), "--kubelet.socket", kubelet.socket_path])
    assert " 1111\n" in requests.get(exporter.url(), timeout=30).text
    for marker, body in (("2222", VERSIONS[1]), ("1111", VERSIONS[0])):
        temporary = tmp_path / "dcgm.prom.tmp"
        temporary.write_bytes(body)
        temporary.replace(path)  # as a writer should: a new file, whole the moment it appears
        text = requests.get(exporter.url(), timeout=30).text  # the next scrape serves it, whole
        assert f" {marker}\n" in text and len(served_samples(text)) == SAMPLES


class _RenameWriter(_BackgroundWriter):
    """Writes each version to a temporary file and renames it over `path`, every 0.05 to 0.5 s."""

    PAUSES = (0.05, 0.5, 0.2, 0.1, 0.35)  # fixed, so every run sees the same mix of fast and slower renames

    def _write(self, body: bytes) -> None:
        temporary = self.path.with_name(f"{self.path.name}.{self.writes}.tmp")
        temporary.write_bytes(body)
        temporary.replace(self.path)

    def _pause(self) -> float:
        return self.PAUSES[self.writes % len(self.PAUSES)]


def test_a_file_renamed_into_place_many_times_a_second_is_served_on_every_scrape(kubelet, run_exporter, tmp_path):
    """From the exporter's first scrape on: no accepted version to compare with, and every file seen is fresh."""
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    path = tmp_path / "dcgm.prom"
    with _RenameWriter(path) as writer:
        wait_until(path.exists, timeout_seconds=10, describe="the writer's first rename")
        exporter = run_exporter(["--dcgm.file", str(path), "--kubelet.socket", kubelet.socket_path])
        scrapes = []

        def scraped_across_ten_renames() -> bool:
            text = requests.get(exporter.url(), timeout=30).text
            scrapes.append((re.search(r"(?m)^pod_gpu_exporter_dcgm_up (\d)$", text).group(1),
                            len(served_samples(text))))
            return len(scrapes) >= 6 and writer.writes >= 10

        # Scraped until ten renames have passed: six fixed scrapes 0.3 s apart can end before that.
        wait_until(scraped_across_ten_renames, 30, 0.3, "six scrapes across ten renames")
    assert scrapes == [("1", SAMPLES)] * len(scrapes), scrapes
