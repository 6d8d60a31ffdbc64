"""The pure bounds of the API watch: the line cap, the request budget, the backoff and the object checks."""

from __future__ import annotations

import json
import os
import threading

import pytest

from exporter.collectors.kubernetes.objects import Skipped, pod_check, slice_check
from exporter.collectors.kubernetes.pacing import Backoff, RequestBudget
from exporter.collectors.kubernetes.stream import WatchLineTooLong, bounded_lines, decode_object, event_version
from support.clocks import ManualClock
from support.fake_kube_api import make_pod
from support.kube_scenario import NODE, resource_slice


def test_lines_are_split_across_chunks_and_empty_ones_skipped():
    chunks = [b'{"a":', b'1}\n\n{"b"', b":2}\n", b"cut without its newline"]
    assert list(bounded_lines(chunks, 64)) == [b'{"a":1}', b'{"b":2}']


@pytest.mark.parametrize("chunks", [[b"x" * 10], [b"x" * 4, b"x" * 4, b"x" * 4], [b"x" * 9 + b"\n"]])
def test_a_line_past_the_cap_is_refused_with_or_without_its_newline(chunks):
    with pytest.raises(WatchLineTooLong):
        list(bounded_lines(chunks, 8))


def test_a_line_of_exactly_the_cap_passes():
    assert list(bounded_lines([b"x" * 8 + b"\nyy\n"], 8)) == [b"x" * 8, b"yy"]


def test_the_budget_gives_a_burst_then_one_request_per_interval():
    clock, stop = ManualClock(), threading.Event()
    budget = RequestBudget(burst=2, interval=2.5, clock=clock)
    assert budget.take(stop) and budget.take(stop)
    stop.set()  # no token left: take waits, and a stop ends the wait
    assert not budget.take(stop)
    clock.now += 2.5
    assert budget.take(stop) and not budget.take(stop)
    clock.now += 1000  # a long quiet spell refills only the burst
    assert budget.take(stop) and budget.take(stop) and not budget.take(stop)
    assert budget.taken == 5


def test_the_backoff_doubles_to_its_ceiling_and_a_success_resets_it():
    backoff = Backoff(first=0.5, most=30.0)
    pauses = [backoff.next_pause() for _ in range(10)]
    assert 0.4 <= pauses[0] <= 0.6 and 24 <= pauses[-1] <= 36 and backoff.pending == 30.0
    backoff.reset()
    assert 0.4 <= backoff.next_pause() <= 0.6


def _pod(**changes):
    from lightkube.resources.core_v1 import Pod

    obj = make_pod("ml", "small-a", NODE, labels={"team": "a"})
    for path, value in changes.items():
        target = obj
        *parents, last = path.split("__")
        for part in parents:
            target = target[part]
        target[last] = value
    return decode_object(json.dumps(obj).encode(), Pod)


@pytest.mark.parametrize("changes, reason", [
    ({"metadata__labels": {"team": 5}}, "malformed"),
    ({"metadata__annotations": {"a": ["b"]}}, "malformed"),
    ({"metadata__name": ""}, "malformed"),
    ({"metadata__namespace": None}, "malformed"),
    ({"spec__nodeName": "gpu-node-2"}, "other_node"),
    ({"spec__nodeName": None}, "other_node"),
])
def test_a_pod_of_an_odd_shape_or_of_another_node_is_skipped(changes, reason):
    with pytest.raises(Skipped) as skipped:
        pod_check(NODE)(_pod(**changes))
    assert skipped.value.reason == reason


def test_a_pod_of_this_node_passes():
    pod_check(NODE)(_pod())


def test_a_resource_slice_of_another_node_is_skipped():
    from lightkube.resources.resource_v1 import ResourceSlice

    published = resource_slice({"gpu-0": {"uuid": "GPU-0"}})
    slice_check(NODE)(decode_object(json.dumps(published).encode(), ResourceSlice))
    published["spec"]["nodeName"] = "gpu-node-2"
    with pytest.raises(Skipped) as skipped:
        slice_check(NODE)(decode_object(json.dumps(published).encode(), ResourceSlice))
    assert skipped.value.reason == "other_node"


def test_the_version_of_an_event_object_and_of_a_bookmark():
    assert event_version(b'{"kind":"Pod","metadata":{"resourceVersion":"42"}}') == "42"
    assert event_version(b'{"metadata":5}') is None and event_version(b"[]") is None


def _bearer(auth) -> str:
    from lightkube.core.generic_client import httpx

    request = httpx.Request("GET", "https://api.invalid/api/v1/pods")
    return next(auth.auth_flow(request)).headers["Authorization"]


def test_the_token_file_is_read_again_when_it_changes_and_every_minute(tmp_path):
    from exporter.collectors.kubernetes.token import rotating_token_auth

    path, clock = tmp_path / "token", ManualClock()
    path.write_text("one\n")
    auth = rotating_token_auth(str(path), clock)
    assert _bearer(auth) == "Bearer one"
    (tmp_path / "new").write_text("two\n")
    os.replace(tmp_path / "new", path)  # the kubelet's way: a new file swapped in
    assert _bearer(auth) == "Bearer two"
    # Rewritten in place with its size and times kept, the change cannot be seen: the minute's re-read finds it.
    stat = path.stat()
    path.write_text("six\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _bearer(auth) == "Bearer two"
    clock.now += 60
    assert _bearer(auth) == "Bearer six"


# Run in a fresh interpreter (msgspec has not met lightkube's models yet): the pods and ResourceSlices
# watches meet their first objects on two threads at once, here four threads each.
_FIRST_DECODES_AT_ONCE = """
import sys, threading
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceSlice
from exporter.collectors.kubernetes.stream import decode_event, decode_object
pod, published = sys.argv[1].encode(), sys.argv[2].encode()
start = threading.Barrier(8)
def decode(number):
    start.wait()
    if number % 4 == 3:
        decode_event(b'{"type":"ADDED","object":' + pod + b'}')
    else:
        decode_object(*((pod, Pod) if number % 2 else (published, ResourceSlice)))
threads = [threading.Thread(target=decode, args=(number,)) for number in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_objects_decoded_on_several_threads_at_once_never_crash_the_process():
    import subprocess
    import sys

    from support.exporter_process import REPO_ROOT, exporter_env

    pod = json.dumps(make_pod("ml", "a", NODE, containers=("main",)))
    published = json.dumps(resource_slice({"gpu-0": {"uuid": "GPU-0"}}))
    for _ in range(10):  # without the lock each run crashed (SIGSEGV) nearly every time
        result = subprocess.run([sys.executable, "-c", _FIRST_DECODES_AT_ONCE, pod, published], cwd=str(REPO_ROOT),
                                env=exporter_env(), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
