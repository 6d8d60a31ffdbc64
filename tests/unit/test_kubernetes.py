"""The Kubernetes context in-process, against the fake API server through the real client library:
DRA MIG devices, the v1beta1 fallback, bookmarks, and what the pod cache keeps."""

from __future__ import annotations

import threading

import pytest

from exporter.core.identity import GpuKey
from exporter.core.mapping import build_mapping
from exporter.sources.kubelet import AllocatedDevice
from exporter.collectors.kubernetes.client import make_client
from exporter.collectors.kubernetes.context import KubernetesContext
from exporter.collectors.kubernetes.labels import LabelSpec
from exporter.collectors.kubernetes.watch import ListWatch
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.fake_kube_api import FakeKubeApi, make_pod, write_kubeconfig
from support.kube_scenario import NODE, POOL, UUID0, claim, resource_slice
from support.waiting import wait_until

MIG = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"
MIG_DEVICE = "gpu-0-mig-19-4-1"  # the driver's name: profile 19, placement start 4, size 1 — no GI ID


def context(api, tmp_path, spec=LabelSpec(), resolve_mig=None):
    ctx = KubernetesContext(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)), NODE, spec, DEVICE_FORMS)
    ctx.dra.resolve_mig = resolve_mig
    ctx.lifecycle.start()
    wait_until(lambda: ctx.lifecycle.up and ctx.lifecycle.slices_up)
    return ctx


@pytest.fixture
def api():
    fake = FakeKubeApi().start()
    yield fake
    fake.stop()


def mig_slice_and_claim(api, version="v1"):
    attributes = {"type": "mig", "uuid": MIG, "parentUUID": UUID0, "profile": "1g.10gb"}
    body = resource_slice({MIG_DEVICE: attributes})
    body["apiVersion"] = f"resource.k8s.io/{version}"
    if version == "v1beta1":  # v1beta1 nests a device's attributes under `basic`
        body["spec"]["devices"] = [{"name": MIG_DEVICE, "basic": {"attributes": {
            k: {"string": v} for k, v in attributes.items()}}}]
    api.put(f"resource.k8s.io/{version}", "resourceslices", body)
    held = claim("ml", "small", MIG_DEVICE)
    held["apiVersion"] = f"resource.k8s.io/{version}"
    api.put(f"resource.k8s.io/{version}", "resourceclaims", held)
    return [AllocatedDevice("ml", "small-a", "c", "gpu.nvidia.com", MIG_DEVICE, dra=True, claim="ml/small", pool=POOL)]


def test_dra_mig_device_matched_through_its_slice_and_nvml(api, tmp_path):
    devices = mig_slice_and_claim(api)
    looked_up = []

    def nvml(mig_uuid):  # stands in for NVML, the outside world: MIG UUID → (parent, GPU instance)
        looked_up.append(mig_uuid)
        return (UUID0, "13") if mig_uuid == MIG else None

    ctx = context(api, tmp_path, resolve_mig=nvml)
    try:
        wait_until(lambda: ctx.dra.resolve("gpu.nvidia.com", POOL, MIG_DEVICE, "ml/small").known)
        mapping = build_mapping(DEVICE_FORMS, devices, context=ctx.mapping)
    finally:
        ctx.lifecycle.stop()
    assert mapping.owners_for(GpuKey("UUID", UUID0, "13"))[0].pod == "small-a"
    assert mapping.unresolved == () and set(looked_up) == {MIG}  # (the NVML resolver caches its answers)


def test_dra_mig_device_without_nvml_is_unresolved_not_guessed(api, tmp_path):
    devices = mig_slice_and_claim(api)
    ctx = context(api, tmp_path)
    try:
        wait_until(lambda: ctx.dra.resolve("gpu.nvidia.com", POOL, MIG_DEVICE, "ml/small").known)
        mapping = build_mapping(DEVICE_FORMS, devices, context=ctx.mapping)
    finally:
        ctx.lifecycle.stop()
    assert mapping.owners == {} and mapping.unresolved == (MIG_DEVICE,)


def test_resource_slices_and_claims_fall_back_to_v1beta1(api, tmp_path):
    api.served = {"v1", "resource.k8s.io/v1beta1"}
    devices = mig_slice_and_claim(api, "v1beta1")
    api.put("resource.k8s.io/v1beta1", "resourceclaims", {**claim("ml", "small", MIG_DEVICE, admin=True),
                                                          "apiVersion": "resource.k8s.io/v1beta1"})
    ctx = context(api, tmp_path, resolve_mig=lambda _: (UUID0, "13"))
    try:
        assert ctx.dra.resolve("gpu.nvidia.com", POOL, MIG_DEVICE, "other/none").key == GpuKey("UUID", UUID0, "13")
        assert build_mapping(DEVICE_FORMS, devices, context=ctx.mapping).allocations == ()  # its claim has adminAccess (v1beta1 fields)
    finally:
        ctx.lifecycle.stop()


