"""The demo behind the Prometheus the checkout ships for it (prometheus/demo/prometheus.yml), as README.md runs
them: the config file as committed but for the demo's address (a free port, not 9400) and, where a test asks, its
intervals; kept in a folder laid out like the checkout's prometheus/, so its relative rule_files resolve as they
do there."""

from __future__ import annotations

import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, NamedTuple, Optional

import yaml

from exporter.demo.explain import DEMO_TARGET
from support.deploy_tools import PROMETHEUS_DIR, require_executable
from support.exporter_process import ExporterProcess
from support.prometheus_server import PrometheusServer, get_json
from support.top_runs import start_demo_keeping_its_text

DEMO_CONFIG = PROMETHEUS_DIR / "demo" / "prometheus.yml"
_INTERVALS = re.compile(r"(?m)^(  (?:scrape|evaluation)_interval: )\S+$")


class DemoStack(NamedTuple):
    demo: ExporterProcess
    prometheus: PrometheusServer
    printed: List[str]  # what the demo printed on stdout at start-up


def demo_config_text(target: str, interval: Optional[str] = None) -> str:
    """The committed file with the demo's address `target` in place of DEMO_TARGET, and every global interval
    set to `interval` (None: as committed)."""
    text = DEMO_CONFIG.read_text()
    (job,) = yaml.safe_load(text)["scrape_configs"]
    assert job["static_configs"][0]["targets"] == [DEMO_TARGET], "the shipped config no longer scrapes the demo"
    text = text.replace(DEMO_TARGET, target)
    if interval is not None:
        text, replaced = _INTERVALS.subn(lambda match: match.group(1) + interval, text)
        assert replaced == 2, "the shipped config's scrape and evaluation intervals moved"
    return text


def loaded_rule_files(prometheus: PrometheusServer) -> List[str]:
    """The names of the rule files Prometheus loaded, from its rule groups."""
    answer = get_json(prometheus.url + "/api/v1/rules")
    return sorted({Path(group["file"]).name for group in answer["data"]["groups"]})


@contextmanager
def demo_behind_prometheus(*demo_args: str, interval: str = "1s") -> Iterator[DemoStack]:
    """`demo DEMO_ARGS` and a real Prometheus started with the shipped demo config (see demo_config_text)."""
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix="pgx-demo-prometheus-", dir="/tmp"))
    demo = prometheus = None
    try:
        demo, printed = start_demo_keeping_its_text(*demo_args)
        config = folder / "prometheus" / "demo" / DEMO_CONFIG.name
        config.parent.mkdir(parents=True)
        config.write_text(demo_config_text(demo.address, interval))
        # Beside the config, as in the checkout: `../rules/*.rules.yml` finds the shipped rule files themselves.
        (folder / "prometheus" / "rules").symlink_to(PROMETHEUS_DIR / "rules", target_is_directory=True)
        prometheus = PrometheusServer(binary, folder, config)
        yield DemoStack(demo, prometheus, printed)
    finally:
        if prometheus is not None:
            prometheus.stop()
        if demo is not None:
            demo.stop()
        shutil.rmtree(folder, ignore_errors=True)
