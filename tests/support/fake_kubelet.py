"""The demo's gRPC kubelet with what tests add: injected faults, padded answers and counts of the Lists made."""

from __future__ import annotations

import os
import socket
import threading
from typing import List, Sequence

import grpc

from exporter.demo import fake_kubelet as demo

FAULTS = (None, "unimplemented", "unknown", "rate_limited", "hang")
HANG_LIMIT_SECONDS = 60.0
# Status texts as a kubelet (grpc-go) words them, so clients are tested against realistic details.
_FAULT_STATUS = {
    "unimplemented": (grpc.StatusCode.UNIMPLEMENTED, "unknown service {service}"),
    "unknown": (grpc.StatusCode.UNKNOWN, "PodResources API List failed: fake kubelet told to fail"),
    "rate_limited": (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit"),
}
_PADDING_POD_BYTES = 256  # roughly what one padding pod adds to a response


class FakeKubelet(demo.FakeKubelet):
    """The demo's kubelet, still a real gRPC server on a unix socket, told to misbehave.

    `fault` (None, "unimplemented", "unknown", "rate_limited", "hang") applies to every List of
    every version; `allocatable_unimplemented` answers GetAllocatableResources UNIMPLEMENTED, as a
    kubelet older than the call does, while List works. `pad_bytes` adds device-less pods until a response is at least that big;
    `last_response_bytes` is the size of the last response built. `list_calls` counts Lists.
    `die_leaving_socket()` plays a kubelet that died without cleaning up.
    """

    def __init__(self, socket_path: str, versions: Sequence[str] = ("v1", "v1alpha1")):
        super().__init__(socket_path, versions)
        self.fault: str | None = None
        self.allocatable_unimplemented = False
        self.last_response_bytes = 0
        self._pad_bytes = 0
        self._list_calls = 0
        self._released = threading.Event()  # set by stop(): hung calls return, so the server stops at once
        self._unreachable: List[grpc.Server] = []  # servers left running by die_leaving_socket, stopped by stop()

    @property
    def list_calls(self) -> int:
        """List calls answered or refused (including UNIMPLEMENTED for absent versions)."""
        with self._lock:
            return self._list_calls

    @property
    def pad_bytes(self) -> int:
        return self._pad_bytes

    @pad_bytes.setter
    def pad_bytes(self, value: int) -> None:
        with self._lock:
            self._pad_bytes = value
            self._responses.clear()

    def start(self) -> FakeKubelet:
        self._released = threading.Event()
        super().start()
        return self

    def stop(self) -> None:
        self._released.set()
        super().stop()
        for server in self._unreachable:  # gRPC deletes their path on stop: the socket file is gone already
            server.stop(grace=None).wait()
        self._unreachable.clear()

    def die_leaving_socket(self) -> None:
        """As a kubelet that died without cleaning up: its socket file stays, nobody listens on it; start() again
        replaces the file. For a client it happens at once: a socket file bound and closed beside the live one
        is renamed over it. Stopping the server first would not do: gRPC deletes the socket file as it stops, and
        a List made before the stale file came would find no socket at all. The server, unreachable without its
        file, runs on until stop()."""
        stale = self.socket_path + ".stale"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(stale)
        finally:
            listener.close()
        os.replace(stale, self.socket_path)
        self._released.set()
        server, self._server = self._server, None
        if server is not None:
            self._unreachable.append(server)

    def _generic_handlers(self) -> tuple:
        return (_RefusalCounter(self),)

    def _count_call(self) -> None:
        with self._lock:
            self._list_calls += 1

    def _answer(self, version: str, context: grpc.ServicerContext):
        """The List response for one call, after applying the configured fault."""
        self._count_call()
        fault = self.fault
        if fault == "hang":
            self._hang(context)
            context.abort(grpc.StatusCode.UNAVAILABLE, "fake kubelet stopped while hanging")
        if fault in _FAULT_STATUS:
            code, text = _FAULT_STATUS[fault]
            context.abort(code, text.format(service=f"{version}.PodResourcesLister"))
        return super()._answer(version, context)

    def _answer_allocatable(self, context: grpc.ServicerContext):
        if self.allocatable_unimplemented:  # grpc-go's words for a method its service does not have
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          "unknown method GetAllocatableResources for service v1.PodResourcesLister")
        return super()._answer_allocatable(context)

    def _build(self, version: str):
        response = super()._build(version)
        _pad(response, self._pad_bytes)
        self.last_response_bytes = response.ByteSize()
        return response

    def _hang(self, context: grpc.ServicerContext) -> None:
        """Block like a wedged kubelet until the caller gives up, stop() or the hang limit."""
        waited = 0.0
        while context.is_active() and waited < HANG_LIMIT_SECONDS:
            if self._released.wait(0.05):
                return
            waited += 0.05


class _RefusalCounter(grpc.GenericRpcHandler):
    """Counts List calls to absent services, then declines them so gRPC answers UNIMPLEMENTED."""

    def __init__(self, kubelet: FakeKubelet):
        self._kubelet = kubelet

    def service(self, handler_call_details):
        if handler_call_details.method.endswith("PodResourcesLister/List"):
            self._kubelet._count_call()
        return None


def _pad(response, pad_bytes: int) -> None:
    """Add device-less pods (most pods on a real node hold no GPU) until the response is big enough."""
    index = 0
    while pad_bytes > 0 and response.ByteSize() < pad_bytes:
        for _ in range(max(1, (pad_bytes - response.ByteSize()) // _PADDING_POD_BYTES)):
            name = f"padding-{index:07d}-" + "x" * 200
            response.pod_resources.add(name=name, namespace="padding").containers.add(name="app")
            index += 1