@pytest.mark.parametrize("behaviour, why", [("trickle", "took longer than 1 s"), ("oversized", "larger than")])
def test_a_claim_read_is_bounded_in_time_and_size_so_the_refresh_goes_on(api, tmp_path, log_stream, behaviour, why):
    # Claims are read on the mapping refresher: a trickled answer held it (and every GPU's attribution) for good,
    # and an answer of any size was read whole.
    device = mig_slice_and_claim(api)[0]
    api.put("resource.k8s.io/v1", "resourceclaims", claim("ml", "small", MIG_DEVICE, admin=True))
    api.hostile_gets["resourceclaims"] = behaviour
    ctx = KubernetesContext(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)), NODE, LabelSpec(), DEVICE_FORMS,
                            read_seconds=1.0)
    ctx.lifecycle.start()
    try:
        wait_until(lambda: ctx.lifecycle.up and ctx.lifecycle.slices_up)
        outcome = []
        refresh = threading.Thread(target=lambda: outcome.append(ctx.mapping.resolve_dra(device)), daemon=True)
        refresh.start()
        refresh.join(30)  # far beyond the bound: only a read that never ends gets here alive
        assert not refresh.is_alive()
    finally:
        ctx.lifecycle.stop()
    assert outcome[0].admin_access is False  # the claim could not be read: adminAccess is not assumed
    assert why in log_stream.getvalue()


def test_bookmarks_pass_and_the_cache_follows_the_watch(api, tmp_path):
    api.bookmarks = "always"  # a real server sends them when asked; a client must take them any time
    api.put("v1", "pods", make_pod("ml", "a", NODE, labels={"team": "x"}, containers=("main", "sidecar")))
    api.put("v1", "pods", make_pod("ml", "b", "another-node"))
    ctx = context(api, tmp_path, LabelSpec(pod_uid=True))
    try:
        wait_until(lambda: api.bookmarks_sent >= 2, 10)
        api.put("v1", "pods", make_pod("ml", "c", NODE))
        wait_until(lambda: ctx.pod_index.pod("ml", "c") is not None)
        info = ctx.pod_index.pod("ml", "a")
        assert ctx.lifecycle.up and ctx.pod_index.pod("ml", "b") is None  # another node's pod is never seen
    finally:
        ctx.lifecycle.stop()
    # What per-process attribution needs next: the pod UID and each container's ID.
    assert info.uid and [name for name, _ in info.containers] == ["main", "sidecar"]
    assert all(container_id.startswith("containerd://") for _, container_id in info.containers)
    assert info.labels == ()  # not allow-listed: not kept


def test_pods_that_ended_or_vanished_are_known_as_ended(api, tmp_path):
    for name, phase in [("done", "Succeeded"), ("failed", "Failed"), ("running", "Running"), ("pending", "Pending"),
                        ("deleted-live", "Running"), ("deleted-away", "Running")]:
        api.put("v1", "pods", make_pod("ml", name, NODE, phase=phase))
    ctx = context(api, tmp_path)
    port = api.port
    try:
        api.delete("v1", "pods", "ml", "deleted-live")  # a DELETED event
        wait_until(lambda: ctx.pod_index.pod("ml", "deleted-live") is None)
        api.stop()
        api.delete("v1", "pods", "ml", "deleted-away")  # deleted while the watch was away...
        api.compact()  # ...and the event compacted: only the relist after a 410 can tell
        api.start(port)
        wait_until(lambda: api.request_count("list") >= 3 and ctx.pod_index.pod("ml", "deleted-away") is None and ctx.lifecycle.up, 30)
        pods = [("ml", name) for name in ("done", "failed", "running", "pending", "deleted-live", "deleted-away",
                                          "never-seen")]
        assert ctx.mapping.ended_pods(pods) == {("ml", "done"), ("ml", "failed"), ("ml", "deleted-live"), ("ml", "deleted-away")}
        api.put("v1", "pods", make_pod("ml", "deleted-live", NODE))  # the same name again: a new pod
        wait_until(lambda: ("ml", "deleted-live") not in ctx.mapping.ended_pods(pods))
    finally:
        ctx.lifecycle.stop()


