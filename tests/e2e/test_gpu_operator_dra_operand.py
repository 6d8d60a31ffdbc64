"""The GPU operator's DRA-mode dcgm-exporter (nvidia-dcgm-exporter-dra) holds every GPU of its node through one
adminAccess claim (ResourceClaimTemplate nvidia-dcgm-exporter-admin, allocationMode All): the real exporter,
reading it as deploy/gpu-operator.yaml does with the API context on, must make it the owner of nothing."""

from __future__ import annotations

from exporter.sources.kubelet import AllocatedDevice
from support.kube_e2e import add_pod, gauge, lines_of, scrape, start
from support.kube_scenario import POOL, UUID3, claim, devices, resource_slice
from support.waiting import wait_until

UUID4 = "GPU-c4c7f4f8-af86-6966-c0b2-7c1e40c18347"  # gpu="4" of the H100 scrape: held by the operand alone
UUID5 = "GPU-7845680c-0e07-1670-c2bb-9f018cd7864b"  # gpu="5"
OPERAND_POD = "nvidia-dcgm-exporter-dra-7xk2q"
OPERAND_CLAIM = "nvidia-dcgm-exporter-dra-7xk2q-all-gpus-9fz4c"  # made from the template, as the kubelet names it
SLICE = {"gpu-h100-a": {"type": "gpu", "uuid": UUID3}, "gpu-h100-e": {"type": "gpu", "uuid": UUID4},
         "gpu-h100-f": {"type": "gpu", "uuid": UUID5}}


def _admin_claim_on_every_device():
    """The operand's claim: allocationMode All, one adminAccess result per device of the node's pool."""
    template = claim("gpu-operator", OPERAND_CLAIM, "gpu-h100-a", admin=True)
    template["status"]["allocation"]["devices"]["results"] = [
        {"request": "all-gpus", "driver": "gpu.nvidia.com", "pool": POOL, "device": name, "adminAccess": True}
        for name in SLICE]
    return template


def test_the_dra_operand_holding_every_gpu_owns_nothing(node, api, run_exporter):
    kubelet = node[0]
    api.put("resource.k8s.io/v1", "resourceslices", resource_slice(SLICE))
    api.put("resource.k8s.io/v1", "resourceclaims", claim("batch", "train-gpu", "gpu-h100-a"))
    api.put("resource.k8s.io/v1", "resourceclaims", _admin_claim_on_every_device())
    add_pod(api, "gpu-operator", OPERAND_POD, labels={"app": "nvidia-dcgm-exporter-dra"})
    operand = [AllocatedDevice("gpu-operator", OPERAND_POD, "nvidia-dcgm-exporter", "gpu.nvidia.com", name, dra=True,
                               claim=f"gpu-operator/{OPERAND_CLAIM}", pool=POOL) for name in SLICE]
    kubelet.set_devices(devices() + operand)
    exporter = start(run_exporter, node, "--labels.extra", "pod_uid,workload")
    text = wait_until(lambda: (lambda t: t if 'pod="train-x7k2p"' in t and "DCGM" in "".join(lines_of(t, "train-x7k2p"))
                               else None)(scrape(exporter)))
    assert not lines_of(text, OPERAND_POD)  # no sample, no allocation, no share: not an owner
    assert 'namespace="gpu-operator"' not in text
    # The GPUs only it holds are served as nobody's; the one a workload holds is that workload's alone.
    for uuid in (UUID4, UUID5):
        samples = [line for line in text.splitlines() if line.startswith("DCGM_") and f'UUID="{uuid}"' in line]
        assert samples and not [line for line in samples if 'pod="' in line], uuid
    held = [line for line in text.splitlines() if line.startswith("DCGM_") and f'UUID="{UUID3}"' in line]
    assert held and all('pod="train-x7k2p"' in line for line in held)
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0"
