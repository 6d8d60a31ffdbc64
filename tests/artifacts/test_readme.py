"""README.md is a front door: short, in the order a newcomer needs (what → demo → install → deploy → top →
the docs), with its set-up commands, examples that match the demo, and a link to every other page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.demo.node import mapping_command
from exporter.vendors.nvidia.demo.workload import gpu_uuid, simulated_allocations
from exporter.vendors.nvidia.demo.workload import SIMULATED_PODS
from exporter.collectors.catalogue import CATALOGUE

REPO_ROOT = Path(__file__).resolve().parents[2]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
ORDER = ["What it is", "Quick start", "Install", "Deployment", "Who uses what: `kubectl gpu top`", "Documentation",
         "Development"]
MAX_BYTES = 20_000  # node_exporter's README is about 20 KB: the manual is docs/
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/pod-gpu-metrics-exporter demo"
DEMO_PROGRAM = ".venv/bin/pod-gpu-metrics-exporter"  # as the demo command above starts it
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"


def test_sections_follow_a_newcomers_order():
    headings = re.findall(r"^## (.+)$", README, re.MULTILINE)
    assert [h for h in headings if h in ORDER] == ORDER, headings


def test_it_is_a_front_door_not_the_manual():
    assert len(README.encode("utf-8")) <= MAX_BYTES
    assert "| flag |" not in README and "| metric |" not in README  # the reference is docs/flags.md, docs/metrics.md


def test_every_page_of_docs_is_reachable_from_it():
    linked = set(re.findall(r"\]\(docs/([^)#]+)", README))
    assert not sorted(page.name for page in (REPO_ROOT / "docs").glob("*.md") if page.name not in linked)


def test_the_two_set_up_commands_are_there():
    assert DEMO_COMMAND in README and TEST_COMMAND in README
    assert "python3-venv" in README


def test_sample_examples_use_the_demos_names():
    # Every attributed sample shown must be one the demo really serves: its owners and GPU UUIDs.
    owners = {(a.namespace, a.pod, a.container) for a in simulated_allocations()}
    uuids = {gpu_uuid(n) for n in range(4)}
    lines = [l for l in README.splitlines() if re.match(r"(DCGM_FI_\w+|pod_gpu_allocation_info)\{", l)]
    assert len(lines) >= 4
    for line in lines:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        assert labels["UUID"] in uuids, line
        if "pod" in labels:
            assert (labels["namespace"], labels["pod"], labels["container"]) in owners, line


def test_the_opening_shows_what_the_demo_serves():
    # The lines above "What it is" are the demo's own series: catalogued families, its pods and GPUs.
    opening = README.split("\n## What it is\n", 1)[0]
    pods = {(pod.namespace, pod.name, container) for pod in SIMULATED_PODS for container in pod.containers}
    names = {family.name for family in CATALOGUE}
    lines = [line for line in opening.splitlines() if line.startswith("pod_gpu_")]
    assert len(lines) >= 4
    for line in lines:
        assert line.split("{", 1)[0] in names, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        assert labels["UUID"] in {gpu_uuid(n) for n in range(4)}, line
        if "pod" in labels:
            assert (labels["namespace"], labels["pod"], labels["container"]) in pods, line


def test_links_to_docs_resolve():
    for target in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (REPO_ROOT / target).is_file(), target


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


# The words the demo prints just before its `mapping` command (exporter/demo/explain.py), which the README quotes.
DEMO_MAPPING_WORDS = "as `mapping` prints it on a real node"


def test_quick_start_points_at_the_mapping_command_the_demo_prints_and_invents_no_socket(capsys):
    # The demo prints mapping_command(<its program>, <this run's socket>), a new folder each run: a socket
    # path in the README is one no reader has, and its error would send them looking for a mount.
    from exporter.demo.explain import explain
    from exporter.vendors.nvidia.demo.explain import simulated_text

    quick_start = section("Quick start")
    assert not re.search(r"--kubelet\.socket /tmp/", quick_start), "the Quick start shows a made-up demo socket"
    assert DEMO_MAPPING_WORDS in " ".join(quick_start.split()), "the Quick start no longer says which line to paste"
    explain("http://127.0.0.1:9400/gpu/metrics", "/tmp/pod-gpu-demo-abcd1234/kubelet.sock",
            simulated_text("http://127.0.0.1:9400/gpu/metrics", "http://127.0.0.1:1/metrics"),
            mapping_command(DEMO_PROGRAM, "/tmp/pod-gpu-demo-abcd1234/kubelet.sock"), top=DEMO_PROGRAM)
    printed = capsys.readouterr().out.splitlines()
    quoted = next(index for index, line in enumerate(printed) if DEMO_MAPPING_WORDS in line)
    assert printed[quoted + 1].strip() == mapping_command(DEMO_PROGRAM, "/tmp/pod-gpu-demo-abcd1234/kubelet.sock")


def _demo_queue(pod) -> str:
    """The QUEUE cell `top` prints for one of the demo's pods: Kueue's ClusterQueue/LocalQueue, else its KAI
    Scheduler Queue (served as cluster_queue, with no local queue), else -."""
    from exporter.demo.cluster import CLUSTER_QUEUE

    if pod.local_queue:
        return f"{CLUSTER_QUEUE}/{pod.local_queue}"
    return pod.kai_queue or "-"


@pytest.mark.parametrize("document", ["README.md", "docs/top.md"])
def test_the_top_table_shows_the_demos_pods_and_queues(document):
    """The table `top` printed from the demo: its rows are the demo's holders, each with the demo's queue."""
    text = (REPO_ROOT / document).read_text(encoding="utf-8")
    table = text[text.index("NAMESPACE   POD            CONTAINER"):].split("\n\n", 1)[0].splitlines()
    assert table[0].split()[-1] == "QUEUE"
    queues = {(pod.namespace, pod.name): _demo_queue(pod) for pod in SIMULATED_PODS}
    holders = {(a.namespace, a.pod) for a in simulated_allocations()}
    shown = {(cells[0], cells[1]): cells[-1] for cells in (line.split() for line in table[1:])}
    assert set(shown) == holders
    assert shown == {key: queues[key] for key in shown}
