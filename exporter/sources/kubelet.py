"""Kubelet PodResources gRPC client: which container holds which device, read over the kubelet's unix socket."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import grpc

from exporter._gen.podresources.v1 import api_pb2 as v1_pb2
from exporter._gen.podresources.v1 import api_pb2_grpc as v1_grpc
from exporter._gen.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2
from exporter._gen.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from exporter.base.errors import KubeletError
from exporter.base.unix_socket import SocketWords, stat_socket

KUBELET_FOLDER = "/var/lib/kubelet/"
DEFAULT_SOCKET = KUBELET_FOLDER + "pod-resources/kubelet.sock"
# The kubelet sets no response-size limit and gRPC's 4 MiB default is exceeded on big nodes
# (dcgm-exporter broke on it and moved to 16 MiB). We take 4x that: a too-small limit blinds the
# exporter completely, while the bound only costs memory when a kubelet really sends that much.
MAX_RECEIVE_BYTES = 64 * 1024 * 1024
_CHANNEL_OPTIONS = (
    # A restarting kubelet re-creates its socket within seconds; gRPC's default backoff (up to
    # 120 s) would keep us blind long after it is back. (Not grpc.min_reconnect_backoff_ms: gRPC
    # reads it as the least time a connection attempt is given, see _connect.)
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A re-created channel must not inherit a subchannel (and its backoff) from the global pool.
    ("grpc.use_local_subchannel_pool", 1),
)
_V1_LIST = "/v1.PodResourcesLister/List"
_MOUNT_HINT = ("is the pod-resources folder mounted "
               "(-v /var/lib/kubelet/pod-resources:/var/lib/kubelet/pod-resources:ro) "
               "and --kubelet.socket right?")
# A socket elsewhere (a test kubelet's, the demo's under /tmp) is no folder a container mounts from the host.
_ELSEWHERE_HINT = ("is --kubelet.socket right, and its server running? (the demo prints its simulated "
                   "kubelet's socket, a new folder each run; a container needs the socket's folder mounted)")


def _absent_hint(path: str) -> str:
    """What to check when the socket is not there: the mount where it is the kubelet's own folder."""
    return _MOUNT_HINT if path.startswith(KUBELET_FOLDER) else _ELSEWHERE_HINT
_ROOT_HINT = ("run as root (the kubelet creates it root-owned, mode 0755) "
              "or as a user allowed to write to it")


@dataclass(frozen=True)
class AllocatedDevice:
    """One device the kubelet assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource: str     # device-plugin resource name ("nvidia.com/gpu"); for DRA the driver ("gpu.nvidia.com")
    device_id: str    # device-plugin device ID ("GPU-…", "0", "nvidia0/gi1"…); for DRA the device name ("gpu-0")
    dra: bool = False  # True when it came from v1 dynamic_resources
    claim: str = ""   # DRA only: "<claim_namespace>/<claim_name>"
    pool: str = ""    # DRA only: the ResourceSlice pool the device belongs to
    # DRA only: the first CDI device ID, which pod status names the device by; not part of its identity.
    cdi_id: str = field(default="", compare=False)


@dataclass(frozen=True)
class KubeletOptions:
    """PodResourcesClient's settings, checked by exporter.config."""

    socket_path: str = DEFAULT_SOCKET  # --kubelet.socket
    timeout_seconds: float = 5.0  # --kubelet.timeout, of each call
    max_receive_bytes: int = MAX_RECEIVE_BYTES