def test_a_pod_a_relist_skips_as_malformed_has_not_ended(api, tmp_path):
    # Missing from a list because it could not be read is not deleted: taken as ended, it lost its GPU.
    api.put("v1", "pods", make_pod("ml", "trainer", NODE))
    api.put("v1", "pods", make_pod("ml", "gone", NODE))
    ctx = context(api, tmp_path)
    try:
        api.put("v1", "pods", make_pod("ml", "trainer", NODE, labels={"team": 5}))  # not a string: skipped
        api.delete("v1", "pods", "ml", "gone")
        wait_until(lambda: ctx.pod_index.pod("ml", "gone") is None)
        lists = ctx.pod_watch.lists
        api.compact()  # the watch's version compacted: a relist, which skips the malformed pod
        wait_until(lambda: ctx.pod_watch.lists > lists and ctx.lifecycle.up, 30)
        assert ctx.pod_watch.skipped["malformed"] >= 2
        assert ctx.mapping.ended_pods([("ml", "trainer"), ("ml", "gone")]) == {("ml", "gone")}
    finally:
        ctx.lifecycle.stop()


class _RefusingStore:
    """A WatchedStore whose add fails for pods named refused-…, as a bug in the cache would."""

    def __init__(self):
        self.names = set()

    def replace(self, objects, complete):
        self.names = {obj.metadata.name for obj in objects}

    def add(self, obj):
        if obj.metadata.name.startswith("refused"):
            raise KeyError(obj.metadata.name)
        self.names.add(obj.metadata.name)

    def update(self, obj):
        self.add(obj)

    def delete(self, obj):
        self.names.discard(obj.metadata.name)


def test_a_store_that_fails_is_logged_once_not_counted_as_malformed_and_the_watch_goes_on(api, tmp_path,
                                                                                           log_stream):
    from lightkube.resources.core_v1 import Pod

    store = _RefusingStore()
    watch = ListWatch(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)), Pod, "pods", None, store)
    watch.start()
    try:
        wait_until(lambda: watch.healthy)
        for name in ("refused-1", "refused-2", "taken"):
            api.put("v1", "pods", make_pod("ml", name, NODE))
        wait_until(lambda: "taken" in store.names)
        assert watch.status().skipped == {} and watch.lists == 1  # no object skipped, no relist
    finally:
        watch.stop()
    logged = [line for line in log_stream.getvalue().splitlines() if "not taken by the cache" in line]
    assert len(logged) == 1 and "KeyError" in logged[0] and "refused-1" in logged[0]


def get_forbidden(api_version, kind, namespace, name):
    """The API server's answer to a ServiceAccount without `get` on jobs, without a round trip per
    object (thousands of them are needed here)."""
    from lightkube.core.exceptions import ApiError
    from lightkube.models.meta_v1 import Status

    raise ApiError(status=Status(code=403, reason="Forbidden", message=f"{kind} {name} is forbidden"))


def test_failing_workload_lookups_stay_within_the_cache_bound(api, tmp_path, log_stream):
    # RBAC without `get jobs` while a CronJob keeps making Jobs: every Job's refusal is remembered for
    # the retry interval, but only up to the bound that answers have too.
    jobs = 4096 + 50
    for n in range(jobs):
        api.put("v1", "pods", make_pod("batch", f"job-{n}-pod", NODE, owner=("Job", f"job-{n}")))
    client = make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url))
    ctx = KubernetesContext(client, NODE, LabelSpec(workload=True), DEVICE_FORMS, clock=lambda: 1000.0,  # no retry is due
                            read_owners=get_forbidden)
    ctx.lifecycle.start()
    try:
        wait_until(lambda: ctx.lifecycle.up and len(ctx.pod_index) == jobs, 60)
        pods = [("batch", f"job-{n}-pod") for n in range(jobs)]
        extras = ctx.mapping.extra_labels_for(pods)
        # The walk stops at the Job it cannot read: the workload is that Job, known by its name.
        assert extras[pods[7]] == (("workload_kind", "Job"), ("workload", "job-7"))
        assert ctx.workloads.lookups == jobs
        ctx.mapping.extra_labels_for(pods[:1])  # within the retry interval, yet asked again: the oldest made room
        assert ctx.workloads.lookups == jobs + 1
        assert len(ctx.workloads) <= 4096
    finally:
        ctx.lifecycle.stop()
    assert log_stream.getvalue().count("cannot read Job objects (403)") == 1  # once, not once per Job


