"""`top` without Prometheus: the demo's exporter scraped through a fake API server's pod proxy, as the real one serves it."""

from __future__ import annotations

import json

import pytest

from support.demo_process import console_script, samples
from support.exporter_process import start_exporter
from support.fake_pod_proxy import PodProxyApi
from support.tlspki import OPENSSL, SKIP_REASON, make_pki
from support.top_runs import (EXPORTER_NAMESPACE, add_exporter_pod, kubeconfig_for, own_sum, rows_by_pod, run_top,
                              served, start_demo_with_energy, top_json, within_readings)

WINDOW_SECONDS = 4.0
DEMO_POD = "pod-gpu-metrics-exporter-7xk2p"
# top's rate of a counter is the change between its two scrapes over the time between them, as it timed
# them; the fake proxy times the same answers a moment earlier: this much apart at most, on a loaded machine.
DELIVERY_SECONDS = 1.0


def served_text(body: bytes):
    return samples(body.decode())


@pytest.fixture(scope="module")
def demo():
    exporter = start_demo_with_energy()
    yield exporter
    exporter.stop()


@pytest.fixture
def api():
    fake = PodProxyApi().start()
    yield fake
    fake.stop()


@pytest.fixture
def cluster(api, demo, tmp_path):
    """The demo's exporter on demo-node, another exporter pod on gpu-node-2 that does not answer."""
    add_exporter_pod(api, DEMO_POD, "demo-node", demo.address)
    add_exporter_pod(api, "pod-gpu-metrics-exporter-q9d4m", "gpu-node-2", None)
    return kubeconfig_for(api, tmp_path)


def test_the_table_matches_the_demos_own_series(cluster, demo, api):
    before = served(demo.url())
    document = top_json(["--kubeconfig", cluster, "--window", f"{WINDOW_SECONDS:g}s"])
    own = after = served(demo.url())
    rows = rows_by_pod(document)
    assert set(rows) == {"trainer-0", "llm-server-a", "llm-server-b"}
    trainer, a, b = rows["trainer-0"], rows["llm-server-a"], rows["llm-server-b"]
    assert (trainer["gpus"], a["gpus"], b["gpus"]) == (2, 0.5, 0.25)
    assert (trainer["node"], trainer["health"], a["health"]) == ("demo-node", "unhealthy", "healthy")
    assert (trainer["cluster_queue"], trainer["local_queue"]) == ("cq-research", "team-ml")  # Kueue
    assert (a["cluster_queue"], a["local_queue"], b["cluster_queue"]) == ("inference", None, None)  # KAI Scheduler
    # Shares move on a two-minute cycle and are rounded to 0.01: top read them between the demo's two answers.
    for pod, row in rows.items():
        readings = [own_sum(own, "pod_gpu_container_sm_utilization_ratio", pod) for own in (before, after)]
        assert within_readings(row["sm_ratio"], readings, 0.03), (pod, row["sm_ratio"], readings)
        assert row["sm_source"] == "process"
    assert trainer["memory_bytes"] == pytest.approx(own_sum(own, "pod_gpu_container_memory_used_bytes", "trainer-0"),
                                                    rel=0.1)
    # Power: the demo's own energy counters in the two answers top got, over the time between them. (The
    # counters step at the demo's refreshes, 2 s apart, later when it is starved: no constant to expect.)
    first, second = [(when, served_text(body)) for when, key, body in api.answered if key[1] == DEMO_POD]
    for pod, row in rows.items():
        joules = (own_sum(second[1], "pod_gpu_container_energy_joules_total", pod)
                  - own_sum(first[1], "pod_gpu_container_energy_joules_total", pod))
        seconds = second[0] - first[0]
        assert seconds >= WINDOW_SECONDS, seconds  # the second round starts a window after the first ends
        low, high = joules / (seconds + DELIVERY_SECONDS), joules / (seconds - DELIVERY_SECONDS)
        assert low <= row["power_watts"] <= high, (pod, row["power_watts"], low, high)
    assert b["idle_ratio"] > 0.4 and trainer["idle_ratio"] == 0.0  # llm-server-b runs nothing on its replica
    assert document["unallocated"][0]["pod"] == "notebook-7" and document["unallocated"][0]["memory_bytes"] > 0
    assert {u["reason"] for u in document["unattributed"]} >= {"host", "no_holder"}


