"""Vendors: each GPU vendor one package (everything it knows), registered below by one line each."""

from __future__ import annotations

from typing import Dict, Tuple

from exporter.collectors.vendor import Vendor
from exporter.vendors.amd import AMD
from exporter.vendors.nvidia import NVIDIA

# Every vendor this build serves, one line each; the first is what --gpu.vendor auto serves as while
# nothing on the node says otherwise.
VENDORS: Tuple[Vendor, ...] = (
    NVIDIA,
    AMD,
)

# Vendors --gpu.vendor names before this build serves them: refused at start-up with this reason.
PENDING_VENDORS: Dict[str, str] = {}
