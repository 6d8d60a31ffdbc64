"""The demo's simulated AMD node: the exporter's text valid and shaped as AMD's (whole-GPU figures on the CPX GPU's
first partition only, a GPU turning unhealthy, values that move), and every held device of its kubelet met with
its own gpu_id through the demo's sysfs tree and its identity service on a real unix socket."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition.text import parse_label_pairs
from exporter.vendors.amd.demo_exporter import SimulatedAmdExporter
from exporter.vendors.amd.demo_identity import DemoIdentityService
from exporter.vendors.amd.demo_node import (HOLDERS, NIC_RESOURCE, UNHEALTHY_AFTER_SECONDS, UNHEALTHY_GPU_ID,
                                            allocations, demo_gpus, demo_sysfs_specs, identity_states, offered)
from exporter.vendors.amd.demo_sysfs import write_sysfs
from exporter.vendors.amd.device_ids import is_gpu_device, parse_device_id
from exporter.vendors.amd.device_map import resolve
from exporter.vendors.amd.dialect import (UPSTREAM_OWNER_LABELS, figure_of, identity_of, is_whole_gpu_figure,
                                          unprefixed)
from exporter.vendors.amd.identity import AmdIdentity
from exporter.vendors.amd.identity_client import UNHEALTHY, IdentityClient
from exporter.vendors.amd.sysfs_layout import read_layout
from support.clocks import ManualClock

_SAMPLE = re.compile(r"(\w+)\{(.*)\} (\S+)$")


def _samples(body: bytes):
    """(name, labels as a dict, label names in order, value) of every sample line."""
    for line in body.decode().splitlines():
        match = _SAMPLE.match(line)
        if match:
            pairs = parse_label_pairs(match.group(2))
            yield match.group(1), {n: v for n, v, _ in pairs}, [n for n, _, _ in pairs], float(match.group(3))


def test_the_text_is_valid_prometheus_text_with_one_help_and_type_per_family():
    body = SimulatedAmdExporter(clock=ManualClock()).render()
    families = list(text_string_to_metric_families(body.decode()))
    names = [family.name for family in families]
    assert len(names) == len(set(names)) == 12 and all(family.type == "gauge" for family in families)


def test_labels_are_in_name_order_and_name_every_gpu_and_its_own_idea_of_the_holder():
    samples = list(_samples(SimulatedAmdExporter(clock=ManualClock()).render()))
    assert all(order == sorted(order) for _, _, order, _ in samples)
    gpu_samples = [(name, labels) for name, labels, _, _ in samples if identity_of(labels)]
    assert {labels["gpu_id"] for _, labels in gpu_samples} == {str(n) for n in range(15)}
    assert all(UPSTREAM_OWNER_LABELS <= set(labels) for _, labels in gpu_samples)
    stale = {labels["pod"] for name, labels in gpu_samples if labels["gpu_id"] == "2"}
    assert stale == {"llm-server-old-5d8f"}  # AMD's exporter is behind: ours must replace it


def test_whole_gpu_figures_of_the_cpx_gpu_are_on_its_first_partition_only():
    samples = list(_samples(SimulatedAmdExporter(clock=ManualClock()).render()))
    ids = lambda family: {labels["gpu_id"] for name, labels, _, _ in samples if name == family}  # noqa: E731
    assert ids("gpu_gfx_activity") == ids("gpu_energy_consumed") == {str(n) for n in range(8)}
    assert ids("gpu_used_vram") == ids("gpu_health") == ids("gpu_package_power") == {str(n) for n in range(15)}
    partition_power = [value for name, labels, _, value in samples
                       if name == "gpu_package_power" and int(labels["gpu_id"]) > 7]
    assert partition_power == [0.0] * 7
    assert all(is_whole_gpu_figure(name, labels) for name, labels, _, _ in samples
               if labels.get("gpu_id") == "7" and name in ("gpu_gfx_activity", "gpu_package_power"))


def test_values_move_energy_grows_and_a_gpu_turns_unhealthy():
    clock = ManualClock()
    exporter = SimulatedAmdExporter(clock=clock)
    before = {(n, l.get("gpu_id"), l.get("clock_type")): v for n, l, _, v in _samples(exporter.render())}
    clock.now += UNHEALTHY_AFTER_SECONDS + 5
    after = {(n, l.get("gpu_id"), l.get("clock_type")): v for n, l, _, v in _samples(exporter.render())}
    assert before[("gpu_health", UNHEALTHY_GPU_ID, None)] == 1 and after[("gpu_health", UNHEALTHY_GPU_ID, None)] == 0
    assert sum(after[key] == 0 for key in after if key[0] == "gpu_health") == 1
    assert any(before[key] != after[key] for key in before if key[0] == "gpu_gfx_activity")
    assert all(after[key] > before[key] for key in before if key[0] == "gpu_energy_consumed")
    unhealthy = [s.gpu_id for s in identity_states(UNHEALTHY_AFTER_SECONDS + 5) if s.health == UNHEALTHY]
    assert unhealthy == [UNHEALTHY_GPU_ID] and not [s for s in identity_states(0) if s.health == UNHEALTHY]


def test_the_prefix_goes_before_every_family_and_is_recognised():
    names = {name for name, _, _, _ in _samples(SimulatedAmdExporter(prefix="amd_", clock=ManualClock()).render())}
    assert all(name.startswith("amd_gpu_") for name in names)
    assert figure_of("amd_gpu_gfx_activity").figure == "utilization" and unprefixed("amd_gpu_clock") == "gpu_clock"


def test_the_kubelet_uses_mixed_names_and_cpx_partitions_are_held_by_different_pods():
    devices = allocations()
    resources = {device.resource for device in devices}
    assert resources == {"amd.com/spx_nps1", "amd.com/cpx_nps1", NIC_RESOURCE}
    partition_pods = {device.pod for device in devices if device.resource == "amd.com/cpx_nps1"}
    assert len(partition_pods) == 5
    assert not is_gpu_device(NIC_RESOURCE) and parse_device_id(devices[-1].device_id) is not None  # a PCI address
    assert len(offered()) == 16 and sum(1 for gpu in demo_gpus() if gpu.gpu_id not in HOLDERS) == 5


def test_every_held_device_meets_its_own_gpu_through_sysfs_and_the_identity_service(tmp_path):
    write_sysfs(str(tmp_path / "sys"), demo_sysfs_specs())
    layout = read_layout(str(tmp_path / "sys"))
    with DemoIdentityService(str(tmp_path / "amd.sock"), lambda: identity_states(0)) as service:
        identity = AmdIdentity(IdentityClient(service.socket_path))
        identity.refresh()
    snapshot = identity.snapshot()
    assert snapshot.up
    met = {}
    for device in allocations():
        if is_gpu_device(device.resource):
            gpu = resolve(parse_device_id(device.device_id), layout, snapshot).gpu
            met[gpu.gpu_id] = (device.namespace, device.pod, device.container)
    assert met == HOLDERS


@pytest.mark.parametrize("elapsed", [0.0, UNHEALTHY_AFTER_SECONDS + 1])
def test_the_demo_identity_service_answers_states_of_the_moment(tmp_path, elapsed):
    with DemoIdentityService(str(tmp_path / "amd.sock"), lambda: identity_states(elapsed)) as service:
        states = IdentityClient(service.socket_path).list_states()
    assert states == identity_states(elapsed)
