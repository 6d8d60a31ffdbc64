"""The AMD metrics exporter's identity and health service: one `List` over its unix socket, read into GPU states.

Wire contract: ROCm/device-metrics-exporter pkg/exporter/gen/metricssvc (`/metricssvc.MetricsService/List`,
`google.protobuf.Empty` → `GPUStateResponse`), served by pkg/exporter/svc/svc_handler.go; the states are made in
pkg/amdgpu/gpuagent/gpuagent_health.go (`processEccErrorMetrics`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional, Tuple

import grpc
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError

from exporter._gen.amd import metricssvc_pb2
from exporter.base.errors import ExporterError
from exporter.base.unix_socket import SocketWords, stat_socket
from exporter.vendors.amd.device_ids import normalise_pci_address

DEFAULT_SOCKET = "/var/lib/amd-metrics-exporter/amdgpu_device_metrics_exporter_grpc.socket"
# The package is part of the path: a client built on AMD's look-alike gpumetricssvc.proto calls
# /gpumetricssvc.MetricsService/List and gets UNIMPLEMENTED from a real node.
LIST_METHOD = "/metricssvc.MetricsService/List"
HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
# A few hundred bytes per GPU: far below gRPC's 4 MiB default, which stays the bound.
_CHANNEL_OPTIONS = (
    # AMD's exporter re-creates its socket on every restart; a fresh channel per call, never from the pool.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
_GPU_INDEX = re.compile(r"\d+")  # gpu.Status.Index, a uint32 written with %v
# What AMD's List answers (an error made with fmt.Errorf: gRPC code UNKNOWN) while its health map is empty.
_NOT_READY = "health status not available"
_MOUNT_HINT = ("is the AMD exporter running on this node with its health service on, and its socket folder "
               "(/var/lib/amd-metrics-exporter) mounted?")


class AmdIdentityError(ExporterError):
    """The AMD identity service could not be asked or answered badly.

    Reasons: absent, permission, unavailable, timeout, unimplemented, not_ready, garbage, error.
    """


@dataclass(frozen=True)
class GpuState:
    """One GPU or partition as the identity service lists it."""

    gpu_id: str       # the `gpu_id` label of the AMD exporter's samples (amdsmi's index)
    uuid: str         # may be empty
    health: str       # HEALTHY, UNHEALTHY or UNKNOWN (a value the service is not known to send)
    pci_address: str  # lower case; empty where the service gives none
    workloads: Tuple[str, ...] = ()  # AMD's own idea of the holder (one per GPU): shown, never used to attribute


class IdentityClient:
    """Asks the service over a fresh channel per call (the socket is re-created on every restart of AMD's
    exporter), within `timeout_seconds`; `list_states` raises AmdIdentityError and nothing else."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout_seconds: float = 5.0):
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds

    def list_states(self) -> Tuple[GpuState, ...]:
        """Every GPU state the service lists, checked; raises AmdIdentityError."""
        self._check_socket()
        channel = grpc.insecure_channel("unix:" + os.path.abspath(self.socket_path), options=_CHANNEL_OPTIONS)
        try:
            call = channel.unary_unary(LIST_METHOD, request_serializer=empty_pb2.Empty.SerializeToString,
                                       response_deserializer=None)  # bytes: garbage is ours to judge
            answer = call(empty_pb2.Empty(), timeout=self.timeout_seconds)
        except grpc.RpcError as exc:
            raise self._translate(exc) from exc
        finally:
            channel.close()
        return read_states(answer, f"AMD identity socket {self.socket_path}")

    def _check_socket(self) -> None:
        """Say plainly what is wrong with the socket: gRPC's own words for these cases are cryptic."""
        words = SocketWords(f"AMD identity socket {self.socket_path}", _MOUNT_HINT,
                            ": AMD's exporter makes it root-owned, mode 0600", _MOUNT_HINT)
        stat_socket(self.socket_path, words, lambda line, reason: AmdIdentityError(line, reason=reason))

    def _translate(self, exc: grpc.RpcError) -> AmdIdentityError:
        code, details = exc.code(), exc.details() or ""
        where = f"AMD identity socket {self.socket_path}"
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return AmdIdentityError(f"{where}: no answer to List within {self.timeout_seconds:g}s", reason="timeout")
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return AmdIdentityError(f"{where}: {LIST_METHOD} is not served ({details}): is this AMD's "
                                    "device-metrics-exporter with its GPU monitoring on?", reason="unimplemented")
        if code == grpc.StatusCode.PERMISSION_DENIED or "permission denied" in details.lower():
            return AmdIdentityError(f"{where}: permission denied: AMD's exporter makes it root-owned, mode 0600",
                                    reason="permission")
        if code == grpc.StatusCode.UNAVAILABLE:
            return AmdIdentityError(f"{where}: not answering ({details}): AMD's exporter may be restarting",
                                    reason="unavailable")
        if _NOT_READY in details:
            return AmdIdentityError(f"{where}: no GPU state yet ({details}): AMD's exporter answers so until "
                                    "its first health check", reason="not_ready")
        return AmdIdentityError(f"{where}: List failed with {code.name}: {details}", reason="error")


def read_states(answer: bytes, where: str) -> Tuple[GpuState, ...]:
    """The states of one List answer; an answer that cannot be read whole raises AmdIdentityError(garbage):
    a partly read answer could pair one GPU's ID with another's address."""
    try:
        response = metricssvc_pb2.GPUStateResponse.FromString(answer)
    except DecodeError as exc:
        raise AmdIdentityError(f"{where}: List answer is not a GPUStateResponse ({exc})", reason="garbage") from exc
    states = tuple(_state(message, where) for message in response.GPUState)
    ids = [state.gpu_id for state in states]
    addresses = [state.pci_address for state in states if state.pci_address]
    if len(set(ids)) != len(ids) or len(set(addresses)) != len(addresses):
        raise AmdIdentityError(f"{where}: List answer names a GPU ID or PCI address twice", reason="garbage")
    return states


def _state(message: metricssvc_pb2.GPUState, where: str) -> GpuState:
    if not _GPU_INDEX.fullmatch(message.ID):
        raise AmdIdentityError(f"{where}: List answer has a GPU state whose ID {message.ID!r} is not a GPU index",
                               reason="garbage")
    address: Optional[str] = normalise_pci_address(message.Device) if message.Device else ""
    if address is None:
        raise AmdIdentityError(f"{where}: List answer has GPU {message.ID} at {message.Device!r}, not a PCI "
                               "address", reason="garbage")
    health = message.Health if message.Health in (HEALTHY, UNHEALTHY) else UNKNOWN
    return GpuState(message.ID, message.UUID, health, address, tuple(message.AssociatedWorkload))