class PodResourcesClient:
    """Lists allocated devices, v1 first, v1alpha1 for old kubelets.

    Thread-safe (calls are serialised). Each List opens a channel and closes it after: an open
    channel keeps gRPC's threads waking several times a second (0.4 millicores of an otherwise idle
    process, measured), where a connection to a local unix socket every refresh interval costs far
    less. The API version found is remembered until the socket file is replaced (a kubelet restart
    deletes and re-creates it), since a restart may be an upgrade.
    """

    def __init__(self, options: KubeletOptions = KubeletOptions()):
        self.socket_path = options.socket_path
        self.timeout_seconds = options.timeout_seconds
        self.max_receive_bytes = options.max_receive_bytes
        self.api_version: str | None = None  # version of the last successful answer
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._socket_identity: tuple[int, int, int] | None = None
        self._use_v1alpha1 = False
        self._v1: Optional[Callable[..., bytes]] = None
        self._v1alpha1: v1alpha1_grpc.PodResourcesListerStub | None = None
        # The last v1 answer as received and the devices read from it. A node's allocations change
        # rarely, and reading 224 pods into AllocatedDevice objects costs three times the List
        # itself: an unchanged answer returns the same list of the same objects (so that a caller's
        # comparison with the devices it had costs one identity check per device).
        self._last_answer: Optional[bytes] = None
        self._last_pods: Optional[list] = None  # its pods, each serialised, sorted
        self._last_devices: list[AllocatedDevice] = []

    def list_devices(self) -> list[AllocatedDevice]:
        """Every device of every resource held by every container; raises KubeletError."""
        with self._lock:
            identity = self._stat_socket()
            self._connect(identity)
            try:
                return self._list()
            except grpc.RpcError as exc:
                raise _translate(exc, self) from exc
            finally:
                self._close_channel()

    def list_offered(self) -> list[tuple[str, str]]:
        """(resource, device ID) of every device the device plugins offer, held or free (v1
        GetAllocatableResources, Kubernetes >= 1.23 by default); raises KubeletError."""
        with self._lock:
            self._connect(self._stat_socket())
            try:
                lister = v1_grpc.PodResourcesListerStub(self._channel)
                response = lister.GetAllocatableResources(v1_pb2.AllocatableResourcesRequest(),
                                                          timeout=self.timeout_seconds)
            except grpc.RpcError as exc:
                raise _translate(exc, self, "GetAllocatableResources") from exc
            finally:
                self._close_channel()
        return [(devices.resource_name, device_id) for devices in response.devices for device_id in devices.device_ids]

    def close(self, wait_seconds: Optional[float] = None) -> None:
        """Close the channel. With wait_seconds, a List still running after that long is cancelled
        (gRPC cancels the calls of a closed channel) instead of waited for: shutting down must not
        wait up to --kubelet.timeout for a hanging kubelet."""
        if self._lock.acquire(timeout=-1 if wait_seconds is None else wait_seconds):
            try:
                self._disconnect()
            finally:
                self._lock.release()
            return
        channel = self._channel
        if channel is not None:
            channel.close()

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _stat_socket(self) -> tuple[int, int, int]:
        """Check the socket before dialling: gRPC's own errors for these cases are cryptic."""
        path = self.socket_path
        hint = _absent_hint(path)
        words = SocketWords(f"kubelet socket {path}", hint, f" on its folder: {_ROOT_HINT}", hint,
                            ": point --kubelet.socket at the kubelet's pod-resources socket")
        info = stat_socket(path, words, lambda line, reason: KubeletError(line, reason=reason))
        # ctime too: tmpfs may hand a re-created socket the inode number of the deleted one.
        return (info.st_dev, info.st_ino, info.st_ctime_ns)

    def _connect(self, identity: tuple[int, int, int]) -> None:
        if identity != self._socket_identity:
            self._socket_identity = identity
            self._use_v1alpha1 = False  # a new socket may be a new (upgraded) kubelet: probe v1 again
        target = "unix:" + os.path.abspath(self.socket_path)
        # A connection attempt, handshake included, may take the whole call's time: at 100 ms a kubelet
        # slow to answer on a busy node would fail the List at once as "not answering"
        # (grpc/grpc src/core/client_channel/subchannel.cc: the attempt's deadline is the larger of
        # the next backoff and grpc.min_reconnect_backoff_ms).
        options = (("grpc.max_receive_message_length", self.max_receive_bytes),
                   ("grpc.min_reconnect_backoff_ms", max(100, round(self.timeout_seconds * 1000))), *_CHANNEL_OPTIONS)
        self._channel = grpc.insecure_channel(target, options=options)
        # The v1 answer is taken as bytes, parsed only when it differs from the last one.
        self._v1 = self._channel.unary_unary(
            _V1_LIST, request_serializer=v1_pb2.ListPodResourcesRequest.SerializeToString, response_deserializer=None)
        self._v1alpha1 = v1alpha1_grpc.PodResourcesListerStub(self._channel)

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None

    def _disconnect(self) -> None:
        self._close_channel()
        self._socket_identity = None

    def _list(self) -> list[AllocatedDevice]:
        if not self._use_v1alpha1:
            try:
                answer = self._v1(v1_pb2.ListPodResourcesRequest(), timeout=self.timeout_seconds)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._use_v1alpha1 = True  # Kubernetes < 1.20: remember until the socket changes
            else:
                self.api_version = "v1"
                if answer != self._last_answer:
                    response = v1_pb2.ListPodResourcesResponse.FromString(answer)
                    # The kubelet lists its pods from a Go map, in another order on every call: the
                    # pods' own bytes, sorted, are what stays the same while nothing changes. (Device
                    # IDs within a container may be reordered too; that is read as a change: the full
                    # read, no worse than without this check.)
                    pods = sorted(pod.SerializeToString(deterministic=True) for pod in response.pod_resources)
                    if pods != self._last_pods:
                        self._last_pods, self._last_devices = pods, list(_devices_v1(response))
                    self._last_answer = answer
                return self._last_devices
        try:
            response = self._v1alpha1.List(v1alpha1_pb2.ListPodResourcesRequest(),
                                           timeout=self.timeout_seconds)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._use_v1alpha1 = False  # neither answers: try v1 first again next time
            raise
        self.api_version = "v1alpha1"
        return list(_devices_plugin(response))


