"""docs/deployment.md and the README against the chart: the values table, the upgrade note, Helm first."""

from __future__ import annotations

import json
import re

import yaml

from support.deploy_tools import REPO_ROOT, load_documents
from support.helm_tools import CHART, RENDER, load_chart_file, schema_leaf_keys

DEPLOYMENT_DOC = REPO_ROOT / "docs" / "deployment.md"


def _section(text: str, heading: str) -> str:
    """From `heading` to the next heading of its level or higher, outside code blocks."""
    level = len(heading.split(" ", 1)[0])
    lines = text[text.index(heading) + len(heading):].splitlines(keepends=True)
    fenced, kept = False, []
    for line in lines:
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        kept.append(line)
    return "".join(kept)


def _documented_values():
    table = _section(DEPLOYMENT_DOC.read_text(), "### Chart values")
    rows = re.findall(r"(?m)^\| `([^`]+)` \| `([^`]*)` \| (.*) \|$", table)
    return {key: (json.loads(default), description) for key, default, description in rows}


def _value(values, key):
    for part in key.split("."):
        values = values[part]
    return values


def test_the_values_table_is_values_yaml():
    documented = _documented_values()
    keys = schema_leaf_keys()
    assert list(documented) == keys, "docs/deployment.md 'Chart values' lists other keys than values.yaml"
    values = load_chart_file("values.yaml")
    for key in keys:
        assert documented[key][0] == _value(values, key), f"{key}: the documented default differs from values.yaml"
        assert documented[key][1].strip(), f"{key} has no description"


def test_the_upgrade_note_deletes_every_object_the_raw_manifests_make():
    note = _section(DEPLOYMENT_DOC.read_text(), "### Upgrading from the raw manifests")
    deleted = set()
    for namespace, kind, name in re.findall(r"(?m)^kubectl (?:-n (\S+) )?delete (\S+) (\S+)", note):
        deleted.add((kind, name, namespace or None))
    made = set()
    for manifest in RENDER.MANIFESTS:
        for doc in load_documents(REPO_ROOT / manifest.path):
            if doc["kind"] != "Namespace":  # kept: the chart is installed into it
                made.add((doc["kind"].lower(), doc["metadata"]["name"], doc["metadata"].get("namespace")))
    assert made <= deleted, f"not deleted by the note: {made - deleted}"
    assert ("service", "pod-gpu-metrics-dcgm-local", "gpu-operator") in deleted  # hand-kept copies' Service
    assert "helm install pod-gpu-metrics-exporter charts/pod-gpu-metrics-exporter -n gpu-monitoring" in note


def test_the_readme_deployment_section_leads_with_helm_install():
    readme = (REPO_ROOT / "README.md").read_text()
    section = _section(readme, "## Deployment")
    first_block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    assert "helm install" in first_block and "charts/pod-gpu-metrics-exporter" in first_block
    assert section.index("helm install") < section.index("kubectl create -f daemonset.yaml")


def test_the_docs_name_every_ci_shape():
    text = _section(DEPLOYMENT_DOC.read_text(), "## Kubernetes: the Helm chart")
    for path in sorted((CHART / "ci").glob("*-values.yaml")):
        assert f"`{path.name.removesuffix('-values.yaml')}`" in text, path.name
    assert yaml.safe_load((CHART / "ci" / "default-values.yaml").read_text()) == {}
