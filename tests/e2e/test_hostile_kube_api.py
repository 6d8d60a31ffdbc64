"""The real exporter against a hostile Kubernetes API server: huge and endless watch lines, stalled
watches, odd objects, pods of other nodes, request storms and a rotated token. Memory is read from
/proc/PID/status, request counts from the fake API server."""

from __future__ import annotations

import json
import os
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.sources.kubelet import AllocatedDevice
from support.fake_kube_api import make_pod, write_kubeconfig
from support.kube_e2e import add_pod, gauge, lines_of, scrape, start
from support.kube_scenario import NODE, UUID1, devices
from support.process_memory import proc_status_mib
from support.waiting import holds_throughout, wait_until

MIB = 1024 * 1024
# docs/operations.md: a watch line is cut at 4 MiB; peak memory stays within this whatever the server sends.
WATCH_MEMORY_BOUND_MIB = 100
REQUESTS_PER_MINUTE_BOUND = 60  # docs/operations.md: list + watch requests, pods and ResourceSlices together


def counter(exporter, name: str, **labels) -> float:
    text = requests.get(exporter.url("/metrics"), timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def labelled(exporter, needle: str):
    return wait_until(lambda: (lambda t: t if needle in t else None)(scrape(exporter)), 30)


def endless_line(total: int = 400 * MIB, chunk: int = MIB):
    """A watch line that never ends: `total` bytes without a newline, a chunk at a time."""
    yield b'{"type":"ADDED","object":{"metadata":{"name":"'
    block = b"x" * chunk
    for _ in range(total // chunk):
        yield block


def huge_event(size: int) -> bytes:
    """One well-formed ADDED event of about `size` bytes (a 50 MiB annotation), newline-terminated."""
    pod = make_pod("ml", "huge", NODE, annotations={"blob": "y" * size})
    pod["metadata"]["resourceVersion"] = "1"
    return json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n"


@pytest.mark.parametrize("make_data, sent_at_most", [(endless_line, 64 * MIB), (lambda: huge_event(50 * MIB), 51 * MIB)],
                         ids=["never-ending-line", "50-MiB-event"])
def test_a_watch_line_past_the_cap_drops_the_connection_relists_and_stays_within_memory(node, api, run_exporter,
                                                                                       make_data, sent_at_most):
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    labelled(exporter, 'label_team="a"')
    lists = api.requests_since(0.0, verb="list", plural="pods")
    api.send_raw(make_data(), "pods")
    api.close_watches()  # the watch reopened next gets the line
    wait_until(lambda: counter(exporter, "pod_gpu_exporter_kubernetes_watch_dropped_total",
                               resource="pods", reason="too_large") == 1, 60)
    peak = proc_status_mib(exporter.proc.pid, "VmHWM")
    assert api.raw_bytes_sent <= sent_at_most  # the exporter stopped reading: the server could not send it all
    add_pod(api, "ml", "small-a", labels={"team": "b"})  # the relisted watch follows changes again
    labelled(exporter, 'label_team="b"')
    wait_until(lambda: gauge(scrape(exporter), "pod_gpu_exporter_kubernetes_api_up") == "1", 30)
    assert api.requests_since(0.0, verb="list", plural="pods") > lists
    exporter.wait_for_log("reason=pods:too_large")
    print(f"peak RSS (VmHWM) {peak:.1f} MiB; the server got {api.raw_bytes_sent / MIB:.1f} MiB out")
    assert peak <= WATCH_MEMORY_BOUND_MIB, f"peak RSS {peak:.1f} MiB"


def test_a_watch_that_stalls_after_its_headers_is_dropped_and_api_up_says_so(node, api, run_exporter):
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team", "--kubernetes.watch-silence-timeout", "2s")
    labelled(exporter, 'label_team="a"')
    api.watch_behaviour = "stall"  # headers, then nothing: no event, no bookmark, no end
    api.close_watches()
    lists = api.requests_since(0.0, verb="list", plural="pods")
    text = wait_until(lambda: (lambda t: t if gauge(t, "pod_gpu_exporter_kubernetes_api_up") == "0" else None)(
        scrape(exporter)), 30)
    wait_until(lambda: api.requests_since(0.0, verb="list", plural="pods") > lists, 30)  # listed again after the drop
    add_pod(api, "ml", "small-a", labels={"team": "b"})
    wait_until(lambda: counter(exporter, "pod_gpu_exporter_kubernetes_watch_dropped_total",
                               resource="pods", reason="silent") >= 2, 30)
    # Listing succeeds, but a watch that delivers nothing never counts as up.
    assert all(gauge(scrape(exporter), "pod_gpu_exporter_kubernetes_api_up") == "0" for _ in range(5))
    api.watch_behaviour = None
    text = labelled(exporter, 'label_team="b"')
    wait_until(lambda: gauge(scrape(exporter), "pod_gpu_exporter_kubernetes_api_up") == "1", 30)
    assert lines_of(text, "small-a")
    exporter.wait_for_log("reason=pods:silent")


def test_malformed_objects_are_skipped_and_counted_and_a_new_owner_is_still_attributed(node, api, run_exporter):
    kubelet = node[0]
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    labelled(exporter, 'label_team="a"')
    add_pod(api, "web", "infer-1", labels={"team": 5})  # a number where Kubernetes has strings
    api.send_raw(b"".join(json.dumps(event).encode() + b"\n" for event in (
        {"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Pod"}},  # no metadata
        {"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Pod", "metadata": 5}},  # wrong type
        {"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"name": "x", "namespace": "ml", "labels": ["team"]}}},
        "not an event",  # no event at all: the watch ends there, and the next starts from the last good version
    )), "pods")
    api.close_watches()
    wait_until(lambda: counter(exporter, "pod_gpu_exporter_kubernetes_objects_skipped_total",
                               resource="pods", reason="malformed") >= 4, 30)
    wait_until(lambda: counter(exporter, "pod_gpu_exporter_kubernetes_watch_dropped_total",
                               resource="pods", reason="undecodable") == 1, 30)
    # The kubelet reports a new owner, known to the API: attributed and labelled as ever.
    add_pod(api, "ml", "new-owner", labels={"team": "new"})
    kubelet.set_devices(devices() + [AllocatedDevice("ml", "new-owner", "c", "nvidia.com/gpu.shared", UUID1 + "::7")])
    text = labelled(exporter, 'pod="new-owner",container="c",label_team="new"}')
    assert gauge(text, "pod_gpu_exporter_kubelet_up") == "1" and gauge(text, "pod_gpu_exporter_kubernetes_api_up") == "1"
    assert lines_of(text, "infer-1") and all("label_team" not in line for line in lines_of(text, "infer-1"))
    log = exporter.wait_for_log("Kubernetes object skipped")
    assert "Traceback" not in log and log.count("Kubernetes object skipped") == 1, log


@pytest.mark.parametrize("line", [b'{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name',
                                  b"\x00\xff\xfe\x80 junk \x1b[0m\xc3", b'[{"type":"MODIFIED"}]'],
                         ids=["cut-json", "binary-junk", "json-array"])
def test_an_undecodable_watch_line_is_rewatched_from_the_last_good_version_and_its_change_served(
        node, api, run_exporter, line):
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    labelled(exporter, 'label_team="a"')
    lists = api.requests_since(0.0, verb="list", plural="pods")
    api.corrupt_next_event(line, "pods")
    add_pod(api, "ml", "small-a", labels={"team": "b"})  # the watch gets the bad line in place of this change
    wait_until(lambda: 'label_team="b"' in scrape(exporter), 15, describe="the change the bad line stood for")
    assert not api.corrupt_for_next_event  # the bad line was sent
    assert api.requests_since(0.0, verb="list", plural="pods") == lists  # a new watch from the last good version, not a relist
    assert counter(exporter, "pod_gpu_exporter_kubernetes_watch_dropped_total",
                   resource="pods", reason="undecodable") == 1
    assert gauge(scrape(exporter), "pod_gpu_exporter_kubernetes_api_up") == "1"
    log = exporter.wait_for_log("Kubernetes watch line is no event")
    assert "Traceback" not in log and log.count("Kubernetes watch line is no event") == 1, log


def test_pods_of_another_node_are_ignored_when_the_server_ignores_the_field_selector(node, api, run_exporter):
    api.ignore_field_selector = True  # a proxy that drops the query's fieldSelector
    add_pod(api, "web", "infer-1", labels={"team": "mine"})
    add_pod(api, "ml", "small-a", node="gpu-node-2", labels={"team": "theirs"})  # same name as our kubelet's pod
    exporter = start(run_exporter, node, "--labels.pod-labels", "team", "--labels.extra", "pod_uid")
    text = labelled(exporter, 'label_team="mine"')
    add_pod(api, "ml", "small-a", node="gpu-node-2", labels={"team": "theirs-2"})  # and as a watch event
    wait_until(lambda: counter(exporter, "pod_gpu_exporter_kubernetes_objects_skipped_total",
                               resource="pods", reason="other_node") >= 2, 30)
    text = scrape(exporter)
    assert lines_of(text, "small-a") and "theirs" not in text
    assert all("pod_uid" not in line for line in lines_of(text, "small-a"))


PLURALS = ("pods", "resourceslices")


def requests_made(exporter) -> dict:
    """The exporter's own count of its list and watch requests, by resource: refused ones count too."""
    return {plural: counter(exporter, "pod_gpu_exporter_kubernetes_requests_total", resource=plural) for plural in PLURALS}


def budgeted_requests_since(api, since: float) -> int:
    return api.requests_since(since, "list") + api.requests_since(since, "watch")


def within_the_bucket(api, since: float) -> bool:
    """docs/kubernetes.md's bucket: per resource two requests at once, then one per 2.5 s, at every moment."""
    return budgeted_requests_since(api, since) <= len(PLURALS) * (2 + (time.monotonic() - since) / 2.5)


@pytest.mark.parametrize("behaviour", ["end", "gone", "forbidden"])
def test_api_requests_stay_bounded_whatever_the_server_does(node, api, run_exporter, behaviour):
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    labelled(exporter, 'label_team="a"')
    if behaviour == "forbidden":
        api.forbidden.update(pods="watch", resourceslices="watch")
    else:
        api.watch_behaviour = behaviour
    api.close_watches()
    window, since = 20.0, time.monotonic()
    # A storm breaks the bucket's line within a second, not only at the window's end.
    holds_throughout(lambda: within_the_bucket(api, since), window, 0.2, "list and watch requests within the bucket")
    made = api.requests_since(since)
    assert made <= REQUESTS_PER_MINUTE_BOUND * window / 60, f"{made} requests in {window:g} s"
    assert lines_of(scrape(exporter), "small-a")


def test_the_backoff_starts_again_after_a_success(node, api, run_exporter):
    kubelet = node[0]
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, node, "--labels.pod-labels", "team")
    labelled(exporter, 'label_team="a"')
    port = api.port
    made = requests_made(exporter)
    api.stop()
    # An outage long enough for the pause to grow past 8 s: after five refused requests of each resource
    # it has paused 0.5, 1, 2 and 4 s, pauses 8 s now, and would pause 16 s after the next refusal.
    wait_until(lambda: all(n >= made[p] + 5 for p, n in requests_made(exporter).items()), 90, 0.2,
               "five refused requests of each resource")
    api.start(port)
    restarted = time.monotonic()
    wait_until(lambda: all(api.requests_since(restarted, "watch", plural) for plural in PLURALS), 60)
    marks = dict(api.bookmarks_sent_to)
    wait_until(lambda: all(api.bookmarks_sent_to.get(p, 0) > marks.get(p, 0) for p in PLURALS), 30, 0.05,
               "a bookmark on each new watch: both work")
    made = requests_made(exporter)
    api.stop()  # one short cut: the watches' reopening is refused once
    wait_until(lambda: all(n > made[p] for p, n in requests_made(exporter).items()), 30, 0.05,
               "each watch's reopening refused")
    api.start(port)
    back, refreshes = time.monotonic(), kubelet.list_calls
    wait_until(lambda: api.requests_since(back, "list") >= 2, 60)  # pods and ResourceSlices listed again
    # Timed on the exporter's own clock, its kubelet refreshes (one per 200 ms at most): a reset pause
    # (0.5 s) lists again within a few of them; the outage's pause, had it been kept, is 16 s, which 25
    # refreshes could cover only if each took over 0.6 s, three times their interval.
    refreshed = kubelet.list_calls - refreshes
    assert refreshed <= 25, f"listed {refreshed} kubelet refreshes after the API came back: the pause of the outage was kept"


def test_a_rotated_token_file_is_used_before_the_old_one_is_refused(node, api, run_exporter, tmp_path):
    kubelet, dcgm, _ = node
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")
    api.token = "old-token"
    kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), api.url, token_file=str(token_file))
    add_pod(api, "ml", "small-a", labels={"team": "a"})
    exporter = start(run_exporter, (kubelet, dcgm, kubeconfig), "--labels.pod-labels", "team")
    labelled(exporter, 'label_team="a"')
    # The kubelet writes the new token beside the old one and swaps it in; the server takes only the new one.
    (tmp_path / "token.new").write_text("new-token\n")
    os.replace(tmp_path / "token.new", token_file)
    api.token = "new-token"
    before = api.request_count()
    api.close_watches()
    wait_until(lambda: api.request_count() >= before + 2, 30)
    assert api.unauthorized == 0 and set(api.tokens[before:]) == {"new-token"}
    add_pod(api, "ml", "small-a", labels={"team": "b"})
    labelled(exporter, 'label_team="b"')
