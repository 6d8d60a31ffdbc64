"""docs/multi-cluster.md's "Try it on one machine", run line by line as the page gives it (only its loopback
ports, its scratch folder and the installed program's path differ; an Alertmanager stand-in answers at the
notifier's address): both clusters' series reach the store apart, the rules recorded per cluster answer what the
page prints, alerts come per cluster, and `top` on the store shows each pod in both."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from support.central_store import AlertReceiver
from support.demo_process import console_script
from support.deploy_tools import REPO_ROOT, require_executable
from support.doc_commands import Started, Substitutions, run, sh_blocks
from support.prometheus_server import free_port
from support.top_runs import run_top
from support.victoria_metrics import INSTALL
from support.waiting import wait_until

PAGE = REPO_ROOT / "docs" / "multi-cluster.md"
SECTION = "## Try it on one machine"
DEADLINE_SECONDS = 60.0
ALERTMANAGER_PORT = 9093  # where the page's vmalert sends alerts: the stand-in's port here
SCRATCH = "/tmp/gpu-fleet"
PROGRAM = ".venv/bin/pod-gpu-metrics-exporter"
# A printed answer, as the page writes it in a comment under its query: {cluster="east"} 5, {cluster="west"} 5
_ANSWER = re.compile(r'\{cluster="(\w+)"\} (\d+)')


def _recipe():
    """(the lines that start the set-up, [(a query line, the answer printed under it)])."""
    section = PAGE.read_text(encoding="utf-8").split(SECTION + "\n", 1)[1].split("\n## ", 1)[0]
    starting, checking = sh_blocks(section)
    queries = [(line, {cluster: int(count) for cluster, count in _ANSWER.findall(answer)})
               for line, answer in zip(checking[::2], checking[1::2])]
    assert all(answer.startswith("#") for answer in checking[1::2]) and len(queries) == 2
    return starting, queries


@pytest.fixture(scope="module")
def fleet():
    for program in ("victoria-metrics", "vmagent", "vmalert"):
        require_executable(program, INSTALL)
    require_executable("curl", "apt-get install -y curl (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix="pgx-recipe-", dir="/tmp"))
    receiver = AlertReceiver()
    substitute = Substitutions(free_port, {SCRATCH: str(folder), PROGRAM: console_script()},
                               {ALERTMANAGER_PORT: int(receiver.url.rsplit(":", 1)[1])})
    started = Started(folder)
    try:
        starting, queries = _recipe()
        for line in starting:
            started.start(substitute(line))
        yield started, substitute, receiver, queries
    finally:
        started.stop()
        receiver.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _answer(line: str):
    """cluster → value of the page's curl query, run as written; None while the store does not answer yet."""
    done = run(line)
    if done.returncode != 0:
        return None
    body = json.loads(done.stdout)
    assert body["status"] == "success", body
    return {series["metric"].get("cluster"): int(float(series["value"][1])) for series in body["data"]["result"]}


def test_the_store_answers_what_the_page_prints(fleet):
    started, substitute, _, queries = fleet
    for line, printed in queries:
        assert set(printed) == {"east", "west"}, line
        try:
            wait_until(lambda: _answer(substitute(line)) == printed, DEADLINE_SECONDS, 1.0, line)
        except AssertionError:
            pytest.fail(f"{line}\nanswered {_answer(substitute(line))}, the page prints {printed}; "
                        f"exited: {started.exited()}")
    assert started.exited() == []


def test_alerts_come_once_per_cluster_naming_it(fleet):
    _, _, receiver, _ = fleet
    wait_until(lambda: {alert["labels"].get("cluster") for alert in receiver.alerts
                        if alert["labels"]["alertname"] == "GpuXidError"} >= {"east", "west"},
               DEADLINE_SECONDS, 1.0, "GpuXidError from both clusters at the Alertmanager")
    for alert in (a for a in list(receiver.alerts) if a["labels"]["alertname"] == "GpuXidError"):
        assert f" in cluster {alert['labels']['cluster']}," in alert["annotations"]["summary"], alert


def test_top_on_the_store_shows_every_pod_in_both_clusters(fleet):
    _, substitute, _, _ = fleet
    (command,) = re.findall(rf"`({re.escape(PROGRAM)} top --prometheus [^`]+)`", PAGE.read_text(encoding="utf-8"))
    args = substitute(command).split()[2:]
    rows = lambda: json.loads(run_top([*args, "-o", "json"], command=[console_script(), "top"]).stdout)["rows"]  # noqa: E731
    found = wait_until(lambda: (lambda r: r if len(r) == 6 else None)(rows()), DEADLINE_SECONDS, 1.0, "six rows")
    assert Counter(row["cluster"] for row in found) == {"east": 3, "west": 3}
    table = run_top(args, command=[console_script(), "top"])
    assert table.returncode == 0 and table.stdout.split()[0] == "CLUSTER", table.stdout + table.stderr
