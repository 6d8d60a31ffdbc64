"""Many clusters through a real central store: two demos stand for two clusters that share every namespace, pod,
node and GPU name; each is scraped by its own vmagent that adds cluster=<name> and remote-writes into one
victoria-metrics, where vmalert evaluates the project's rule files. Read from the centre, every recorded
series, alert, dashboard panel and `top` row keeps the two clusters apart."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml

from support.central_store import AlertReceiver, query, start_agent, start_rules, start_store
from support.demo_process import start_demo
from support.deploy_tools import DASHBOARD, PROMETHEUS_DIR, REPO_ROOT
from support.top_runs import own_sum, run_top, served, top_json, within_readings
from support.waiting import wait_until

CLUSTERS = ("east", "west")
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.rules.yml"))
DEADLINE_SECONDS = 45.0
POLL_SECONDS = 0.5
# Recorded series the demo cannot feed: the quota ratio divides by Kueue's own
# kueue_cluster_queue_nominal_quota, which no exporter serves.
NOT_FED_BY_THE_DEMO = {"cluster_queue:pod_gpu_allocated_gpus:nominal_quota_ratio"}
PANELS_NOT_FED = {"Allocated share of nominal GPU quota"}


@pytest.fixture(scope="module")
def centre():
    folder = Path(tempfile.mkdtemp(prefix="pgx-clusters-", dir="/tmp"))
    started = []
    try:
        demos = {cluster: start_demo() for cluster in CLUSTERS}
        started += demos.values()
        store = start_store(folder / "store")
        started.append(store)
        # east's agent adds `cluster` itself; west's platform names clusters `k8s_cluster`, mapped to `cluster`
        # by the relabelling docs/multi-cluster.md gives.
        started.append(start_agent(folder / "east", "cluster=east", [demos["east"].address], store))
        started.append(start_agent(folder / "west", "k8s_cluster=west", [demos["west"].address], store,
                                   relabel=documented_relabelling()))
        receiver = AlertReceiver()
        started.append(receiver)
        started.append(start_rules(folder / "vmalert", RULE_FILES, store, receiver.url))
        yield store, receiver, demos
    finally:
        for process in reversed(started):
            process.stop()
        shutil.rmtree(folder, ignore_errors=True)


def documented_relabelling() -> str:
    """The relabelling rules docs/multi-cluster.md gives for a cluster label by another name."""
    page = (REPO_ROOT / "docs" / "multi-cluster.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", page, re.DOTALL) if "target_label: cluster" in b]
    return block


def _records():
    return [rule["record"] for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "record" in rule]


def _clusters_of(result: list) -> Counter:
    return Counter(series["metric"].get("cluster") for series in result)


def test_recording_rules_read_from_the_centre_keep_the_clusters_apart(centre):
    store, _, _ = centre
    utilisation = wait_until(lambda: len(found := query(store, "namespace_pod:DCGM_FI_DEV_GPU_UTIL:avg")) >= 6 and found,
                             DEADLINE_SECONDS, POLL_SECONDS, "each cluster's per-pod utilisation recorded centrally")
    assert _clusters_of(utilisation) == {"east": 3, "west": 3}
    pods = {cluster: sorted((s["metric"]["namespace"], s["metric"]["pod"]) for s in utilisation
                            if s["metric"]["cluster"] == cluster) for cluster in CLUSTERS}
    assert pods["east"] == pods["west"]  # the same names, two clusters: never merged into one series

    expected = [name for name in _records() if name not in NOT_FED_BY_THE_DEMO]

    def every_record_in_both_clusters():
        missing = [name for name in expected if set(_clusters_of(query(store, name))) != set(CLUSTERS)]
        return not missing or None

    try:
        wait_until(every_record_in_both_clusters, DEADLINE_SECONDS, POLL_SECONDS, "every recorded series per cluster")
    except AssertionError:
        pytest.fail(f"recorded series not split by cluster: "
                    f"{ {name: dict(_clusters_of(query(store, name))) for name in expected} }")
    for name in expected:  # each cluster's answer is its own: as many series in each, none without the label
        counts = _clusters_of(query(store, name))
        assert counts["east"] == counts["west"] and None not in counts, (name, counts)
    assert query(store, 'count({k8s_cluster!=""})') == []  # west's own name for the label was mapped, not kept


def test_alerts_evaluated_centrally_carry_and_name_their_cluster(centre):
    _, receiver, _ = centre
    # The demo's GPUs raise XIDs, and GpuXidError has no `for`: it fires at the first evaluation.
    xids = wait_until(lambda: {a["labels"].get("cluster") for a in receiver.alerts
                               if a["labels"]["alertname"] == "GpuXidError"} >= set(CLUSTERS) and receiver.alerts,
                      DEADLINE_SECONDS, POLL_SECONDS, "GpuXidError from both clusters at the notifier")
    for alert in (a for a in xids if a["labels"]["alertname"] == "GpuXidError"):
        cluster = alert["labels"]["cluster"]
        assert f" in cluster {cluster}," in alert["annotations"]["summary"], alert


def _dashboard_queries(cluster: str):
    substitutions = {"$cluster": cluster, "$vendor": ".*", "$namespace": ".*", "$pod": ".*", "$__rate_interval": "1m"}
    panels = json.loads(DASHBOARD.read_text())["panels"]
    panels += [inner for panel in panels for inner in panel.get("panels", [])]
    for panel in panels:
        for target in panel.get("targets", []):
            if panel["title"] not in PANELS_NOT_FED:
                yield panel["title"], re.sub(r"\$\w+", lambda m: substitutions.get(m.group(), m.group()), target["expr"])


def test_the_dashboard_shows_one_cluster_or_all_of_them_apart(centre):
    store, _, _ = centre

    def all_panels_show_both():
        return all(set(_clusters_of(query(store, promql))) == set(CLUSTERS) for _, promql in _dashboard_queries(".*"))

    wait_until(all_panels_show_both, DEADLINE_SECONDS, POLL_SECONDS, "every fed panel showing both clusters")
    for title, promql in _dashboard_queries("east"):
        assert set(_clusters_of(query(store, promql))) == {"east"}, (title, promql)


TOP_WINDOW = "10s"
GPUS = {"trainer-0": 2, "llm-server-a": 0.5, "llm-server-b": 0.25}  # what the demo's pods hold, per cluster


def _power_in_store(store) -> dict:
    promql = f"sum by (cluster, pod) (rate(pod_gpu_container_energy_joules_total[{TOP_WINDOW}]))"
    return {(s["metric"]["cluster"], s["metric"]["pod"]): float(s["value"][1]) for s in query(store, promql)}


def test_top_reads_the_centre_with_the_clusters_apart(centre):
    store, _, demos = centre
    # A rate over a series younger than the window reads low: wait until each cluster's counters fill it.
    wait_until(lambda: len(query(store, f"count_over_time(pod_gpu_container_energy_joules_total[{TOP_WINDOW}]) >= 8"))
               == len(query(store, "pod_gpu_container_energy_joules_total")) > 0,
               DEADLINE_SECONDS, POLL_SECONDS, "a whole window of both clusters' energy counters at the centre")
    before = {cluster: served(demo.url()) for cluster, demo in demos.items()}
    power_before = _power_in_store(store)
    document = top_json(["--prometheus", store.url, "--window", TOP_WINDOW])
    after = {cluster: served(demo.url()) for cluster, demo in demos.items()}
    power_after = _power_in_store(store)
    rows = {(row["cluster"], row["pod"]): row for row in document["rows"]}
    assert set(rows) == {(cluster, pod) for cluster in CLUSTERS for pod in GPUS}, sorted(rows)
    for (cluster, pod), row in rows.items():  # each row one cluster's: its GPUs, memory and power, not the sum
        assert row["gpus"] == GPUS[pod], (cluster, pod, row)
        readings = [own_sum(own[cluster], "pod_gpu_container_memory_used_bytes", pod) for own in (before, after)]
        assert within_readings(row["memory_bytes"], readings, 0.1 * max(readings) + 1), (cluster, pod, row, readings)
        low, high = sorted((power_before[cluster, pod], power_after[cluster, pod]))
        assert 0.6 * low <= row["power_watts"] <= 1.4 * high + 0.5, (cluster, pod, row["power_watts"], low, high)
    table = run_top(["--prometheus", store.url, "--window", TOP_WINDOW, "--cluster", "west"])
    assert table.returncode == 0, table.stderr
    assert len([line for line in table.stdout.splitlines() if line.split()[1:2] in (["trainer-0"], ["llm-server-a"],
                                                                                    ["llm-server-b"])]) == 3, table.stdout