def _container_devices(namespace: str, pod: str, container) -> Iterator[AllocatedDevice]:
    """Device-plugin devices of one container (the same message shape in v1 and v1alpha1)."""
    for devices in container.devices:
        for device_id in devices.device_ids:
            if device_id:
                yield AllocatedDevice(namespace, pod, container.name, devices.resource_name, device_id)


def _devices_plugin(response) -> Iterator[AllocatedDevice]:
    for pod in response.pod_resources:
        for container in pod.containers:
            yield from _container_devices(pod.namespace, pod.name, container)


def _devices_v1(response: v1_pb2.ListPodResourcesResponse) -> Iterator[AllocatedDevice]:
    yield from _devices_plugin(response)
    for pod in response.pod_resources:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                ref = f"{claim.claim_namespace}/{claim.claim_name}"
                for resource in claim.claim_resources:
                    # Kubelets 1.27-1.30 report only CDI names here, which do not identify a
                    # device; driver and device name arrived in 1.31.
                    if resource.driver_name and resource.device_name:
                        yield AllocatedDevice(pod.namespace, pod.name, container.name,
                                              resource.driver_name, resource.device_name,
                                              dra=True, claim=ref, pool=resource.pool_name,
                                              cdi_id=resource.cdi_devices[0].name if resource.cdi_devices else "")


def _translate(exc: grpc.RpcError, client: PodResourcesClient, call: str = "List") -> KubeletError:
    """One KubeletError, naming the socket, the call that failed and what to do."""
    code, details = exc.code(), exc.details() or ""
    lowered = details.lower()
    where = f"kubelet socket {client.socket_path}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return KubeletError(f"{where}: no answer to {call} within {client.timeout_seconds:g}s: the kubelet may be "
                            "overloaded; raise --kubelet.timeout if this persists", reason="timeout")
    if code == grpc.StatusCode.PERMISSION_DENIED or "permission denied" in lowered:
        return KubeletError(f"{where}: permission denied: {_ROOT_HINT}", reason="permission")
    if code == grpc.StatusCode.UNAVAILABLE:
        if "no such file" in lowered:
            return KubeletError(f"{where} not found: {_absent_hint(client.socket_path)}", reason="absent")
        return KubeletError(f"{where}: kubelet not answering ({details}): is it running? "
                            "will reconnect on the next call", reason="unavailable")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return KubeletError(_UNIMPLEMENTED[call].format(where=where, details=details),
                            reason="unimplemented")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return _translate_exhausted(where, details, client.max_receive_bytes, call)
    return KubeletError(f"{where}: {call} failed with {code.name}: {details}", reason="error")


# What an UNIMPLEMENTED answer means, per call: List is tried in v1, then v1alpha1, before it is reported;
# GetAllocatableResources exists in v1 only, and came later than List.
_UNIMPLEMENTED = {
    "List": ("{where}: the kubelet serves neither v1 nor v1alpha1 PodResources List ({details}): it needs "
             "Kubernetes >= 1.13 with the KubeletPodResources feature gate on (default from 1.15)"),
    "GetAllocatableResources": (
        "{where}: the kubelet does not serve v1 PodResources GetAllocatableResources ({details}), though its "
        "List works: it needs Kubernetes >= 1.21 with the KubeletPodResourcesGetAllocatable feature gate on "
        "(default from 1.23)"),
}


def _translate_exhausted(where: str, details: str, limit_bytes: int, call: str = "List") -> KubeletError:
    """RESOURCE_EXHAUSTED is either the kubelet's rate limiter or our own receive limit."""
    if "larger than max" in details.lower():  # gRPC's "Received message larger than max (N vs. M)"
        return KubeletError(f"{where}: {call} answer larger than our {limit_bytes / 2**20:g} MiB receive "
                            f"limit ({details}): please report this node's size", reason="too_large")
    if "rate limit" in details.lower():
        return KubeletError(f"{where}: rejected by the kubelet's rate limit (100 calls/s, burst 10, for "
                            "all clients on the node): another client may be calling it in a loop; "
                            "raise --kubelet.refresh-interval if we are", reason="rate_limited")
    return KubeletError(f"{where}: {call} failed with RESOURCE_EXHAUSTED: {details}", reason="error")
