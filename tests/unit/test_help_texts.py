"""Help texts say what the code does: the queue systems --labels.extra reads, the stores top's
--prometheus.header is for, and what each section of pod_gpu_exporter_section_up stands for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from exporter.config import all_flags
from exporter.collectors.catalogue import CATALOGUE
from exporter.collectors.kubernetes.queues import VERSIONS
from exporter.top.options import build_parser as build_top_parser

EXPORTER = Path(__file__).resolve().parents[2] / "exporter"
# Each API group the queue reader reads → the queue system's name a user knows.
QUEUE_SYSTEMS = {"kueue.x-k8s.io": "Kueue", "scheduling.volcano.sh": "Volcano", "scheduling.run.ai": "KAI Scheduler"}


def test_labels_extra_names_every_queue_system_read():
    groups = {version.split("/")[0] for versions in VERSIONS.values() for version in versions}
    assert groups <= set(QUEUE_SYSTEMS), f"a queue system this test does not know: {groups - set(QUEUE_SYSTEMS)}"
    extra, = [flag for flag in all_flags() if flag.flag == "--labels.extra"]
    help_text = " ".join(extra.help.split())
    for group in groups:
        assert QUEUE_SYSTEMS[group] in help_text, (QUEUE_SYSTEMS[group], help_text)


def test_top_prometheus_header_names_only_stores_top_can_query():
    help_text = " ".join(build_top_parser("pod-gpu-metrics-exporter top").format_help().split())
    header = help_text[help_text.index("--prometheus.header 'NAME: VALUE' "):][:300]  # the flag's entry, not usage
    assert "Mimir" in header
    for log_or_trace_store in ("Loki", "Tempo", "Pyroscope"):  # no PromQL query API: top cannot read them
        assert log_or_trace_store not in header, header


def section_names() -> set:
    """Every section's name: a section class's `name = "…"`, and each TextSection("…", …) a collector makes."""
    names = set()
    for path in EXPORTER.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "").endswith("Section") for b in node.bases):
                for statement in node.body:
                    if (isinstance(statement, ast.Assign) and [getattr(t, "id", "") for t in statement.targets] == ["name"]
                            and isinstance(statement.value, ast.Constant) and statement.value.value):
                        names.add(statement.value.value)
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "TextSection" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return names


def test_section_up_says_what_each_section_stands_for():
    names = section_names()
    assert {"allocation", "status", "process_shares", "xid_events"} <= names, names  # the finder finds
    section_up, = [family for family in CATALOGUE if family.name == "pod_gpu_exporter_section_up"]  # as served
    missing = [name for name in names if not re.search(rf"\b{name}\b", section_up.help)]
    assert not missing, f"pod_gpu_exporter_section_up's help says nothing of {missing}"
