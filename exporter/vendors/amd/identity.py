"""The AMD identity service's last good answer, kept across its outages, and whether it answers now."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

from exporter.base.logs import DependencyReporter
from exporter.vendors.amd.identity_client import AmdIdentityError, GpuState, IdentityClient

# GPU IDs and addresses survive a restart of AMD's exporter (its socket is re-created, and List errors until
# its first health pass); they change only when a GPU is re-partitioned, which needs the driver reloaded and
# the exporter restarted. An answer older than this while the service is down is no longer trusted.
DEFAULT_KEEP_SECONDS = 600.0


@dataclass(frozen=True)
class IdentitySnapshot:
    """What the last good answer said, and whether the service answers now."""

    up: bool  # the last List answered well
    states: Tuple[GpuState, ...] = ()  # the last good answer's, while it is trusted; else none
    failure: Optional[str] = None  # why the service fails now, in one line
    by_address: Dict[str, GpuState] = field(default_factory=dict, compare=False)
    by_id: Dict[str, GpuState] = field(default_factory=dict, compare=False)

    @property
    def known(self) -> bool:
        """Whether there is an answer to attribute by (the current one or a trusted last good one)."""
        return bool(self.states)

    def health(self, gpu_id: str) -> str:
        """A GPU's health as the service says it now; `unknown` while the service is down or does not list it."""
        state = self.by_id.get(gpu_id) if self.up else None
        return state.health if state else "unknown"


def make_snapshot(up: bool, states: Tuple[GpuState, ...], failure: Optional[str] = None) -> IdentitySnapshot:
    """A snapshot with its indexes built."""
    return IdentitySnapshot(up, states, failure, {s.pci_address: s for s in states if s.pci_address},
                            {s.gpu_id: s for s in states})


class AmdIdentity:
    """Refreshed by a `core.refresher.Refresher`; `snapshot` is what readers take, in one step.

    A failure is logged once per outage, whatever reasons it goes through (absent while the exporter restarts,
    then not ready until its first health pass), and its end once.
    """

    def __init__(self, client: IdentityClient, keep_seconds: float = DEFAULT_KEEP_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._client = client
        self._keep_seconds = keep_seconds
        self._clock = clock
        self._reporter = DependencyReporter("amd-identity-service")
        self._lock = threading.Lock()
        self._good: Tuple[GpuState, ...] = ()
        self._good_at: Optional[float] = None
        self._snapshot = IdentitySnapshot(False)

    def snapshot(self) -> IdentitySnapshot:
        with self._lock:
            if not self._snapshot.up and self._snapshot.states and self._expired():
                self._snapshot = make_snapshot(False, (), self._snapshot.failure)
            return self._snapshot

    def refresh(self) -> None:
        """One List: a good answer replaces the kept one; a failure keeps it (for `keep_seconds`) and says why."""
        try:
            states = self._client.list_states()
        except AmdIdentityError as exc:
            # One reason for every failure: DependencyReporter logs again only when the reason changes.
            self._reporter.failed("down", exc.message, cause=exc.reason)
            with self._lock:
                kept = () if self._expired() else self._good
                self._snapshot = make_snapshot(False, kept, self._reporter.failure)
            return
        with self._lock:
            self._good, self._good_at = states, self._clock()
            self._snapshot = make_snapshot(True, states, None)
        self._reporter.succeeded("amd identity service answering again", gpus=len(states))

    def _expired(self) -> bool:
        return self._good_at is None or self._clock() - self._good_at > self._keep_seconds
