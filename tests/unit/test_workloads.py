"""The workload walk in-process: metadata reads through discovery against the fake API server, and the
walk's bounds (cycles, depth, failures) against an API stand-in that answers from a dict."""

from __future__ import annotations

import threading
import time

import pytest

from exporter.collectors.kubernetes.client import make_client
from exporter.collectors.kubernetes.context import KubernetesContext
from exporter.collectors.kubernetes.labels import LabelSpec
from exporter.collectors.kubernetes.stream import MAX_ANSWER_BYTES, AnswerRefused
from exporter.collectors.kubernetes.workloads import (MAX_DEPTH, MetadataReader,
                                                   NotServed, OwnerRef, Workloads)
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.fake_kube_api import FakeKubeApi, owner_reference, write_kubeconfig
from support.raw_tcp import RawTcpServer


@pytest.fixture
def api():
    fake = FakeKubeApi().start()
    yield fake
    fake.stop()


def reader(api, tmp_path):
    return MetadataReader(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)))


def test_owners_are_read_metadata_only_with_the_plural_and_scope_from_discovery(api, tmp_path):
    api.serve_kind("kueue.x-k8s.io/v1beta1", "clusterqueues", "ClusterQueue", namespaced=False)
    api.serve_kind("kueue.x-k8s.io/v1beta1", "workloads", "Workload")
    api.put_owner("kueue.x-k8s.io/v1beta1", "clusterqueues", "", "gpus")  # cluster-scoped: no namespace
    api.put_owner("kueue.x-k8s.io/v1beta1", "workloads", "ml", "job-train", ("ClusterQueue", "gpus", "kueue.x-k8s.io/v1beta1"))
    metadata = reader(api, tmp_path)
    walk = Workloads(metadata.owner_references)
    assert walk.of("ml", "train-0", OwnerRef("kueue.x-k8s.io/v1beta1", "Workload", "job-train")) == ("ClusterQueue", "gpus")
    assert api.metadata_gets == api.request_count("get") == 2
    assert api.requests.count(("discover", "kueue.x-k8s.io/v1beta1")) == 1  # once per group/version
    assert metadata.plural("kueue.x-k8s.io/v1beta1", "ClusterQueue") == ("clusterqueues", False)
    with pytest.raises(NotServed):
        metadata.plural("kueue.x-k8s.io/v1beta1", "Cohort")


def test_a_kind_served_later_in_a_group_version_already_read_is_found_after_a_minute(api, tmp_path):
    # A CRD installed (or a kind added to a served group/version) after discovery was first read.
    now = [1000.0]
    api.serve_kind("kueue.x-k8s.io/v1beta1", "workloads", "Workload")
    metadata = MetadataReader(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)),
                              clock=lambda: now[0])
    assert metadata.plural("kueue.x-k8s.io/v1beta1", "Workload") == ("workloads", True)
    api.serve_kind("kueue.x-k8s.io/v1beta1", "clusterqueues", "ClusterQueue", namespaced=False)
    for _ in range(3):  # within the minute: discovery is not read again, however often the kind is asked
        now[0] += 10
        with pytest.raises(NotServed):
            metadata.plural("kueue.x-k8s.io/v1beta1", "ClusterQueue")
    assert api.requests.count(("discover", "kueue.x-k8s.io/v1beta1")) == 1
    now[0] += 31
    assert metadata.plural("kueue.x-k8s.io/v1beta1", "ClusterQueue") == ("clusterqueues", False)
    assert api.requests.count(("discover", "kueue.x-k8s.io/v1beta1")) == 2
    assert metadata.plural("kueue.x-k8s.io/v1beta1", "Workload") == ("workloads", True)  # from the new answer
    assert api.requests.count(("discover", "kueue.x-k8s.io/v1beta1")) == 2


def test_a_kind_the_server_does_not_serve_ends_the_walk_there(api, tmp_path, log_stream):
    api.put_owner("apps/v1", "replicasets", "ml", "web-7d9f", ("Notebook", "nb", "kubeflow.org/v1"))
    walk = Workloads(reader(api, tmp_path).owner_references)
    assert walk.of("ml", "web-7d9f-x", OwnerRef("apps/v1", "ReplicaSet", "web-7d9f")) == ("Notebook", "nb")
    assert "a Notebook was not found, or kubeflow.org/v1 is not served (404)" in log_stream.getvalue()


class Objects:
    """The API server's owner objects as a dict: (kind, name) → its ownerReferences; or an error."""

    def __init__(self, owners, error=None):
        self.owners, self.error, self.reads = owners, error, []

    def __call__(self, api_version, kind, namespace, name):
        self.reads.append((kind, name))
        if self.error is not None:
            raise self.error
        return self.owners[(kind, name)]


def ref(kind, name, controller=True):
    return owner_reference(kind, name, controller=controller)


def test_an_owner_that_is_not_a_controller_is_not_followed():
    objects = Objects({("ReplicaSet", "rs"): [ref("Deployment", "adopter", controller=False)]})
    assert Workloads(objects).of("ml", "p", OwnerRef("apps/v1", "ReplicaSet", "rs")) == ("ReplicaSet", "rs")


