"""Several clusters through the pod proxy at once: one source per kubeconfig context, read side by side,
each within its own time; a cluster that fails or is late is named, and the others' rows are shown."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Optional

from exporter.top.errors import TopSourceError
from exporter.top.readings import Readings

Reader = Callable[[], Readings]


class _Cluster:
    """One context's source, made on first use (a context that cannot be loaded is that cluster's failure)
    and read on a daemon thread: one that never answers neither holds the others nor keeps top from exiting."""

    def __init__(self, name: str, make: Callable[[], object]):
        self.name, self._make, self._source = name, make, None
        self._thread: Optional[threading.Thread] = None
        self.readings: Optional[Readings] = None
        self.error: Optional[str] = None

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # still on the last frame's read: that one is awaited, a second never runs beside it
        self.readings, self.error = None, None
        self._thread = threading.Thread(target=self._read, name=f"top-{self.name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            if self._source is None:
                self._source = self._make()
            self.readings = self._source.read()
        except TopSourceError as exc:
            self.error = exc.message
        except Exception as exc:  # noqa: BLE001 - one cluster's surprise is its line in the footer, not a traceback
            self.error = f"{type(exc).__name__}: {exc}"

    def wait(self, deadline: float) -> None:
        self._thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def late(self) -> bool:
        return self._thread.is_alive()


class ClustersSource:
    """Reads every context's source at once; `bound_seconds` is the most one cluster may take."""

    def __init__(self, makers: Dict[str, Callable[[], object]], bound_seconds: float):
        self._clusters = [_Cluster(name, make) for name, make in makers.items()]
        self._bound = bound_seconds

    def read(self) -> Readings:
        for cluster in self._clusters:
            cluster.start()
        deadline = time.monotonic() + self._bound
        for cluster in self._clusters:
            cluster.wait(deadline)
        merged, failed = Readings(), []
        for cluster in self._clusters:
            why = (f"no answer within {self._bound:.3g} s" if cluster.late
                   else cluster.error if cluster.readings is None else None)
            if why is not None:
                failed.append((cluster.name, why))
                merged.unreachable.append(("", why, cluster.name))
                continue
            for family, samples in cluster.readings.families.items():
                merged.families.setdefault(family, []).extend(samples)
            merged.unreachable.extend(cluster.readings.unreachable)
        if len(failed) == len(self._clusters):
            raise TopSourceError("no cluster answered: " + "; ".join(f"context {name}: {why}" for name, why in failed),
                                 "unreachable")
        return merged