def test_queue_labels_stay_on_when_owner_reads_are_injected(api, tmp_path):
    # Injected owner reads replace only the owners' metadata reads: the queue a Job's metadata names is
    # still kept, and its LocalQueue still read from the API server (they were silently off).
    from support.kube_queues import put_local_queue, serve_kueue

    serve_kueue(api)
    put_local_queue(api, "kueue.x-k8s.io/v1beta2", "ml", "lq-train", "cq-research")
    api.put("v1", "pods", make_pod("ml", "train-0", NODE, owner=("Job", "train")))
    job = {"labels": {"kueue.x-k8s.io/queue-name": "lq-train"}, "ownerReferences": []}
    client = make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url))
    ctx = KubernetesContext(client, NODE, LabelSpec(workload=True, queue=True), DEVICE_FORMS,
                            read_owners=lambda version, kind, namespace, name: job)
    ctx.lifecycle.start()
    try:
        wait_until(lambda: ctx.lifecycle.up and ctx.pod_index.pod("ml", "train-0") is not None)
        assert ctx.mapping.extra_labels_for([("ml", "train-0")])[("ml", "train-0")] == (
            ("workload_kind", "Job"), ("workload", "train"), ("cluster_queue", "cq-research"), ("local_queue", "lq-train"))
    finally:
        ctx.lifecycle.stop()


def test_an_extended_resource_claim_is_split_by_request_subrequests_and_sharers_included(api, tmp_path):
    """The claim's results name a subrequest as "<request>/<subrequest>"; a device two requests share (one
    result each) is held by both their containers, split between them; a container whose mappings name
    none of a device's requests does not hold it."""
    from support.kube_scenario import extended_resource_claim, with_extended_resource_claim

    api.put("resource.k8s.io/v1", "resourceslices", resource_slice({
        "gpu-4": {"type": "gpu", "uuid": "GPU-4"}, "gpu-5": {"type": "gpu", "uuid": "GPU-5"}}))
    pod = make_pod("ml", "p", NODE, containers=("a", "b", "c"))
    claim_body = extended_resource_claim(pod, "p-extended-resources-1", {"r0": "gpu-4", "r1": "gpu-5"})
    results = claim_body["status"]["allocation"]["devices"]["results"]
    results[0]["request"] = "r0/large"  # a subrequest of r0 met it
    results.append({**results[1], "request": "r2"})  # gpu-5 also meets c's request
    api.put("resource.k8s.io/v1", "resourceclaims", claim_body)
    api.put("v1", "pods", with_extended_resource_claim(pod, "p-extended-resources-1", (
        ("a", "nvidia.com/gpu", "r0"), ("b", "nvidia.com/gpu", "r1"), ("c", "example.com/gpu", "r2"))))
    devices = [AllocatedDevice("ml", "p", container, "gpu.nvidia.com", device, dra=True,
                               claim="ml/p-extended-resources-1", pool=POOL)
               for container in ("a", "b", "c") for device in ("gpu-4", "gpu-5")]
    ctx = context(api, tmp_path)
    try:
        wait_until(lambda: ctx.store.get(("ml", "p")) is not None and ctx.dra.resolve("gpu.nvidia.com", POOL, "gpu-5", "").known)
        mapping = build_mapping(DEVICE_FORMS, devices, context=ctx.mapping)
    finally:
        ctx.lifecycle.stop()
    held = {(a.owner.container, a.resource, a.device_id) for a in mapping.allocations}
    assert held == {("a", "nvidia.com/gpu", "gpu-4"), ("b", "nvidia.com/gpu", "gpu-5"), ("c", "example.com/gpu", "gpu-5")}
    assert [o.container for o in mapping.owners_for(GpuKey("UUID", "GPU-5", ""))] == ["b", "c"]


def test_a_watch_stopped_before_its_api_goes_away_ends_without_a_warning(tmp_path, log_stream):
    """Shutting down (the demo stops its simulated API server after the exporter): a watch asked to stop whose
    stream the API then closes ends quietly; the closed stream is the shutdown, not an API outage."""
    from lightkube.resources.core_v1 import Pod

    api = FakeKubeApi().start()
    watch = ListWatch(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)), Pod, "pods", None,
                      _RefusingStore())
    watch.start()
    try:
        wait_until(lambda: watch.healthy)
        watch.stop()
    finally:
        api.stop()
    wait_until(lambda: not any(thread.name == "watch-pods" for thread in threading.enumerate()))
    assert "unreachable" not in log_stream.getvalue()
