"""NVML's XID events against the real exporter process: counted on the device and on its holders at that
moment, a lost GPU shown, a GPU without events left out, and a wait that hangs blocking nothing served
(tests/support/shared_node.py builds the node; the fake libnvidia-ml.so.1 delivers the events)."""

from __future__ import annotations

import re

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import PROMETHEUS_DIR
from support.fake_kubelet import FakeKubelet
from support.promtool_tests import run_rule_test
from support.scrape_checks import assert_parses, sample_lines, scrape, split_sample
from support.share_invariants import check_memory_and_sm, parse_samples
from support.shared_node import A800_FIXTURE, A800_GPU0, L4, MIB, MIG_GI3, holder_labels, series, shares_served
from support.waiting import wait_until

DEVICE = "pod_gpu_device_xid_errors_total"
CONTAINER = "pod_gpu_container_xid_errors_total"
MIG_GI5 = "MIG-5f5f5f5f-6a6a-7b7b-8c8c-9d9d9d9d9d9d"
LOST = "GPU-0b0b0b0b-1111-4222-8333-000000000001"
NO_EVENTS = "GPU-0b0b0b0b-1111-4222-8333-000000000002"


def events_up(exporter) -> str:
    """A scrape once the GPUs are registered for events."""
    return wait_until(lambda: (lambda text: text if "pod_gpu_exporter_xid_events_up 1" in text else None)(
        scrape(exporter).text), describe="pod_gpu_exporter_xid_events_up 1")


def counted(exporter, family: str, labels: str, value: str) -> str:
    """A scrape once that sample has that value."""
    def ready():
        text = scrape(exporter).text
        return text if series(text, family).get(labels) == value else None

    return wait_until(ready, describe=f"{family}{{{labels}}} {value}")


def xid(labels: str, number: int) -> str:
    return f'{labels},xid="{number}"'


# The meanings the alert gives, from NVIDIA's XID catalog.
MEANINGS = {"13": "graphics engine exception: usually the application", "79": "GPU has fallen off the bus: drain the node"}


def _expected_alert(labels: dict) -> dict:
    holder = f"{labels['namespace']}/{labels['pod']}"
    return {"exp_labels": {**labels, "instance": "node-a:9400", "job": "pod-gpu-metrics", "severity": "warning"},
            "exp_annotations": {
                "summary": f"XID {labels['xid']} on GPU {labels['gpu']} of node-a:9400, held by {holder} "
                           f"({labels['container']}).",
                "description": f"NVML reported XID {labels['xid']} ({MEANINGS[labels['xid']]}) on GPU {labels['UUID']} "
                               f"while {holder}, container {labels['container']}, held it. See docs/health.md, "
                               '"On GpuXidError", for what to do.'}}


def assert_xid_alert_fires_on(tmp_path, text: str) -> None:
    """GpuXidError, run by promtool on the container counters this scrape served (born 2m into the test,
    as a counter first served with an XID is), fires once per series with the series' own labels."""
    served = [split_sample(line) for line in sample_lines(text) if line.startswith(CONTAINER + "{")]
    target = 'instance="node-a:9400",job="pod-gpu-metrics"'
    inputs = [{"series": f"{CONTAINER}{{{labels},{target}}}", "values": f"_ _ {value.split()[0]}x10"}
              for _, labels, value in served]
    alerts = [_expected_alert(dict(re.findall(r'(\w+)="([^"]*)"', labels))) for _, labels, _ in served]
    test = {"rule_files": [str(PROMETHEUS_DIR / "rules" / "pod-gpu-health.rules.yml")], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": inputs,
                       "alert_rule_test": [{"eval_time": "5m", "alertname": "GpuXidError", "exp_alerts": alerts}]}]}
    result = run_rule_test(test, tmp_path / "health-rules.test.yml")
    assert result.returncode == 0 and len(alerts) == 4, result.stdout + result.stderr


