"""Access to the real dcgm scrapes copied into tests/data (from the project's shared fixtures)."""

from __future__ import annotations

from pathlib import Path

from exporter.vendors.nvidia.demo.node import TEMPLATE as DEMO_SCRAPE

# Kept inside the repository so a clean clone passes its tests without anything beside it.
FIXTURES_DIR = Path(__file__).resolve().parents[1] / "data"
# The demo's real L4 scrape ships in the package (exporter/vendors/nvidia/demo/data); the tests read that one copy.
_PACKAGE_FIXTURES = {"dcgm/" + DEMO_SCRAPE.name: DEMO_SCRAPE}


def fixture_path(name: str) -> Path:
    """Path of a fixture, e.g. "dcgm/l4-aws-gpu-operator-default-counters.prom"; fails loudly if missing."""
    path = _PACKAGE_FIXTURES.get(name) or FIXTURES_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"fixture {path} not found")
    return path


def fixture_bytes(name: str) -> bytes:
    return fixture_path(name).read_bytes()
