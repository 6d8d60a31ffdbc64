"""The AMD resolver's refreshes: the identity service asked every time over its real unix socket, sysfs read again
only when it may have changed (a new answer, a device it did not show, or its age), and the generation moving only
when what was read changed."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from exporter.vendors.amd.demo_identity import DemoIdentityService
from exporter.vendors.amd.demo_sysfs import mi300x_node, write_sysfs
from exporter.vendors.amd.device_ids import parse_device_id
from exporter.vendors.amd.identity import AmdIdentity
from exporter.vendors.amd.identity_client import HEALTHY, UNHEALTHY, GpuState, IdentityClient
from exporter.vendors.amd.resolver import AmdResolver

NODE = mi300x_node(cpx_gpus=(7,))
STATES = tuple([GpuState(str(g.index), f"uuid-{g.index}", HEALTHY, g.address) for g in NODE[:7]]
               + [GpuState(str(7 + p), "", HEALTHY, NODE[7].partition_address(p)) for p in range(8)])
PARTITION_3 = parse_device_id("amdgpu_xcp_51")  # the CPX GPU's fourth partition: gpu_id 10


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def node(tmp_path):
    """A sysfs tree, AMD's identity service on a unix socket, and a resolver over both on a clock of the test's."""
    root = tmp_path / "sys"
    write_sysfs(str(root), NODE)
    clock = Clock()
    with DemoIdentityService(str(tmp_path / "id.sock")) as service:
        service.set_states(STATES)
        resolver = AmdResolver(AmdIdentity(IdentityClient(str(tmp_path / "id.sock"))), str(root), 60.0, clock)
        yield resolver, service, clock, root


def test_an_unchanged_answer_reuses_the_layout_and_keeps_the_generation(node):
    resolver, _, clock, root = node
    resolver.refresh()
    generation = resolver.generation()
    assert resolver.resolve(PARTITION_3).gpu_id == "10"
    shutil.rmtree(root)  # read again now, nothing would resolve: the layout read first serves
    for _ in range(3):
        clock.now += 5
        resolver.refresh()
    assert resolver.layout_reads == 1 and resolver.generation() == generation
    assert resolver.resolve(PARTITION_3).gpu_id == "10"


def test_a_new_answer_reads_sysfs_again(node):
    resolver, service, clock, root = node
    resolver.refresh()
    generation = resolver.generation()
    service.set_states(STATES[:-1] + (dataclasses.replace(STATES[-1], health=UNHEALTHY),))
    clock.now += 5
    resolver.refresh()
    assert resolver.layout_reads == 2 and resolver.generation() == generation + 1


def test_a_device_the_layout_does_not_show_makes_the_next_refresh_read_it(node):
    resolver, _, clock, root = node
    shutil.rmtree(root)  # sysfs not mounted yet: nothing but whole GPUs by address resolves
    resolver.refresh()
    assert resolver.resolve(PARTITION_3) is None
    write_sysfs(str(root), NODE)
    clock.now += 5
    resolver.refresh()
    assert resolver.layout_reads == 2 and resolver.resolve(PARTITION_3).gpu_id == "10"
    clock.now += 5
    resolver.refresh()  # every device it was asked for was shown: not read again
    assert resolver.layout_reads == 2


def test_the_layout_is_read_again_once_it_is_a_minute_old(node):
    resolver, _, clock, root = node
    resolver.refresh()
    generation = resolver.generation()
    clock.now += 59
    resolver.refresh()
    assert resolver.layout_reads == 1
    shutil.rmtree(Path(root, "devices", "platform"))  # the partitions' folders gone
    clock.now += 1
    resolver.refresh()
    assert resolver.layout_reads == 2 and resolver.generation() == generation + 1
    assert resolver.resolve(PARTITION_3) is None
