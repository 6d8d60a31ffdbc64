"""`top`'s pure core: the text reader, the rates, the table from one look at a node, shaping and writing."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from exporter.top.errors import TopSourceError
from exporter.top.readings import Readings, add_scrapes, parse_text, per_second, rate_over_samples
from exporter.top.render import as_text, render
from exporter.top.shaping import parse_selector, shape
from exporter.top.table import Row, Table, build_table

OWNER_A = 'namespace="ml",pod="train-0",container="torch"'
OWNER_B = 'namespace="inf",pod="llm-b",container="vllm"'
GPU0 = 'UUID="GPU-0",gpu="0"'
GPU1 = 'UUID="GPU-1",gpu="1"'
GPU2 = 'UUID="GPU-2",gpu="2"'

PROCESS_MODE = f"""
# TYPE pod_gpu_container_allocated_gpus gauge
pod_gpu_container_allocated_gpus{{{OWNER_A},cluster_queue="cq",local_queue="lq",label_team="red"}} 2
pod_gpu_container_allocated_gpus{{{OWNER_B},cluster_queue="",local_queue="",label_team="blue"}} 0.25
pod_gpu_allocation_info{{{OWNER_A},resource="nvidia.com/gpu",device_id="GPU-0",{GPU0}}} 1
pod_gpu_allocation_info{{{OWNER_A},resource="nvidia.com/gpu",device_id="GPU-1",{GPU1}}} 1
pod_gpu_allocation_info{{{OWNER_B},resource="nvidia.com/gpu.shared",device_id="GPU-2::1",{GPU2}}} 1
pod_gpu_device_health_status{{{GPU0},status="healthy"}} 1
pod_gpu_device_health_status{{{GPU1},status="unhealthy"}} 1
pod_gpu_device_health_status{{{GPU2},status="healthy"}} 1
pod_gpu_container_sm_utilization_ratio{{{GPU0},{OWNER_A}}} 0.5
pod_gpu_container_sm_utilization_ratio{{{GPU1},{OWNER_A}}} 0.25
pod_gpu_container_sm_utilization_ratio{{{GPU2},{OWNER_B}}} 0.125
pod_gpu_container_memory_used_bytes{{{GPU0},{OWNER_A}}} 1073741824
pod_gpu_container_memory_used_bytes{{{GPU1},{OWNER_A}}} 1073741824
pod_gpu_container_memory_used_bytes{{{GPU2},{OWNER_B}}} 1048576
pod_gpu_container_energy_joules_total{{{GPU0},{OWNER_A}}} ENERGY_A
pod_gpu_container_energy_joules_total{{{GPU2},{OWNER_B}}} ENERGY_B
pod_gpu_container_idle_seconds_total{{{GPU0},{OWNER_A}}} 0
pod_gpu_container_idle_seconds_total{{{GPU1},{OWNER_A}}} 0
pod_gpu_container_idle_seconds_total{{{GPU2},{OWNER_B}}} IDLE_B
pod_gpu_unattributed_memory_used_bytes{{{GPU2},reason="host"}} 2097152
pod_gpu_unattributed_memory_used_bytes{{{GPU2},reason="not_holder"}} 0
pod_gpu_unattributed_energy_joules_total{{{GPU2},reason="no_holder"}} NO_HOLDER
pod_gpu_unallocated_memory_used_bytes{{{GPU0},namespace="lab",pod="nb-7",container="jupyter"}} 3145728
pod_gpu_unallocated_sm_utilization_ratio{{{GPU0},namespace="lab",pod="nb-7",container="jupyter"}} 0.03
"""


def scrape(energy_a: float, energy_b: float, idle_b: float, no_holder: float) -> dict:
    text = (PROCESS_MODE.replace("ENERGY_A", str(energy_a)).replace("ENERGY_B", str(energy_b))
            .replace("IDLE_B", str(idle_b)).replace("NO_HOLDER", str(no_holder)))
    return parse_text(text)


def look(first: dict, second: dict, seconds: float, node: str = "node-1") -> Readings:
    readings = Readings()
    add_scrapes(readings, node, first, second, seconds)
    return readings


def process_table():
    return build_table(look(scrape(100, 10, 0, 0), scrape(1100, 60, 8, 300), 10.0))


def test_the_reader_keeps_only_wanted_families_and_unescapes_values():
    found = parse_text('# HELP x y\nother{a="1"} 2\npod_gpu_container_allocated_gpus{pod="a\\"b",namespace="n"} 1.5\n'
                       "pod_gpu_container_allocated_gpus{broken 1\n")
    assert found == {("pod_gpu_container_allocated_gpus", (("pod", 'a"b'), ("namespace", "n"))): 1.5}


def test_a_counter_that_went_down_started_again_from_zero():
    assert per_second({"k": 100.0}, {"k": 30.0}, 10.0) == {"k": 3.0}
    assert per_second({"k": 100.0}, {"k": 150.0, "new": 5.0}, 10.0) == {"k": 5.0}


def test_one_row_per_holder_with_its_own_share_power_idle_and_worst_health():
    rows = {row.pod: row for row in process_table().rows}
    a, b = rows["train-0"], rows["llm-b"]
    assert (a.gpus, a.sm_ratio, a.memory_bytes, a.power_watts) == (2, 0.75, 2 << 30, 100.0)
    assert (a.idle_ratio, a.health, a.cluster_queue, a.local_queue, a.sm_source) == (0.0, "unhealthy", "cq", "lq", "process")
    assert (b.gpus, b.sm_ratio, b.power_watts, b.idle_ratio, b.health) == (0.25, 0.125, 5.0, 0.8, "healthy")
    assert (b.cluster_queue, b.local_queue, b.node) == (None, None, "node-1")


def test_footers_hold_what_nobody_holds_and_use_outside_allocations():
    table = process_table()
    assert [(u.reason, u.memory_bytes, u.power_watts) for u in table.unattributed] == [
        ("host", 2097152, None), ("no_holder", None, 30.0)]
    assert [(u.pod, u.memory_bytes, u.sm_ratio) for u in table.unallocated] == [("nb-7", 3145728, 0.03)]


def test_device_mode_reads_the_gpus_of_each_holder_and_marks_it():
    text = (f'pod_gpu_container_allocated_gpus{{{OWNER_B}}} 0.5\n'
            f'pod_gpu_allocation_info{{{OWNER_B},resource="r",device_id="GPU-2::0",{GPU2}}} 1\n'
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="2",UUID="GPU-2",Hostname="h",{OWNER_B}}} 40\n'
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="2",UUID="GPU-2",Hostname="h",namespace="inf",pod="other",container="c"}} 40\n'
            f'DCGM_FI_DEV_FB_USED{{gpu="2",UUID="GPU-2",{OWNER_B}}} 100\n'
            f'pod_gpu_device_lost{{{GPU2}}} 1\npod_gpu_device_health_status{{{GPU2},status="healthy"}} 1\n')
    row, = build_table(look(parse_text(text), parse_text(text), 5.0)).rows
    assert (row.sm_ratio, row.sm_source, row.memory_bytes, row.health, row.power_watts) == (0.4, "device", 100 << 20,
                                                                                          "lost", None)
    assert "0.40*" in as_text(build_table(look(parse_text(text), parse_text(text), 5.0)), "pod")


def test_grouping_adds_amounts_weights_idle_by_gpus_and_keeps_the_worst_health():
    row, = shape(process_table(), None, [], "node", "sm").rows
    assert (row.node, row.containers, row.gpus, row.sm_ratio, row.power_watts, row.health) == (
        "node-1", 2, 2.25, 0.875, 105.0, "unhealthy")
    assert row.idle_ratio == pytest.approx(0.8 * 0.25 / 2.25)
    queues = shape(process_table(), None, [], "queue", "name").rows
    assert [(r.cluster_queue, r.namespace, r.local_queue) for r in queues] == [(None, "inf", None), ("cq", "ml", "lq")]


def test_sorting_is_widest_first_and_filters_apply():
    assert [r.pod for r in shape(process_table(), None, [], "pod", "sm").rows] == ["train-0", "llm-b"]
    assert [r.pod for r in shape(process_table(), None, [], "pod", "idle").rows] == ["llm-b", "train-0"]
    assert [r.pod for r in shape(process_table(), "inf", [], "pod", "sm").rows] == ["llm-b"]
    assert [r.pod for r in shape(process_table(), None, parse_selector("team=red"), "pod", "sm").rows] == ["train-0"]
    assert [r.pod for r in shape(process_table(), None, parse_selector("team!=red"), "pod", "sm").rows] == ["llm-b"]


def test_a_selector_on_an_exporter_serving_no_pod_labels_is_an_error_not_an_empty_table():
    text = f'pod_gpu_container_allocated_gpus{{{OWNER_B}}} 0.5\n'
    table = build_table(look(parse_text(text), parse_text(text), 5.0))
    with pytest.raises(TopSourceError, match="--labels.pod-labels"):
        shape(table, None, parse_selector("team=red"), "pod", "sm")


@pytest.mark.parametrize("text", ["a in (b)", "=x", "a=b=c"])
def test_set_based_or_broken_selectors_are_refused(text):
    with pytest.raises(ValueError):
        parse_selector(text)


def test_json_carries_the_contracts_fields_and_csv_its_columns():
    table = shape(process_table(), None, [], "pod", "sm")
    document = json.loads(render(table, "json", "pod"))
    assert set(document) >= {"rows", "unallocated", "unattributed"}
    assert set(document["rows"][0]) >= {"namespace", "pod", "container", "node", "gpus", "sm_ratio", "memory_bytes",
                                        "power_watts", "idle_ratio", "health", "cluster_queue", "local_queue"}
    assert set(document["unallocated"][0]) >= {"namespace", "pod", "container", "memory_bytes"}
    assert document["rows"][1]["cluster_queue"] is None
    rows = list(csv.DictReader(io.StringIO(render(table, "csv", "pod"))))
    assert [r["pod"] for r in rows] == ["train-0", "llm-b"] and rows[1]["cluster_queue"] == ""


def test_the_text_names_nodes_that_did_not_answer():
    readings = look(scrape(1, 1, 0, 0), scrape(2, 2, 1, 1), 1.0)
    readings.unreachable.append(("node-9", "HTTP 503: error trying to reach service"))
    text = as_text(build_table(readings), "pod")
    assert text.splitlines()[0].split() == ["NAMESPACE", "POD", "CONTAINER", "NODE", "GPUS", "SM", "UTIL", "MEMORY",
                                            "POWER", "IDLE", "HEALTH", "QUEUE"]
    assert "Not answering (1): node-9 (HTTP 503: error trying to reach service)" in text
    assert "lab/nb-7/jupyter on node-1" in text


def test_the_proxy_route_names_the_port_and_https_when_the_exporter_serves_tls():
    from exporter.top.pod_scrape import ExporterPod, proxy_path

    pod = ExporterPod("gpu-monitoring", "pgx-7xk2p", "node-1", "Running")
    assert proxy_path(pod, "http", "9400", "/gpu/metrics") == \
        "/api/v1/namespaces/gpu-monitoring/pods/pgx-7xk2p:9400/proxy/gpu/metrics"
    assert proxy_path(pod, "https", "metrics", "/gpu/metrics") == \
        "/api/v1/namespaces/gpu-monitoring/pods/https:pgx-7xk2p:metrics/proxy/gpu/metrics"


def test_an_exporter_with_legacy_label_names_is_read_alike():
    text = ('pod_gpu_container_allocated_gpus{pod_name="train-0",pod_namespace="ml",container_name="torch"} 1\n'
            'pod_gpu_container_sm_utilization_ratio{UUID="GPU-0",gpu="0",pod_name="train-0",pod_namespace="ml",'
            'container_name="torch"} 0.5\n')
    row, = build_table(look(parse_text(text), parse_text(text), 5.0)).rows
    assert (row.namespace, row.pod, row.container, row.gpus, row.sm_ratio) == ("ml", "train-0", "torch", 1, 0.5)


def test_json_writes_null_where_a_value_is_not_a_number():
    """NaN and Inf (the text format allows them; Prometheus answers "NaN") are no JSON: null, as unknown."""
    text = (PROCESS_MODE.replace("ENERGY_A", "NaN").replace("ENERGY_B", "+Inf").replace("IDLE_B", "NaN")
            .replace("NO_HOLDER", "NaN").replace("0.25\n", "NaN\n", 1).replace("} 0.5\n", "} NaN\n")
            .replace("} 3145728\n", "} +Inf\n"))
    built = build_table(look(parse_text(text), parse_text(text), 10.0))
    table = shape(built, None, [], "pod", "sm")
    for by in ("pod", "node"):
        written = render(shape(built, None, [], by, "sm"), "json", by)
        document = json.loads(written, parse_constant=lambda name: pytest.fail(f"{name} in the JSON: {written}"))
        assert json.dumps(document, allow_nan=False)
    b = json.loads(render(table, "json", "pod"))
    rows_b = {row["pod"]: row for row in b["rows"]}
    assert rows_b["llm-b"]["gpus"] is None and rows_b["train-0"]["sm_ratio"] is None, rows_b
    assert b["unallocated"][0]["memory_bytes"] is None
    assert "NaN" not in render(table, "csv", "pod") and "nan" not in render(table, "csv", "pod").lower()
    assert not re.search(r"(?i)nan|\binf(W|%|[KMG]iB|B)", as_text(table, "pod")), as_text(table, "pod")


def test_a_counters_rate_is_over_the_time_its_samples_span_not_the_window():
    """80 s of a series at 126.4 W read through a 2 m window: 126.4 W, where rate() divides by the window."""
    points = [(1000.0 + 10 * i, 126.4 * 10 * i) for i in range(9)]  # 9 samples, 80 s apart first to last
    assert rate_over_samples(points) == pytest.approx(126.4)
    assert rate_over_samples([(0.0, 100.0), (10.0, 150.0), (20.0, 30.0)]) == pytest.approx((50 + 30) / 20)  # a reset
    assert rate_over_samples([(5.0, 7.0)]) is None and rate_over_samples([]) is None
    assert rate_over_samples([(5.0, 7.0), (5.0, 9.0)]) is None  # no time spanned


def test_a_counter_new_since_the_first_scrape_is_unrated_and_the_table_says_why_it_shows_a_dash():
    first, second = scrape(100, 10, 0, 0), scrape(1100, 60, 8, 300)
    young = {key: value for key, value in first.items() if 'llm-b' not in str(key)}  # llm-b came after the first
    table = build_table(look(young, second, 10.0))
    rows = {row.pod: row for row in table.rows}
    assert (rows["llm-b"].power_watts, rows["llm-b"].idle_ratio, rows["llm-b"].rates_pending) == (None, None, True)
    assert (rows["train-0"].power_watts, rows["train-0"].rates_pending) == (100.0, False)
    text = as_text(table, "pod")
    assert "- in POWER or IDLE of 1 row: not enough data yet, fewer than two samples" in text, text
    assert "widen --window" in text
    grouped, = shape(table, None, [], "node", "sm").rows
    assert grouped.rates_pending and "of 1 row:" in as_text(shape(table, None, [], "node", "sm"), "node")
    assert "not enough data" not in as_text(process_table(), "pod")  # every counter in both scrapes
    # Device mode serves no counters: its `-` is a value the exporter does not serve, and no note says otherwise.
    device = f'pod_gpu_container_allocated_gpus{{{OWNER_B}}} 0.5\nDCGM_FI_DEV_GPU_UTIL{{{GPU2},{OWNER_B}}} 40\n'
    row, = build_table(look(parse_text(device), parse_text(device), 5.0)).rows
    assert row.power_watts is None and not row.rates_pending
    assert "not enough data" not in as_text(build_table(look(parse_text(device), parse_text(device), 5.0)), "pod")


def test_name_sort_is_by_namespace_pod_container_never_by_queue_first():
    rows = [Row("inference", "llm-server-b", "vllm", "n", cluster_queue=None),
            Row("inference", "llm-server-a", "vllm", "n", cluster_queue="inference"),
            Row("ml-team", "trainer-0", "pytorch", "n", cluster_queue="cq-research", local_queue="team-ml")]
    table = Table(rows, [], [], [])
    assert [r.pod for r in shape(table, None, [], "pod", "name").rows] == ["llm-server-a", "llm-server-b", "trainer-0"]
    by_queue = shape(table, None, [], "queue", "name").rows
    assert [(r.cluster_queue, r.namespace) for r in by_queue] == [
        (None, "inference"), ("cq-research", "ml-team"), ("inference", "inference")]
