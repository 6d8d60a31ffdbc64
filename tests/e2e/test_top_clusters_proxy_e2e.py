"""`top` through the pod proxy of several clusters: each kubeconfig context an API server of its own (the
demo's exporter behind two of them), read side by side from a `$KUBECONFIG` list merged as kubectl does."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import yaml

from support.fake_pod_proxy import PodProxyApi
from support.top_runs import add_exporter_pod, run_top, start_demo_with_energy, top_json

FAST = ["--window", "1s", "--scrape.timeout", "2s", "--scrape.round-timeout", "3s"]
BOUND_SECONDS = 1 + 2 * (3 + 2)  # a cluster's read: the window and two rounds, each with its list
# A silent API server: the list's own 10 s timeout, or on a loaded machine the cluster's bound, whichever first.
SILENT = ("timed out", f"no answer within {BOUND_SECONDS:g} s")


@pytest.fixture(scope="module")
def demo():
    exporter = start_demo_with_energy()
    yield exporter
    exporter.stop()


@pytest.fixture
def silent():
    """An API server that takes the connection and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.fixture
def trickling():
    """An API server that answers every request 200, then sends its JSON body a blank at a time, 0.2 s
    apart, for ever: no read ever waits long enough to time out, and the list never ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stopped = threading.Event()

    def trickle(connection):
        with connection:
            try:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n")
                while not stopped.wait(0.2):
                    connection.sendall(b"1\r\n \r\n")
            except OSError:
                pass

    def serve():
        while not stopped.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=trickle, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stopped.set()
    listener.close()


@pytest.fixture
def apis(demo):
    started = {}
    for name in ("east", "west"):
        api = started[name] = PodProxyApi().start()
        add_exporter_pod(api, f"pod-gpu-metrics-exporter-{name}", "demo-node", demo.address)
    yield started
    for api in started.values():
        api.stop()


def _kubeconfig(path, servers, current=None) -> str:
    config = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": name, "cluster": {"server": url}} for name, url in servers.items()],
              "users": [{"name": "viewer", "user": {"token": "t"}}],
              "contexts": [{"name": name, "context": {"cluster": name, "user": "viewer"}} for name in servers]}
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture
def kubeconfig_list(apis, silent, tmp_path):
    """$KUBECONFIG=first:second: east (and north, which never answers) in the first file; the second names
    east again, at an address where nothing answers (the first file's wins), and west, its current context."""
    first = _kubeconfig(tmp_path / "first", {"east": apis["east"].url, "north": silent})
    second = _kubeconfig(tmp_path / "second", {"east": "http://127.0.0.1:1", "west": apis["west"].url},
                         current="west")
    return {"KUBECONFIG": f"{first}:{second}"}


def test_every_context_read_its_rows_named_by_it_and_the_silent_one_in_the_footer(kubeconfig_list, apis):
    started = time.monotonic()
    run = run_top(["--all-contexts", "-o", "json"] + FAST, env=kubeconfig_list)
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert sorted((row["cluster"], row["pod"]) for row in document["rows"]) == [
        (cluster, pod) for cluster in ("east", "west") for pod in ("llm-server-a", "llm-server-b", "trainer-0")]
    assert all(row["gpus"] == {"trainer-0": 2, "llm-server-a": 0.5, "llm-server-b": 0.25}[row["pod"]]
               for row in document["rows"])
    north, = document["unreachable"]
    assert (north["cluster"], north["node"]) == ("north", None) and north["error"].endswith(SILENT), north
    assert elapsed < BOUND_SECONDS + 10, elapsed  # the silent cluster was not waited for past its bound
    assert all(api.answered for api in apis.values())  # east from the first file, not the second's


def test_the_table_names_clusters_and_the_failing_context(kubeconfig_list):
    run = run_top(["--context", "east", "--context", "north", "--sort", "name"] + FAST, env=kubeconfig_list)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split()[0] == "NAMESPACE", run.stdout  # rows of one cluster alone: no CLUSTER column
    assert "Not answering (1): cluster north (" in run.stdout, run.stdout
    assert any(why + ")" in run.stdout for why in SILENT), run.stdout
    assert "Traceback" not in run.stderr


def test_the_current_context_is_the_first_file_to_set_one_and_names_no_cluster(kubeconfig_list, apis):
    document = top_json(FAST, env=kubeconfig_list)
    assert {row["cluster"] for row in document["rows"]} == {None} and len(document["rows"]) == 3
    assert apis["west"].answered and not apis["east"].answered
    plain = run_top(FAST, env=kubeconfig_list)
    assert plain.stdout.splitlines()[0].split()[0] == "NAMESPACE", plain.stdout


def test_cluster_picks_one_context_and_by_cluster_adds_each_up(kubeconfig_list, apis):
    east = top_json(["--cluster", "east"] + FAST, env=kubeconfig_list)
    assert {row["cluster"] for row in east["rows"]} == {"east"} and len(east["rows"]) == 3
    assert not apis["west"].answered
    by_cluster = top_json(["--context", "east", "--context", "west", "--by", "cluster"] + FAST, env=kubeconfig_list)
    assert sorted((row["cluster"], row["gpus"]) for row in by_cluster["rows"]) == [("east", 2.75), ("west", 2.75)]


def test_a_cluster_that_never_finishes_answering_is_cut_at_its_bound(apis, trickling, tmp_path):
    config = _kubeconfig(tmp_path / "config", {"east": apis["east"].url, "slow": trickling})
    started = time.monotonic()
    run = run_top(["--all-contexts", "--kubeconfig", config, "-o", "json"] + FAST)
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert {row["cluster"] for row in document["rows"]} == {"east"} and len(document["rows"]) == 3
    assert document["unreachable"] == [{"cluster": "slow", "node": None,
                                        "error": f"no answer within {BOUND_SECONDS:g} s"}], document["unreachable"]
    assert BOUND_SECONDS <= elapsed < BOUND_SECONDS + 10, elapsed


def test_no_cluster_answering_is_one_line(silent, tmp_path):
    config = _kubeconfig(tmp_path / "config", {"north": silent, "south": "http://127.0.0.1:1"})
    run = run_top(["--all-contexts", "--kubeconfig", config] + FAST)
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
    assert "no cluster answered: context north: " in run.stderr and any(why in run.stderr for why in SILENT)
    assert "context south: the Kubernetes API server at http://127.0.0.1:1 cannot be reached" in run.stderr
