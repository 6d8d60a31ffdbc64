"""No module outside a vendor's package names a GPU vendor in its code, and the HPC source is one package plus one line.

Read as a contributor reads it: every module's tokens, string literals included, comments and docstrings
aside. `vendors/` holds what a vendor knows (its demo node included); `top/` (a client of the exporters,
reading their families by name) and `_gen/` (generated) are outside the rule. The demo's shared parts
(kubelet, API server, cluster, HTTP exporter) are held to it like the core.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import tokenize
from pathlib import Path
from typing import Dict, List, Set, Tuple

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "exporter"
VENDOR_WORDS = re.compile(r"nvidia|dcgm|nvml|DCGM_FI|xid|amd|rocm", re.IGNORECASE)
OUTSIDE_THE_RULE = ("vendors", "top", "_gen")

HPC_PACKAGE = "collectors/hpc_jobs"
HPC_WORD = re.compile(r"hpc", re.IGNORECASE)


def _docstring_starts(tree: ast.AST) -> Set[Tuple[int, int]]:
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                starts.add((first.lineno, first.col_offset))
    return starts


def code_naming(source: str, word: re.Pattern) -> List[Tuple[int, str]]:
    """(line, token) of every name or string literal in `source` that matches `word`, comments and
    docstrings aside."""
    docstrings = _docstring_starts(ast.parse(source))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.NAME, tokenize.STRING) or token.start in docstrings:
            continue
        if word.search(token.string):
            found.append((token.start[0], token.string))
    return found


def modules_naming(root: Path, word: re.Pattern) -> Dict[str, List[Tuple[int, str]]]:
    """Every module under `root` (outside the rule's folders) whose code matches `word`, by relative path."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in OUTSIDE_THE_RULE:
            continue
        naming = code_naming(path.read_text(), word)
        if naming:
            found[relative.as_posix()] = naming
    return found


def test_no_module_outside_a_vendors_package_names_a_vendor():
    """The core (device forms, figures, identity labels, log lines and the node page's words included)
    takes every vendor word from the vendor it is handed: no module outside the rule's folders names one."""
    found = modules_naming(PACKAGE_ROOT, VENDOR_WORDS)
    assert not found, f"vendor names outside exporter/vendors/: { {module: naming[:3] for module, naming in found.items()} }"


def test_the_vendors_package_is_where_the_names_are():
    """The rule's reading finds the vendor's words where they belong: the check reads real code."""
    found = modules_naming(PACKAGE_ROOT / "vendors", VENDOR_WORDS)
    assert {"nvidia/device_ids.py", "nvidia/figures.py", "nvidia/mig_shares.py"} <= set(found)


def hpc_outside_its_package(root: Path) -> Dict[str, List[Tuple[int, str]]]:
    return {module: naming for module, naming in modules_naming(root, HPC_WORD).items()
            if not module.startswith(HPC_PACKAGE + "/")}


def registration_lines(root: Path, module: str, word: re.Pattern) -> List[str]:
    """The lines of `module` naming `word` in code, import statements aside."""
    lines = (root / module).read_text().splitlines()
    named = sorted({number for number, _ in code_naming((root / module).read_text(), word)})
    return [lines[number - 1] for number in named if not lines[number - 1].lstrip().startswith(("from ", "import "))]


def test_the_hpc_source_is_one_package_and_one_registration_line():
    outside = hpc_outside_its_package(PACKAGE_ROOT)
    assert set(outside) == {"collectors/registry.py"}, outside
    assert [line.strip() for line in registration_lines(PACKAGE_ROOT, "collectors/registry.py", HPC_WORD)] == [
        "SOURCES: Tuple[type, ...] = (HpcJobsCollector,)"]
    assert (PACKAGE_ROOT / HPC_PACKAGE / "__init__.py").is_file()


def test_a_planted_vendor_name_or_source_module_is_caught(tmp_path):
    """The checks are not vacuous: a vendor's name planted in code (in a string, and as a name) in a copy
    of the package is found; the same words in a comment and a docstring are not; an HPC module left
    outside its package is found."""
    copy = tmp_path / "exporter"
    shutil.copytree(PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    identity = copy / "core" / "identity.py"
    identity.write_text(identity.read_text() + '\n\ndef _planted():\n    """Reads NVML."""  # and dcgm\n'
                        '    return "gpu.amd.com"\n\n\nROCM_SMI = None\n')
    found = modules_naming(copy, VENDOR_WORDS)
    assert [token for _, token in found["core/identity.py"]] == ['"gpu.amd.com"', "ROCM_SMI"]
    assert "core/identity.py" not in modules_naming(PACKAGE_ROOT, VENDOR_WORDS)
    (copy / "exposition" / "hpc_rows.py").write_text('"""Rows."""\n\nHPC_JOB = "pod_gpu_hpc_job_info"\n')
    assert set(hpc_outside_its_package(copy)) == {"collectors/registry.py", "exposition/hpc_rows.py"}