def test_xids_on_a_whole_gpu_count_on_every_holder_then_and_stay_after_one_leaves(gpu_node, tmp_path):
    for pod in ("a", "b"):
        gpu_node.add_pod(pod)
    held = [AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", f"{L4}::{i}") for i, pod in enumerate(("a", "b"))]
    gpu_node.kubelet.set_devices(held)
    gpu_node.nvml.gpu(0, L4).process(L4, 11, 300 * MIB).process(L4, 12, 500 * MIB).write()
    gpu_node.run_in(11, "a")
    gpu_node.run_in(12, "b")
    exporter = gpu_node.start()
    shares_served(exporter, count=2)  # the holders are known, and their shares served
    events_up(exporter)
    gpu_node.nvml.xid(L4, 79).xid(L4, 79).xid(L4, 13)
    device = f'UUID="{L4}",gpu="0"'
    text = counted(exporter, DEVICE, xid(device, 13), "1")
    assert series(text, DEVICE) == {xid(device, 79): "2", xid(device, 13): "1"}
    assert series(text, CONTAINER) == {xid(holder_labels(pod), number): count
                                       for pod in ("a", "b") for number, count in ((79, "2"), (13, "1"))}
    check_memory_and_sm(parse_samples(text), {(L4, ""): 800 * MIB})  # the shares stay exact beside them
    assert "pod_gpu_device_lost" not in text
    assert_parses(text)
    assert_xid_alert_fires_on(tmp_path, text)
    # b leaves the GPU: a later XID is a's alone, and b's counters stay as they were (never reset).
    gpu_node.kubelet.set_devices(held[:1])
    wait_until(lambda: holder_labels("b") not in series(scrape(exporter).text, "pod_gpu_container_memory_used_bytes")
               and holder_labels("a") in series(scrape(exporter).text, "pod_gpu_container_memory_used_bytes"))
    gpu_node.nvml.xid(L4, 79)
    text = counted(exporter, CONTAINER, xid(holder_labels("a"), 79), "3")
    assert series(text, CONTAINER)[xid(holder_labels("b"), 79)] == "2"
    assert series(text, DEVICE)[xid(device, 79)] == "3"


def test_xids_on_a_mig_instance_count_on_its_holders_and_a_gpu_wide_one_on_every_instance(gpu_node):
    gpu_node.add_pod("small-a")
    gpu_node.add_pod("small-b")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "small-a", "main", "nvidia.com/mig-2g.20gb", MIG_GI3),
                                  AllocatedDevice("ml", "small-b", "main", "nvidia.com/mig-1g.10gb", MIG_GI5)])
    gpu_node.nvml.gpu(0, A800_GPU0).mig(0, 3, MIG_GI3).mig(0, 5, MIG_GI5)
    gpu_node.nvml.process(MIG_GI3, 21, 3000 * MIB).process(MIG_GI5, 22, 900 * MIB).write()
    gpu_node.run_in(21, "small-a")
    gpu_node.run_in(22, "small-b")
    exporter = gpu_node.start(A800_FIXTURE)
    shares_served(exporter, count=2)
    events_up(exporter)
    gpu_node.nvml.xid(A800_GPU0, 31, gpu_instance=3)
    text = counted(exporter, DEVICE, xid(f'UUID="{A800_GPU0}",gpu="0",GPU_I_ID="3"', 31), "1")
    assert series(text, CONTAINER) == {xid(holder_labels("small-a", A800_GPU0, instance="3"), 31): "1"}
    gpu_node.nvml.xid(A800_GPU0, 79)  # tied to no instance: the whole GPU, so every instance's holders
    gpu = f'UUID="{A800_GPU0}",gpu="0"'
    text = counted(exporter, DEVICE, xid(gpu, 79), "1")
    assert series(text, CONTAINER) == {xid(holder_labels("small-a", A800_GPU0, instance="3"), 31): "1",
                                       xid(holder_labels("small-a", A800_GPU0), 79): "1",
                                       xid(holder_labels("small-b", A800_GPU0), 79): "1"}
    check_memory_and_sm(parse_samples(text), {(A800_GPU0, "3"): 3000 * MIB, (A800_GPU0, "5"): 900 * MIB})
    assert_parses(text)


def test_a_lost_gpu_is_shown_until_it_registers_again_and_one_without_events_is_left_out(gpu_node):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    node = gpu_node.nvml.gpu(0, L4).gpu(1, LOST).gpu(2, NO_EVENTS).process(L4, 11, 300 * MIB)
    node.fail("nvmlDeviceRegisterEvents", 15, LOST).fail("nvmlDeviceRegisterEvents", 3, NO_EVENTS).write()
    gpu_node.run_in(11, "a")
    exporter = gpu_node.start()
    shares_served(exporter)  # the mapping and the pod index are in
    text = wait_until(lambda: (lambda t: t if "pod_gpu_device_lost{" in t else None)(scrape(exporter).text))
    assert series(text, "pod_gpu_device_lost") == {f'UUID="{LOST}",gpu="1"': "1"}
    assert "pod_gpu_exporter_xid_events_up 1" in text  # the other GPUs' events still come
    gpu_node.nvml.xid(NO_EVENTS, 43).xid(L4, 48)  # the GPU without events reports nothing
    text = counted(exporter, CONTAINER, xid(holder_labels("a"), 48), "1")
    assert series(text, DEVICE) == {xid(f'UUID="{L4}",gpu="0"', 48): "1"}
    check_memory_and_sm(parse_samples(text), {(L4, ""): 300 * MIB, (LOST, ""): 0, (NO_EVENTS, ""): 0})
    node.lines = [line for line in node.lines if not line.startswith("fail nvmlDeviceRegisterEvents 15")]
    node.write()  # the GPU is back (reset): the next registration finds it
    wait_until(lambda: "pod_gpu_device_lost" not in scrape(exporter).text, timeout_seconds=30)
    # Said once each, not at every registration:
    log = exporter.wait_for_log("NVML has no XID events for this GPU", "NVML reports a GPU lost")
    assert log.count("NVML has no XID events for this GPU") == 1 and log.count("NVML reports a GPU lost") == 1, log


