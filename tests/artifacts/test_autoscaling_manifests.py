"""prometheus/autoscaling/: the prometheus-adapter values in the chart's rules.custom shape, the HPA against the
Kubernetes schemas, the KEDA ScaledObject against its CRD's fields and the prometheus trigger's settings. (The
queries themselves run on a real Prometheus in tests/e2e/test_autoscaling_e2e.py and test_autoscaling_keda_e2e.py.)"""

from __future__ import annotations

import re

import pytest
import yaml

from support.autoscaling import (ADAPTER_VALUES, AUTOSCALING, HPA, KEDA, RECORD, adapter_rule, expand_pods_query,
                                 keda_pod_name_query, keda_trigger)
from support.deploy_tools import core_schema_errors, validate_strict

# The fields of KEDA's ScaledObject (keda.sh/v1alpha1 CRD) this file may use, and the prometheus trigger's metadata.
SCALED_OBJECT_SPEC = {"advanced", "cooldownPeriod", "fallback", "idleReplicaCount", "initialCooldownPeriod",
                      "maxReplicaCount", "minReplicaCount", "pollingInterval", "scaleTargetRef", "triggers"}
TRIGGER_FIELDS = {"authenticationRef", "metadata", "metricType", "name", "type", "useCachedMetrics"}
PROMETHEUS_TRIGGER = {"serverAddress", "query", "queryParameters", "threshold", "activationThreshold", "namespace",
                      "customHeaders", "ignoreNullValues", "unsafeSsl", "awsRegion", "timeout", "identityOwner"}


def test_adapter_values_expose_the_rule_per_pod_as_gpu_utilization():
    values = yaml.safe_load(ADAPTER_VALUES.read_text())
    assert values["rules"]["default"] is False and values["prometheus"]["url"].startswith("http")
    rule = adapter_rule()
    assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}
    assert rule["seriesQuery"] == f'{RECORD}{{namespace!="",pod!=""}}'
    assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
    assert re.fullmatch(rule["name"]["matches"], RECORD) and not re.fullmatch(rule["name"]["matches"], RECORD + "x")
    assert re.sub(rule["name"]["matches"], rule["name"]["as"], RECORD) == "gpu_utilization"


def test_adapter_metrics_query_expands_for_a_pods_request():
    template = adapter_rule()["metricsQuery"]
    assert expand_pods_query(template, RECORD, "ns", ["a", "b", "c"]) == \
        f'max by (pod) ({RECORD}{{namespace="ns",pod=~"a|b|c"}})'
    assert expand_pods_query(template, RECORD, "ns", ["a"]) == f'max by (pod) ({RECORD}{{namespace="ns",pod="a"}})'
    with pytest.raises(ValueError, match="LabelValuesByName"):
        expand_pods_query("<<.LabelValuesByName>>", RECORD, "ns", ["a"])


def test_hpa_validates_and_scales_on_the_adapters_metric():
    validate_strict(HPA, "1.30.0")
    hpa = yaml.safe_load(HPA.read_text())
    assert hpa["apiVersion"] == "autoscaling/v2" and hpa["kind"] == "HorizontalPodAutoscaler"
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == adapter_rule()["name"]["as"]
    assert metric["pods"]["target"]["type"] == "AverageValue"
    assert metric["pods"]["target"]["averageValue"] == "600m"  # 0.6 of the pods' GPUs busy
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300


def test_hpa_validation_refuses_a_wrong_target(tmp_path):
    # Proves the schema check can fail: a misspelt field of the target (strict: unknown fields are errors).
    wrong = tmp_path / "hpa.yaml"
    wrong.write_text(HPA.read_text().replace("averageValue: 600m", "averagevalue: 600m"))
    with pytest.raises(AssertionError):
        validate_strict(wrong, "1.30.0")


def test_scaled_object_uses_keda_fields_and_never_reads_a_lost_target_as_zero():
    scaled = yaml.safe_load(KEDA.read_text())
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["kind"] == "ScaledObject"
    assert core_schema_errors("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", scaled["metadata"]) == []
    spec = scaled["spec"]
    assert set(spec) <= SCALED_OBJECT_SPEC and spec["minReplicaCount"] >= 1
    assert core_schema_errors("io.k8s.api.autoscaling.v2.CrossVersionObjectReference", spec["scaleTargetRef"]) == []
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert core_schema_errors("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerBehavior", behavior) == []
    trigger = keda_trigger()
    assert set(trigger) <= TRIGGER_FIELDS and trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
    metadata = trigger["metadata"]
    assert set(metadata) <= PROMETHEUS_TRIGGER and all(isinstance(v, str) for v in metadata.values())
    assert metadata["ignoreNullValues"] == "false"  # KEDA's default (true) reads an empty answer as 0
    assert 0 < float(metadata["activationThreshold"]) < float(metadata["threshold"]) <= 1


def test_scaled_object_query_selects_the_workload_by_label_or_pod_name():
    query = keda_trigger()["metadata"]["query"]
    # One element whatever the pods: a top-level aggregation without `by`.
    assert re.match(r"\s*avg\(", query) and " by " not in query.replace("and on (cluster, namespace, pod)", "")
    assert f"{RECORD}{{" in query and 'workload="llm-server"' in query
    assert "on (cluster, namespace, pod)" in query
    assert keda_pod_name_query().startswith(f"avg({RECORD}{{") and 'pod=~"llm-server-' in keda_pod_name_query()


def test_the_guide_shows_the_queries_the_files_hold():
    guide = (AUTOSCALING.parent.parent / "docs" / "autoscaling.md").read_text(encoding="utf-8")
    flat = " ".join(guide.split())
    assert " ".join(keda_trigger()["metadata"]["query"].split()) in flat
    assert keda_pod_name_query() in guide
    assert expand_pods_query(adapter_rule()["metricsQuery"], RECORD, "inference", ["a", "b", "c"]) in guide
    for path in (ADAPTER_VALUES, HPA, KEDA):
        assert f"prometheus/autoscaling/{path.name}" in guide
    headings = re.findall(r"(?m)^#+ (.+)$", guide)
    for topic in ("HPA", "missing pods", "KEDA", "reads the exporter directly", "DCGM_FI_DEV_GPU_UTIL", 'cluster="<self>"'):
        assert any(topic in heading for heading in headings), topic
