"""The rules on a store that holds many clusters and a fleet of several GPU vendors: every aggregation and matching
keeps `cluster`, every recorded series keeps the `vendor` its branch sets, and every promtool rule test gives each of
two clusters that share every name its own single-cluster answer."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from support.deploy_tools import PROMETHEUS_DIR, SHIPPED_RULE_FILES
from support.promql_scan import dropping, groupings, unset_where_read
from support.promtool_tests import run_promtool

RULES_DIR = PROMETHEUS_DIR / "rules"
CLUSTER_TESTS = RULES_DIR / "pod-gpu-clusters.rules.test.yml"
SINGLE_CLUSTER_TESTS = sorted(path for path in RULES_DIR.glob("*.rules.test.yml") if path != CLUSTER_TESTS)
CLUSTERS = ("east", "west")


def _rules(path: Path):
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("path", SHIPPED_RULE_FILES.values(), ids=list(SHIPPED_RULE_FILES))
def test_every_aggregation_and_matching_keeps_the_cluster_label(path):
    dropped = {rule.get("record") or rule["alert"]: problems for rule in _rules(path)
               if (problems := dropping(rule["expr"], "cluster"))}
    assert dropped == {}, f"rules that merge clusters: {dropped}"


@pytest.mark.parametrize("path", SHIPPED_RULE_FILES.values(), ids=list(SHIPPED_RULE_FILES))
def test_every_recorded_series_carries_the_vendor_its_branch_sets(path):
    # A mixed fleet: each family is read inside a branch that sets `vendor` (label_replace), or is a recorded
    # series that carries it; no aggregation after that drops it. Matching (on) keeps the left side's labels.
    unset = {rule["record"]: problems for rule in _rules(path)
             if "record" in rule and (problems := unset_where_read(rule["expr"], "vendor"))}
    assert unset == {}, f"recorded series without a vendor: {unset}"


@pytest.mark.parametrize("expr, problems", [
    ('label_replace(sum by (cluster, pod) (x), "vendor", "nvidia", "", "")', []),
    ('label_replace(a, "vendor", "amd", "", "") or label_replace(b, "vendor", "nvidia", "", "")', []),
    ('a:recorded:sum * 1048576 or label_replace(sum by (cluster) (b), "vendor", "amd", "", "")', []),
    ('sum by (cluster, vendor) (a:recorded:sum)', []),
    ('sum by (cluster) (label_replace(x, "vendor", "amd", "", ""))', ["sum by (cluster)"]),
    ('label_replace(x, "vendor", "amd", "", "") or y', ["y read without vendor"]),
    ('label_replace(x, "node", "n", "", "")', ["x read without vendor"]),
    ('avg without (vendor) (a:recorded:sum)', ["avg without (vendor)"]),
])
def test_the_vendor_scan_finds_each_way_of_losing_it(expr, problems):
    assert unset_where_read(expr, "vendor") == problems


def test_every_recorded_series_of_the_rule_tests_names_its_vendor():
    # The promtool tests say so too: each expected sample of a recorded series has a vendor.
    unnamed = [sample["labels"] for path in RULES_DIR.glob("*.rules.test.yml")
               for case in yaml.safe_load(path.read_text())["tests"] for test in case.get("promql_expr_test", [])
               for sample in test.get("exp_samples", [])
               if not re.search(r'[{,]vendor="(nvidia|amd)"', sample["labels"])]
    assert unnamed == []


@pytest.mark.parametrize("expr, problems", [
    ("sum by (cluster, namespace) (x)", []),
    ("sum(x) by (cluster)", []),
    ("sum without (instance) (x)", []),
    ("a * on (cluster, instance) group_left (namespace) b", []),
    ("a * ignoring (instance) b", []),
    ("a and b", []),  # no on/ignoring: every label, cluster too, must match
    ("sum(x)", ["sum bare ()"]),
    ("count(x{a=\"by (cluster)\"}) or vector(0)", ["count bare ()"]),
    ("max by (namespace) (x)", ["max by (namespace)"]),
    ("sum(rate(x[5m])) by (pod)", ["sum by (pod)"]),
    ("avg without (cluster) (x)", ["avg without (cluster)"]),
    ("a / ignoring (cluster) b", ["vector matching ignoring (cluster)"]),
    ("a and on (instance, job) b  # by (cluster)", ["vector matching on (instance, job)"]),
    ("avg by (cluster, pod) (max by (pod, UUID) (x))", ["max by (pod, UUID)"]),
    ("topk(3, x)", ["topk bare ()"]),
])
def test_the_scan_finds_each_way_of_dropping_the_label(expr, problems):
    # The check above can fail: each way a label can be aggregated or matched away is seen, and
    # strings, matchers and comments that merely contain `by (...)` are not taken for clauses.
    assert dropping(expr, "cluster") == problems


def test_the_scan_reads_every_grouping_of_the_shipped_rules():
    # Not a vacuous pass: the rules do aggregate and match, and the scan sees those clauses.
    found = [g for path in SHIPPED_RULE_FILES.values() for rule in _rules(path) for g in groupings(rule["expr"])]
    assert len([g for g in found if g.clause == "by"]) >= 40 and len([g for g in found if g.clause == "on"]) >= 20


def _in_cluster(selector: str, cluster: str) -> str:
    """`name{a="b"}` with cluster="<cluster>" added (`name` alone gets braces)."""
    if "{" not in selector:
        return f'{selector}{{cluster="{cluster}"}}'
    name, rest = selector.split("{", 1)
    return f'{name}{{cluster="{cluster}"' + ("," if not rest.startswith("}") else "") + rest


def _two_clusters(case: dict) -> dict:
    """One promtool test case with its input in each of two clusters, and each expectation in each; a case
    whose input already names clusters is a many-cluster case of its own and is kept as it is."""
    case = copy.deepcopy(case)
    if any(re.search(r'[{,]\s*cluster="', series["series"]) for series in case["input_series"]):
        return case
    case["input_series"] = [dict(series, series=_in_cluster(series["series"], cluster))
                            for series in case["input_series"] for cluster in CLUSTERS]
    for test in case.get("promql_expr_test", []):
        test["exp_samples"] = [dict(sample, labels=_in_cluster(sample["labels"], cluster))
                               for sample in test.get("exp_samples", []) for cluster in CLUSTERS]
    for test in case.get("alert_rule_test", []):
        test["exp_alerts"] = [{"exp_labels": {**alert.get("exp_labels", {}), "cluster": cluster},
                               "exp_annotations": {"cluster": cluster}}
                              for alert in test.get("exp_alerts", []) for cluster in CLUSTERS]
    return case


def _rules_naming_only_the_cluster(path: Path, edit=lambda expr: expr) -> dict:
    """The rule file with each alert's annotations replaced by one that prints $labels.cluster: the labels
    are what this test checks (pod-gpu-clusters.rules.test.yml checks the annotations' words); `edit` changes
    each expression as written (before YAML folds its lines)."""
    document = yaml.safe_load(path.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            rule["expr"] = edit(rule["expr"])
            if "alert" in rule:
                rule["annotations"] = {"cluster": "{{ $labels.cluster }}"}
    return document


def _write_two_cluster_run(test_file: Path, folder: Path, edit=lambda text: text) -> Path:
    tests = yaml.safe_load(test_file.read_text())
    for name in tests["rule_files"]:
        rules = _rules_naming_only_the_cluster(RULES_DIR / name, edit)
        (folder / name).write_text(yaml.safe_dump(rules, sort_keys=False, allow_unicode=True))
    tests["tests"] = [_two_clusters(case) for case in tests["tests"]]
    path = folder / test_file.name
    path.write_text(yaml.safe_dump(tests, sort_keys=False, allow_unicode=True))
    return path


@pytest.mark.parametrize("test_file", SINGLE_CLUSTER_TESTS, ids=[p.name for p in SINGLE_CLUSTER_TESTS])
def test_each_rule_test_holds_in_each_of_two_clusters_that_share_every_name(test_file, tmp_path):
    result = run_promtool("test", "rules", str(_write_two_cluster_run(test_file, tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_two_cluster_run_fails_where_a_rule_merges_clusters(tmp_path):
    # Proves the copy into two clusters can fail: one inner `max by` without cluster merges them.
    path = _write_two_cluster_run(RULES_DIR / "pod-gpu-metrics.rules.test.yml", tmp_path,
                                  lambda text: text.replace("max by (cluster, namespace, pod,", "max by (namespace, pod,", 1))
    result = run_promtool("test", "rules", str(path))
    assert result.returncode != 0 and "namespace_pod:DCGM_FI_DEV_GPU_UTIL:avg" in result.stdout + result.stderr


def test_two_clusters_and_no_cluster_promtool_tests_pass():
    result = run_promtool("test", "rules", str(CLUSTER_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_names_the_cluster_only_when_the_series_has_one():
    # `{{ with $labels.cluster }}` prints nothing where the label is absent, so one cluster reads as before.
    for path in SHIPPED_RULE_FILES.values():
        for rule in (r for r in _rules(path) if "alert" in r):
            assert re.search(r"\{\{ with \$labels\.cluster \}\} in cluster \{\{ \. \}\}\{\{ end \}\}",
                             rule["annotations"]["summary"]), rule["alert"]


def test_the_cluster_tests_cover_every_rule_file():
    named = yaml.safe_load(CLUSTER_TESTS.read_text())["rule_files"]
    tested = {name for path in SINGLE_CLUSTER_TESTS for name in yaml.safe_load(path.read_text())["rule_files"]}
    untested = set(SHIPPED_RULE_FILES) - tested - set(named)
    # The workload rules are run on the real exporter's answers (tests/e2e/test_workload_rules_e2e.py) and
    # centrally with two clusters (tests/e2e/test_many_clusters_e2e.py); the scan above reads them too.
    assert untested <= {"pod-gpu-workload.rules.yml"}, untested
