"""--labels.extra queue: the queue names in metadata, and the LocalQueue/PodGroup reads against the fake API
server through the real client (version fallback, a missing CRD, 403, an object not found)."""

from __future__ import annotations

import pytest

from exporter.collectors.kubernetes.client import make_client
from exporter.collectors.kubernetes.labels import LabelSpec, PodInfo, QueueHint, extra_label_pairs, label_spec
from exporter.collectors.kubernetes.queue_hints import queue_hint
from exporter.collectors.kubernetes.queues import RETRY_SECONDS, UNAVAILABLE_SECONDS, QueueLabels, QueueObjects
from exporter.collectors.kubernetes.workloads import MetadataReader, OwnerRef, Workloads
from support.fake_kube_api import FakeKubeApi, write_kubeconfig
from support.kube_queues import put_kai_queue, put_local_queue, put_pod_group, serve_kai, serve_kueue, serve_volcano


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def api():
    fake = FakeKubeApi().start()
    yield fake
    fake.stop()


def objects(api, tmp_path, clock):
    reader = MetadataReader(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)), clock=clock)
    return QueueObjects(reader.read, clock)


def test_queue_hint_reads_kueue_and_volcano_names():
    assert queue_hint({"kueue.x-k8s.io/queue-name": "lq"}, None) == QueueHint(local_queue="lq")
    assert queue_hint({"volcano.sh/queue-name": "q"}, {}) == QueueHint(volcano_queue="q")
    assert queue_hint({}, {"volcano.sh/queue-name": "q"}) == QueueHint(volcano_queue="q")
    assert queue_hint({}, {"scheduling.volcano.sh/queue-name": "q"}) == QueueHint(volcano_queue="q")
    assert queue_hint({}, {"scheduling.k8s.io/group-name": "pg"}) == QueueHint(pod_group="pg")
    assert queue_hint({}, {"scheduling.volcano.sh/group-name": "pg"}) == QueueHint(pod_group="pg")
    assert queue_hint({"app": "x"}, {"note": "y"}) is None and queue_hint(None, None) is None


def test_queue_hint_reads_kai_schedulers_label_on_labels_only():
    assert queue_hint({"kai.scheduler/queue": "team-a"}, None) == QueueHint(kai_queue="team-a")
    assert queue_hint({}, {"kai.scheduler/queue": "team-a"}) is None
    assert queue_hint({"kai.scheduler/queue": "Team/A"}, None) is None  # names no object: never read


def test_names_that_cannot_name_an_object_are_not_read():
    # A value becomes part of the path read: a '/' or an upper-case letter names no object.
    assert queue_hint({"kueue.x-k8s.io/queue-name": "../secrets/x"}, None) is None
    assert queue_hint({}, {"scheduling.k8s.io/group-name": "PG"}) is None
    assert queue_hint({"kueue.x-k8s.io/queue-name": 7}, None) is None  # untyped JSON


def test_queue_labels_follow_workload_in_the_contracts_order():
    spec = label_spec("queue,workload,pod_uid", None, None)
    assert spec.queue and spec.enabled
    pod = PodInfo("uid-1", (), (), None, ())
    assert extra_label_pairs(spec, pod, ("Job", "train"), ("cq", "lq")) == (
        ("pod_uid", "uid-1"), ("workload_kind", "Job"), ("workload", "train"),
        ("cluster_queue", "cq"), ("local_queue", "lq"))
    assert extra_label_pairs(spec, pod, ("Job", "train"), None)[-1] == ("workload", "train")  # unknown: left out
    assert extra_label_pairs(LabelSpec(pod_uid=True), pod, None, ("cq", "lq")) == (("pod_uid", "uid-1"),)


@pytest.mark.parametrize("version", ["kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"])
def test_a_local_queue_is_read_at_the_version_served(api, tmp_path, version):
    serve_kueue(api, version)
    put_local_queue(api, version, "ml", "lq", "cq-research")
    queues = objects(api, tmp_path, Clock())
    assert queues.queue_of("LocalQueue", "ml", "lq") == "cq-research"
    put_local_queue(api, version, "ml", "lq-2", "cq-2")
    assert queues.queue_of("LocalQueue", "ml", "lq-2") == "cq-2"
    assert queues.lookups == 2
    # The version that is not served is asked about once, not at every read.
    assert [p for v, p in api.requests if v == "discover"].count("kueue.x-k8s.io/v1beta2") == 1


def test_a_pod_group_names_its_queue_or_volcanos_default(api, tmp_path):
    serve_volcano(api)
    put_pod_group(api, "ml", "pg-1", "q-batch")
    put_pod_group(api, "ml", "pg-2")
    queues = objects(api, tmp_path, Clock())
    assert queues.queue_of("PodGroup", "ml", "pg-1") == "q-batch"
    assert queues.queue_of("PodGroup", "ml", "pg-2") == "default"


def test_without_the_crd_the_queue_is_empty_and_asked_again_only_after_a_long_while(api, tmp_path):
    clock = Clock()
    queues = objects(api, tmp_path, clock)
    assert queues.queue_of("LocalQueue", "ml", "lq") == ""
    assert queues.queue_of("LocalQueue", "ml", "other") == ""
    assert queues.queue_of("PodGroup", "ml", "pg") == ""
    asked = api.request_count()
    clock.now += UNAVAILABLE_SECONDS - 1
    assert queues.queue_of("LocalQueue", "ml", "third") == ""
    assert api.request_count() == asked
    serve_kueue(api)  # installed meanwhile
    put_local_queue(api, "kueue.x-k8s.io/v1beta2", "ml", "lq", "cq")
    clock.now += 2
    assert queues.queue_of("LocalQueue", "ml", "lq") == "cq"


