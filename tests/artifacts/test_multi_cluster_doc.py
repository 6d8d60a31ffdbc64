"""docs/multi-cluster.md: its federation job is a valid Prometheus config that carries every family the rules
read, it names the three ways clusters meet, where rules run and the matcher a consumer adds, and the pages
that set up Prometheus and the rules point to it. (Its relabelling block is run by a real vmagent in
tests/e2e/test_many_clusters_e2e.py; its one-machine recipe, line by line, in
tests/e2e/test_multi_cluster_recipe_e2e.py.)"""

from __future__ import annotations

import re

import yaml

from support.deploy_tools import REPO_ROOT, SHIPPED_RULE_FILES
from support.promql_scan import selectors
from support.promtool_tests import run_promtool

PAGE = REPO_ROOT / "docs" / "multi-cluster.md"
# Read by a rule but written by another exporter, scraped by its own job: Kueue's controller.
NOT_OURS = {"kueue_cluster_queue_nominal_quota"}


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _federation_job() -> dict:
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", _text(), re.DOTALL) if "/federate" in b]
    return block


def _read_by_rules() -> set:
    rules = [rule for path in SHIPPED_RULE_FILES.values() for group in yaml.safe_load(path.read_text())["groups"]
             for rule in group["rules"]]
    recorded = {rule["record"] for rule in rules if "record" in rule}
    return {s.name for rule in rules for s in selectors(rule["expr"])} - recorded - NOT_OURS


def _carried(name: str, matches: list) -> bool:
    """Whether one of the federation's match[] selectors (`{__name__=~"re"}` or `name{...}`) takes `name`."""
    for match in matches:
        regex = re.fullmatch(r'\{__name__=~"(.+)"\}', match)
        if (regex and re.fullmatch(regex.group(1), name)) or match.split("{", 1)[0] == name:
            return True
    return False


def test_the_federation_job_is_a_valid_config(tmp_path):
    path = tmp_path / "federate.yml"
    path.write_text(_federation_job())
    result = run_promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_federation_carries_every_family_the_rules_read():
    (job,) = yaml.safe_load(_federation_job())["scrape_configs"]
    matches = job["params"]["match[]"]
    assert '{__name__=~"DCGM_.*"}' in matches and '{__name__=~"pod_gpu_.*"}' in matches
    read = _read_by_rules()
    assert {"pod_gpu_allocation_info", "pod_gpu_exporter_dcgm_up", "DCGM_FI_DEV_GPU_UTIL", "up"} <= read
    assert [name for name in sorted(read) if not _carried(name, matches)] == []
    # DCGM_.* alone would lose them: the check above can fail.
    assert [name for name in read if not _carried(name, ['{__name__=~"DCGM_.*"}'])]
    assert job["honor_labels"] is True


def test_the_page_covers_the_ways_the_rules_the_matcher_and_another_label_name():
    headings = re.findall(r"(?m)^#{2,3} (.+)$", _text())
    for wanted in ("1. External labels and remote write", "2. Thanos sidecar and Thanos Query", "3. Federation",
                   "Where the rules run", "Reading a central store", "When the label is not called `cluster`"):
        assert any(h.startswith(wanted) for h in headings), wanted
    assert re.search(r'\{cluster="east", namespace="ml"', _text())


def test_the_pages_that_set_up_prometheus_link_it():
    for page in ("deployment.md", "scale.md", "top.md", "autoscaling.md"):
        assert "(multi-cluster.md)" in (REPO_ROOT / "docs" / page).read_text(encoding="utf-8"), page
