"""The Grafana dashboard over many clusters: a `cluster` variable that works where no series has the label,
namespace and pod choices that follow it, and every panel query filtered on it and grouped by it.

tests/e2e/test_many_clusters_e2e.py runs the same queries on a central store holding two clusters."""

from __future__ import annotations

from support.deploy_tools import dashboard as _dashboard
from support.deploy_tools import dashboard_targets as _targets
from support.promql_scan import dropping, selectors

CLUSTER_MATCHER = 'cluster=~"$cluster"'


def _variables():
    return {variable["name"]: variable for variable in _dashboard()["templating"]["list"]}


def test_the_cluster_variable_lists_clusters_and_matches_everything_where_there_is_no_label():
    variables = _variables()
    cluster = variables["cluster"]
    # From a gauge every node serves, whichever GPU vendor it has (dcgm_up is NVIDIA's alone).
    assert cluster["definition"] == cluster["query"]["query"] == "label_values(pod_gpu_exporter_kubelet_up, cluster)"
    # With no cluster label anywhere, label_values is empty and "All" must still match the label's absence:
    # `.*` matches the empty value, where Grafana's default (a join of every listed value) would match nothing.
    assert cluster["includeAll"] is True and cluster["allValue"] == ".*"
    assert cluster["current"]["value"] == ["$__all"]
    names = [variable["name"] for variable in _dashboard()["templating"]["list"]]
    assert names.index("cluster") < names.index("namespace") < names.index("pod")


def test_namespace_and_pod_choices_follow_the_cluster():
    variables = _variables()
    for name in ("namespace", "pod"):
        assert CLUSTER_MATCHER in variables[name]["definition"], name
        assert variables[name]["definition"] == variables[name]["query"]["query"], name
    assert 'namespace=~"$namespace"' in variables["pod"]["definition"]


def test_every_selector_of_every_panel_filters_on_the_cluster():
    unfiltered = [(title, selector.name) for title, target in _targets() for selector in selectors(target["expr"])
                  if CLUSTER_MATCHER not in selector.matchers]
    assert unfiltered == []
    assert len(_targets()) >= 20


def test_every_panel_keeps_the_cluster_in_its_grouping_and_legend():
    merged = {title: problems for title, target in _targets() if (problems := dropping(target["expr"], "cluster"))}
    assert merged == {}
    # Two clusters' series of one namespace/pod must not read alike in the legend.
    unnamed = [title for title, target in _targets()
               if target.get("legendFormat") and "{{cluster}}" not in target["legendFormat"]]
    assert unnamed == []
