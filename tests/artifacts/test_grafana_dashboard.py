"""prometheus/grafana/grafana-dashboard.json: template variables, per-pod panels, and only metrics that exist.

Its queries are also run against a real Prometheus in tests/e2e/test_prometheus_e2e.py.
"""

from __future__ import annotations

import json
import re

import yaml

from support.deploy_tools import DASHBOARD, RULES, SHIPPED_RULE_FILES

RECORDED_NAME = re.compile(r"\b((?:namespace(?:_pod)?|node):[A-Za-z_]+:[a-z0-9]+)\b")


def _dashboard():
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels():
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def test_namespace_and_pod_variables_come_from_the_allocation_series():
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["namespace"]["definition"] == 'label_values(pod_gpu_allocation_info{cluster=~"$cluster"}, namespace)'
    # The pod list follows the namespace choice.
    assert '$namespace' in variables["pod"]["definition"]
    assert variables["pod"]["definition"].startswith("label_values(pod_gpu_allocation_info")


def test_every_panel_queries_through_the_datasource_variable():
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]


def test_per_pod_panels_filter_by_namespace_and_pod():
    per_pod = [p for p in _panels() if "pod" in p["title"].lower() and "namespace" not in p["title"].lower()]
    assert len(per_pod) >= 4
    for panel in per_pod:
        for target in panel["targets"]:
            assert 'pod=~"$pod"' in target["expr"] and 'namespace=~"$namespace"' in target["expr"], panel["title"]


def test_recorded_series_used_by_panels_exist_in_the_rule_files():
    recorded = {r["record"] for path in SHIPPED_RULE_FILES.values() for g in yaml.safe_load(path.read_text())["groups"]
                for r in g["rules"] if "record" in r}
    used = {name for p in _panels() for t in p["targets"] for name in RECORDED_NAME.findall(t["expr"])}
    assert used and used <= recorded, used - recorded


def test_panel_ids_are_unique():
    ids = [p["id"] for p in _dashboard()["panels"]]
    assert len(ids) == len(set(ids))


OURS_ONLY = "and on (cluster, instance, job) pod_gpu_exporter_dcgm_up"


def test_raw_dcgm_panels_count_only_this_exporters_series():
    # With the GPU operator's dcgm-exporter scraped as well, a raw DCGM_* query would show every
    # GPU twice (once charged to the dcgm-exporter pod); recorded series are filtered in the rules.
    raw = [t["expr"] for p in _panels() for t in p["targets"] if re.search(r"\bDCGM_FI_\w+\{", t["expr"])
           and not RECORDED_NAME.search(t["expr"])]
    assert raw
    for expr in raw:
        assert OURS_ONLY in expr, expr


def test_rules_and_dashboard_do_not_depend_on_the_hostname_label_spelling():
    # dcgm-exporter wrote Hostname, later releases write hostname: neither may matter.
    for path in (DASHBOARD, RULES):
        assert not re.search(r"\b[Hh]ostname\b", path.read_text(encoding="utf-8").split("groups:", 1)[-1]), path


def test_the_health_row_shows_health_taints_xids_lost_gpus_and_use_without_an_allocation():
    panels = _dashboard()["panels"]
    row = next(index for index, panel in enumerate(panels) if panel["title"] == "Health and accountability")
    below = panels[row + 1:]
    below = below[:next((i for i, p in enumerate(below) if p["type"] == "row"), len(below))]
    queried = " ".join(t["expr"] for p in below for t in p["targets"])
    for family in ("pod_gpu_device_health_status", "pod_gpu_device_taint", "pod_gpu_container_xid_errors_total",
                   "pod_gpu_device_lost", "pod_gpu_unallocated_memory_used_bytes",
                   "pod_gpu_unallocated_sm_utilization_ratio"):
        assert re.search(rf"\b{family}\b", queried), family
