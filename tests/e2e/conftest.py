"""Fixtures of the end-to-end tests: a fake API server and the scenario node with the Kubernetes API on; AMD nodes."""

from __future__ import annotations

import pytest

from support.amd_node import AmdNode
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


@pytest.fixture
def amd_node(tmp_path):
    """A maker of simulated AMD nodes (support.amd_node.AmdNode) under the test's folder, each stopped after it."""
    made = []

    def make(**options) -> AmdNode:
        made.append(AmdNode(tmp_path, **options))
        return made[-1]

    yield make
    for amd in made:
        amd.stop()
