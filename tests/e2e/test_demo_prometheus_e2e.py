"""The first hour as README.md runs it: `demo`, then `prometheus --config.file=prometheus/demo/prometheus.yml`
(the committed file; only the demo's port and, for speed, its intervals differ), then `top --prometheus`. What
README.md and docs/ print of that set-up is what it gives, in every part that does not move with time: the `top`
table's columns, rows, fixed cells and footer, every sample line naming the demo's GPUs, and the `mapping` table."""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Dict, List, Tuple

import pytest
import requests

from exporter.vendors.nvidia.demo.explain import QUERIES
from support.autoscaling import query
from support.demo_process import console_script, samples
from support.demo_prometheus import demo_behind_prometheus, loaded_rule_files
from support.deploy_tools import REPO_ROOT, SHIPPED_RULE_FILES
from support.exporter_process import exporter_env
from support.prometheus_server import DEADLINE_SECONDS
from support.top_runs import run_top
from support.waiting import wait_until

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
TOP_PAGES = [REPO_ROOT / "README.md", REPO_ROOT / "docs" / "top.md"]
TOP_HEADER = "NAMESPACE   POD            CONTAINER"
# The columns of `top`'s table that hold still on the demo; the others (SM, UTIL, MEMORY, POWER, IDLE) move
# with its load, so only their form is compared: a number, its unit.
FIXED_COLUMNS = ("NAMESPACE", "POD", "CONTAINER", "NODE", "GPUS", "HEALTH", "QUEUE")
# A sample line with one of the demo's GPU UUIDs, in a code block or inline: name{labels} and its value.
DEMO_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^{}\n]*0demo[^{}\n]*\})(?: ([0-9.e+-]+))?")
# Families whose value on the demo is a state, not a reading: a printed one must be the served one.
STATE_FAMILIES = {"pod_gpu_allocation_info", "pod_gpu_device_health_status", "pod_gpu_device_lost",
                  "pod_gpu_device_taint", "pod_gpu_hpc_job_info"}
EVALUATIONS = 10


@pytest.fixture(scope="module")
def stack():
    with demo_behind_prometheus() as stack:
        # Ten evaluations of the rules over the demo's shares: `top`'s UTIL reads the autoscaling rule's inputs.
        wait_until(lambda: query(stack.prometheus, f"count_over_time(namespace_pod:pod_gpu_utilization:ratio"
                                                   f'{{pod="trainer-0"}}[1m]) >= {EVALUATIONS}'),
                   2 * DEADLINE_SECONDS, 0.5, f"{EVALUATIONS} evaluations of the autoscaling rule")
        yield stack


def _masked(text: str) -> str:
    """`text` with every number a #: what a moving reading's cell keeps (its form and unit)."""
    return re.sub(r"\d+(?:\.\d+)?", "#", text)


def _top_output(text: str) -> Tuple[List[List[str]], List[str]]:
    """(the table's rows of cells, header first; the footer's lines) of the `top` table printed in `text`."""
    block = text[text.index(TOP_HEADER):].split("\n```", 1)[0]
    table, _, footer = block.partition("\n\n")
    return [line.split() for line in table.splitlines()], [line for line in footer.splitlines() if line.strip()]


def _as_compared(rows: List[List[str]]) -> List[List[str]]:
    header = rows[0]
    return [header] + [[cell if header[index] in FIXED_COLUMNS else _masked(cell) for index, cell in enumerate(row)]
                       for row in rows[1:]]


def test_prometheus_loads_every_shipped_rule_file_and_labels_the_demo_node(stack):
    assert loaded_rule_files(stack.prometheus) == sorted(SHIPPED_RULE_FILES)
    up = query(stack.prometheus, "up")
    assert [(s["metric"].get("node"), s["value"][1]) for s in up] == [("demo-node", "1")], up


def test_the_demo_names_the_command_and_the_top_the_readme_runs(stack):
    printed = [line.strip() for line in stack.printed]
    assert "prometheus --config.file=prometheus/demo/prometheus.yml" in printed
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "\nprometheus --config.file=prometheus/demo/prometheus.yml\n" in readme
    (top,) = [line for line in printed if " top --prometheus " in line]
    # The README starts the demo as .venv/bin/pod-gpu-metrics-exporter; the demo prints what started it.
    assert top.replace(console_script(), ".venv/bin/pod-gpu-metrics-exporter") in readme.splitlines()


def test_the_queries_the_demo_prints_answer_on_its_prometheus(stack):
    # Over the last 10 s rather than 5 minutes: rate() reads a window the series has not filled yet as slower.
    answers = {what: query(stack.prometheus, promql.replace("[5m]", "[10s]")) for what, promql in QUERIES}
    assert all(answers.values()), answers
    (idle,) = [answer for what, answer in answers.items() if "idle" in what]
    assert [series["metric"]["pod"] for series in idle] == ["llm-server-b"], idle


@pytest.mark.parametrize("page", TOP_PAGES, ids=lambda page: page.name)
def test_top_prints_the_table_the_page_shows(stack, page):
    run = run_top(["--prometheus", stack.prometheus.url, "--window", "1m"], command=[console_script(), "top"])
    assert run.returncode == 0, run.stderr
    shown_rows, shown_footer = _top_output(page.read_text(encoding="utf-8"))
    rows, footer = _top_output(run.stdout)
    assert _as_compared(rows) == _as_compared(shown_rows), run.stdout
    assert [_masked(line) for line in footer] == [_masked(line) for line in shown_footer], run.stdout


def _printed_samples() -> Dict[Tuple[str, str], Tuple[str, str]]:
    """(name, labels) → (value, page) of every sample line README.md and docs/ print for the demo's GPUs."""
    found = {}
    for page in PAGES:
        for name, labels, value in DEMO_SAMPLE.findall(page.read_text(encoding="utf-8")):
            found[(name, labels)] = (value, page.name)
    return found


def test_every_sample_printed_for_the_demos_gpus_is_one_it_serves(stack):
    printed = _printed_samples()
    assert len(printed) >= 10
    served: Dict[Tuple[str, str], float] = {}

    def all_seen():
        # Some come later than others: GPU 3 is lost about 15 s in, idle time once the shares have run.
        served.update(samples(requests.get(stack.demo.url(), timeout=10).text))
        return not [key for key in printed if key not in served]

    try:
        wait_until(all_seen, DEADLINE_SECONDS, 1.0, "every printed sample served")
    except AssertionError:
        missing = {f"{page}: {name}{labels}" for (name, labels), (_value, page) in printed.items()
                   if (name, labels) not in served}
        pytest.fail(f"printed, never served by the demo: {sorted(missing)}")
    for (name, labels), (value, page) in printed.items():
        if name in STATE_FAMILIES:
            assert float(value) == served[(name, labels)], (page, name, labels)


def test_the_mapping_rows_the_readme_shows_are_the_demos(stack):
    (command,) = [line.strip() for line in stack.printed if " mapping --kubelet.socket " in line]
    run = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, cwd=str(REPO_ROOT),
                         env=exporter_env())
    assert run.returncode == 0, run.stderr
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme[readme.index("NAMESPACE  POD"):].split("\n```", 1)[0].splitlines()
    lines = run.stdout.splitlines()
    assert shown[0].split() == lines[0].split()
    # "rows shortened": the README shows some of the rows, each as printed.
    assert {tuple(line.split()) for line in shown[1:]} <= {tuple(line.split()) for line in lines[1:]}, run.stdout