def test_a_node_that_does_not_answer_is_named_in_the_footer(cluster):
    run = run_top(["--kubeconfig", cluster, "--window", "1s"])
    assert run.returncode == 0, run.stderr
    assert "trainer-0" in run.stdout and "Traceback" not in run.stderr
    footer = run.stdout.splitlines()[-1]
    assert footer.startswith("Not answering (1): gpu-node-2 (HTTP 503: error trying to reach service"), run.stdout


def test_a_denied_proxy_is_one_line_naming_the_rbac(cluster, api):
    api.deny_proxy = True
    run = run_top(["--kubeconfig", cluster, "--window", "1s"])
    assert run.returncode == 1 and run.stdout == ""
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert "get` on pods/proxy" in run.stderr and "HTTP 403" in run.stderr and "top.rbac.create" in run.stderr


def test_no_exporter_pods_is_one_line(cluster):
    run = run_top(["--kubeconfig", cluster, "-N", "elsewhere"])
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
    assert "no pod-gpu-metrics-exporter pods in namespace elsewhere" in run.stderr


def test_an_unreachable_api_server_is_one_line(cluster, api):
    server = api.url
    api.stop()
    run = run_top(["--kubeconfig", cluster])
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
    assert f"Kubernetes API server at {server} cannot be reached" in run.stderr


def test_exporter_pods_are_found_by_their_labels_in_their_namespace(cluster, api):
    from support.fake_kube_api import make_pod

    api.put("v1", "pods", make_pod(EXPORTER_NAMESPACE, "dcgm-exporter-x", "other", labels={"app": "dcgm"}))
    document = top_json(["--kubeconfig", cluster, "--window", "1s"])
    assert [entry["node"] for entry in document["unreachable"]] == ["gpu-node-2"]


@pytest.mark.parametrize("args", [["--by", "pods"], ["-o", "yaml"], ["--window", "soon"], ["--watch", "0"],
                                  ["--scrape.concurrency", "0"], ["--prometheus", "prometheus:9090"]])
def test_a_bad_flag_exits_2_with_one_line(args):
    run = run_top(args)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr


def test_each_scrape_is_bounded_in_size_and_time(api, tmp_path):
    body = b"pod_gpu_exporter_dcgm_up 1\n" + b"# padding\n" * 2000
    add_exporter_pod(api, "pod-gpu-metrics-exporter-big", "gpu-node-big")
    api.serve_body(EXPORTER_NAMESPACE, "pod-gpu-metrics-exporter-big", "9400", body)
    add_exporter_pod(api, "pod-gpu-metrics-exporter-slow", "gpu-node-slow")
    api.stall(EXPORTER_NAMESPACE, "pod-gpu-metrics-exporter-slow", "9400")
    add_exporter_pod(api, "pod-gpu-metrics-exporter-pending", "gpu-node-new", phase="Pending")
    run = run_top(["--kubeconfig", kubeconfig_for(api, tmp_path), "--window", "100ms", "--scrape.max-body-size", "4KiB",
                   "--scrape.timeout", "500ms", "-o", "json"], timeout=30)
    assert run.returncode == 0, run.stderr
    errors = {entry["node"]: entry["error"] for entry in json.loads(run.stdout)["unreachable"]}
    assert errors == {"gpu-node-big": "answer larger than 4096 bytes", "gpu-node-slow": "no answer within 0.5 s",
                      "gpu-node-new": "pod pod-gpu-metrics-exporter-pending is Pending"}


def test_in_device_mode_rows_show_their_gpus_utilisation_marked(api, tmp_path):
    device_demo = start_exporter(["demo", "--demo.nvml", "off"], command=[console_script()])
    try:
        add_exporter_pod(api, "pod-gpu-metrics-exporter-dev01", "demo-node", device_demo.address)
        kubeconfig = kubeconfig_for(api, tmp_path)
        before = served(device_demo.url())
        document = top_json(["--kubeconfig", kubeconfig, "--window", "200ms"])
        after = served(device_demo.url())
        table = run_top(["--kubeconfig", kubeconfig, "--window", "200ms"])
    finally:
        device_demo.stop()
    rows = rows_by_pod(document)
    trainer, a, b = rows["trainer-0"], rows["llm-server-a"], rows["llm-server-b"]
    assert {row["sm_source"] for row in rows.values()} == {"device"}
    assert (trainer["power_watts"], trainer["idle_ratio"], trainer["health"]) == (None, None, "unhealthy")
    # The GPUs' own activity (0-1), read a moment apart on a two-minute cycle.
    readings = [own_sum(own, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "trainer-0") for own in (before, after)]
    assert within_readings(trainer["sm_ratio"], readings, 0.01), (trainer["sm_ratio"], readings)
    assert a["sm_ratio"] == pytest.approx(b["sm_ratio"], abs=0.03)  # both hold GPU 2: each shows all of it
    assert document["unallocated"] == [] and document["unattributed"] == []
    assert "* the GPU's own utilisation and memory" in table.stdout and "trainer-0" in table.stdout


