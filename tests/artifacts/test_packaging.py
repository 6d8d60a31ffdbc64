"""pyproject.toml: the declared floors are the ones CI installs, and the license is an SPDX expression."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FLOORS = REPO_ROOT / "constraints" / "floors.txt"


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared_floors() -> dict:
    floors = {}
    for requirement in _pyproject()["project"]["dependencies"]:
        match = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)", requirement)
        assert match, f"dependency without a >= floor: {requirement!r}"
        floors[_canonical(match.group(1))] = match.group(2)
    return floors


def _pinned_floors() -> dict:
    pins = {}
    for line in FLOORS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[_canonical(name)] = version.strip()
    return pins


def _release(version: str) -> tuple:
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def test_floor_constraints_pin_every_declared_floor():
    declared, pinned = _declared_floors(), _pinned_floors()
    assert declared.keys() == pinned.keys()
    for name, floor in declared.items():
        assert _release(pinned[name]) == _release(floor), f"{name}: pyproject says >={floor}, {FLOORS.name} pins {pinned[name]}"


def test_license_is_an_spdx_expression_with_its_file():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in text and "Apache-2.0" in text
    assert "https://www.apache.org/licenses/LICENSE-2.0" in text
    # PEP 639: setuptools >= 77 reads both keys; older ones reject the string form.
    assert any(r.startswith("setuptools>=77") for r in _pyproject()["build-system"]["requires"])


def test_the_wheel_holds_every_package_and_no_test_double_but_the_demos(tmp_path):
    """Built as users get it (pip, build isolation): every module of exporter/, the demo's fakes and data,
    and nothing from tests/ (the faults the tests inject into the demo's servers are test doubles only)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    # From a copy of what the image build copies (.dockerignore): building in the checkout would leave a
    # build/ folder there, whose stale files a later build can carry into its wheel.
    source = tmp_path / "source"
    shutil.copytree(REPO_ROOT / "exporter", source / "exporter", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO_ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("pod_gpu_metrics_exporter-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "exporter").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert "exporter/vendors/nvidia/demo/data/l4-aws-gpu-operator-default-counters.prom" in names
    doubles = sorted(name for name in names if "fake" in name.rsplit("/", 1)[-1])
    assert doubles == ["exporter/demo/fake_kubelet.py", "exporter/demo/fake_upstream.py"]
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/"))]
