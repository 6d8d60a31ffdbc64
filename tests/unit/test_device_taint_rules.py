"""DeviceTaintRules: decoded by lightkube in each API version that serves them, what each selects, and their
taints joined to the ResourceSlice's own in the DRA devices' taints (the slice itself unchanged)."""

from __future__ import annotations

import json

import pytest

from exporter.core.health import DeviceTaint, taint_effect
from exporter.core.identity import GpuKey
from exporter.collectors.kubernetes.dra import DraDevices, slice_devices
from exporter.collectors.kubernetes.objects import Skipped
from exporter.collectors.kubernetes.stream import decode_object
from exporter.collectors.kubernetes.taint_rules import (MAX_RULES, VERSIONS, DeviceTaintRules, rule_check,
                                                     rule_resource, taint_rule)
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS

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
    dra = DraDevices(lambda namespace, name: None, forms=DEVICE_FORMS)
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


def test_two_rules_with_the_same_taint_give_it_once_and_an_unknown_effect_reads_as_none():
    """The API: "Consumers must treat unknown effects like None"; a rule's taint is read as a slice's."""
    rules = DeviceTaintRules()
    rules.replace([_rule("v1", "one", {"device": "gpu-0"}), _rule("v1", "two", {"driver": DRIVER}),
                   _rule("v1", "new", {"device": "gpu-0"}, key="example.com/new", effect="Degrade"),
                   _rule("v1", "none", {"device": "gpu-0"}, key="example.com/info", effect="None")])
    assert rules.taints_for(DRIVER, "n", "gpu-0") == (("example.com/info", "", "None"),
                                                      ("example.com/maintenance", "", "NoExecute"),
                                                      ("example.com/new", "", "None"))
    same = {"key": "example.com/new", "effect": "Degrade"}
    assert slice_devices(_slice([same]))[(DRIVER, "n", "gpu-0")].taints == (("example.com/new", "", "None"),)


@pytest.mark.parametrize("published, read", [("NoSchedule", "NoSchedule"), ("NoExecute", "NoExecute"),
                                             ("None", "None"), ("Degrade", "None"), ("noexecute", "None"),
                                             ("PreferNoSchedule", "None"), ("", "None"), (None, "None")])
def test_a_taint_effect_is_one_of_the_three_the_api_defines(published, read):
    assert taint_effect(published) == read


def test_the_rules_kept_are_bounded():
    rules = DeviceTaintRules()
    many = [_rule("v1", f"r{i}", {"device": f"gpu-{i}"}) for i in range(MAX_RULES + 3)]
    rules.replace(many)
    assert len(rules) == MAX_RULES
    rules.add(_rule("v1", "one-more", None))
    assert len(rules) == MAX_RULES and rules.taints_for(DRIVER, "n", "gpu-99999") == ()
    rules.update(_rule("v1", "r0", {"device": "gpu-0"}, key="example.com/changed"))  # a kept rule still changes
    assert rules.taints_for(DRIVER, "n", "gpu-0") == (("example.com/changed", "", "NoExecute"),)


def _rule_object(version: str, name: str, key: str) -> dict:
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "DeviceTaintRule", "metadata": {"name": name},
            "spec": {"taint": {"key": key, "effect": "NoExecute"}}}


@pytest.fixture
def rule_api(tmp_path):
    """The fake API server with the real lightkube client: DeviceTaintRules served in v1 only, one rule."""
    from exporter.collectors.kubernetes.client import make_client
    from support.fake_kube_api import FakeKubeApi, write_kubeconfig

    fake = FakeKubeApi(served_versions=("v1", "resource.k8s.io/v1"))
    fake.serve_kind("resource.k8s.io/v1", "devicetaintrules", "DeviceTaintRule", namespaced=False)
    fake.put("resource.k8s.io/v1", "devicetaintrules", _rule_object("v1", "drain", "example.com/drain"))
    fake.start()
    yield fake, make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), fake.url))
    fake.stop()


def _verbs(api) -> list:
    """What was asked of the rules, in order: discovery reads of /apis and the rules' lists and watches."""
    with api._cond:
        return [verb for verb, plural in api.requests if plural in ("apis", "devicetaintrules")]


def test_a_version_gone_since_it_was_chosen_sends_the_watch_back_to_discovery_not_to_each_version(rule_api):
    """A 404 on the version discovery chose (its feature gate turned off since): after the pause, one
    discovery read per pause and no list while none is served; a version served later is found there."""
    from exporter.collectors.kubernetes.taint_rules import TaintRuleWatch
    from support.waiting import wait_until

    api, client = rule_api
    rules = DeviceTaintRules()
    watch = TaintRuleWatch(client, rules, unavailable_seconds=0.2)
    watch.start()
    try:
        wait_until(lambda: len(rules) == 1 and "watch" in _verbs(api))
        assert _verbs(api)[:2] == ["discover", "list"] and watch.version == "v1"
        watched = len(_verbs(api))
        del api.kinds[("resource.k8s.io/v1", "devicetaintrules")]  # the gate off: v1 no longer serves the kind
        api.close_watches()
        wait_until(lambda: len(rules) == 0 and _verbs(api)[watched:].count("discover") >= 3, 30)
        gone = _verbs(api)
        # The watch's 404, then discovery only: neither v1beta2 nor v1alpha3 listed, v1 not listed again.
        assert set(gone[watched:]) == {"watch", "discover"} and gone[-1] == "discover", gone
        api.serve_kind("resource.k8s.io/v1beta2", "devicetaintrules", "DeviceTaintRule", namespaced=False)
        api.put("resource.k8s.io/v1beta2", "devicetaintrules", _rule_object("v1beta2", "audit", "example.com/audit"))
        wait_until(lambda: rules.taints_for(DRIVER, "n", "gpu-0") == (("example.com/audit", "", "NoExecute"),), 30)
        assert watch.version == "v1beta2" and _verbs(api)[len(gone):].count("list") == 1
    finally:
        watch.stop()


@pytest.mark.parametrize("body, versions", [
    ({"kind": "APIGroupList", "groups": []}, None),  # a server without aggregated discovery
    ({"kind": "APIGroupDiscoveryList", "items": "junk"}, ()),
    ({"kind": "APIGroupDiscoveryList", "items": [
        7, {"metadata": None}, {"metadata": {"name": "resource.k8s.io"}, "versions": [
            {"version": "v1", "resources": [{"resource": "resourceslices"}, "x"]},
            {"version": 3, "resources": [{"resource": "devicetaintrules"}]},
            {"version": "v1beta2", "resources": [{"resource": "devicetaintrules"}]}]}]}, ("v1beta2",)),
])
def test_discovery_answers_are_read_whatever_their_entries(body, versions):
    """Malformed entries of an aggregated discovery answer are passed over, the rest read."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from lightkube.core.generic_client import httpx

    from exporter.collectors.kubernetes.api_discovery import served_versions

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_address[1]}") as http:
            assert served_versions(http, "resource.k8s.io", "devicetaintrules") == versions
    finally:
        server.shutdown()
        server.server_close()