@pytest.mark.skipif(OPENSSL is None, reason=SKIP_REASON)
def test_an_exporter_serving_tls_is_scraped_with_the_https_form(api, tmp_path):
    make_pki(tmp_path)
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: {tmp_path}/server.crt\n"
                                      f"  key_file: {tmp_path}/server.key\n")
    tls_demo = start_exporter(["demo", "--web.config.file", str(tmp_path / "web.yml")], command=[console_script()])
    try:
        assert tls_demo.scheme == "https"
        add_exporter_pod(api, "pod-gpu-metrics-exporter-tls01", "demo-node", tls_demo.address)
        kubeconfig = kubeconfig_for(api, tmp_path)
        over_tls = top_json(["--kubeconfig", kubeconfig, "--window", "200ms", "--exporter.scheme", "https"])
        plain = top_json(["--kubeconfig", kubeconfig, "--window", "200ms", "--scrape.timeout", "2s"])
    finally:
        tls_demo.stop()
    assert set(rows_by_pod(over_tls)) == {"trainer-0", "llm-server-a", "llm-server-b"}
    assert plain["rows"] == [] and [entry["node"] for entry in plain["unreachable"]] == ["demo-node"]


def test_an_exporter_asking_for_credentials_fails_its_node_alone(cluster, api, tmp_path):
    """Behind basic auth (--web.config.file) the exporter answers 401 itself, through the proxy: not the API
    server's RBAC refusal (a Status object), so the other nodes' rows are still shown."""
    import bcrypt

    config = tmp_path / "web-config.yml"
    config.write_text(f"basic_auth_users:\n  prometheus: '{bcrypt.hashpw(b's3cret', bcrypt.gensalt(rounds=4)).decode()}'\n")
    guarded = start_exporter(["demo", "--web.config.file", str(config)], command=[console_script()])
    try:
        add_exporter_pod(api, "pod-gpu-metrics-exporter-auth1", "gpu-node-auth", guarded.address)
        run = run_top(["--kubeconfig", cluster, "--window", "1s", "-o", "json"])
    finally:
        guarded.stop()
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert {row["pod"] for row in document["rows"]} == {"trainer-0", "llm-server-a", "llm-server-b"}
    errors = {entry["node"]: entry["error"] for entry in document["unreachable"]}
    assert errors["gpu-node-auth"] == "the exporter asks for credentials (web config basic auth)", errors


def test_one_deadline_bounds_a_pod_that_answers_in_a_trickle(api, tmp_path):
    """Headers just inside the timeout, then a byte each time just inside it again: each read is in time,
    the scrape is not; it must end at --scrape.timeout, not about twice that."""
    add_exporter_pod(api, "pod-gpu-metrics-exporter-trickle", "gpu-node-trickle")
    api.trickle(EXPORTER_NAMESPACE, "pod-gpu-metrics-exporter-trickle", "9400")
    api.trickle_seconds = 1.8
    run = run_top(["--kubeconfig", kubeconfig_for(api, tmp_path), "--window", "100ms", "--scrape.timeout", "2s",
                   "-o", "json"], timeout=60)
    assert run.returncode == 0, run.stderr
    errors = {entry["node"]: entry["error"] for entry in json.loads(run.stdout)["unreachable"]}
    assert errors == {"gpu-node-trickle": "answer took longer than 2 s"}
    # Two rounds, each one scrape of it; a generous margin for a loaded machine (without one deadline: ~3.6 s).
    assert len(api.trickle_held) == 2 and max(api.trickle_held) < 2.0 + 1.0, api.trickle_held
