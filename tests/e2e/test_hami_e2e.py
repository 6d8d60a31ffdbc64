"""HAMi on the real exporter: the kubelet's replica IDs, the pod annotation followed through the fake API server
(lightkube's watch), the cores share in pod_gpu_container_allocated_gpus, and an unreadable annotation counted."""

from __future__ import annotations

import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.core.hami import ALLOCATED_ANNOTATION, BIND_PHASE_ANNOTATION
from exporter.sources.kubelet import AllocatedDevice
from support.kube_e2e import add_pod, lines_of, scrape, start
from support.kube_scenario import UUID1, UUID3
from support.waiting import wait_until

# HAMi's own annotations on a pod it scheduled and bound, as its scheduler writes them.
def hami_annotations(allocated: str, phase: str = "success") -> dict:
    return {ALLOCATED_ANNOTATION: allocated, "hami.io/vgpu-devices-to-allocate": ";" * allocated.count(";"),
            BIND_PHASE_ANNOTATION: phase, "hami.io/vgpu-node": "gpu-node-1", "hami.io/vgpu-time": "1764000000"}


def gpu_of(lines) -> set:
    return {line.split('UUID="', 1)[1].split('"', 1)[0] for line in lines if line.startswith("DCGM_FI_DEV_FB_USED")}


def allocated(text: str, pod: str):
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "pod_gpu_container_allocated_gpus" and sample.labels.get("pod") == pod:
                return sample.value
    return None


def test_a_hami_pod_is_attributed_to_the_gpu_its_annotation_names(node, api, run_exporter):
    kubelet = node[0]
    # The kubelet picked a replica of GPU 1 (preferred allocation off); HAMi gave the container GPU 2 (UUID3),
    # 30% of its cores. The pod's init container and its sidecar get empty entries, in spec order.
    kubelet.set_devices([AllocatedDevice("ml", "hami-infer", "main", "nvidia.com/gpu", UUID1 + "-3")])
    add_pod(api, "ml", "hami-infer", containers=("main", "sidecar"), init_containers=("setup",),
            annotations=hami_annotations(f";{UUID3},NVIDIA,3000,30:;;"))
    exporter = start(run_exporter, node)
    text = wait_until(lambda: (lambda t: t if gpu_of(lines_of(t, "hami-infer")) == {UUID3} else None)(scrape(exporter)),
                      30)
    assert allocated(text, "hami-infer") == 0.3
    info = [line for line in lines_of(text, "hami-infer") if line.startswith("pod_gpu_allocation_info")]
    assert len(info) == 1 and f'device_id="{UUID1}-3"' in info[0] and f'UUID="{UUID3}"' in info[0], info


def test_a_memory_only_share_is_its_memory_over_the_gpus_framebuffer_and_outlives_dcgm(node, api, run_exporter):
    kubelet, dcgm, _ = node
    # nvidia.com/gpumem only: cores 0, 40000 MiB of GPU 2, whose framebuffer dcgm-exporter reports as
    # 81079 MiB free and 0 used.
    kubelet.set_devices([AllocatedDevice("ml", "hami-mem", "main", "nvidia.com/gpu", UUID1 + "-1")])
    add_pod(api, "ml", "hami-mem", annotations=hami_annotations(f"{UUID3},NVIDIA,40000,0:;"))
    exporter = start(run_exporter, node)
    text = wait_until(lambda: (lambda t: t if allocated(t, "hami-mem") else None)(scrape(exporter)), 30)
    assert allocated(text, "hami-mem") == float(f"{40000 / 81079:.12g}")
    assert gpu_of(lines_of(text, "hami-mem")) == {UUID3}
    dcgm.status = 503
    text = wait_until(lambda: (lambda t: t if "pod_gpu_exporter_dcgm_up 0" in t else None)(scrape(exporter)), 30)
    assert allocated(text, "hami-mem") == float(f"{40000 / 81079:.12g}")


def test_an_unbound_or_unreadable_annotation_leaves_the_kubelets_replica_counted_once(node, api, run_exporter):
    kubelet = node[0]
    kubelet.set_devices([AllocatedDevice("ml", "broken", "main", "nvidia.com/gpu", UUID1 + "-5"),
                         AllocatedDevice("ml", "pending", "main", "nvidia.com/gpu", UUID1 + "-6")])
    broken = add_pod(api, "ml", "broken", annotations=hami_annotations(f"{UUID3},NVIDIA,lots,30:;"))
    add_pod(api, "ml", "pending", annotations=hami_annotations(f"{UUID3},NVIDIA,3000,30:;", phase="allocating"))
    exporter = start(run_exporter, node)
    text = wait_until(lambda: (lambda t: t if gpu_of(lines_of(t, "broken")) and gpu_of(lines_of(t, "pending"))
                               else None)(scrape(exporter)), 30)
    assert gpu_of(lines_of(text, "broken")) == {UUID1} and gpu_of(lines_of(text, "pending")) == {UUID1}
    # An update of the pod that leaves the annotation as it was is not counted again.
    broken["metadata"]["labels"]["touched"] = "yes"
    api.put("v1", "pods", broken)
    for _ in range(3):
        scrape(exporter)
    log = exporter.wait_for_log("HAMi annotation cannot be read")
    assert log.count("HAMi annotation cannot be read") == 1, log
    metrics = requests.get(exporter.url("/metrics"), timeout=10).text
    assert ('pod_gpu_exporter_kubernetes_annotations_malformed_total{annotation="hami.io/vgpu-devices-allocated"} 1.0'
            in metrics), metrics
