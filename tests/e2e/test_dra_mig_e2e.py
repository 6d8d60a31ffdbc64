"""DRA MIG devices with the real exporter process: NVIDIA's DRA driver publishes, for a MIG device,
only its own "MIG-…" UUID and its parent GPU's in the ResourceSlice, so the GPU instance whose
samples it owns comes from NVML (the fake libnvidia-ml.so.1 in C, loaded by the real nvidia-ml-py
through LD_LIBRARY_PATH); without NVML the device is reported unresolved, never guessed."""

from __future__ import annotations

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.kube_e2e import add_pod, gauge, lines_of, scrape, start
from support.kube_scenario import POOL, UUID0, UUID3, claim, resource_slice
from support.nvml_node import NODE_ENV, FakeNode
from support.waiting import wait_until

MIG13 = "MIG-7c1d2e3f-4a5b-5c6d-9e0f-a1b2c3d4e5f6"  # GPU 0's GPU instance 13, as NVML names it
MIG11 = "MIG-0b1c2d3e-4f50-5162-a3b4-c5d6e7f80912"  # GPU 0's instance 11: in NVML, held by nobody
MIG_DEVICE = "gpu-0-mig-1g10gb-0"  # the DRA driver's name: no GPU instance ID, nor gpu-<minor>


# NVIDIA's DRA driver from 25.12: gpu-<minor>-mig-<profile>-<GPU instance profile ID>-<placement start>.
# A static MIG device so named still has its `uuid`; a dynamic one (made when its claim is prepared) has none.
MIG_DEVICE_25_12 = "gpu-0-mig-1g10gb-19-6"


def dra_mig_node(api, kubelet, name=MIG_DEVICE, uuid=MIG13):
    """One pod holding GPU 0's instance 13 through a DRA claim; its ResourceSlice names only the MIG
    device's own UUID (none for a dynamic MIG device) and its parent's, as NVIDIA's DRA driver publishes
    them. A second pod holds a whole GPU that only the slice identifies: its samples' owner shows the
    slice has been read."""
    mig = {"type": "mig", "parentUUID": UUID0, "profile": "1g.10gb", **({"uuid": uuid} if uuid else {})}
    api.put("resource.k8s.io/v1", "resourceslices", resource_slice({name: mig, "gpu-h100-a": {"type": "gpu", "uuid": UUID3}}))
    api.put("resource.k8s.io/v1", "resourceclaims", claim("ml", "small", name))
    api.put("resource.k8s.io/v1", "resourceclaims", claim("batch", "train-gpu", "gpu-h100-a"))
    uid = add_pod(api, "ml", "small-a")["metadata"]["uid"]
    kubelet.set_devices([AllocatedDevice("ml", "small-a", "c", "gpu.nvidia.com", name, dra=True,
                                         claim="ml/small", pool=POOL),
                         AllocatedDevice("batch", "train-x7k2p", "main", "gpu.nvidia.com", "gpu-h100-a", dra=True,
                                         claim="batch/train-gpu", pool=POOL)])
    return uid


def slice_read(text: str) -> bool:
    return any(line.startswith("DCGM_") and f'UUID="{UUID3}"' in line for line in lines_of(text, "train-x7k2p"))


def dcgm_samples(text: str, instance: str):
    return [line for line in text.splitlines() if line.startswith("DCGM_") and f'GPU_I_ID="{instance}"' in line]


@pytest.mark.parametrize("name, uuid", [
    (MIG_DEVICE, MIG13),  # static MIG, found by its UUID
    (MIG_DEVICE_25_12, MIG13),  # static MIG under the 25.12 name: by its UUID still
    (MIG_DEVICE_25_12, None),  # dynamic MIG: by its parent, profile ID 19 and placement start 6
])
def test_dra_mig_device_resolved_through_its_slice_and_nvml(node, api, run_exporter, fake_nvml_library, tmp_path,
                                                            name, uuid):
    kubelet = node[0]
    uid = dra_mig_node(api, kubelet, name, uuid)
    # Both instances are of profile 19; only 13 starts at memory slice 6.
    nvml = FakeNode(tmp_path / "nvml-node.txt").gpu(0, UUID0).mig(0, 11, MIG11, profile=19, start=4)
    nvml.mig(0, 13, MIG13, profile=19, start=6).write()
    exporter = start(run_exporter, node, "--labels.extra", "pod_uid",
                     env={"LD_LIBRARY_PATH": str(fake_nvml_library.parent), NODE_ENV: str(nvml.path)})
    owner = f'namespace="ml",pod="small-a",container="c",pod_uid="{uid}"}}'
    text = wait_until(lambda: (lambda t: t if any(owner in line for line in dcgm_samples(t, "13"))
                               else None)(scrape(exporter)))
    held, other = dcgm_samples(text, "13"), dcgm_samples(text, "11")
    assert held and all(f'UUID="{UUID0}"' in line and line.rpartition(" ")[0].endswith(owner) for line in held), held
    assert other and not any('pod="small-a"' in line for line in other), other  # only that instance's
    assert [line for line in text.splitlines() if 'pod="small-a"' in line and line.startswith("DCGM_")] == held
    info = [line for line in lines_of(text, "small-a") if line.startswith("pod_gpu_allocation_info")]
    assert len(info) == 1 and f'UUID="{UUID0}",gpu="0",GPU_I_ID="13"' in info[0], info
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0" and slice_read(text)
    exporter.wait_for_log("NVML available")
    # The slice's `profile` says how much of GPU 0 the instance is: one of an H100's 8 memory slices.
    assert f'pod_gpu_container_allocated_gpus{{{owner} 0.125' in text.splitlines()


@pytest.mark.parametrize("library", ["none", "driver-not-loaded"])
@pytest.mark.parametrize("name, uuid", [(MIG_DEVICE, MIG13), (MIG_DEVICE_25_12, None)])
def test_dra_mig_device_without_nvml_is_unresolved_not_guessed(node, api, run_exporter, fake_nvml_library,
                                                                tmp_path, library, name, uuid):
    kubelet = node[0]
    dra_mig_node(api, kubelet, name, uuid)
    # No NVML library at all; or the fake one with no node file, which answers nvmlInit as a node
    # without the driver does (whatever libnvidia-ml the machine running the tests may have).
    env = {} if library == "none" else {"LD_LIBRARY_PATH": str(fake_nvml_library.parent),
                                        NODE_ENV: str(tmp_path / "no-such-node.txt")}
    exporter = start(run_exporter, node, env=env)
    # Unresolved also before the slice is read (the name rule declines "gpu-0-mig-…"): wait for the slice.
    text = wait_until(lambda: (lambda t: t if slice_read(t) else None)(scrape(exporter)))
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "1"
    assert dcgm_samples(text, "13") and not any(line.startswith("DCGM_") for line in lines_of(text, "small-a"))
    info = [line for line in lines_of(text, "small-a") if line.startswith("pod_gpu_allocation_info")]
    assert len(info) == 1 and "UUID=" not in info[0] and "GPU_I_ID" not in info[0], info
    # The warnings come from the refresher's thread (NVML opened on a worker, waited for within a
    # bound): they may be written a moment after the scrape that already shows the device unresolved.
    exporter.wait_for_log(f"device_ids={name}")  # what stays unmatched
    if library == "driver-not-loaded":  # ("none" may find a real driver's NVML, which knows no MIG13)
        exporter.wait_for_log("will be reported as unresolved", "Driver Not Loaded")
