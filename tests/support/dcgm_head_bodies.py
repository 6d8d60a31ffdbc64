"""Bodies written as NVIDIA dcgm-exporter's HEAD writes them with its Kubernetes options, from a real scrape.

What it does, read from its code (internal/pkg/transformation/kubernetes.go, process_metrics.go,
const.go; internal/pkg/rendermetrics/render_metrics.go):

- Every GPU sample is written `gpu,UUID,pci_bus_id,device,modelName[,GPU_I_PROFILE,GPU_I_ID]`
  `[,hostname]` (`Hostname` before HEAD's rename), then its `Labels` map sorted by key (label-type
  fields such as DCGM_FI_DRIVER_VERSION, and pod labels), then its `Attributes` map sorted by key
  (err_code/err_msg, and the pod attribution). Values are written unescaped.
- `-k` alone (one pod per GPU, the last the kubelet lists wins): `container`, `namespace`, `pod`
  (or `container_name`, `pod_name`, `pod_namespace` with --use-old-namespace); `pod_uid` with
  --kubernetes-enable-pod-uid; with --kubernetes-enable-pod-labels every pod label, its key
  sanitised and unprefixed, into `Labels` unless an attribute has that name. Nothing stops a pod label
  named like a fixed label (`gpu`, `device`): that sample then carries the name twice.
- --kubernetes-virtual-gpus: one copy per (container, device ID) holding the GPU, with the
  container's attribution and, for a time-slicing replica `GPU-<uuid>::N`, `vgpu="N"`: the same value
  in each copy, and no pod labels. DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED instead keep the
  device-level sample as it was (no attribution) and follow it with per-pod copies that carry the
  pod's own processes' value (0 for a pod without any), `pod_uid` always and `vgpu`.
- A GPU no container holds keeps its sample unchanged.

MIG instances are mapped by dcgm-exporter through NVML; this helper leaves their samples unattributed.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

# The fixed part of dcgm-exporter's GPU template, in its order.
_FIXED = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID")
_HOSTNAMES = ("Hostname", "hostname")
_ATTRIBUTES = ("err_code", "err_msg")  # what its collector itself puts in Attributes
PER_PROCESS_FAMILIES = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")


class HeadPod(NamedTuple):
    """A container as the kubelet lists it, with what the pod informer knows of its pod."""

    namespace: str
    pod: str
    container: str
    uid: str
    device_ids: Tuple[str, ...]
    labels: Dict[str, str] = {}


class HeadOptions(NamedTuple):
    virtual_gpus: bool = False  # --kubernetes-virtual-gpus
    pod_labels: bool = False  # --kubernetes-enable-pod-labels
    pod_uid: bool = False  # --kubernetes-enable-pod-uid
    old_namespace: bool = False  # --use-old-namespace
    hostname: str = "hostname"  # "Hostname" before HEAD's rename


def sanitize_label_name(key: str) -> str:
    """dcgm-exporter's utils.SanitizeLabelName: anything outside [a-zA-Z0-9_] becomes `_`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


class _Info(NamedTuple):
    pod: HeadPod
    vgpu: str


def _whole_gpu(device_id: str) -> str:
    """The GPU UUID a device ID keys dcgm-exporter's map by (`GPU-x::N` → `GPU-x`)."""
    return device_id.split("::")[0]


def _vgpu(device_id: str) -> str:
    if "/vgpu" in device_id:
        return device_id.split("/vgpu")[1]
    return device_id.split("::")[1] if "::" in device_id else ""


