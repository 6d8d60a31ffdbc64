"""The package plan holds: imports point down the layers, no source or collector imports another, no circle.

The layers, lowest first (docs/architecture.md explains each). A module may import its own layer and
any layer below it, never one above; function-level (lazy) imports count like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "exporter"
LAYERS = (
    ("base", ("exporter", "exporter.base", "exporter._gen")),
    ("core", ("exporter.core",)),
    ("sources", ("exporter.sources",)),
    ("exposition", ("exporter.exposition",)),
    ("web", ("exporter.web",)),
    ("collectors", ("exporter.collectors",)),
    # The demo's vendor-free parts (its kubelet, API server, cluster, HTTP exporter), on which each vendor
    # builds its simulated node; the demo itself (demo.node) runs the one --gpu.vendor names, from above.
    ("demo parts", ("exporter.demo",)),
    # A vendor's package holds what it knows at every level (its exporter's reader, its driver library,
    # its shares and its collectors) on the framework below; the registry above takes its registration.
    ("vendors", ("exporter.vendors",)),
    ("registry", ("exporter.collectors.registry", "exporter.collectors.catalogue")),
    ("config", ("exporter.config",)),
    ("demo", ("exporter.demo.node",)),
    ("app", ("exporter.app", "exporter.auto_vendor", "exporter.mapping_report")),
    ("top", ("exporter.top",)),
    ("cli", ("exporter.cli", "exporter.__main__")),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def own_modules() -> Dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py")) if "_gen" not in path.parts}


def imported_modules(path: Path, known: Set[str]) -> Set[str]:
    """The project's modules this file imports anywhere (top level or inside functions)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target.startswith("exporter._gen"):
                found.add("exporter._gen")
            elif target in known:
                found.add(target)
    found.discard(name)
    return found


def layer_of(module: str) -> int:
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "exporter" and module.startswith(prefix + "."))
            if matches and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS and docs/architecture.md"
    return best


def source_of(module: str) -> str:
    """'exporter.sources.procfs' → 'procfs': the one outside system a source module talks to."""
    return module.split(".")[2] if module.startswith("exporter.sources.") else ""


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    modules = own_modules()
    known = set(modules) | {"exporter._gen"}
    return {name: imported_modules(path, known) for name, path in modules.items()}


def test_every_module_belongs_to_a_layer(graph):
    for module in graph:
        layer_of(module)


def test_no_module_imports_a_layer_above_its_own(graph):
    upward = [f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
              for module, targets in graph.items() for target in sorted(targets)
              if layer_of(target) > layer_of(module)]
    assert not upward, "\n".join(upward)


def test_no_source_imports_another_source(graph):
    crossing = [f"{module} imports {target}" for module, targets in graph.items() for target in sorted(targets)
                if source_of(module) and source_of(target) and source_of(module) != source_of(target)]
    assert not crossing, "\n".join(crossing)


def vendor_of(module: str) -> str:
    """'exporter.vendors.nvidia.nvml.mig' → 'nvidia'; '' outside a vendor's package (the registration included)."""
    return module.split(".")[2] if module.startswith("exporter.vendors.") else ""


def test_no_vendor_imports_another_vendor(graph):
    crossing = [f"{module} imports {target}" for module, targets in graph.items() for target in sorted(targets)
                if vendor_of(module) and vendor_of(target) and vendor_of(module) != vendor_of(target)]
    assert not crossing, "\n".join(crossing)


def collector_of(module: str) -> str:
    """'exporter.collectors.hpc_jobs' → 'hpc_jobs'; '' for the framework (collector, registry) and the rest."""
    if not module.startswith("exporter.collectors."):
        return ""
    name = module.split(".")[2]
    return "" if name in ("collector", "registry", "vendor", "catalogue", "roles") else name


def test_no_collector_imports_another_collector(graph):
    """What one collector needs of another (the pod index) reaches it through the hub the registry hands it."""
    crossing = [f"{module} imports {target}" for module, targets in graph.items() for target in sorted(targets)
                if collector_of(module) and collector_of(target) and collector_of(module) != collector_of(target)]
    assert not crossing, "\n".join(crossing)


# The framework names no source: a source is reached only through the registry. The kubelet is the core.
SOURCE_FREE = ("exporter.app", "exporter.cli", "exporter.config", "exporter.web")


def test_the_framework_names_no_source(graph):
    naming = [f"{module} imports {target}" for module, targets in graph.items() for target in sorted(targets)
              if any(module == prefix or module.startswith(prefix + ".") for prefix in SOURCE_FREE)
              and ((target.startswith("exporter.sources.") and target != "exporter.sources.kubelet")
                   or collector_of(target) or vendor_of(target))]
    assert not naming, "\n".join(naming)


def test_the_import_graph_has_no_circle(graph):
    cycles = _cycles(graph)
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_every_module_and_package_says_its_concern_in_one_line():
    missing = []
    for name, path in own_modules().items():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if name != "exporter.__main__" and (not doc or not doc.splitlines()[0].strip()):
            missing.append(name)
    assert not missing


def test_the_installed_demo_api_server_carries_no_test_only_code():
    """Compaction and its 410s, and the hooks for counting and faults are the tests' (support.fake_kube_api)."""
    from exporter.demo.kube_api import FakeKubeApi

    test_only = {"compact", "_compacted", "gone_as_http", "_admit", "_served_selector", "_answer_get",
                 "_counted_metadata_get", "_watch_bookmarks", "_event_line", "_bookmark_sent"}
    assert not test_only & set(dir(FakeKubeApi())), "the demo's server, as installed, has them"


def test_tests_share_helpers_only_through_the_support_package():
    """No test module imports another (shared helpers live in tests/support), and none edits sys.path:
    pytest's `pythonpath` setting puts tests/ on the path."""
    tests_root = PACKAGE_ROOT.parent / "tests"
    offenders = []
    for path in sorted(tests_root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0].startswith("test_") or name == "conftest" for name in names):
                offenders.append(f"{path.relative_to(tests_root)} imports {names}")
        if "sys.path.insert" in path.read_text() or "sys.path.append" in path.read_text():
            offenders.append(f"{path.relative_to(tests_root)} edits sys.path")
    assert not [o for o in offenders if not o.startswith("unit/test_architecture.py")], offenders


def test_the_checks_see_an_upward_import_and_a_circle():
    """The checks above are not vacuous: a made-up graph with both faults is caught."""
    made_up = {"exporter.core.a": {"exporter.web.b"}, "exporter.web.b": {"exporter.web.c"},
               "exporter.web.c": {"exporter.web.b"}}
    assert layer_of("exporter.web.b") > layer_of("exporter.core.a")
    assert _cycles(made_up) == [["exporter.web.b", "exporter.web.c", "exporter.web.b"]]
    assert source_of("exporter.sources.nvml.mig") != source_of("exporter.sources.procfs")
    assert vendor_of("exporter.vendors.one.reader") != vendor_of("exporter.vendors.other.reader") != ""


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """One circle per strongly connected component of more than one module (or a self-import)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                members = sorted(component)
                found.append(members + [members[0]])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
