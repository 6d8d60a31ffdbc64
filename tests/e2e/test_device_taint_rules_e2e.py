"""DeviceTaintRules with the real exporter process, the real lightkube client and the fake API server: the
rules' taints join the ResourceSlice's own in pod_gpu_device_taint whichever version serves them (v1alpha3
in 1.33-1.35, v1beta2 in 1.36, v1 from 1.37, found by one read of aggregated discovery), follow the rules as
they change, and a cluster that serves none costs one discovery read (without aggregated discovery, one list
per version), an RBAC that refuses them one list, then nothing for ten minutes."""

from __future__ import annotations

import time

import pytest

from support.fake_kube_api import FakeKubeApi
from support.kube_e2e import scrape, start
from support.kube_scenario import NODE, POOL, UUID3
from support.scrape_checks import sample_lines, split_sample
from support.waiting import wait_until

UUID4 = "GPU-c4c7f4f8-af86-6966-c0b2-7c1e40c18347"  # gpu="4" in the H100 scrape
SLICES = "resource.k8s.io/v1"
OWN = f'UUID="{UUID3}",gpu="2",key="gpu.nvidia.com/xid",value="79",effect="NoSchedule"'


def _api(rule_versions) -> FakeKubeApi:
    """DRA v1 slices; DeviceTaintRules in `rule_versions` (a 1.36 server serves v1alpha3 and v1beta2)."""
    fake = FakeKubeApi(served_versions=("v1", "apps/v1", "batch/v1", SLICES))
    for version in rule_versions:
        fake.serve_kind(f"resource.k8s.io/{version}", "devicetaintrules", "DeviceTaintRule", namespaced=False)
    fake.put(SLICES, "resourceslices", {
        "apiVersion": SLICES, "kind": "ResourceSlice", "metadata": {"name": f"{NODE}-gpu.nvidia.com-abcde"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": NODE, "pool": {"name": POOL, "generation": 1,
                                                                         "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-h100-a", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": UUID3}},
                              "taints": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]},
                             {"name": "gpu-h100-b", "attributes": {"type": {"string": "gpu"},
                                                                   "uuid": {"string": UUID4}}}]}})
    return fake.start()


@pytest.fixture
def api(request):
    """The API server of the scenario node's kubeconfig (tests/e2e/conftest.py), serving the rules in
    the versions the test names."""
    fake = _api(request.param)
    yield fake
    fake.stop()


def _put_rule(api, version, name, selector, key, effect, value=""):
    spec = {"taint": {"key": key, "effect": effect, **({"value": value} if value else {})}}
    if selector is not None:
        spec["deviceSelector"] = selector
    api.put(f"resource.k8s.io/{version}", "devicetaintrules",
            {"apiVersion": f"resource.k8s.io/{version}", "kind": "DeviceTaintRule", "metadata": {"name": name},
             "spec": spec})


def _taints(exporter) -> set:
    return {split_sample(line)[1] for line in sample_lines(scrape(exporter)) if line.startswith("pod_gpu_device_taint{")}


def _serves(exporter, expected: set) -> None:
    wait_until(lambda: _taints(exporter) == expected, timeout_seconds=30)


@pytest.mark.parametrize("api", [("v1alpha3",), ("v1alpha3", "v1beta2"), ("v1",)], ids=["1.35", "1.36", "1.37"],
                         indirect=True)