def test_a_forbidden_kind_is_empty_and_not_read_again_for_a_long_while(api, tmp_path):
    serve_kueue(api)
    put_local_queue(api, "kueue.x-k8s.io/v1beta2", "ml", "lq", "cq")
    api.forbidden["localqueues"] = "get"
    queues = objects(api, tmp_path, Clock())
    assert queues.queue_of("LocalQueue", "ml", "lq") == ""
    gets = api.request_count("get")
    assert queues.queue_of("LocalQueue", "ml", "lq-2") == ""
    assert api.request_count("get") == gets


def test_a_local_queue_not_found_is_empty_and_asked_again_after_a_minute(api, tmp_path):
    serve_kueue(api)
    clock = Clock()
    queues = objects(api, tmp_path, clock)
    assert queues.queue_of("LocalQueue", "ml", "lq") == ""
    put_local_queue(api, "kueue.x-k8s.io/v1beta2", "ml", "lq", "cq")
    assert queues.queue_of("LocalQueue", "ml", "lq") == ""  # remembered for now
    clock.now += RETRY_SECONDS
    assert queues.queue_of("LocalQueue", "ml", "lq") == "cq"


def test_an_owners_kueue_label_names_the_pods_local_queue(api, tmp_path):
    serve_kueue(api)
    put_local_queue(api, "kueue.x-k8s.io/v1beta2", "ml", "lq-train", "cq-research")
    metadata = {("batch/v1", "Job", "ml", "train"): {"labels": {"kueue.x-k8s.io/queue-name": "lq-train"}}}
    workloads = Workloads(lambda *key: metadata[key], keep=lambda meta: queue_hint(meta.get("labels"), None))
    labels = QueueLabels(objects(api, tmp_path, Clock()), workloads)
    pod = PodInfo("uid", (), (), OwnerRef("batch/v1", "Job", "train"), ())
    assert labels.of("ml", pod) == ("cq-research", "lq-train")
    assert labels.of("ml", pod._replace(controller=None)) == ("", "")
    # Volcano names a queue on every pod it schedules; Kueue's label on the owner still wins.
    assert labels.of("ml", pod._replace(queue=QueueHint(volcano_queue="q"))) == ("cq-research", "lq-train")
    assert labels.of("ml", pod._replace(queue=QueueHint(volcano_queue="q"), controller=None)) == ("q", "")


def test_the_label_limit_drops_the_queues_after_the_pod_labels_and_before_the_workload():
    from exporter.exposition.label_limit import LabelLimit

    extras = extra_label_pairs(label_spec("pod_uid,workload,queue", ".*", None),
                               PodInfo("u", (("team", "a"),), (), None, ()), ("Job", "t"), ("cq", "lq"))
    assert [name for name, _ in extras] == ["pod_uid", "workload_kind", "workload", "cluster_queue", "local_queue",
                                            "label_team"]
    limit = LabelLimit(14)
    assert limit.fit(extras, 6, 3) == extras[:5]  # room 5: the pod label goes first
    assert limit.fit(extras, 7, 3) == extras[:4]  # room 4: then local_queue
    assert limit.fit(extras, 8, 3) == extras[:3]  # room 3: then cluster_queue; the workload stays


def test_a_kai_queue_is_read_at_the_cluster_scope_and_names_itself(api, tmp_path):
    serve_kai(api)
    queues = objects(api, tmp_path, Clock())
    assert queues.queue_of("Queue", "", "team-a") == "team-a"
    assert queues.queue_of("Queue", "", "missing") == ""  # not found: empty, asked again after a minute
    assert ("get", "scheduling.run.ai", "queues") in api.resource_requests


def test_without_kais_crd_its_group_is_discovered_once_per_ten_minutes(api, tmp_path):
    clock = Clock()
    queues = objects(api, tmp_path, clock)
    for name in ("team-a", "team-b", "team-c"):
        assert queues.queue_of("Queue", "", name) == ""
    discoveries = lambda: [p for v, p in api.requests if v == "discover"].count("scheduling.run.ai/v2")  # noqa: E731
    assert discoveries() == 1
    clock.now += UNAVAILABLE_SECONDS - 1
    assert queues.queue_of("Queue", "", "team-a") == "" and discoveries() == 1
    serve_kai(api)  # installed meanwhile
    clock.now += 2
    assert queues.queue_of("Queue", "", "team-a") == "team-a" and discoveries() == 2


def test_kais_label_on_the_top_owner_outranks_the_pods(api, tmp_path):
    serve_kai(api)
    put_kai_queue(api, "team-c", parent="org")
    metadata = {("batch/v1", "Job", "ml", "train"): {"labels": {"kai.scheduler/queue": "team-b"},
                                                    "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Run",
                                                                         "name": "r", "controller": True}]},
                ("example.com/v1", "Run", "ml", "r"): {"labels": {"kai.scheduler/queue": "team-c"}}}
    workloads = Workloads(lambda *key: metadata[key], keep=lambda meta: queue_hint(meta.get("labels"), None))
    labels = QueueLabels(objects(api, tmp_path, Clock()), workloads)
    pod = PodInfo("uid", (), (), OwnerRef("batch/v1", "Job", "train"), (), queue=QueueHint(kai_queue="team-a"))
    assert labels.of("ml", pod) == ("team-c", "")  # the top owner's, not the Job's in between nor the pod's
    assert labels.of("ml", pod._replace(controller=None)) == ("team-a", "")
