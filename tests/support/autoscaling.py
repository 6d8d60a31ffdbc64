"""prometheus/autoscaling/: its files, the adapter's expansion of a metricsQuery for a pods request, and a real
Prometheus (with the shipped rules) scraping an exporter (the demo, in either mode that feeds the rule), asked as
the adapter and KEDA ask it."""

from __future__ import annotations

import re
import shutil
import tempfile
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import yaml

from support.deploy_tools import PROMETHEUS_DIR, require_executable
from support.demo_process import console_script
from support.exporter_process import start_exporter
from support.prometheus_server import DEADLINE_SECONDS, PrometheusServer, get_json
from support.waiting import wait_until

AUTOSCALING = PROMETHEUS_DIR / "autoscaling"
ADAPTER_VALUES = AUTOSCALING / "prometheus-adapter-values.yaml"
HPA = AUTOSCALING / "hpa.yaml"
KEDA = AUTOSCALING / "keda-scaledobject.yaml"
RECORD = "namespace_pod:pod_gpu_utilization:ratio"
AUTOSCALING_DOC = PROMETHEUS_DIR.parent / "docs" / "autoscaling.md"
SHIPPED_RULES = sorted((PROMETHEUS_DIR / "rules").glob("*.rules.yml"))
# The template actions the adapter fills in for a metricsQuery (its naming.MetricsQuery).
_ACTION = re.compile(r"<<\s*\.(\w+)\s*>>")


def adapter_rule() -> dict:
    (rule,) = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    return rule


def keda_trigger() -> dict:
    (trigger,) = yaml.safe_load(KEDA.read_text())["spec"]["triggers"]
    return trigger


def keda_pod_name_query() -> str:
    """The query the ScaledObject's comments offer for an exporter run without --labels.extra workload."""
    (query,) = re.findall(r"(?m)^#\s+(avg\(.*pod=~.*\))\s*$", KEDA.read_text())
    return query


def documented_demo_ranges() -> Dict[str, Tuple[float, float]]:
    """pod → (lowest, highest) that docs/autoscaling.md says the rule reads for it on the demo ("`trainer-0` reads
    0.48–0.77"), and "neighbour" → the percent it says the whole-GPU rule gives llm-server-b."""
    text = " ".join(AUTOSCALING_DOC.read_text(encoding="utf-8").split())
    ranges = {pod: (float(low), float(high))
              for pod, low, high in re.findall(r"`(trainer-0|llm-server-a)` (?:reads )?([0-9.]+)–([0-9.]+)", text)}
    (neighbour,) = re.findall(r"gives `llm-server-b` the ([0-9]+)–([0-9]+) %", text)
    return {**ranges, "neighbour": (float(neighbour[0]), float(neighbour[1]))}


def documented_demo_keda_query() -> str:
    """The KEDA query docs/autoscaling.md asks the demo's Prometheus, as its curl command sends it."""
    (promql,) = re.findall(r"--data-urlencode 'query=(avg\(.*\))'", AUTOSCALING_DOC.read_text(encoding="utf-8"))
    return promql


def expand_pods_query(template: str, series: str, namespace: str, pods: Sequence[str]) -> str:
    """The metricsQuery as prometheus-adapter writes it for GET .../namespaces/<namespace>/pods/*/<metric>:
    the series name, the resources' label matchers (one pod by equality, several as an alternation) and
    `pod` to group by. Any other action is refused: the adapter would not fill it in for this request."""
    pod_matcher = f'pod="{pods[0]}"' if len(pods) == 1 else f'pod=~"{"|".join(pods)}"'
    values = {"Series": series, "LabelMatchers": f'namespace="{namespace}",{pod_matcher}', "GroupBy": "pod"}

    def fill(match: re.Match) -> str:
        if match.group(1) not in values:
            raise ValueError(f"metricsQuery uses <<.{match.group(1)}>>, which a pods request does not fill in")
        return values[match.group(1)]

    return _ACTION.sub(fill, template)


def series_names(prometheus: PrometheusServer, selector: str) -> List[str]:
    """The metric names of the series `selector` finds, as the adapter's discovery asks (/api/v1/series)."""
    answer = get_json(prometheus.url + "/api/v1/series?" + urllib.parse.urlencode({"match[]": selector}))
    return sorted({series["__name__"] for series in answer["data"]})


def query(prometheus: PrometheusServer, promql: str, at: Optional[float] = None) -> list:
    """The instant vector `promql` answers (now, or at the Unix time `at`)."""
    params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
    answer = get_json(prometheus.url + "/api/v1/query?" + urllib.parse.urlencode(params))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def by_pod(result: list) -> dict:
    return {sample["metric"]["pod"]: float(sample["value"][1]) for sample in result}


@contextmanager
def prometheus_scraping(address: str, prefix: str) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping the exporter at `address` (host:port) every second, as shipped (honor_labels),
    evaluating every shipped rule file every second."""
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    server = None
    try:
        server = PrometheusServer(binary, folder, {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in SHIPPED_RULES],
            "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", "honor_labels": True,
                                "static_configs": [{"targets": [address]}]}],
        })
        yield server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


# The demo's two ways to feed the rule: each pod's own SM share from process samples, and device mode with
# --labels.mode join (whole GPUs only; a shared one has no owner to read for). For pytest.fixture(params=, ids=).
DEMO_MODES = [[], ["--demo.nvml", "off", "--labels.mode", "join"]]
DEMO_MODE_IDS = ["process-samples", "device-join"]


@contextmanager
def demo_with_recorded_rule(demo_args: Sequence[str], prefix: str) -> Iterator[PrometheusServer]:
    """The demo (`demo_args`: one of DEMO_MODES) scraped by prometheus_scraping, once the autoscaling rule has
    recorded a value and Prometheus holds all three of its pods."""
    exporter = start_exporter(["demo", *demo_args], command=[console_script()])
    try:
        with prometheus_scraping(urllib.parse.urlsplit(exporter.url()).netloc, prefix) as prometheus:
            wait_until(lambda: len(query(prometheus, RECORD)) >= 1 and
                       len(query(prometheus, "pod_gpu_container_allocated_gpus")) == 3,
                       DEADLINE_SECONDS, 0.5, "the rule to record the demo's pods")
            yield prometheus
    finally:
        exporter.stop()