def test_rule_taints_join_the_slices_own_in_whichever_version_is_served(node, api, run_exporter):
    version = max(v for v, p in api.kinds if p == "devicetaintrules")[len("resource.k8s.io/"):]
    _put_rule(api, version, "drain-b", {"driver": "gpu.nvidia.com", "pool": POOL, "device": "gpu-h100-b"},
              "example.com/maintenance", "NoExecute", value="rack-7")
    _put_rule(api, version, "node-audit", {"pool": POOL}, "example.com/audit", "None")
    _put_rule(api, version, "other-node", {"pool": "gpu-node-9"}, "example.com/elsewhere", "NoExecute")
    exporter = start(run_exporter, node)
    audit = 'key="example.com/audit",value="",effect="None"'
    _serves(exporter, {OWN, f'UUID="{UUID3}",gpu="2",{audit}', f'UUID="{UUID4}",gpu="4",{audit}',
                       f'UUID="{UUID4}",gpu="4",key="example.com/maintenance",value="rack-7",effect="NoExecute"'})
    # The rules are watched: a deleted one's taint goes, a changed one's follows, a rule without a selector
    # taints every device (as the scheduler applies it).
    api.delete(f"resource.k8s.io/{version}", "devicetaintrules", "", "node-audit")
    _put_rule(api, version, "drain-b", {"device": "gpu-h100-b"}, "example.com/maintenance", "NoSchedule")
    _put_rule(api, version, "everything", None, "example.com/freeze", "NoExecute")
    freeze = 'key="example.com/freeze",value="",effect="NoExecute"'
    _serves(exporter, {OWN, f'UUID="{UUID3}",gpu="2",{freeze}', f'UUID="{UUID4}",gpu="4",{freeze}',
                       f'UUID="{UUID4}",gpu="4",key="example.com/maintenance",value="",effect="NoSchedule"'})
    verbs = [v for v, p in api.requests if p == "devicetaintrules"]
    assert set(verbs) <= {"list", "watch"}
    # Discovery named the version: no list of a version not served first.
    assert verbs.count("list") == 1 and api.requests_since(0.0, "discover", "apis") == 1


@pytest.mark.parametrize("api, aggregated, lists", [((), True, 0), ((), False, 3), (("v1",), True, 1)],
                         ids=["not-served", "not-served-without-aggregated-discovery", "forbidden"], indirect=["api"])
def test_a_cluster_without_rules_or_rbac_for_them_costs_one_request_then_nothing(node, api, run_exporter,
                                                                                 aggregated, lists):
    """Not served: one read of aggregated discovery and no list (a server without aggregated discovery: one
    list per version); refused by RBAC: one list. Then nothing until ten minutes have passed."""
    forbidden = bool(api.kinds.get(("resource.k8s.io/v1", "devicetaintrules")))
    if forbidden:
        api.forbidden["devicetaintrules"] = "list"
    api.aggregated_discovery = aggregated
    exporter = start(run_exporter, node)
    _serves(exporter, {OWN})  # the slice's own taint, as without the feature
    wait_until(lambda: api.requests_since(0.0, "discover", "apis") >= 1
               and api.requests_since(0.0, plural="devicetaintrules") >= lists)
    time.sleep(3)  # long enough for a backoff's retries (0.5 s, 1 s, 2 s): none may come
    assert api.requests_since(0.0, plural="devicetaintrules") == lists
    assert api.requests_since(0.0, "discover", "apis") == 1
    assert _taints(exporter) == {OWN}
    exporter.wait_for_log("'list' and 'watch' on 'devicetaintrules'" if forbidden else "DeviceTaintRules are not served")


@pytest.mark.parametrize("api", [("v1",)], indirect=True)
def test_a_cluster_role_without_watch_keeps_the_listed_rules_and_lists_again_later(node, api, run_exporter):
    api.forbidden["devicetaintrules"] = "watch"
    _put_rule(api, "v1", "drain-b", {"device": "gpu-h100-b"}, "example.com/maintenance", "NoExecute")
    exporter = start(run_exporter, node)
    _serves(exporter, {OWN, f'UUID="{UUID4}",gpu="4",key="example.com/maintenance",value="",effect="NoExecute"'})
    exporter.wait_for_log("'list' and 'watch' on 'devicetaintrules'")
    time.sleep(3)
    assert [verb for verb, plural in api.requests if plural == "devicetaintrules"] == ["list", "watch"]
