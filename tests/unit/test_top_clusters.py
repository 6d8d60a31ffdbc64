"""`top` across clusters: rows of two clusters that share every name stay apart, in the table, its
groupings, filters and outputs; on one cluster the table is the one it always was."""

from __future__ import annotations

import csv
import io
import json

import pytest

from exporter.top.readings import Readings, parse_text
from exporter.top.render import as_text, render
from exporter.top.shaping import shape
from exporter.top.table import build_table

OWNER = 'namespace="ml",pod="train-0",container="torch"'
GPU0 = 'UUID="GPU-0",gpu="0"'
# One cluster's node as a central store holds it: the same names in both, the amounts each its own.
NODE = f"""
pod_gpu_container_allocated_gpus{{{OWNER},cluster_queue="cq",local_queue="lq"}} 1
pod_gpu_allocation_info{{{OWNER},resource="nvidia.com/gpu",device_id="GPU-0",{GPU0}}} 1
pod_gpu_container_sm_utilization_ratio{{{GPU0},{OWNER}}} SM
pod_gpu_container_memory_used_bytes{{{GPU0},{OWNER}}} MEMORY
pod_gpu_device_health_status{{{GPU0},status="HEALTH"}} 1
pod_gpu_unallocated_memory_used_bytes{{{GPU0},namespace="lab",pod="nb",container="j"}} 1024
pod_gpu_unattributed_memory_used_bytes{{{GPU0},reason="host"}} 2048
"""


def cluster_readings(readings: Readings, cluster, sm: float, memory: float, health: str = "healthy",
                     label: str = "cluster") -> None:
    """One cluster's series added as a store answers them: every sample with the cluster label."""
    text = NODE.replace("SM", str(sm)).replace("MEMORY", str(memory)).replace("HEALTH", health)
    for (family, labels), value in parse_text(text).items():
        extra = {label: cluster} if cluster else {}
        readings.add(family, dict(labels, node="gpu-node-1", **extra), value)


def two_clusters() -> Readings:
    readings = Readings()
    cluster_readings(readings, "east", 0.5, 1 << 30)
    cluster_readings(readings, "west", 0.25, 3 << 30, health="unhealthy")
    return readings


def test_rows_of_two_clusters_with_the_same_names_never_merge():
    table = build_table(two_clusters())
    rows = {row.cluster: row for row in table.rows}
    assert set(rows) == {"east", "west"}
    assert (rows["east"].memory_bytes, rows["east"].sm_ratio, rows["east"].health) == (1 << 30, 0.5, "healthy")
    assert (rows["west"].memory_bytes, rows["west"].sm_ratio, rows["west"].health) == (3 << 30, 0.25, "unhealthy")
    assert sorted((u.cluster, u.memory_bytes) for u in table.unallocated) == [("east", 1024), ("west", 1024)]
    assert sorted((u.cluster, u.memory_bytes) for u in table.unattributed) == [("east", 2048), ("west", 2048)]


def test_the_cluster_column_shows_only_when_more_than_one_cluster_is_seen():
    several = as_text(shape(build_table(two_clusters()), None, [], "pod", "name"), "pod").splitlines()
    assert several[0].split()[:2] == ["CLUSTER", "NAMESPACE"]
    assert [line.split()[0] for line in several[1:3]] == ["east", "west"]
    one = Readings()
    cluster_readings(one, None, 0.5, 1 << 30)
    alone = as_text(shape(build_table(one), None, [], "pod", "name"), "pod").splitlines()
    assert alone[0].split() == ["NAMESPACE", "POD", "CONTAINER", "NODE", "GPUS", "SM", "UTIL", "MEMORY", "POWER",
                                "IDLE", "HEALTH", "QUEUE"]
    assert alone[1].split() == ["ml", "train-0", "torch", "gpu-node-1", "1", "0.50", "50%", "1.0GiB", "-", "-",
                                "healthy", "cq/lq"]
    # --cluster leaves one: the column goes with the other cluster.
    east = as_text(shape(build_table(two_clusters()), None, [], "pod", "name", cluster="east"), "pod").splitlines()
    assert east[0].split()[0] == "NAMESPACE" and east[1].startswith("ml ") and "west" not in "\n".join(east)


def test_json_carries_cluster_null_where_the_series_carry_none():
    document = json.loads(render(shape(build_table(two_clusters()), None, [], "pod", "name"), "json", "pod"))
    assert [row["cluster"] for row in document["rows"]] == ["east", "west"]
    assert sorted(entry["cluster"] for entry in document["unallocated"]) == ["east", "west"]
    one = Readings()
    cluster_readings(one, None, 0.5, 1 << 30)
    document = json.loads(render(shape(build_table(one), None, [], "pod", "name"), "json", "pod"))
    assert document["rows"][0]["cluster"] is None and document["rows"][0]["utilization"] == 0.5


def test_csv_has_the_cluster_column_only_for_several_clusters():
    several = list(csv.DictReader(io.StringIO(render(shape(build_table(two_clusters()), None, [], "pod", "name"),
                                                     "csv", "pod"))))
    assert [row["cluster"] for row in several] == ["east", "west"]
    one = Readings()
    cluster_readings(one, None, 0.5, 1 << 30)
    header = render(shape(build_table(one), None, [], "pod", "name"), "csv", "pod").splitlines()[0]
    assert header.split(",")[:2] == ["namespace", "pod"] and "cluster," not in header.replace("cluster_queue", "")


@pytest.mark.parametrize("by, keys", [
    ("namespace", [("east", "ml"), ("west", "ml")]),
    ("node", [("east", "gpu-node-1"), ("west", "gpu-node-1")]),
    ("queue", [("east", "cq"), ("west", "cq")]),
])
def test_every_grouping_keeps_the_clusters_apart(by, keys):
    rows = shape(build_table(two_clusters()), None, [], by, "name").rows
    assert [(row.cluster, getattr(row, {"namespace": "namespace", "node": "node", "queue": "cluster_queue"}[by]))
            for row in rows] == keys
    assert [row.memory_bytes for row in rows] == [1 << 30, 3 << 30]


def test_by_cluster_adds_each_clusters_rows_up():
    readings = two_clusters()
    cluster_readings(readings, "east", 0.25, 1 << 30, label="cluster")  # the same again: one row, values replaced
    rows = shape(build_table(readings), None, [], "cluster", "name").rows
    assert [(row.cluster, row.containers, row.gpus) for row in rows] == [("east", 1, 1), ("west", 1, 1)]
    text = as_text(shape(build_table(two_clusters()), None, [], "cluster", "name"), "cluster").splitlines()
    assert text[0].split()[:3] == ["CLUSTER", "CONTAINERS", "GPUS"] and text[1].split()[0] == "east"


def test_a_whole_cluster_that_did_not_answer_is_named_in_the_footer():
    readings = two_clusters()
    readings.unreachable.append(("", "the Kubernetes API server at https://10.0.0.9 cannot be reached", "north"))
    readings.unreachable.append(("gpu-node-7", "HTTP 503", "east"))
    table = shape(build_table(readings), None, [], "pod", "name")
    text = as_text(table, "pod")
    assert ("Not answering (2): east/gpu-node-7 (HTTP 503); cluster north (the Kubernetes API server at "
            "https://10.0.0.9 cannot be reached)") in text
    document = json.loads(render(table, "json", "pod"))
    assert document["unreachable"][1] == {"cluster": "north", "node": None,
                                          "error": "the Kubernetes API server at https://10.0.0.9 cannot be reached"}
