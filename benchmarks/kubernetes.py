"""What the Kubernetes API source costs: peak RSS with the API on vs off, the installed size of the
added packages, and a 5,000-pod node's watch (memory, CPU, time to list, churn, relist).

Run from the repository root: `python benchmarks/kubernetes.py [--pods 200] [--large-pods 5000]`.
Everything is real but the node: a gRPC kubelet on a unix socket, a simulated dcgm-exporter serving a
real scrape (tests/data/dcgm, 8 H100s, MIG), a fake API server on loopback speaking REST + watch
(tests/support/fake_kube_api.py) and the real exporter process, reached through a kubeconfig. Figures
are printed, never judged: CI runs it once at a small size (tests/e2e/test_benchmark_smoke.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
from exporter.sources.kubelet import AllocatedDevice  # noqa: E402
from support.exporter_process import start_exporter  # noqa: E402
from support.fake_dcgm import FakeDcgmExporter  # noqa: E402
from support.fake_kube_api import FakeKubeApi, make_pod, write_kubeconfig  # noqa: E402
from support.fake_kubelet import FakeKubelet  # noqa: E402

FIXTURE = REPO_ROOT / "tests/data/dcgm/repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom"
NODE = "gpu-node-1"
SCRAPES = 200
_TICKS = os.sysconf("SC_CLK_TCK")
# Real pods carry a few KB the exporter never keeps (kubectl's last-applied annotation, managed fields).
_UNKEPT_ANNOTATION = {"kubectl.kubernetes.io/last-applied-configuration": "x" * 3000}


def status_kib(pid: int, field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(match.group(1))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def gpu_devices(count: int):
    """`count` pods sharing the node's GPUs (time-slicing replicas), each an owner of samples."""
    uuids = sorted(set(re.findall(r'UUID="(GPU-[^"]+)"', FIXTURE.read_text())))
    return [AllocatedDevice("ml", f"gpu-pod-{i}", "main", "nvidia.com/gpu.shared", f"{uuids[i % len(uuids)]}::{i}")
            for i in range(count)]


def fill_api(api: FakeKubeApi, pods: int) -> None:
    """`pods` pods on this node, as a Deployment's replicas, with the labels a real pod carries."""
    api.put("apps/v1", "replicasets", {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "gpu-pod-7d9f", "namespace": "ml", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gpu-pod", "uid": "d1", "controller": True}]},
            "spec": {"selector": {}}})
    api.put_owner("apps/v1", "deployments", "ml", "gpu-pod")  # the top of the chain, read metadata-only
    for i in range(pods):
        labels = {"app.kubernetes.io/name": "gpu-pod", "team": f"team-{i % 7}", "pod-template-hash": "7d9f"}
        api.put("v1", "pods", make_pod("ml", f"gpu-pod-{i}", NODE, labels=labels, annotations=_UNKEPT_ANNOTATION,
                                       owner=("ReplicaSet", "gpu-pod-7d9f")))


def exporter_args(kubelet, dcgm):
    return ["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--kubelet.refresh-interval", "1s"]


def scrape_peak(exporter, scrapes: int) -> int:
    import requests

    with requests.Session() as session:
        for _ in range(scrapes):
            session.get(exporter.url(), timeout=10).raise_for_status()
    return status_kib(exporter.proc.pid, "VmHWM")


