#!/usr/bin/env python3
"""The demo with its simulated clocks frozen at one moment, so that two revisions serve the same values (for compare_revisions.py).

    python scripts/frozen_demo.py --moment SECONDS [demo flags...]

Whichever `exporter` is first on the path runs: its own `demo`, unchanged, but with the simulated
dcgm-exporter's and the simulated NVML's clocks reading SECONDS after their start on every call. The
demo has no clock option of its own (a user's demo moves in real time); this comparison-only driver
binds the clock where the demo's NVIDIA node makes its simulations, and nothing else.
"""

from __future__ import annotations

import functools
import sys
from typing import List

EPOCH = 1000.0  # any fixed monotonic reading: the simulations only ever use differences


def frozen_clock(moment: float):
    """A clock that reads EPOCH at the simulation's start (its first call) and EPOCH + moment after."""
    calls: List[int] = []

    def clock() -> float:
        first = not calls
        calls.append(1)
        return EPOCH if first else EPOCH + moment
    return clock


def main(argv: List[str]) -> int:
    moment = float(argv[argv.index("--moment") + 1])
    rest = [arg for index, arg in enumerate(argv) if arg != "--moment" and (index == 0 or argv[index - 1] != "--moment")]
    from exporter import cli

    node = _simulations_module()

    simulated_dcgm, simulated_nvml = node.SimulatedDcgm, node.SimulatedNvml
    node.SimulatedDcgm = lambda template: simulated_dcgm(template, clock=frozen_clock(moment))
    node.SimulatedNvml = functools.partial(_nvml, simulated_nvml, moment)
    return cli.main(["demo", *rest])


def _simulations_module():
    """The module whose SimulatedDcgm and SimulatedNvml the demo makes its simulations from: NVIDIA's demo node
    since the demo is vendor-neutral, the demo's own node module before."""
    import importlib

    try:
        return importlib.import_module("exporter.vendors.nvidia.demo.node")
    except ModuleNotFoundError:
        return importlib.import_module("exporter.demo.node")


def _nvml(simulated_nvml, moment: float, processes, ready=None):
    return simulated_nvml(processes, clock=frozen_clock(moment), ready=ready)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