def test_an_event_wait_that_hangs_blocks_nothing_served(gpu_node):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    node = gpu_node.nvml.gpu(0, L4).process(L4, 11, 300 * MIB).hang("nvmlEventSetWait", 600_000).write()
    gpu_node.run_in(11, "a")
    exporter = gpu_node.start()
    wait_until(lambda: "nvmlEventSetWait" in node.hanging())
    # While the wait hangs, the shares follow NVML and the dcgm samples are served.
    node.lines = [line for line in node.lines if not line.startswith("process")]
    node.process(L4, 11, 700 * MIB).write()
    text = wait_until(lambda: (lambda t: t if series(t, "pod_gpu_container_memory_used_bytes").get(
        holder_labels("a")) == str(700 * MIB) else None)(scrape(exporter).text))
    assert "pod_gpu_exporter_nvml_up 1" in text and "DCGM_FI_DEV_GPU_UTIL{" in text
    # Past its bound the stuck wait is counted and events are reported down; scrapes still answer.
    wait_until(lambda: re.search(r"(?m)^pod_gpu_exporter_nvml_timeouts_total [1-9]", scrape(exporter, "/metrics").text))
    text = scrape(exporter).text
    assert "pod_gpu_exporter_xid_events_up 0" in text and "pod_gpu_exporter_nvml_up 1" in text


def test_the_flag_turns_events_on_in_device_mode_and_off_in_process_mode(gpu_node):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).write()
    exporter = gpu_node.start(mode=None, extra=("--health.xid-events", "on"))  # device mode
    events_up(exporter)
    gpu_node.nvml.xid(L4, 94)
    text = counted(exporter, CONTAINER, xid(holder_labels("a"), 94), "1")
    assert "pod_gpu_container_memory_used_bytes" not in text  # no shares: device mode
    exporter.stop()
    off = gpu_node.start(extra=("--health.xid-events", "off"))  # process mode
    text = shares_served(off)
    assert "pod_gpu_exporter_xid_events_up" not in text and "_xid_errors_total" not in text


def test_a_kubelet_outage_past_the_mapping_max_age_keeps_the_holders_series_and_their_counts(gpu_node):
    # The counters attribute by the trusted mapping the shares use: while there is none (the kubelet gone
    # past --kubelet.mapping-max-age) no holder is taken to have left, and its counter goes on from where
    # it was once the kubelet is back. (The old reading of an aged-out, empty, mapping forgot every holder
    # an hour into an outage; tests/unit/test_xid_counters.py shows that on a hand-moved clock.)
    gpu_node.add_pod("a")
    held = [AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)]
    gpu_node.kubelet.set_devices(held)
    gpu_node.nvml.gpu(0, L4).process(L4, 11, 300 * MIB).write()
    gpu_node.run_in(11, "a")
    exporter = gpu_node.start(extra=["--kubelet.mapping-max-age", "1s"])
    shares_served(exporter)
    events_up(exporter)
    gpu_node.nvml.xid(L4, 79)
    counted(exporter, CONTAINER, xid(holder_labels("a"), 79), "1")
    socket_path = gpu_node.kubelet.socket_path
    gpu_node.kubelet.stop()
    text = wait_until(lambda: (lambda t: t if "pod_gpu_allocation_info{" not in t else None)(scrape(exporter).text),
                      describe="the mapping aged out")
    assert series(text, CONTAINER) == {xid(holder_labels("a"), 79): "1"}
    gpu_node.nvml.xid(L4, 79)  # no trusted mapping: counted on the device only
    text = counted(exporter, DEVICE, xid(f'UUID="{L4}",gpu="0"', 79), "2")
    assert series(text, CONTAINER) == {xid(holder_labels("a"), 79): "1"}
    self_metrics = scrape(exporter, "/metrics").text
    assert 'pod_gpu_exporter_section_up{section="allocation"} 0.0' in self_metrics
    assert 'pod_gpu_exporter_section_up{section="xid_events"} 1.0' in self_metrics
    gpu_node.kubelet = FakeKubelet(socket_path)
    gpu_node.kubelet.set_devices(held)
    gpu_node.kubelet.start()
    wait_until(lambda: 'pod_gpu_allocation_info{namespace="ml",pod="a"' in scrape(exporter).text,
               describe="the kubelet's mapping back")
    gpu_node.nvml.xid(L4, 79)
    counted(exporter, CONTAINER, xid(holder_labels("a"), 79), "2")  # counted on, never from 0 again
