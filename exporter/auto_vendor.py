"""`--gpu.vendor auto` at run time: the marker paths before the node is built, then a look at each mapping refresh until decided.

What the node shows is gathered here (the kubelet's resources offered and held, the ResourceSlices' drivers,
the vendors' marker paths) and judged by core.vendor_choice. Start-up asks the kubelet nothing (a kubelet that
hangs must not delay serving): it reads the marker paths only, and the refresher's first List, moments later,
brings the rest. A decision is logged once, with why, and kept for the process's life; while none is made the
node is served as the fallback vendor. A decision for another vendor than the one served is handed to
`on_decided`, which the serving Node answers by building that vendor's parts and swapping them in
(app.Node.switch_vendor).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Collection, Optional, Sequence

from exporter.base.errors import KubeletError
from exporter.base.logs import log
from exporter.collectors.registry import VENDOR_AUTO, VENDORS
from exporter.core.vendor_choice import Candidate, NodeSigns, VendorChoice, choose_vendor


def candidates(config) -> Sequence[Candidate]:
    """Every registered vendor as detection reads it, its marker paths taken from the Config."""
    return tuple(Candidate(vendor.name, vendor.devices,
                           tuple(vendor.marker_paths(config)) if vendor.marker_paths is not None else ())
                 for vendor in VENDORS)


def fallback_vendor() -> str:
    """What auto serves as while nothing is seen: the first registered vendor."""
    return VENDORS[0].name


class VendorWatch:
    """Looks at the node until a vendor is decided; `look` is safe to call from the mapping refresher."""

    def __init__(self, config, list_offered: Callable[[], Sequence], path_exists: Callable[[str], bool] = os.path.exists,
                 on_decided: Optional[Callable[[str], None]] = None):
        self._candidates = candidates(config)
        self._fallback = fallback_vendor()
        self._list_offered = list_offered
        self._path_exists = path_exists
        self._slice_drivers: Callable[[], Collection[str]] = lambda: ()
        self.on_decided = on_decided  # called once, with a vendor other than the one served
        self._lock = threading.Lock()
        self._waiting_logged = False
        self.decided: Optional[VendorChoice] = None

    def rebind(self, list_offered: Callable[[], Sequence]) -> None:
        """Ask this kubelet client from now on (the serving core's, once it is built)."""
        self._list_offered = list_offered

    def read_slices_from(self, slice_drivers: Callable[[], Collection[str]]) -> None:
        """Read the node's ResourceSlice drivers from here (the Kubernetes context, once it is prepared)."""
        self._slice_drivers = slice_drivers

    def look(self, held: Optional[Sequence] = None, served: str = "") -> Optional[VendorChoice]:
        """One look (held: the devices the kubelet just listed; None: ask the kubelet nothing, read the marker
        paths only); the choice once made, else None. A choice of another vendor than `served` is handed to
        on_decided."""
        with self._lock:
            if self.decided is not None:
                return self.decided
            choice = choose_vendor(self._candidates, self._signs(held), self._fallback)
            if choice is None:
                if held is not None:
                    self._log_waiting()
                return None
            self.decided = choice
        log("info", "GPU vendor chosen", vendor=choice.vendor, reason=choice.reason, gpu_vendor=VENDOR_AUTO)
        if served and choice.vendor != served and self.on_decided is not None:
            self.on_decided(choice.vendor)
        return choice

    def wrap(self, list_devices: Callable[[], Sequence], served: Callable[[], str]) -> Callable[[], Sequence]:
        """`list_devices` that also looks at what it lists, while undecided: at each mapping refresh."""
        def listing() -> Sequence:
            devices = list_devices()
            if self.decided is None:
                self.look(devices, served())
            return devices
        return listing

    def _signs(self, held: Optional[Sequence]) -> NodeSigns:
        paths = {path for candidate in self._candidates for path in candidate.marker_paths if self._path_exists(path)}
        if held is None:
            return NodeSigns(present_paths=paths)
        try:
            offered = list(self._list_offered())
        except KubeletError:
            offered = []  # a kubelet that refuses GetAllocatableResources: the held devices still tell
        return NodeSigns(offered, tuple(held), set(self._slice_drivers()), paths)

    def _log_waiting(self) -> None:
        if not self._waiting_logged:
            self._waiting_logged = True
            log("info", f"no GPU vendor seen on this node yet: serving as {self._fallback}, looking again at each "
                "mapping refresh", gpu_vendor=VENDOR_AUTO)


def watch_from_start(config) -> VendorWatch:
    """A watch that has read the marker paths, before anything runs; its `decided` is None unless one exists."""
    watch = VendorWatch(config, list_offered=lambda: ())
    watch.look(None)
    return watch


def look_once(config, list_offered: Callable[[], Sequence], list_devices: Callable[[], Sequence]) -> Optional[VendorChoice]:
    """One whole look for a command that runs once (`mapping`): the kubelet's answers and the marker paths;
    None when nothing was seen or the kubelet did not answer (its own call then says why)."""
    watch = VendorWatch(config, list_offered)
    try:
        held = list(list_devices())
    except KubeletError:
        return watch.look(None)
    choice = watch.look(held)
    return choice
