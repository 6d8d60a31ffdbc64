"""The demo's AMD identity and health service: a real gRPC server on a unix socket answering List as AMD's does."""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Optional, Tuple

import grpc
from google.protobuf import empty_pb2

from exporter._gen.amd import metricssvc_pb2
from exporter.base.unix_grpc_server import UnixSocketGrpcServer
from exporter.vendors.amd.identity_client import GpuState

# Registered under the literal wire names, as AMD's generated Go server is (ServiceName in metricssvc_grpc.pb.go).
SERVICE = "metricssvc.MetricsService"
# AMD's List error while its health map is still empty (GetHealthStates in gpuagent_health.go): a Go error,
# which gRPC sends as UNKNOWN.
NOT_READY_DETAILS = "health status not available"


class DemoIdentityService(UnixSocketGrpcServer):
    """Answers `List` (and `GetGPUState`) with the states set, or those `states` gives at each call (health that
    changes over time); before any are set, with AMD's not-ready error.

    The socket is made mode 0600 and removed on stop, as AMD's exporter does on every restart; tests/support adds
    faults by overriding `_answer_list` and `_serialize`.
    """

    _socket_mode = 0o600  # as AMD's exporter makes it

    def __init__(self, socket_path: str, states: Optional[Callable[[], Iterable[GpuState]]] = None):
        super().__init__(socket_path, "identity service")
        self._lock = threading.Lock()
        self._states: Optional[Tuple[GpuState, ...]] = None
        self._provider = states

    def set_states(self, states: Iterable[GpuState]) -> None:
        with self._lock:
            self._states = tuple(states)

    def _register(self, server: grpc.Server) -> None:
        server.add_generic_rpc_handlers((self._handlers(),))

    def _handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(SERVICE, {
            "List": grpc.unary_unary_rpc_method_handler(
                self._answer_list, request_deserializer=empty_pb2.Empty.FromString,
                response_serializer=self._serialize),
            "GetGPUState": grpc.unary_unary_rpc_method_handler(
                self._answer_get, request_deserializer=metricssvc_pb2.GPUGetRequest.FromString,
                response_serializer=self._serialize),
        })

    def _serialize(self, response: metricssvc_pb2.GPUStateResponse) -> bytes:
        return response.SerializeToString()

    def _current(self, context: grpc.ServicerContext) -> Tuple[GpuState, ...]:
        with self._lock:
            states = self._states
        if states is None and self._provider is not None:
            states = tuple(self._provider())
        if states is None:
            context.abort(grpc.StatusCode.UNKNOWN, NOT_READY_DETAILS)
        return states

    def _answer_list(self, request: empty_pb2.Empty, context: grpc.ServicerContext):
        return state_response(self._current(context))

    def _answer_get(self, request: metricssvc_pb2.GPUGetRequest, context: grpc.ServicerContext):
        wanted = set(request.ID)
        return state_response(state for state in self._current(context) if state.gpu_id in wanted)


def state_response(states: Iterable[GpuState]) -> metricssvc_pb2.GPUStateResponse:
    """The wire form of some GPU states."""
    response = metricssvc_pb2.GPUStateResponse()
    for state in states:
        response.GPUState.add(ID=state.gpu_id, UUID=state.uuid, Health=state.health, Device=state.pci_address,
                              AssociatedWorkload=list(state.workloads))
    return response
