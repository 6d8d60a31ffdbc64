"""The demo's AMD identity service with what tests add: faults (hangs, gRPC errors, garbage) and a count of Lists."""

from __future__ import annotations

import threading
from typing import Iterable, Optional

import grpc

from exporter.vendors.amd.demo_identity import DemoIdentityService
from exporter.vendors.amd.identity_client import GpuState

FAULTS = (None, "hang", "unavailable", "internal", "garbage", "missing_id", "bad_address")
HANG_LIMIT_SECONDS = 60.0
# As grpc-go words them.
_STATUS = {"unavailable": (grpc.StatusCode.UNAVAILABLE, "transport is closing"),
           "internal": (grpc.StatusCode.INTERNAL, "grpc: error while marshaling: proto: invalid UTF-8")}
_UNDECODABLE = b"\x0a\xff\xff\xff\xff\x0f"  # field 1, a length far past the end: not a GPUStateResponse


class FakeAmdIdentity(DemoIdentityService):
    """Still a real gRPC server on a unix socket; `fault` (one of FAULTS) applies to every List. Without `states`
    it answers as AMD's does before its first health pass."""

    def __init__(self, socket_path: str, states: Optional[Iterable[GpuState]] = None):
        super().__init__(socket_path)
        if states is not None:
            self.set_states(states)
        self.fault: str | None = None
        self._calls = 0
        self._count_lock = threading.Lock()
        self._released = threading.Event()

    @property
    def list_calls(self) -> int:
        with self._count_lock:
            return self._calls

    def stop(self) -> None:
        self._released.set()
        super().stop()
        self._released = threading.Event()

    def _serialize(self, response) -> bytes:
        return response if isinstance(response, bytes) else super()._serialize(response)

    def _answer_list(self, request, context):
        with self._count_lock:
            self._calls += 1
        fault = self.fault
        if fault == "hang":
            waited = 0.0
            while context.is_active() and waited < HANG_LIMIT_SECONDS and not self._released.wait(0.05):
                waited += 0.05
            context.abort(grpc.StatusCode.UNAVAILABLE, "fake identity service stopped while hanging")
        if fault in _STATUS:
            context.abort(*_STATUS[fault])
        if fault == "garbage":
            return _UNDECODABLE
        answer = super()._answer_list(request, context)
        if fault == "missing_id":
            answer.GPUState.add(UUID="3dff74a1-0000-1000-80d3-0c4c1df1df58", Health="healthy", Device="0000:99:00.0")
        if fault == "bad_address":
            answer.GPUState.add(ID="99", Health="healthy", Device="card9")
        return answer

