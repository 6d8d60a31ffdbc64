"""DeviceTaintRules: decoded by lightkube in each API version that serves them, what each selects, and their
taints joined to the ResourceSlice's own in the DRA devices' taints (the slice itself unchanged)."""

from __future__ import annotations

import json

import pytest

from exporter.core.health import DeviceTaint
from exporter.core.identity import GpuKey
from exporter.sources.kubernetes.dra import DraDevices, slice_devices
from exporter.sources.kubernetes.objects import Skipped
from exporter.sources.kubernetes.stream import decode_object
from exporter.sources.kubernetes.taint_rules import (MAX_RULES, VERSIONS, DeviceTaintRules, rule_check,
                                                     rule_resource, taint_rule)

DRIVER = "gpu.nvidia.com"
GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"


def _rule(version: str, name: str, selector, key="example.com/maintenance", value="", effect="NoExecute"):
    """A DeviceTaintRule as the API server sends it in `version`, decoded by lightkube; `selector` None: none."""
    spec = {"taint": {"key": key, "effect": effect, "timeAdded": "2026-03-01T10:00:00Z", **({"value": value} if value else {})}}
    if selector is not None:
        spec["deviceSelector"] = selector
    published = {"apiVersion": f"resource.k8s.io/{version}", "kind": "DeviceTaintRule",
                 "metadata": {"name": name, "uid": "0d1e", "resourceVersion": "7"}, "spec": spec,
                 **({"status": {"conditions": [{"type": "EvictionInProgress", "status": "False", "reason": "Done",
                                                "message": "", "lastTransitionTime": "2026-03-01T10:00:01Z"}]}}
                    if version != "v1alpha3" else {})}
    return decode_object(json.dumps(published).encode(), rule_resource(version))


def _slice(taints=()) -> object:
    from lightkube.resources.resource_v1 import ResourceSlice

    devices = [{"name": name, "attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid}},
                **({"taints": list(taints)} if name == "gpu-0" and taints else {})}
               for name, uuid in (("gpu-0", GPU_A), ("gpu-1", GPU_B))]
    published = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n-gpu"},
                 "spec": {"driver": DRIVER, "nodeName": "n", "devices": devices,
                          "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1}}}
    return decode_object(json.dumps(published).encode(), ResourceSlice)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_rule_is_read_in_every_version_that_serves_it(version):
    rule = _rule(version, "r", {"driver": DRIVER, "pool": "n", "device": "gpu-1"}, value="drain", effect="NoSchedule")
    rule_check(rule)
    read = taint_rule(rule)
    assert read.taint == ("example.com/maintenance", "drain", "NoSchedule")
    assert read.selects(DRIVER, "n", "gpu-1")
    assert not read.selects(DRIVER, "n", "gpu-0") and not read.selects(DRIVER, "m", "gpu-1")
    assert not read.selects("other.example.com", "n", "gpu-1")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_rule_without_a_selector_or_with_an_empty_one_selects_every_device(version):
    for selector in (None, {}):
        read = taint_rule(_rule(version, "all", selector))
        assert read.selects(DRIVER, "n", "gpu-0") and read.selects("other.example.com", "p", "d")


def test_a_pool_selector_selects_the_pool_of_any_driver():
    read = taint_rule(_rule("v1", "pool", {"pool": "n"}))
    assert read.selects(DRIVER, "n", "gpu-0") and read.selects("other.example.com", "n", "x")
    assert not read.selects(DRIVER, "other-node", "gpu-0")


def test_old_v1alpha3_selectors_by_class_or_cel_are_skipped_not_widened():
    """1.33-1.34's v1alpha3 could select by device class and CEL: read as if absent, such a rule would taint
    every device; it is skipped (counted as `unsupported`) instead."""
    for extra in ({"deviceClassName": "gpu.nvidia.com"},
                  {"selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].type == "mig"'}}]}):
        rule = _rule("v1alpha3", "old", {"driver": DRIVER, **extra})
        with pytest.raises(Skipped) as skipped:
            rule_check(rule)
        assert skipped.value.reason == "unsupported"


def test_a_rule_without_a_taint_key_is_malformed():
    with pytest.raises(Skipped) as skipped:
        rule_check(_rule("v1", "r", None, key=""))
    assert skipped.value.reason == "malformed"


def test_rule_taints_join_the_slices_own_and_the_slice_is_unchanged():
    own = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    resource_slice = _slice([own])
    dra = DraDevices(lambda namespace, name: None)
    dra.replace([resource_slice])
    rules = DeviceTaintRules()
    assert dra.taints(rules.taints_for) == (DeviceTaint(GpuKey("UUID", GPU_A, ""), "gpu.nvidia.com/xid", "79",
                                                        "NoSchedule"),)
    rules.replace([_rule("v1", "drain-b", {"driver": DRIVER, "device": "gpu-1"}, value="soon"),
                   _rule("v1", "everything", None, key="example.com/audit", effect="None"),
                   _rule("v1", "elsewhere", {"pool": "other-node"}, key="example.com/other")])
    a, b = GpuKey("UUID", GPU_A, ""), GpuKey("UUID", GPU_B, "")
    assert dra.taints(rules.taints_for) == tuple(sorted((
        DeviceTaint(a, "example.com/audit", "", "None"), DeviceTaint(a, "gpu.nvidia.com/xid", "79", "NoSchedule"),
        DeviceTaint(b, "example.com/audit", "", "None"), DeviceTaint(b, "example.com/maintenance", "soon", "NoExecute"))))
    assert dra.taints() == (DeviceTaint(a, "gpu.nvidia.com/xid", "79", "NoSchedule"),)  # without the rules: the slice's
    assert slice_devices(resource_slice)[(DRIVER, "n", "gpu-1")].taints == ()
    rules.delete(_rule("v1", "everything", None))
    rules.update(_rule("v1", "drain-b", {"driver": DRIVER, "device": "gpu-1"}, value="now"))
    assert {t for t in dra.taints(rules.taints_for) if t.key == b} == {
        DeviceTaint(b, "example.com/maintenance", "now", "NoExecute")}


def test_two_rules_with_the_same_taint_give_it_once_and_an_unknown_effect_is_kept_as_published():
    rules = DeviceTaintRules()
    rules.replace([_rule("v1", "one", {"device": "gpu-0"}), _rule("v1", "two", {"driver": DRIVER}),
                   _rule("v1", "new", {"device": "gpu-0"}, key="example.com/new", effect="Degrade")])
    assert rules.taints_for(DRIVER, "n", "gpu-0") == (("example.com/maintenance", "", "NoExecute"),
                                                      ("example.com/new", "", "Degrade"))


def test_the_rules_kept_are_bounded():
    rules = DeviceTaintRules()
    many = [_rule("v1", f"r{i}", {"device": f"gpu-{i}"}) for i in range(MAX_RULES + 3)]
    rules.replace(many)
    assert len(rules) == MAX_RULES
    rules.add(_rule("v1", "one-more", None))
    assert len(rules) == MAX_RULES and rules.taints_for(DRIVER, "n", "gpu-99999") == ()
    rules.update(_rule("v1", "r0", {"device": "gpu-0"}, key="example.com/changed"))  # a kept rule still changes
    assert rules.taints_for(DRIVER, "n", "gpu-0") == (("example.com/changed", "", "NoExecute"),)
