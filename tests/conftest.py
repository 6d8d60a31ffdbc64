"""Shared fixtures: a real gRPC kubelet on a unix socket, a real HTTP dcgm-exporter, the real exporter."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from support.exporter_process import start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes

# The property tests draw the same examples on every run (a seed fixed per test), so that the test
# command's answer depends on the code alone: a run that finds a new counter-example by chance is a
# red run nobody can repeat. HYPOTHESIS_PROFILE=explore draws new examples (and replays those it
# found, from .hypothesis/) when hunting for them on purpose.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    from support import exporter_process

    exporter_process.STARTED.clear()  # before its fixtures start any: only this test's are reported
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report ends with the exit status and log tail of each exporter it started."""
    from support import exporter_process

    report = (yield).get_result()
    if not report.failed:
        return
    for number, process in enumerate(exporter_process.STARTED, 1):
        status = process.proc.poll()
        tail = "".join(process.stderr_text().splitlines(keepends=True)[-40:])
        report.sections.append((f"exporter {number} ({'running' if status is None else f'exited {status}'})",
                                tail))


@pytest.fixture
def socket_dir():
    # Unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer than that.
    path = Path(tempfile.mkdtemp(prefix="pgx-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(socket_dir):
    fake = FakeKubelet(str(socket_dir / "kubelet.sock"))
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def dcgm():
    fake = FakeDcgmExporter(fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom"))
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory):
    """The fake libnvidia-ml.so.1 (tests/support/fake_nvml/fake_nvml.c), built once with the system compiler."""
    from support.nvml_node import build_fake_nvml

    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def fake_nvml_loaded(fake_nvml_library):
    """The fake loaded into this process, where pynvml finds it by SONAME."""
    from support.nvml_node import preload

    preload(fake_nvml_library)
    return fake_nvml_library


@pytest.fixture
def gpu_node(tmp_path, socket_dir, fake_nvml_library, run_exporter):
    """A GPU node for the real exporter process in --sharing.mode process (tests/support/shared_node.py)."""
    from support.shared_node import SharedNode

    node = SharedNode(tmp_path, socket_dir, fake_nvml_library.parent, run_exporter)
    yield node
    node.stop()


@pytest.fixture
def nvml_node(fake_nvml_loaded, tmp_path, monkeypatch):
    """An empty fake NVML node for this test (FAKE_NVML_NODE points at its file)."""
    from support.nvml_node import NODE_ENV, FakeNode

    monkeypatch.setenv(NODE_ENV, str(tmp_path / "nvml-node.txt"))
    return FakeNode(tmp_path / "nvml-node.txt")


@pytest.fixture
def log_stream():
    """The exporter's log lines (debug and up, logfmt) of this test."""
    import io

    from exporter.base.logs import setup_logging

    stream = io.StringIO()
    setup_logging("debug", "logfmt", stream)
    yield stream
    setup_logging("info", "logfmt")


@pytest.fixture
def run_exporter():
    """Start exporter processes; all are stopped (SIGTERM) at the end of the test."""
    started = []

    def start(args, env=None):
        handle = start_exporter(args, env=env)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()
