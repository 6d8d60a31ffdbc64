"""prometheus/rules/pod-gpu-workload.rules.yml gives the same answers in --labels.mode samples and join:
promtool runs the rules on the series the real exporter serves in each mode, against one set of
expected values worked out by hand from the node below."""

from __future__ import annotations

import subprocess

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import PROMETHEUS_DIR
from support.kube_e2e import add_pod, scrape, start
from support.kube_scenario import UUID0, UUID1, UUID3
from support.promtool_tests import input_series, run_rule_test
from support.scrape_checks import sample_lines
from support.waiting import wait_until

RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-workload.rules.yml"
_LABELS = 'pci_bus_id="00000000:1B:00.0",modelName="NVIDIA H100 80GB HBM3",Hostname="localhost"'

# (gpu, UUID, GPU_I_ID or "", utilisation %, framebuffer MiB used, energy mJ per minute)
GPUS = [
    # MIG instances of GPU 0: ml/small-a and ml/small-b (Deployment trainer). The energy counter is the
    # board's, which dcgm-exporter repeats on every instance (shared/fixtures' A800 MIG excerpt).
    ("0", UUID0, "11", 40, 1000, 100 * 60_000),
    ("0", UUID0, "13", 90, 5000, 100 * 60_000),
    ("1", UUID1, "", 60, 20000, 300 * 60_000),  # time-sliced: web/infer-1 and web/infer-2 (Deployment vllm)
    ("2", UUID3, "", 30, 3000, 200 * 60_000),  # web/solo (bare pod) and batch/tool (Job nightly) share it
    ("3", "GPU-eb5c9999-ebc3-9a6e-58cc-494befb69b8a", "", 10, 7777, 90 * 60_000),  # nobody
]
DEVICES = [
    AllocatedDevice("ml", "small-a", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/11/0"),
    AllocatedDevice("ml", "small-b", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/13/0"),
    AllocatedDevice("web", "infer-1", "vllm", "nvidia.com/gpu.shared", UUID1 + "::0"),
    AllocatedDevice("web", "infer-2", "vllm", "nvidia.com/gpu.shared", UUID1 + "::1"),
    AllocatedDevice("web", "solo", "main", "nvidia.com/gpu.shared", UUID3 + "::0"),
    AllocatedDevice("batch", "tool", "main", "nvidia.com/gpu.shared", UUID3 + "::1"),
]
# Worked out by hand: each GPU (utilisation, memory: each MIG instance) once per group, a shared GPU
# counted in every group that holds it; a MIG GPU's energy once for the group holding its instances.
EXPECTED = {
    "namespace_workload:gpu_utilization_percent:avg": {
        ("ml", "Deployment", "trainer"): 65, ("web", "Deployment", "vllm"): 60, ("web", "Pod", "solo"): 30,
        ("batch", "CronJob", "nightly"): 30},
    "namespace_workload:gpu_memory_used_mib:sum": {
        ("ml", "Deployment", "trainer"): 6000, ("web", "Deployment", "vllm"): 20000, ("web", "Pod", "solo"): 3000,
        ("batch", "CronJob", "nightly"): 3000},
    "namespace_workload:gpu_energy_watts:rate5m": {
        ("ml", "Deployment", "trainer"): 100, ("web", "Deployment", "vllm"): 300, ("web", "Pod", "solo"): 200,
        ("batch", "CronJob", "nightly"): 200},
    "namespace:gpu_utilization_percent:avg": {("ml",): 65, ("web",): 45, ("batch",): 30},
    "namespace:gpu_memory_used_mib:sum": {("ml",): 6000, ("web",): 23000, ("batch",): 3000},
    "namespace:gpu_energy_watts:rate5m": {("ml",): 100, ("web",): 500, ("batch",): 200},
}


def _dcgm_body() -> str:
    lines = []
    for name, kind, column in (("DCGM_FI_DEV_GPU_UTIL", "gauge", 3), ("DCGM_FI_DEV_FB_USED", "gauge", 4),
                               ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", 5)):
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} {kind}"]
        for gpu in GPUS:
            instance = f',GPU_I_PROFILE="1g.10gb",GPU_I_ID="{gpu[2]}"' if gpu[2] else ""
            lines.append(f'{name}{{gpu="{gpu[0]}",UUID="{gpu[1]}",device="nvidia{gpu[0]}",{_LABELS}{instance}}} '
                         f"{gpu[column]}")
    return "\n".join(lines) + "\n"


def _add_controllers(api):
    for plural, kind, namespace, name, parent in (("replicasets", "ReplicaSet", "ml", "trainer-5f6", "trainer"),
                                                   ("replicasets", "ReplicaSet", "web", "vllm-7c9", "vllm"),
                                                   ("jobs", "Job", "batch", "nightly-2900", "nightly")):
        group = "apps/v1" if plural == "replicasets" else "batch/v1"
        parent_kind = "Deployment" if plural == "replicasets" else "CronJob"
        api.put(group, plural, {"apiVersion": group, "kind": kind, "metadata": {
            "name": name, "namespace": namespace, "ownerReferences": [
                {"apiVersion": "apps/v1" if parent_kind == "Deployment" else "batch/v1", "kind": parent_kind,
                 "name": parent, "uid": f"uid-{parent}", "controller": True}]},
            "spec": {"selector": {}, "template": {}}})
    for namespace, pod, owner in (("ml", "small-a", ("ReplicaSet", "trainer-5f6")), ("ml", "small-b", ("ReplicaSet", "trainer-5f6")),
                                  ("web", "infer-1", ("ReplicaSet", "vllm-7c9")),
                                  ("web", "infer-2", ("ReplicaSet", "vllm-7c9")), ("web", "solo", None),
                                  ("batch", "tool", ("Job", "nightly-2900"))):
        add_pod(api, namespace, pod, owner=owner)


def _promtool_test(tmp_path, mode: str, text: str, expected=None) -> subprocess.CompletedProcess:
    checks = []
    for record, groups in (expected or EXPECTED).items():
        names = ("namespace", "workload_kind", "workload") if record.startswith("namespace_workload") else ("namespace",)
        # Each recorded series says its vendor: the exporter here serves an NVIDIA node.
        samples = [{"labels": record + "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, key)) + ',vendor="nvidia"}',
                    "value": value} for key, value in groups.items()]
        checks.append({"expr": record, "eval_time": "10m", "exp_samples": samples})
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [{"name": f"--labels.mode {mode}", "interval": "1m",
                       "input_series": input_series(text, 15, counters_grow=True), "promql_expr_test": checks}]}
    return run_rule_test(test, tmp_path / f"workload-rules-{mode}.test.yml")


@pytest.mark.parametrize("mode", ["samples", "join"])
def test_workload_rules_give_the_same_answers_in_each_mode(node, api, run_exporter, tmp_path, mode):
    kubelet, dcgm, _ = node
    dcgm.body = _dcgm_body().encode()
    _add_controllers(api)
    kubelet.set_devices(DEVICES)
    exporter = start(run_exporter, node, "--labels.extra", "workload", "--labels.mode", mode)

    def attributed():
        text = scrape(exporter)
        return text if text.count('workload="') >= len(DEVICES) and text.count("pod_gpu_allocation_info{") == len(DEVICES) else None

    text = wait_until(attributed, timeout_seconds=30)
    owned_samples = [line for line in sample_lines(text) if line.startswith("DCGM_") and 'pod="' in line]
    assert bool(owned_samples) == (mode == "samples")  # the two modes do serve different series
    result = _promtool_test(tmp_path, mode, text)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails(node, api, run_exporter, tmp_path):
    # The check above can fail: the same run with one value off by one.
    kubelet, dcgm, _ = node
    dcgm.body = _dcgm_body().encode()
    _add_controllers(api)
    kubelet.set_devices(DEVICES)
    exporter = start(run_exporter, node, "--labels.extra", "workload", "--labels.mode", "join")
    text = wait_until(lambda: (lambda t: t if t.count('workload="') >= len(DEVICES) else None)(scrape(exporter)),
                      timeout_seconds=30)
    wrong = {**EXPECTED, "namespace:gpu_memory_used_mib:sum": {("ml",): 6000, ("web",): 23001, ("batch",): 3000}}
    result = _promtool_test(tmp_path, "join", text, wrong)
    assert result.returncode != 0 and "namespace:gpu_memory_used_mib:sum" in result.stdout + result.stderr
