"""Opening NVML (the driver's libnvidia-ml.so.1 through nvidia-ml-py), and the MIG resolver when it opens."""

from __future__ import annotations

import threading
from typing import Any, Optional, Tuple

from exporter.base.bounded import BoundedRunner, CallTimeout
from exporter.base.logs import log
from exporter.vendors.nvidia.nvml.mig import NvmlMigResolver

_UNRESOLVED_NOTE = ("MIG-<uuid> device IDs (nvidia.com/mig-* on R470+ drivers) and DRA MIG devices will be "
                    "reported as unresolved: make the driver's libnvidia-ml.so.1 visible in the container to resolve them "
                    "(the NVIDIA container runtime with NVIDIA_DRIVER_CAPABILITIES=utility does)")


# nvmlInit loads the driver's library and, without persistence mode, wakes every GPU: seconds on a
# large node. Longer than that, it is wedged.
OPEN_TIMEOUT_SECONDS = 2.0


def open_nvml(library: Any = None) -> Tuple[Any, str]:
    """(the NVML binding, initialised, "") when NVML is usable, else (None, why not).

    `library` is a binding to use instead of importing pynvml (tests pass a stand-in). nvmlInit is
    reference-counted by the driver, so each user of NVML in the process may open it.
    """
    if library is None:
        try:
            import pynvml as library  # the optional nvidia-ml-py distribution
        except ImportError:
            return None, "nvidia-ml-py (module pynvml) is not installed"
    try:
        library.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on nodes or images without a driver
        return None, f"NVML did not initialise: {str(exc) or type(exc).__name__}"
    return library, ""


def make_mig_resolver(library: Any = None) -> Optional[NvmlMigResolver]:
    """A resolver when NVML is usable (nvidia-ml-py importable and the driver's library present), else None.

    `library` is an NVML binding to use instead of importing pynvml (tests pass a stand-in). Called once
    per process (by LazyMigResolver), so its one info line is the only notice that MIG-<uuid> IDs stay
    unresolved.
    """
    library, problem = open_nvml(library)
    if library is None:
        log("info", _UNRESOLVED_NOTE, reason=problem)
        return None
    log("info", "NVML available: MIG-<uuid> device IDs are resolved to their parent GPU and GPU instance")
    return NvmlMigResolver(library)


class LazyMigResolver:
    """A MigResolver that opens NVML at its first MIG-<uuid> lookup, once, and answers through it after.

    Most nodes never show a MIG-<uuid> device ID, and `demo` or `mapping` rarely do: opening NVML at
    start-up would load the driver's library for nothing and log a MIG note that concerns nobody.
    Lookups run on the mapping refresher (or `mapping`'s one build), never on a scrape.

    nvmlInit may hang on a wedged driver, and the refresher attributes every GPU: it is waited for at
    most `open_timeout_seconds`, then left to finish on its own thread. Until it does, MIG-<uuid> IDs
    are unresolved (the other GPUs are attributed as usual); once it does, the next refresh resolves them.
    """

    def __init__(self, library: Any = None, open_timeout_seconds: float = OPEN_TIMEOUT_SECONDS):
        self._library = library  # an NVML binding instead of pynvml (tests pass a stand-in)
        self._lock = threading.Lock()
        self._opened = False
        self._resolver: Optional[NvmlMigResolver] = None
        self._runner = BoundedRunner("nvml-init", open_timeout_seconds, "nvmlInit (for MIG lookups)")

    def __call__(self, mig_uuid: str) -> Optional[Tuple[str, str]]:
        resolver = self._opened_resolver()
        return resolver(mig_uuid) if resolver is not None else None

    def placement(self, parent_uuid: str, profile_id: int, start: int) -> Optional[str]:
        """A MigPlacementResolver (a dynamic DRA MIG device): NvmlMigResolver.placement once NVML is open."""
        resolver = self._opened_resolver()
        return resolver.placement(parent_uuid, profile_id, start) if resolver is not None else None

    def _opened_resolver(self) -> Optional[NvmlMigResolver]:
        with self._lock:
            if not self._opened:
                self._opened = True
                try:
                    self._runner.run(self._open)
                except CallTimeout:
                    pass  # it goes on in the background: its resolver is used once it is there
            return self._resolver

    def _open(self) -> None:
        self._resolver = make_mig_resolver(self._library)