def wait_for(condition, seconds: float = 60.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > seconds:
            raise RuntimeError("timed out")
        time.sleep(0.05)
    return time.monotonic() - started


def rss_on_vs_off(pods: int, gpu_pods: int, scrapes: int, workdir: str) -> None:
    print(f"== peak RSS, API off vs on: {pods} pods on the node, {gpu_pods} holding GPUs, {scrapes} scrapes each")
    with FakeKubelet(f"{workdir}/kubelet.sock") as kubelet, FakeDcgmExporter(FIXTURE.read_bytes()) as dcgm:
        kubelet.set_devices(gpu_devices(gpu_pods))
        off = start_exporter(exporter_args(kubelet, dcgm) + ["--kubernetes.api", "off"])
        peak_off = scrape_peak(off, scrapes)
        off.stop()
        api = FakeKubeApi().start()
        fill_api(api, pods)
        kubeconfig = write_kubeconfig(f"{workdir}/kubeconfig", api.url)
        on = start_exporter(exporter_args(kubelet, dcgm) + [
            "--kubernetes.kubeconfig", kubeconfig, "--kubernetes.node-name", NODE,
            "--labels.extra", "pod_uid,workload", "--labels.pod-labels", "app.kubernetes.io/.*|team"])
        import requests

        wait_for(lambda: "workload=" in requests.get(on.url(), timeout=10).text)
        before = api.request_count()
        peak_on = scrape_peak(on, scrapes)
        after = api.request_count()
        on.stop()
        api.stop()
    print(f"  exporter peak RSS (VmHWM), API off: {mib(peak_off)}")
    print(f"  exporter peak RSS (VmHWM), API on:  {mib(peak_on)}")
    print(f"  growth: {mib(peak_on - peak_off)} (goal <= 15 MiB)")
    print(f"  API requests during the {scrapes} scrapes: {after - before}")


def large_node(pods: int, churn_per_second: int, churn_seconds: float, workdir: str) -> None:
    print(f"== {pods}-pod node: the pod watch's memory and CPU (figures, not judged)")
    with FakeKubelet(f"{workdir}/kubelet-large.sock") as kubelet, FakeDcgmExporter(FIXTURE.read_bytes()) as dcgm:
        kubelet.set_devices(gpu_devices(8))
        api = FakeKubeApi().start()
        fill_api(api, pods)
        kubeconfig = write_kubeconfig(f"{workdir}/kubeconfig-large", api.url)
        started = time.monotonic()
        exporter = start_exporter(exporter_args(kubelet, dcgm) + [
            "--kubernetes.kubeconfig", kubeconfig, "--kubernetes.node-name", NODE,
            "--labels.extra", "pod_uid,workload", "--labels.pod-labels", "app.kubernetes.io/.*|team"], timeout_seconds=120)
        pid = exporter.proc.pid
        import requests

        wait_for(lambda: "pod_gpu_exporter_kubernetes_api_up 1" in requests.get(exporter.url(), timeout=10).text, 120)
        listed_in = time.monotonic() - started
        cpu_listed, rss_listed = cpu_seconds(pid), status_kib(pid, "VmRSS")
        print(f"  start-up to first list done (process start included): {listed_in:.2f} s; "
              f"CPU so far {cpu_listed:.2f} s; RSS {mib(rss_listed)}; peak {mib(status_kib(pid, 'VmHWM'))}")
        updates = churn(api, pods, churn_per_second, churn_seconds)
        time.sleep(1.0)
        cpu_churn = cpu_seconds(pid) - cpu_listed
        print(f"  churn: {updates} pod updates in {churn_seconds:.0f} s -> exporter CPU {cpu_churn:.2f} s "
              f"({1000 * cpu_churn / max(updates, 1):.2f} ms per update); RSS {mib(status_kib(pid, 'VmRSS'))}")
        lists = api.request_count("list")
        cpu_before = cpu_seconds(pid)
        api.compact()
        relisted = wait_for(lambda: api.request_count("list") >= lists + 2, 60)
        time.sleep(2.0)
        print(f"  410 Gone -> relist of {pods} pods: started after {relisted:.2f} s, exporter CPU "
              f"{cpu_seconds(pid) - cpu_before:.2f} s; RSS {mib(status_kib(pid, 'VmRSS'))}; "
              f"peak {mib(status_kib(pid, 'VmHWM'))}")
        exporter.stop()
        api.stop()


def churn(api: FakeKubeApi, pods: int, per_second: int, seconds: float) -> int:
    """Relabel pods at a steady rate, as rolling updates and status changes do."""
    deadline, updates = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        tick = time.monotonic()
        for _ in range(per_second // 10):
            i = updates % pods
            api.put("v1", "pods", make_pod("ml", f"gpu-pod-{i}", NODE, labels={"team": f"t{updates}"},
                                           annotations=_UNKEPT_ANNOTATION, owner=("ReplicaSet", "gpu-pod-7d9f")))
            updates += 1
        time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
    return updates


def added_install_size() -> None:
    """The installed size of lightkube and the packages only it brings (compiled bytecode included),
    from this environment's records of what each distribution installed: what the image's venv grows by."""
    print("== installed size of the added packages (what the image grows by)")
    ours = _closure("pod-gpu-metrics-exporter", skip={"lightkube"})
    added = _closure("lightkube") - ours
    total = 0
    for name in sorted(added):
        size = _installed_bytes(metadata.distribution(name))
        total += size
        print(f"  {name:24s} {size / 1e6:6.2f} MB")
    print(f"  total: {total / 1e6:.1f} MB (goal <= 20 MB)")


def _installed_bytes(dist) -> int:
    files = [Path(f.locate()) for f in dist.files or ()]
    size = sum(f.stat().st_size for f in files if f.is_file())
    recorded = {f.resolve() for f in files}
    for source in [f for f in files if f.suffix == ".py"]:  # bytecode pip compiled, not always recorded
        for compiled in (source.parent / "__pycache__").glob(source.stem + ".*.pyc"):
            if compiled.resolve() not in recorded:
                size += compiled.stat().st_size
    return size


def _closure(name: str, skip=frozenset()) -> set:
    """A distribution and every requirement it installs (markers and requested extras evaluated)."""
    from packaging.requirements import Requirement

    seen, todo = set(), [(name, frozenset())]
    while todo:
        current, extras = todo.pop()
        current = _normal(current)
        if (current, extras) in seen or current in skip:
            continue
        try:
            dist = metadata.distribution(current)
        except metadata.PackageNotFoundError:
            continue
        seen.add((current, extras))
        for text in dist.requires or ():
            requirement = Requirement(text)
            wanted = requirement.marker is None or any(
                requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""}))
            if wanted:
                todo.append((requirement.name, frozenset(requirement.extras)))
    return {dist for dist, _ in seen}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--gpu-pods", type=int, default=16)
    parser.add_argument("--scrapes", type=int, default=SCRAPES)
    parser.add_argument("--large-pods", type=int, default=5000)
    parser.add_argument("--churn-per-second", type=int, default=200)
    parser.add_argument("--churn-seconds", type=float, default=10.0)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="pgx-bench-", dir="/tmp")
    added_install_size()
    rss_on_vs_off(args.pods, args.gpu_pods, args.scrapes, workdir)
    large_node(args.large_pods, args.churn_per_second, args.churn_seconds, workdir)


if __name__ == "__main__":
    main()
