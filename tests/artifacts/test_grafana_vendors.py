"""The Grafana dashboard over a fleet of several GPU vendors: a `vendor` variable that matches everything where no
series says a vendor, and every panel query following it: recorded series by their own `vendor` label, the
exporter's raw families by the vendor their node's exporter serves (pod_gpu_exporter_vendor_info)."""

from __future__ import annotations

from support.deploy_tools import dashboard as _dashboard
from support.deploy_tools import dashboard_targets as _targets
from support.promql_scan import selectors

VENDOR_MATCHER = 'vendor=~"$vendor"'
# A raw family keeps the nodes of the chosen vendor, and those whose exporter does not say one.
NODE_FILTER = 'unless on (cluster, instance, job) pod_gpu_exporter_vendor_info{cluster=~"$cluster", vendor!~"$vendor"}'


def test_the_vendor_variable_follows_the_cluster_and_matches_everything_where_no_series_says_a_vendor():
    variables = {variable["name"]: variable for variable in _dashboard()["templating"]["list"]}
    vendor = variables["vendor"]
    assert vendor["definition"] == vendor["query"]["query"]
    assert 'cluster=~"$cluster"' in vendor["definition"] and ", vendor)" in vendor["definition"]
    assert vendor["includeAll"] is True and vendor["allValue"] == ".*" and vendor["current"]["value"] == ["$__all"]
    names = list(variables)
    assert names.index("cluster") < names.index("vendor") < names.index("namespace")


def test_every_selector_of_every_panel_follows_the_vendor():
    unfollowed = []
    for title, target in _targets():
        found = selectors(target["expr"])
        # dcgm_up after `and on`: a filter that keeps this exporter's own series, of series already filtered.
        ours_only = "and on (cluster, instance, job) pod_gpu_exporter_dcgm_up" in target["expr"]
        filters = ("pod_gpu_exporter_vendor_info",) + (("pod_gpu_exporter_dcgm_up",) if ours_only else ())
        raw = [s for s in found if ":" not in s.name and s.name not in filters]
        recorded = [s for s in found if ":" in s.name]
        unfollowed += [(title, s.name) for s in recorded if VENDOR_MATCHER not in s.matchers]
        if target["expr"].count(NODE_FILTER) != len(raw):
            unfollowed.append((title, [s.name for s in raw]))
    assert unfollowed == []
    assert any(":" in s.name for _, t in _targets() for s in selectors(t["expr"]))  # both kinds are there
    assert any(NODE_FILTER in t["expr"] for _, t in _targets())


def test_panels_of_recorded_series_name_the_vendor_in_their_legend():
    # Two vendors' series of one namespace or pod must not read alike (nor be averaged: each is its own line).
    unnamed = [title for title, target in _targets() if target.get("legendFormat")
               and any(":" in s.name for s in selectors(target["expr"])) and "{{vendor}}" not in target["legendFormat"]
               and "{{node}}" not in target["legendFormat"]]
    assert unnamed == []


def test_amd_pods_have_their_utilisation_memory_and_power_panels():
    queried = " ".join(target["expr"] for _, target in _targets())
    for record in ("namespace_pod:gpu_memory_used_bytes:sum", "namespace_pod:gpu_power_watts:sum",
                   "namespace:gpu_utilization_percent:avg", "namespace:gpu_memory_used_bytes:sum",
                   "namespace:gpu_power_watts:sum", 'namespace_pod:pod_gpu_utilization:ratio{'):
        assert record in queried, record
