"""Every device-ID form end to end: gRPC kubelet → real exporter process → HTTP dcgm-exporter built from real scrapes."""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.fixtures import fixture_bytes
from support.scrape_checks import assert_parses, scrape
from support.waiting import wait_until

A100_DOCS = "dcgm/nvidia-docs-a100-mig-2.x-gpu-and-gi.prom"  # GPU 0: GPU-level samples and GI 13
H100 = "dcgm/repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom"  # GPU 0 in MIG (GI 11, 13), 1-7 whole
A800 = "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom"  # GPU 0 in MIG (GI 3, 5, 6), 1-7 whole
L4 = "dcgm/l4-aws-gpu-operator-default-counters.prom"  # one whole GPU

A100_UUID = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
H100_UUIDS = {1: "GPU-21c6d9d7-46cd-7e91-99c3-7b6a06a3faea", 2: "GPU-5d9cc71f-b438-dc00-707d-c6c12bcfede1"}
A800_UUIDS = {0: "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418", 1: "GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6",
              2: "GPU-5022ce43-b44a-987b-71c3-dee05378a618", 3: "GPU-f22db14d-1597-8eb1-78dc-d93765918c73"}
L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
MIG_UUID = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"

OWNER_NAMES = ("namespace", "pod", "container")
UPSTREAM_OWNER_NAMES = OWNER_NAMES + ("pod_uid", "pod_name", "pod_namespace", "container_name")
FAST_REFRESH = ["--kubelet.refresh-interval", "100ms"]
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+\S+)?")
_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Sample(NamedTuple):
    name: str
    labels: Dict[str, str]
    value: str


Owner = Tuple[str, str, str]
SeriesKey = Tuple[str, Tuple[Tuple[str, str], ...]]


def parse(text: str) -> List[Sample]:
    """Sample lines by position and regex, independent of the exporter's code."""
    samples = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = _SAMPLE.fullmatch(line)
            assert match, f"unparseable line served: {line!r}"
            samples.append(Sample(match.group(1), dict(_PAIR.findall(match.group(2) or "")), match.group(3)))
    return samples


def served_owners(text: str) -> Dict[SeriesKey, List[Optional[Owner]]]:
    """Each dcgm series served (without owner labels) → the owners it was served with, in order."""
    table: Dict[SeriesKey, List[Optional[Owner]]] = {}
    for sample in parse(text):
        if not sample.name.startswith("DCGM_"):
            continue
        labels = dict(sample.labels)
        owner = tuple(labels.pop(name, None) for name in OWNER_NAMES)
        key = (sample.name, tuple(sorted(labels.items())))
        table.setdefault(key, []).append(None if owner == (None, None, None) else owner)
    return table


def upstream_series(body: bytes) -> Dict[SeriesKey, Dict[str, str]]:
    series = {}
    for sample in parse(body.decode()):
        labels = {k: v for k, v in sample.labels.items() if k not in UPSTREAM_OWNER_NAMES}
        series[(sample.name, tuple(sorted(labels.items())))] = labels
    return series


def allocation_info(text: str) -> List[Dict[str, str]]:
    return [s.labels for s in parse(text) if s.name == "pod_gpu_allocation_info"]


def gauge(text: str, name: str) -> str:
    [value] = [s.value for s in parse(text) if s.name == name]
    return value


def start(kubelet, dcgm, run_exporter, body: bytes, devices):
    dcgm.body = body
    kubelet.set_devices(devices)
    return run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path] + FAST_REFRESH)


def assert_attribution(text: str, body: bytes, expected: Dict[Tuple[str, str], List[Owner]]):
    """Every upstream sample is served once per expected owner of its (gpu, GPU_I_ID), else once, unattributed."""
    served = served_owners(text)
    upstream = upstream_series(body)
    assert set(served) == set(upstream)
    for key, labels in upstream.items():
        want = expected.get((labels.get("gpu", ""), labels.get("GPU_I_ID", "")), [None])
        assert served[key] == want, f"{key}: served with {served[key]}, want {want}"


