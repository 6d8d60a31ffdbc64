"""`demo --gpu.vendor amd` behind the Prometheus the checkout ships for the demo (prometheus/demo/prometheus.yml, every
rule file), then `top --prometheus`, as the README runs them for the NVIDIA demo: every holder of an AMD GPU or
partition is a row, with its vendor, its GPUs (a CPX partition its share of the GPU: one of the eight its sysfs
shows) and the utilisation its own device gives it (none for a partition: the GPU's activity is the whole GPU's)."""

from __future__ import annotations

import pytest

from exporter.vendors.amd.demo_node import HOLDERS, demo_gpus
from support.autoscaling import query
from support.demo_process import console_script
from support.demo_prometheus import demo_behind_prometheus, loaded_rule_files
from support.deploy_tools import SHIPPED_RULE_FILES
from support.prometheus_server import DEADLINE_SECONDS
from support.top_runs import top_json
from support.waiting import wait_until

# Each holder's GPUs: a whole GPU counts 1, a CPX partition 1/8 (the demo's CPX GPU is split in eight).
WHOLE = {gpu.gpu_id for gpu in demo_gpus() if not gpu.partitioned}


@pytest.fixture(scope="module")
def stack():
    with demo_behind_prometheus("--gpu.vendor", "amd") as stack:
        wait_until(lambda: query(stack.prometheus, 'count_over_time(namespace_pod:pod_gpu_utilization:ratio'
                                                   f'{{pod="{HOLDERS["0"][1]}",vendor="amd"}}[1m]) >= 5'),
                   2 * DEADLINE_SECONDS, 0.5, "five evaluations of the per-pod utilisation rule")
        yield stack


def test_prometheus_loads_every_rule_file_and_records_amd_pods_with_their_vendor(stack):
    assert loaded_rule_files(stack.prometheus) == sorted(SHIPPED_RULE_FILES)
    recorded = {(s["metric"]["namespace"], s["metric"]["pod"]): s["metric"].get("vendor")
                for s in query(stack.prometheus, "namespace_pod:pod_gpu_utilization:ratio")}
    whole_holders = {(h[0], h[1]) for gpu_id, h in HOLDERS.items() if gpu_id in WHOLE}
    assert whole_holders <= set(recorded) and set(recorded.values()) == {"amd"}, recorded


def test_top_shows_every_amd_holder_with_its_vendor(stack):
    document = top_json(["--prometheus", stack.prometheus.url, "--window", "1m"], command=[console_script(), "top"])
    rows = {(row["namespace"], row["pod"], row["container"]): row for row in document["rows"]}
    whole_holders = {holder for gpu_id, holder in HOLDERS.items() if gpu_id in WHOLE}
    partition_holders = set(HOLDERS.values()) - whole_holders
    assert partition_holders and set(rows) == set(HOLDERS.values()), sorted(rows)
    assert {row["vendor"] for row in rows.values()} == {"amd"}
    assert {rows[holder]["gpus"] for holder in partition_holders} == {0.125}
    assert {rows[holder]["utilization"] for holder in partition_holders} == {None}
    trainer = rows[HOLDERS["0"]]
    assert trainer["gpus"] == 2 and trainer["node"] == "demo-node"
    assert trainer["utilization"] is not None and 0.5 < trainer["utilization"] <= 1.0, trainer
    assert {rows[holder]["gpus"] for holder in whole_holders - {trainer_key(trainer)}} == {1}


def trainer_key(row: dict) -> tuple:
    return row["namespace"], row["pod"], row["container"]