def head_body(fixture: str, pods: Sequence[HeadPod], options: HeadOptions = HeadOptions(),
              per_process: Optional[Dict[str, Dict[str, str]]] = None,
              device_values: Optional[Dict[str, str]] = None) -> str:
    """A dcgm-exporter scrape (`fixture`, written by any 4.x release) as HEAD writes it with `options`
    for the kubelet's `pods`; `per_process` is pod UID → family → that pod's own value;
    `device_values` (family → value) replaces the fixture's device-level values."""
    per_process = per_process or {}
    device_values = device_values or {}
    to_pod: Dict[str, HeadPod] = {}  # toDeviceToPod: the last container listed wins
    to_pods: Dict[str, List[_Info]] = {}  # toDeviceToSharingPods: one entry per (container, device ID)
    for pod in pods:
        for device_id in pod.device_ids:
            to_pod[_whole_gpu(device_id)] = pod
            to_pods.setdefault(_whole_gpu(device_id), []).append(_Info(pod, _vgpu(device_id)))
    out: List[str] = []
    for line in fixture.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            out.append(line)
            continue
        name, label_text, value = match.groups()
        value = device_values.get(name, value)
        pairs = _PAIR.findall(label_text)
        fixed = {n: v for n, v in pairs if n in _FIXED}
        host = next((v for n, v in pairs if n in _HOSTNAMES), "")
        labels = {n: v for n, v in pairs if n not in _FIXED and n not in _HOSTNAMES and n not in _ATTRIBUTES}
        attributes = {n: v for n, v in pairs if n in _ATTRIBUTES}
        uuid = fixed.get("UUID", "")
        whole = uuid and "GPU_I_ID" not in fixed
        if options.virtual_gpus:
            infos = to_pods.get(uuid, []) if whole else []
            if name in PER_PROCESS_FAMILIES and infos:
                out.append(_render(name, fixed, host, labels, attributes, value, options))
                for info in infos:
                    copy = dict(attributes, **_attribution(info.pod, options), pod_uid=info.pod.uid)
                    if info.vgpu:
                        copy["vgpu"] = info.vgpu
                    own = per_process.get(info.pod.uid, {}).get(name, "0")
                    out.append(_render(name, fixed, host, labels, copy, own, options))
                continue
            for info in infos:
                copy = dict(attributes, **_attribution(info.pod, options))
                if options.pod_uid:
                    copy["pod_uid"] = info.pod.uid
                if info.vgpu:
                    copy["vgpu"] = info.vgpu
                out.append(_render(name, fixed, host, {k: v for k, v in labels.items() if k not in copy}, copy,
                                   value, options))
            if not infos:
                out.append(_render(name, fixed, host, labels, attributes, value, options))
            continue
        pod = to_pod.get(uuid) if whole else None
        if pod is not None:
            attributes = dict(attributes, **_attribution(pod, options))
            if options.pod_uid:
                attributes["pod_uid"] = pod.uid
            if options.pod_labels:
                for key, label_value in pod.labels.items():
                    if sanitize_label_name(key) not in attributes:
                        labels[sanitize_label_name(key)] = label_value
            labels = {k: v for k, v in labels.items() if k not in attributes}
        out.append(_render(name, fixed, host, labels, attributes, value, options))
    return "\n".join(out) + "\n"


def _attribution(pod: HeadPod, options: HeadOptions) -> Dict[str, str]:
    if options.old_namespace:
        return {"pod_name": pod.pod, "pod_namespace": pod.namespace, "container_name": pod.container}
    return {"pod": pod.pod, "namespace": pod.namespace, "container": pod.container}


def _render(name: str, fixed: Dict[str, str], host: str, labels: Dict[str, str], attributes: Dict[str, str],
            value: str, options: HeadOptions) -> str:
    parts = [f'{n}="{fixed[n]}"' for n in _FIXED if n in fixed]
    if host:
        parts.append(f'{options.hostname}="{host}"')
    parts += [f'{k}="{labels[k]}"' for k in sorted(labels)]
    parts += [f'{k}="{attributes[k]}"' for k in sorted(attributes)]
    return f"{name}{{{','.join(parts)}}} {value}"


def samples_of(text: str, family: str) -> Iterable[Tuple[Dict[str, str], str]]:
    """(labels, value) of every sample of a family, read independently of the exporter's code."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) == family:
            yield dict(_PAIR.findall(match.group(2))), match.group(3)
