"""The real exporter process with the Kubernetes API on: a fake API server speaking REST + watch on
loopback (through a kubeconfig), the gRPC kubelet on a unix socket and the HTTP dcgm-exporter."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import cluster_role_grants
from support.exporter_process import REPO_ROOT, exporter_env
from support.fake_kube_api import owner_reference, write_kubeconfig
from support.fixtures import FIXTURES_DIR
from support.kube_e2e import add_pod, gauge, lines_of, scrape, start
from support.kube_scenario import NODE, POOL, UUID3, claim, devices, resource_slice, status_free
from support.waiting import wait_until


def add_owner(api, plural, namespace, name, parent=None):
    kind = {"replicasets": "ReplicaSet", "jobs": "Job"}[plural]
    meta = {"name": name, "namespace": namespace}
    if parent is not None:
        meta["ownerReferences"] = [owner_reference(*parent)]
    api.put("apps/v1" if plural == "replicasets" else "batch/v1", plural,
            {"apiVersion": "apps/v1" if plural == "replicasets" else "batch/v1", "kind": kind, "metadata": meta,
             "spec": {"selector": {}, "template": {}}})


def test_api_off_serves_exactly_the_kubelet_only_scrape(node, run_exporter, api):
    kubelet, dcgm, _ = node
    expected = (FIXTURES_DIR / "golden" / "kubelet-only-scrape.prom").read_text()
    # Off by flag (the --labels.* flags are then ignored, with a warning), and auto outside a pod.
    for mode in ("off", "auto"):
        exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path,
                                 "--kubernetes.api", mode, "--labels.extra", "pod_uid,workload",
                                 "--labels.pod-labels", ".*"])
        assert status_free(scrape(exporter)) == expected, mode
        assert "kubernetes_api_up" not in scrape(exporter)
        # Nor is the client library loaded (its msgspec extension would be mapped): no memory spent on it.
        assert "msgspec" not in open(f"/proc/{exporter.proc.pid}/maps").read()
    assert api.request_count() == 0


# Workloads of every controller chain: tests/e2e/test_workload_e2e.py.


def test_pod_labels_and_annotations_allow_listed_sanitised_and_ordered(node, api, run_exporter):
    labels = {"app.kubernetes.io/name": "trainer", "team": "vision", "pod-template-hash": "7d9f",
              "a.b": "first", "a_b": "second"}
    annotations = {"cost-center": 'R&D "east"', "kubectl.kubernetes.io/last-applied-configuration": "{...}"}
    uid = add_pod(api, "web", "infer-1", labels=labels, annotations=annotations)["metadata"]["uid"]
    exporter = start(run_exporter, node, "--labels.extra", "pod_uid", "--labels.pod-labels",
                     r"app\.kubernetes\.io/.*|team|a.b", "--labels.pod-annotations", "cost-center|team")
    text = wait_until(lambda: (lambda t: t if "label_team" in t else None)(scrape(exporter)))
    # `a.b` and `a_b` both sanitise to label_a_b: the first key in sorted order ("a.b") wins.
    expected = (',namespace="web",pod="infer-1",container="vllm",pod_uid="' + uid + '",label_a_b="first",'
                'label_app_kubernetes_io_name="trainer",label_team="vision",annotation_cost_center="R&D \\"east\\""}')
    samples = [line for line in lines_of(text, "infer-1") if line.startswith("DCGM_")]
    assert samples and all(expected in line for line in samples)
    assert "pod_template_hash" not in text and "last_applied" not in text  # refused keys
    # A pod the API does not know (infer-2, not created) keeps its owner labels and gets no extras.
    assert all("pod_uid" not in line for line in lines_of(text, "infer-2"))
    for _ in range(5):
        scrape(exporter)
    unknown = exporter.wait_for_lines("not (yet) known to the API server watch", count=3)
    assert len(unknown) == 3, unknown  # infer-2, small-a, train
    assert gauge(text, "pod_gpu_exporter_kubernetes_api_up") == "1"


def test_pod_added_relabelled_deleted_while_serving_and_scrapes_never_call_the_api(node, api, run_exporter):
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    text = wait_until(lambda: (lambda t: t if gauge(t, "pod_gpu_exporter_kubernetes_api_up") == "1" else None)(scrape(exporter)))
    assert lines_of(text, "small-a") and "label_team" not in text  # the kubelet knows it, the API not yet
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    wait_until(lambda: 'pod="small-a",container="c",label_team="a"}' in scrape(exporter))
    add_pod(api, "ml", "small-a", labels={"team": "b"})
    wait_until(lambda: 'label_team="b"' in scrape(exporter) and 'label_team="a"' not in scrape(exporter))
    # The DeviceTaintRule watch's discovery read (no version is served here) is made by then.
    wait_until(lambda: api.requests_since(0.0, "discover", "apis") >= 1)
    before = api.request_count()
    for _ in range(30):
        scrape(exporter)
    assert api.request_count() == before, "a scrape called the API server"
    api.delete("v1", "pods", "ml", "small-a")
    text = wait_until(lambda: (lambda t: t if "label_team" not in t else None)(scrape(exporter)))
    # The kubelet still lists it, but the API server says it is gone: it owns nothing any more.
    assert not lines_of(text, "small-a") and lines_of(text, "infer-1")


def test_api_down_and_back(node, api, run_exporter):
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team", "--kubelet.mapping-max-age", "1s")
    wait_until(lambda: 'label_team="a"' in scrape(exporter))
    port = api.port
    api.stop()  # every watch ends and no connection is accepted: the API server is down
    text = wait_until(lambda: (lambda t: t if gauge(t, "pod_gpu_exporter_kubernetes_api_up") == "0"
                               and "label_team" not in t else None)(scrape(exporter)))
    assert lines_of(text, "small-a") and gauge(text, "pod_gpu_exporter_kubelet_up") == "1"
    api.start(port)
    text = wait_until(lambda: (lambda t: t if 'label_team="a"' in t else None)(scrape(exporter)), 30)
    assert gauge(text, "pod_gpu_exporter_kubernetes_api_up") == "1"
    log = exporter.wait_for_log('msg="Kubernetes API answering again" dependency=kubernetes-api resource=pods')
    assert len(re.findall(r"Kubernetes API unreachable for \w+ pods", log)) == 1, log
    assert log.count('msg="Kubernetes API answering again" dependency=kubernetes-api resource=pods') == 1, log


def test_forbidden_names_the_verb_and_resource_once(node, api, run_exporter):
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    api.forbidden["pods"] = "watch"
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    exporter.wait_for_log("forbids watch on pods")
    for _ in range(10):
        text = scrape(exporter)
    assert gauge(text, "pod_gpu_exporter_kubernetes_api_up") == "0"
    assert lines_of(text, "small-a")  # owner labels still there
    wait_until(lambda: api.request_count("watch") >= 3)  # retried with backoff...
    log = exporter.stderr_text()
    assert log.count("forbids watch on pods") == 1, log  # ...and logged once
    assert "needs verb 'watch' on 'pods'" in log


def test_unauthorized_is_logged_and_never_an_outage(node, api, run_exporter):
    kubelet, dcgm, kubeconfig = node
    api.token = "the-right-token"
    write_kubeconfig(kubeconfig, api.url, token="a-stale-token")
    exporter = start(run_exporter, node, "--labels.extra", "pod_uid")
    exporter.wait_for_log("refused our credentials (401)")
    text = scrape(exporter)
    assert gauge(text, "pod_gpu_exporter_kubernetes_api_up") == "0" and gauge(text, "pod_gpu_exporter_dcgm_up") == "1"
    assert lines_of(text, "infer-1") and "pod_uid" not in text


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-410"])
def test_watch_expired_410_relists(node, api, run_exporter, as_http):
    api.gone_as_http = as_http
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    wait_until(lambda: 'label_team="a"' in scrape(exporter))
    lists = api.requests_since(0.0, verb="list", plural="pods")
    # Compaction ends open watches with an ERROR 410 event; or, in the other mode, the watch closes
    # cleanly and the exporter's next watch, from its last version, is answered HTTP 410.
    add_owner(api, "replicasets", "ml", "elsewhere")  # the version moves on past the pod watch's own...
    api.compact()  # ...and is compacted away
    add_pod(api, "ml", "small-a", labels={"team": "b"})
    wait_until(lambda: 'label_team="b"' in scrape(exporter), 30)
    assert api.requests_since(0.0, verb="list", plural="pods") > lists
    exporter.wait_for_log("410 Gone")


def test_dra_device_identified_by_its_resource_slice_and_admin_access_never_owns(node, api, run_exporter):
    kubelet = node[0]
    api.put("resource.k8s.io/v1", "resourceslices", resource_slice({
        "gpu-h100-a": {"type": "gpu", "uuid": UUID3, "productName": "NVIDIA H100 80GB HBM3"}}))
    api.put("resource.k8s.io/v1", "resourceclaims", claim("batch", "train-gpu", "gpu-h100-a"))
    api.put("resource.k8s.io/v1", "resourceclaims", claim("gpu-operator", "monitor-all", "gpu-h100-a", admin=True))
    kubelet.set_devices(devices() + [AllocatedDevice("gpu-operator", "nvidia-dcgm-exporter-x", "exporter",
                                                     "gpu.nvidia.com", "gpu-h100-a", dra=True,
                                                     claim="gpu-operator/monitor-all", pool=POOL)])
    exporter = start(run_exporter, node)
    text = wait_until(lambda: (lambda t: t if 'pod="train-x7k2p"' in t and "DCGM" in "".join(lines_of(t, "train-x7k2p"))
                               else None)(scrape(exporter)))
    samples = [line for line in lines_of(text, "train-x7k2p") if line.startswith("DCGM_")]
    assert samples and all(f'UUID="{UUID3}"' in line for line in samples)
    assert not lines_of(text, "nvidia-dcgm-exporter-x")  # adminAccess: not an owner, not an allocation
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0"
    info = [line for line in lines_of(text, "train-x7k2p") if line.startswith("pod_gpu_allocation_info")]
    assert len(info) == 1 and f'UUID="{UUID3}",gpu="2"' in info[0]


def test_mapping_command_shows_the_extras(node, api):
    kubelet, dcgm, kubeconfig = node
    uid = add_pod(api, "web", "infer-1", labels={"team": "vision"})["metadata"]["uid"]
    command = [sys.executable, "-m", "exporter", "mapping", "-o", "json", "--kubelet.socket", kubelet.socket_path,
               "--kubernetes.kubeconfig", kubeconfig, "--kubernetes.node-name", NODE,
               "--labels.extra", "pod_uid", "--labels.pod-labels", "team"]
    done = subprocess.run(command, cwd=str(REPO_ROOT), env=exporter_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = {row["pod"]: row for row in json.loads(done.stdout)["allocations"]}
    assert rows["infer-1"]["labels"] == f'pod_uid="{uid}",label_team="vision"'
    assert rows["infer-2"]["labels"] == ""  # not known to the API
    table = subprocess.run(command[:4] + command[6:], cwd=str(REPO_ROOT), env=exporter_env(), capture_output=True,
                           text=True, timeout=60)
    assert "LABELS" in table.stdout.splitlines()[0] and f'pod_uid="{uid}"' in table.stdout


@pytest.mark.parametrize("args, message", [
    (["--labels.extra", "pod_uid,namespace_uid"], "--labels.extra: unknown extra label 'namespace_uid'"),
    (["--labels.pod-labels", "app(["], "--labels.pod-labels: invalid regular expression"),
    (["--kubernetes.api", "sometimes"], "--kubernetes.api: invalid choice"),
    (["--kubernetes.api", "on"], "not running in a pod"),
    (["--kubernetes.kubeconfig", "/nonexistent/kubeconfig"], "--kubernetes.kubeconfig: cannot load"),
])
def test_bad_kubernetes_flags_stop_start_up_with_exit_2(args, message):
    done = subprocess.run([sys.executable, "-m", "exporter", "--web.listen-address", "127.0.0.1:0", *args],
                          cwd=str(REPO_ROOT), env=exporter_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_every_api_request_is_granted_by_the_daemonset_cluster_role(node, api, run_exporter):
    add_owner(api, "replicasets", "web", "infer-5d4f", ("Deployment", "infer"))
    add_owner(api, "jobs", "ml", "small-29001", ("CronJob", "small"))
    add_pod(api, "web", "infer-1", owner=("ReplicaSet", "infer-5d4f"))
    add_pod(api, "ml", "small-a", owner=("Job", "small-29001"))
    api.put("resource.k8s.io/v1", "resourceslices", resource_slice({"gpu-h100-a": {"type": "gpu", "uuid": UUID3}}))
    api.put("resource.k8s.io/v1", "resourceclaims", claim("batch", "train-gpu", "gpu-h100-a"))
    api.serve_kind("resource.k8s.io/v1", "devicetaintrules", "DeviceTaintRule", namespaced=False)
    exporter = start(run_exporter, node, "--labels.extra", "pod_uid,workload")
    wait_until(lambda: 'workload="small"' in scrape(exporter) and 'workload="infer"' in scrape(exporter))
    groups = {plural: version.rpartition("/")[0] for version, plural in api.kinds}
    made = {(groups[plural], plural, verb) for verb, plural in api.requests if verb != "discover"}
    assert {(plural, verb) for _, plural, verb in made} >= {("pods", "list"), ("pods", "watch"),
                                                           ("replicasets", "get"), ("jobs", "get"),
                                                           ("resourceslices", "list"), ("resourceclaims", "get"),
                                                           ("devicetaintrules", "list")}
    grants = cluster_role_grants()
    assert all(verb in grants.get((group, plural), ()) for group, plural, verb in made), made


def test_a_5000_pod_node_is_listed_in_pages_and_watched(node, api, run_exporter):
    """Functional only: memory and CPU at this size are figures of benchmarks/kubernetes.py."""
    for i in range(5000):
        add_pod(api, "filler", f"pod-{i:04d}", labels={"team": "filler"})
    add_pod(api, "web", "infer-1", labels={"team": "vision"})
    add_pod(api, "other", "elsewhere", node="gpu-node-2", labels={"team": "x"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    wait_until(lambda: 'label_team="vision"' in scrape(exporter), 60)
    pages = api.requests_since(0.0, verb="list", plural="pods")
    assert pages >= 11, pages  # 5,001 pods of this node in pages of 500
    add_pod(api, "web", "infer-2", labels={"team": "late"})
    wait_until(lambda: 'pod="infer-2",container="vllm",label_team="late"}' in scrape(exporter))
    assert api.requests_since(0.0, verb="list", plural="pods") == pages  # a watch event, not a relist