def test_a_cycle_and_a_chain_deeper_than_the_bound_end_at_the_last_owner_reached(log_stream):
    cycle = Objects({("A", "a"): [ref("B", "b")], ("B", "b"): [ref("A", "a")]})
    assert Workloads(cycle).of("ml", "p", OwnerRef("example.com/v1", "A", "a")) in {("A", "a"), ("B", "b")}
    deep = Objects({("Level", str(n)): [ref("Level", str(n + 1))] for n in range(50)})
    walk = Workloads(deep)
    assert walk.of("ml", "p", OwnerRef("example.com/v1", "Level", "0")) == ("Level", str(MAX_DEPTH))
    assert len(deep.reads) == MAX_DEPTH
    assert "deeper than the walk follows" in log_stream.getvalue()


def test_an_unreachable_api_leaves_the_workload_unknown_and_asks_again_after_a_minute():
    now = [1000.0]
    objects = Objects({}, error=ConnectionError("connection refused"))
    walk = Workloads(objects, clock=lambda: now[0])
    controller = OwnerRef("apps/v1", "ReplicaSet", "rs")
    assert walk.of("ml", "p", controller) is None  # never guessed
    assert walk.of("ml", "p", controller) is None and len(objects.reads) == 1
    objects.owners, objects.error = {("ReplicaSet", "rs"): [ref("Deployment", "web")], ("Deployment", "web"): []}, None
    now[0] += 61
    assert walk.of("ml", "p", controller) == ("Deployment", "web")
    reads = len(objects.reads)
    for _ in range(10):  # every later refresh walks the cache
        assert walk.of("ml", "p", controller) == ("Deployment", "web")
    assert len(objects.reads) == reads


@pytest.mark.parametrize("bad", [{"name": 7}, {"name": ""}, {"name": "a/../../secrets/x"}, {"kind": ["Deployment"]},
                                 {"apiVersion": None}, {"controller": "yes"}])
def test_an_owner_reference_that_names_no_object_ends_the_walk_at_the_object_read(bad):
    # A metadata read is untyped JSON: what it names becomes a label value or the next path read.
    objects = Objects({("ReplicaSet", "rs"): [{**ref("Deployment", "web"), **bad}], ("Deployment", "web"): []})
    assert Workloads(objects).of("ml", "p", OwnerRef("apps/v1", "ReplicaSet", "rs")) == ("ReplicaSet", "rs")
    assert objects.reads == [("ReplicaSet", "rs")]


def trickled(conn):
    """An API server that sends its answer's headers, then one byte a second, for ever."""
    conn.recv(65536)
    try:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        while True:
            conn.sendall(b" ")
            time.sleep(1)
    except OSError:
        pass


def oversized(conn):
    """An answer larger than any owner's metadata or discovery document, gzip announced (but not used)."""
    request = conn.recv(65536)
    body = b" " * (MAX_ANSWER_BYTES + 1)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                 + body if b"accept-encoding: identity" in request.lower() else b"HTTP/1.1 400 Bad\r\n\r\n")
    conn.close()


@pytest.mark.parametrize("handle, why", [(trickled, "took longer than 1 s"), (oversized, "larger than")])
def test_an_owner_read_is_bounded_in_time_and_size_whatever_the_server_sends(tmp_path, handle, why):
    # These reads run on the mapping refresher: a trickled answer held it (and every GPU's attribution) for good.
    server = RawTcpServer(handle)
    metadata = MetadataReader(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), server.url)), read_seconds=1.0)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(_raised(metadata.plural, "apps/v1", "ReplicaSet")),
                              daemon=True)
    worker.start()
    worker.join(30)  # far beyond the bound: only a read that never ends gets here alive
    assert not worker.is_alive()
    assert isinstance(outcome[0], AnswerRefused) and why in str(outcome[0])
    server.close()


def _raised(call, *args):
    try:
        call(*args)
    except Exception as exc:  # noqa: BLE001 - returned for the test to look at
        return exc
    return None


def test_a_failed_owner_read_asks_discovery_once(api, tmp_path):
    context = KubernetesContext(make_client(write_kubeconfig(str(tmp_path / "kubeconfig"), api.url)), "node-a",
                                LabelSpec(workload=True), DEVICE_FORMS)
    assert context.workloads.of("ml", "p", OwnerRef("ray.io/v1", "RayJob", "j")) == ("RayJob", "j")  # not served
    assert api.request_count("discover") == 1  # the failure's message names the kind from what is known


def test_owner_reads_stop_for_the_refresh_once_they_took_too_long_and_go_on_at_the_next():
    # An API server that takes 6 s per answer: one refresh must not wait for a read per new pod.
    now = [1000.0]

    class Slow(Objects):
        def __call__(self, *args):
            now[0] += 6
            return super().__call__(*args)

    objects = Slow({("ReplicaSet", f"rs-{n}"): [] for n in range(3)})
    walk = Workloads(objects, clock=lambda: now[0])
    pods = [("ml", f"p-{n}", OwnerRef("apps/v1", "ReplicaSet", f"rs-{n}")) for n in range(3)]
    walk.begin_refresh()
    assert [walk.of(*pod) for pod in pods] == [("ReplicaSet", "rs-0"), None, None]
    assert len(objects.reads) == 1
    walk.begin_refresh()
    assert [walk.of(*pod) for pod in pods] == [("ReplicaSet", "rs-0"), ("ReplicaSet", "rs-1"), None]
    walk.begin_refresh()
    assert [walk.of(*pod) for pod in pods] == [("ReplicaSet", f"rs-{n}") for n in range(3)]
    assert len(objects.reads) == 3  # each owner read once
