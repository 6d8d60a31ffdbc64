"""Fixtures of the end-to-end tests with the Kubernetes API on: a fake API server and the scenario node."""

from __future__ import annotations

import pytest

from support.fake_dcgm import FakeDcgmExporter
from support.fake_kube_api import FakeKubeApi, write_kubeconfig
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes
from support.kube_scenario import H100, devices


@pytest.fixture
def api():
    fake = FakeKubeApi().start()
    yield fake
    fake.stop()


@pytest.fixture
def node(socket_dir, api):
    """(kubelet, dcgm, kubeconfig) for the scenario node."""
    with FakeKubelet(str(socket_dir / "kubelet.sock")) as kubelet, FakeDcgmExporter(fixture_bytes(H100)) as dcgm:
        kubelet.set_devices(devices())
        yield kubelet, dcgm, write_kubeconfig(str(socket_dir / "kubeconfig"), api.url)
