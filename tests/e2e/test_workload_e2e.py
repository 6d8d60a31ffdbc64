"""The real exporter process against the fake API server: workload = the top controller of any kind,
read metadata-only and granted by the shipped ClusterRole; pods that have ended own nothing."""

from __future__ import annotations

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import cluster_role_grants
from support.kube_e2e import add_pod, gauge, lines_of, scrape, start
from support.kube_scenario import UUID1
from support.kube_workloads import put_chains
from support.waiting import wait_until


def gpu_devices(pods, namespace="team"):
    return [AllocatedDevice(namespace, pod, "main", "nvidia.com/gpu.shared", f"{UUID1}::{i}")
            for i, pod in enumerate(pods)]


def workload_text(exporter, pods):
    def ready():
        text = scrape(exporter)
        return text if all('workload="' in "".join(lines_of(text, pod)) for pod in pods) else None
    return wait_until(ready, 30)


def test_workload_is_the_top_controller_of_every_chain(node, api, run_exporter):
    kubelet = node[0]
    chains = put_chains(api)
    uids = {pod: uid for pod, _, uid in chains}
    kubelet.set_devices(gpu_devices(list(uids)))
    exporter = start(run_exporter, node, "--labels.extra", "workload,pod_uid")
    text = workload_text(exporter, list(uids))
    for pod, (kind, name), _ in chains:
        extra = f'namespace="team",pod="{pod}",container="main",pod_uid="{uids[pod]}",workload_kind="{kind}",workload="{name}"'
        samples = [line for line in lines_of(text, pod) if line.startswith("DCGM_")]
        assert samples and all(f"{extra}}}" in line for line in samples), (pod, samples[:1])
        info = [line for line in lines_of(text, pod) if line.startswith("pod_gpu_allocation_info")]
        assert len(info) == 1 and f"{{{extra},resource=" in info[0], info
    # Every owner object read once, metadata only; scrapes and later refreshes read nothing more.
    gets = api.request_count("get")
    assert api.metadata_gets == gets > 0
    for _ in range(5):
        scrape(exporter)
    assert api.request_count("get") == gets
    # Discovery once per group/version, not per object.
    discovered = [plural for verb, plural in api.requests if verb == "discover"]
    assert len(discovered) == len(set(discovered)), discovered


def test_a_forbidden_level_ends_the_walk_at_the_last_known_owner_and_is_logged_once(node, api, run_exporter):
    kubelet = node[0]
    put_chains(api)
    api.forbidden["statefulsets"] = "get"  # a ClusterRole without statefulsets
    api.forbidden["rollouts"] = "get"
    pods = ["llama-0-1", "llama-1", "db-0", "trainer-7c9d5f8b6-x2", "web-7d9f-abcde"]
    kubelet.set_devices(gpu_devices(pods))
    exporter = start(run_exporter, node, "--labels.extra", "workload")
    text = workload_text(exporter, pods)
    expected = {"llama-0-1": ("StatefulSet", "llama-0"), "llama-1": ("StatefulSet", "llama"),
                "db-0": ("StatefulSet", "db"), "trainer-7c9d5f8b6-x2": ("Rollout", "trainer"),
                "web-7d9f-abcde": ("Deployment", "web")}
    for pod, (kind, name) in expected.items():
        assert all(f'workload_kind="{kind}",workload="{name}"' in line
                   for line in lines_of(text, pod) if line.startswith("DCGM_")), pod
    for _ in range(5):
        scrape(exporter)
    log = exporter.wait_for_log("cannot read StatefulSet objects (403)", "cannot read Rollout objects (403)")
    assert log.count("cannot read StatefulSet objects (403)") == 1, log
    assert "needs verb 'get' on 'statefulsets' in API group 'apps'" in log
    assert log.count("cannot read Rollout objects (403)") == 1, log
    assert "needs verb 'get' on 'rollouts' in API group 'argoproj.io'" in log


def test_the_daemonset_cluster_role_grants_every_read_of_the_shipped_chains(node, api, run_exporter):
    kubelet = node[0]
    pods = [pod for pod, workload, _ in put_chains(api) if workload[0] != "RayCluster"]
    kubelet.set_devices(gpu_devices(pods))
    exporter = start(run_exporter, node, "--labels.extra", "workload")
    workload_text(exporter, pods)
    groups = {plural: version.rpartition("/")[0] for version, plural in api.kinds}
    # Kinds this server does not serve (DeviceTaintRules, answered 404) are left out: their grant is
    # test_kubernetes_e2e's, against a server that serves them.
    made = {(groups[plural], plural, verb) for verb, plural in api.requests if verb != "discover" and plural in groups}
    assert {plural for _, plural, _ in made} >= {"pods", "replicasets", "jobs", "statefulsets", "deployments",
                                                  "cronjobs", "rollouts", "jobsets", "leaderworkersets", "daemonsets"}
    grants = cluster_role_grants()
    assert all(verb in grants.get((group, plural), ()) for group, plural, verb in made), made
    assert "forbid" not in exporter.stderr_text()


def test_an_ended_pod_sharing_a_gpu_with_its_successor_owns_nothing(node, api, run_exporter):
    kubelet = node[0]
    # The kubelet still lists the finished Job's pod (and a failed one) beside the pod now on the GPU.
    add_pod(api, "batch", "train-1-done", owner=("Job", "train-1"), phase="Succeeded")
    add_pod(api, "batch", "train-2-failed", owner=("Job", "train-2"), phase="Failed")
    add_pod(api, "batch", "train-3-run", owner=("Job", "train-3"))
    add_pod(api, "batch", "train-4-run", owner=("Job", "train-4"))
    kubelet.set_devices(gpu_devices(["train-1-done", "train-2-failed", "train-3-run", "train-4-run"], "batch"))
    exporter = start(run_exporter, node)  # no --labels.*: ended pods are left out all the same
    text = wait_until(lambda: (lambda t: t if gauge(t, "pod_gpu_exporter_kubernetes_api_up") == "1"
                               and lines_of(t, "train-3-run") and not lines_of(t, "train-1-done") else None)(scrape(exporter)))
    gpu_lines = [line for line in text.splitlines() if line.startswith("DCGM_") and UUID1 in line]
    assert gpu_lines and all('pod="train-3-run"' in line or 'pod="train-4-run"' in line for line in gpu_lines)
    assert not lines_of(text, "train-2-failed")  # no sample, no pod_gpu_allocation_info row
    # A pod the API server deletes while the kubelet goes on listing it: gone from the next refresh on.
    api.delete("v1", "pods", "batch", "train-4-run")
    text = wait_until(lambda: (lambda t: t if not lines_of(t, "train-4-run") else None)(scrape(exporter)))
    assert lines_of(text, "train-3-run")
    # The same name back (a StatefulSet's pod): it owns its GPU again.
    add_pod(api, "batch", "train-4-run", owner=("Job", "train-4"))
    wait_until(lambda: lines_of(scrape(exporter), "train-4-run"))


def test_without_the_api_an_ended_pod_is_still_an_owner(node, run_exporter):
    """The documented limitation: the kubelet alone cannot tell that a pod has ended."""
    kubelet, dcgm, _ = node
    kubelet.set_devices(gpu_devices(["train-1-done", "train-3-run"], "batch"))
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path,
                             "--kubernetes.api", "off", "--kubelet.refresh-interval", "200ms"])
    text = wait_until(lambda: (lambda t: t if lines_of(t, "train-1-done") else None)(scrape(exporter)))
    assert lines_of(text, "train-3-run")