def assert_allocation_info_joins_the_samples(text: str, devices):
    """One info series per allocated device, carrying the identity of samples its owner was served with."""
    info = allocation_info(text)
    assert sorted((i["namespace"], i["pod"], i["container"], i["device_id"]) for i in info) == sorted(
        {(d.namespace, d.pod, d.container, d.device_id) for d in devices})
    owned = {(s.labels.get("UUID"), s.labels.get("gpu"), s.labels.get("GPU_I_ID"),
              tuple(s.labels.get(n) for n in OWNER_NAMES)) for s in parse(text) if s.name.startswith("DCGM_")}
    for labels in info:
        owner = tuple(labels[n] for n in OWNER_NAMES)
        assert (labels["UUID"], labels["gpu"], labels.get("GPU_I_ID"), owner) in owned, labels


def device(pod: str, resource: str, device_id: str, namespace: str = "ml", container: str = "main", **extra):
    return AllocatedDevice(namespace, pod, container, resource, device_id, **extra)


def owner(pod: str, namespace: str = "ml", container: str = "main") -> Owner:
    return (namespace, pod, container)


# One case per row of DESIGN.md's device-ID table: (fixture, devices, {(gpu, GPU_I_ID): owners}).
ROWS = {
    "GPU-uuid": (H100, [device("whole", "nvidia.com/gpu", H100_UUIDS[1])], {("1", ""): [owner("whole")]}),
    "GPU-uuid::N": (H100, [
        device("b", "nvidia.com/gpu.shared", H100_UUIDS[2] + "::1"),
        device("a", "nvidia.com/gpu.shared", H100_UUIDS[2] + "::0"),
        device("a", "nvidia.com/gpu.shared", H100_UUIDS[2] + "::4"),
    ], {("2", ""): [owner("a"), owner("b")]}),
    "GPU-uuid-N (HAMi, without the API)": (H100, [
        device("hami-b", "nvidia.com/gpu", H100_UUIDS[1] + "-7"),
        device("hami-a", "nvidia.com/gpu", H100_UUIDS[1] + "-0"),
    ], {("1", ""): [owner("hami-a"), owner("hami-b")]}),
    "index": (H100, [device("by-index", "nvidia.com/gpu", "3")], {("3", ""): [owner("by-index")]}),
    "gke-nvidiaN-and-vgpu": (H100, [
        device("gke-whole", "nvidia.com/gpu", "nvidia4"),
        device("gke-shared-1", "nvidia.com/gpu", "nvidia5/vgpu0"),
        device("gke-shared-2", "nvidia.com/gpu", "nvidia5/vgpu1"),
    ], {("4", ""): [owner("gke-whole")], ("5", ""): [owner("gke-shared-1"), owner("gke-shared-2")]}),
    "gke-mig": (A800, [
        device("gi3", "nvidia.com/gpu", "nvidia0/gi3"),
        device("gi5", "nvidia.com/gpu", "nvidia0/gi5/vgpu0"),  # a time-shared MIG partition
    ], {("0", "3"): [owner("gi3")], ("0", "5"): [owner("gi5")]}),
    "MIG-GPU-uuid/gi/ci": (A100_DOCS, [device("mig", "nvidia.com/mig-1g.5gb", f"MIG-{A100_UUID}/13/0")],
                           {("0", "13"): [owner("mig")]}),
    "DRA-gpu-minor": (H100, [device("dra", "gpu.nvidia.com", "gpu-3", dra=True, claim="ml/one-gpu")],
                      {("3", ""): [owner("dra")]}),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_each_device_id_form_meets_its_samples(row, kubelet, dcgm, run_exporter):
    fixture, devices, expected = ROWS[row]
    body = fixture_bytes(fixture)
    exporter = start(kubelet, dcgm, run_exporter, body, devices)
    text = scrape(exporter).text
    assert_attribution(text, body, expected)
    assert_allocation_info_joins_the_samples(text, devices)
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0"
    assert_parses(text)


def test_mig_uuid_without_nvml_is_reported_unresolved_and_logged_once(kubelet, dcgm, run_exporter):
    body = fixture_bytes(H100)
    mig = device("mig-uuid", "nvidia.com/mig-1g.10gb", MIG_UUID)
    exporter = start(kubelet, dcgm, run_exporter, body, [mig])
    text = scrape(exporter).text
    assert_attribution(text, body, {})  # nothing guessed
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "1"
    assert allocation_info(text) == [{"namespace": "ml", "pod": "mig-uuid", "container": "main",
                                      "resource": "nvidia.com/mig-1g.10gb", "device_id": MIG_UUID}]
    # The mapping changes (another pod arrives) and is refreshed many times; MIG_UUID stays allocated.
    kubelet.set_devices([mig, device("whole", "nvidia.com/gpu", H100_UUIDS[1])])
    wait_until(lambda: 'pod="whole"' in scrape(exporter).text)
    calls = kubelet.list_calls
    wait_until(lambda: kubelet.list_calls >= calls + 5)
    log = exporter.wait_for_log("will be reported as unresolved", "cannot be matched to dcgm samples")
    assert log.count("will be reported as unresolved") == 1 and "libnvidia-ml.so.1 visible" in log
    warnings = [line for line in log.splitlines() if "cannot be matched to dcgm samples" in line]
    assert len(warnings) == 1 and MIG_UUID in warnings[0]
    # A device newly unresolved is warned about, alone.
    kubelet.set_devices([mig, device("dra-mig", "gpu.nvidia.com", "gpu-0-mig-9-4-2", dra=True)])
    wait_until(lambda: gauge(scrape(exporter).text, "pod_gpu_exporter_unresolved_devices") == "2")
    # The warning is written by the refresh that the scrape above already shows: it may come a moment later.
    warnings = exporter.wait_for_lines("cannot be matched to dcgm samples", count=2)
    assert len(warnings) == 2 and "gpu-0-mig-9-4-2" in warnings[1] and MIG_UUID not in warnings[1]


def with_gpu_level_samples_of_gpu0(body: bytes) -> bytes:
    """The A800 scrape plus GPU 0's GPU-level sample in each family that holds its MIG instance samples.

    dcgm-exporter reports both for a GPU in MIG mode (see the A100 scrape from NVIDIA's docs); the A800
    excerpt kept only the instance series. The added line is the first instance line of the family
    without GPU_I_PROFILE/GPU_I_ID, placed inside the family.
    """
    out, done = [], set()
    for line in body.decode().splitlines():
        name = line.split("{", 1)[0]
        if 'GPU_I_ID="' in line and name not in done:
            done.add(name)
            out.append(re.sub(r',GPU_I_PROFILE="[^"]*",GPU_I_ID="[^"]*"', "", line))
        out.append(line)
    return ("\n".join(out) + "\n").encode()


def test_node_where_forms_coexist(kubelet, dcgm, run_exporter):
    body = with_gpu_level_samples_of_gpu0(fixture_bytes(A800))
    devices = [
        device("mig-a", "nvidia.com/mig-2g.20gb", f"MIG-{A800_UUIDS[0]}/3/0"),
        device("mig-b", "nvidia.com/mig-2g.20gb", f"MIG-{A800_UUIDS[0]}/5/0", namespace="other"),
        device("api", "nvidia.com/gpu", A800_UUIDS[1], namespace="web"),
        device("etl", "nvidia.com/gpu", "2", namespace="batch"),
        device("x", "nvidia.com/gpu.shared", A800_UUIDS[3] + "::0", namespace="web"),
        device("y", "nvidia.com/gpu.shared", A800_UUIDS[3] + "::1", namespace="web"),
    ]
    exporter = start(kubelet, dcgm, run_exporter, body, devices)
    text = scrape(exporter).text
    assert_attribution(text, body, {
        ("0", "3"): [owner("mig-a")],
        ("0", "5"): [owner("mig-b", "other")],  # GI 6 idle; GPU 0's own samples held by no single pod
        ("1", ""): [owner("api", "web")],
        ("2", ""): [owner("etl", "batch")],
        ("3", ""): [owner("x", "web"), owner("y", "web")],
    })
    gpu0_level = [s for s in parse(text) if s.labels.get("gpu") == "0" and "GPU_I_ID" not in s.labels]
    assert gpu0_level and all("pod" not in s.labels for s in gpu0_level)
    assert sorted(allocation_info(text), key=lambda i: (i["namespace"], i["pod"], i["device_id"])) == [
        {"namespace": "batch", "pod": "etl", "container": "main", "resource": "nvidia.com/gpu", "device_id": "2",
         "UUID": A800_UUIDS[2], "gpu": "2"},  # index-strategy device: UUID filled in from the samples
        {"namespace": "ml", "pod": "mig-a", "container": "main", "resource": "nvidia.com/mig-2g.20gb",
         "device_id": f"MIG-{A800_UUIDS[0]}/3/0", "UUID": A800_UUIDS[0], "gpu": "0", "GPU_I_ID": "3"},
        {"namespace": "other", "pod": "mig-b", "container": "main", "resource": "nvidia.com/mig-2g.20gb",
         "device_id": f"MIG-{A800_UUIDS[0]}/5/0", "UUID": A800_UUIDS[0], "gpu": "0", "GPU_I_ID": "5"},
        {"namespace": "web", "pod": "api", "container": "main", "resource": "nvidia.com/gpu",
         "device_id": A800_UUIDS[1], "UUID": A800_UUIDS[1], "gpu": "1"},
        {"namespace": "web", "pod": "x", "container": "main", "resource": "nvidia.com/gpu.shared",
         "device_id": A800_UUIDS[3] + "::0", "UUID": A800_UUIDS[3], "gpu": "3"},
        {"namespace": "web", "pod": "y", "container": "main", "resource": "nvidia.com/gpu.shared",
         "device_id": A800_UUIDS[3] + "::1", "UUID": A800_UUIDS[3], "gpu": "3"},
    ]
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0"
    assert_parses(text)


def without_status_gauges(text: str) -> frozenset:
    return frozenset(line for line in text.splitlines()
                     if line and not line.startswith("#") and not line.startswith("pod_gpu_exporter_"))


def test_time_sliced_gpu_two_pods_one_with_two_replicas_two_series_stable(kubelet, dcgm, run_exporter):
    body = fixture_bytes(L4)
    devices = [
        device("server-a", "nvidia.com/gpu", L4_UUID + "::0", namespace="inference"),
        device("server-a", "nvidia.com/gpu", L4_UUID + "::3", namespace="inference"),
        device("server-b", "nvidia.com/gpu", L4_UUID + "::1", namespace="inference"),
    ]
    exporter = start(kubelet, dcgm, run_exporter, body, devices)
    first = scrape(exporter).text
    both = [owner("server-a", "inference"), owner("server-b", "inference")]
    assert_attribution(first, body, {("0", ""): both})
    served = served_owners(first)
    assert served and all(len(owners) == 2 for owners in served.values())
    expected = without_status_gauges(first)
    for attempt in range(20):
        # The kubelet lists the replicas in another order each time; what is served must not move.
        kubelet.set_devices(devices[attempt % 3:] + devices[: attempt % 3])
        calls = kubelet.list_calls
        wait_until(lambda: kubelet.list_calls >= calls + 2)  # a refresh with that order has happened
        text = scrape(exporter).text
        assert without_status_gauges(text) == expected, f"scrape {attempt + 2} differs"
    info = allocation_info(first)
    assert [i["device_id"] for i in info] == [L4_UUID + "::0", L4_UUID + "::3", L4_UUID + "::1"]
    assert all(i["UUID"] == L4_UUID and i["gpu"] == "0" for i in info)
    assert_parses(first)
