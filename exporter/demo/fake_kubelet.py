"""A real gRPC PodResources server on a unix socket that plays the kubelet, for tests and the demo."""

from __future__ import annotations

import os
import threading
from concurrent import futures
from typing import Iterable, Sequence

import grpc

from exporter._gen.podresources.v1 import api_pb2 as v1_pb2
from exporter._gen.podresources.v1 import api_pb2_grpc as v1_grpc
from exporter._gen.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2
from exporter._gen.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from exporter.sources.kubelet import AllocatedDevice

FAULTS = (None, "unimplemented", "unknown", "rate_limited", "hang")
HANG_LIMIT_SECONDS = 60.0
# Status texts as a kubelet (grpc-go) words them, so clients are tested against realistic details.
_FAULT_STATUS = {
    "unimplemented": (grpc.StatusCode.UNIMPLEMENTED, "unknown service {service}"),
    "unknown": (grpc.StatusCode.UNKNOWN, "PodResources API List failed: fake kubelet told to fail"),
    "rate_limited": (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit"),
}
_PROTOS = {"v1": v1_pb2, "v1alpha1": v1alpha1_pb2}
_REGISTER = {"v1": v1_grpc.add_PodResourcesListerServicer_to_server,
             "v1alpha1": v1alpha1_grpc.add_PodResourcesListerServicer_to_server}
_PADDING_POD_BYTES = 256  # roughly what one padding pod adds to a response


class FakeKubelet:
    """Serves PodResources List for the `versions` given (others answer UNIMPLEMENTED, for real).

    `fault` (None, "unimplemented", "unknown", "rate_limited", "hang") applies to every List of
    every version. `pad_bytes` adds device-less pods until a response is at least that big.
    """

    def __init__(self, socket_path: str, versions: Sequence[str] = ("v1", "v1alpha1")):
        unknown = set(versions) - set(_PROTOS)
        if unknown:
            raise ValueError(f"unknown PodResources versions {sorted(unknown)}; use v1 and/or v1alpha1")
        self.socket_path = os.path.abspath(socket_path)
        self.versions = tuple(versions)
        self.fault: str | None = None
        self.last_response_bytes = 0
        self._lock = threading.Lock()
        self._devices: list[AllocatedDevice] = []
        # (resource, device ID) the device plugins offer, for v1 GetAllocatableResources; None: that
        # call is refused as a kubelet without the KubeletPodResourcesGetAllocatable gate refuses it.
        self._allocatable: list[tuple[str, str]] | None = None
        self.allocatable_calls = 0
        self._pad_bytes = 0
        self._responses: dict[str, object] = {}  # built once per version until the devices change
        self._list_calls = 0
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()

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

    def set_devices(self, devices: Iterable[AllocatedDevice]) -> None:
        with self._lock:
            self._devices = list(devices)
            self._responses.clear()

    def set_allocatable(self, devices: Iterable[tuple[str, str]] | None) -> None:
        """(resource, device ID) pairs GetAllocatableResources answers with; None refuses the call."""
        with self._lock:
            self._allocatable = None if devices is None else list(devices)

    def _answer_allocatable(self, context: grpc.ServicerContext):
        with self._lock:
            self.allocatable_calls += 1
            offered = self._allocatable
        if offered is None:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API GetAllocatableResources disabled")
        response = _PROTOS["v1"].AllocatableResourcesResponse()
        by_resource: dict[str, list[str]] = {}
        for resource, device_id in offered:
            by_resource.setdefault(resource, []).append(device_id)
        for resource, ids in by_resource.items():
            response.devices.add(resource_name=resource, device_ids=ids)
        return response

    def start(self) -> FakeKubelet:
        """Bind the socket and serve; a stopped kubelet can be started again (a new server)."""
        if self._server is not None:
            raise RuntimeError(f"fake kubelet on {self.socket_path} is already running")
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)  # a stale socket file makes bind fail
        self._stopping = threading.Event()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="fake-kubelet"))
        for version in self.versions:
            _REGISTER[version](_Servicer(self, version), server)
        server.add_generic_rpc_handlers((_RefusalCounter(self),))
        if server.add_insecure_port("unix:" + self.socket_path) == 0:
            raise OSError(f"fake kubelet could not bind {self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and delete the socket, as a kubelet that shuts down does."""
        server, self._server = self._server, None
        self._stopping.set()  # releases hung calls so the server can stop at once
        if server is not None:
            server.stop(grace=None).wait()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

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
        with self._lock:
            response = self._responses.get(version)
            if response is None:
                response = _build_response(_PROTOS[version], self._devices, version == "v1", self._pad_bytes)
                self._responses[version] = response
                self.last_response_bytes = response.ByteSize()
        return response

    def _hang(self, context: grpc.ServicerContext) -> None:
        """Block like a wedged kubelet until the caller gives up, stop() or the hang limit."""
        waited = 0.0
        while context.is_active() and waited < HANG_LIMIT_SECONDS:
            if self._stopping.wait(0.05):
                return
            waited += 0.05


class _Servicer:
    """Both versions' servicer: the generated base classes only add UNIMPLEMENTED defaults."""

    def __init__(self, kubelet: FakeKubelet, version: str):
        self._kubelet = kubelet
        self._version = version

    def List(self, request, context):  # noqa: N802 - the gRPC method name
        return self._kubelet._answer(self._version, context)

    def GetAllocatableResources(self, request, context):  # noqa: N802
        return self._kubelet._answer_allocatable(context)

    def Get(self, request, context):  # noqa: N802
        context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")


class _RefusalCounter(grpc.GenericRpcHandler):
    """Counts List calls to absent services, then declines them so gRPC answers UNIMPLEMENTED."""

    def __init__(self, kubelet: FakeKubelet):
        self._kubelet = kubelet

    def service(self, handler_call_details):
        if handler_call_details.method.endswith("PodResourcesLister/List"):
            self._kubelet._count_call()
        return None


def _build_response(pb, devices: list[AllocatedDevice], with_dra: bool, pad_bytes: int):
    """Group devices into pods and containers the way the kubelet reports them."""
    pods: dict[tuple[str, str], dict[str, list[AllocatedDevice]]] = {}
    for device in devices:
        if device.dra and not with_dra:
            continue  # v1alpha1 has no dynamic_resources
        pods.setdefault((device.namespace, device.pod), {}).setdefault(device.container, []).append(device)
    response = pb.ListPodResourcesResponse()
    for (namespace, pod), containers in pods.items():
        message = response.pod_resources.add(name=pod, namespace=namespace)
        for container, held in containers.items():
            _fill_container(pb, message.containers.add(name=container), held, namespace)
    _pad(response, pad_bytes)
    return response


def _fill_container(pb, container, held: list[AllocatedDevice], namespace: str) -> None:
    by_resource: dict[str, list[str]] = {}
    claims: dict[str, list[AllocatedDevice]] = {}
    for device in held:
        if device.dra:
            claims.setdefault(device.claim or f"{namespace}/claim", []).append(device)
        else:
            by_resource.setdefault(device.resource, []).append(device.device_id)
    for resource, ids in by_resource.items():
        container.devices.add(resource_name=resource, device_ids=ids)
    for claim, claimed in claims.items():
        claim_namespace, _, claim_name = claim.rpartition("/")
        dynamic = container.dynamic_resources.add(claim_name=claim_name,
                                                  claim_namespace=claim_namespace or namespace)
        for device in claimed:
            cdi = pb.CDIDevice(name=f"k8s.gpu.nvidia.com/claim={claim_name}-{device.device_id}")
            dynamic.claim_resources.add(cdi_devices=[cdi], driver_name=device.resource,
                                        pool_name=device.pool, device_name=device.device_id)


def _pad(response, pad_bytes: int) -> None:
    """Add device-less pods (most pods on a real node hold no GPU) until the response is big enough."""
    index = 0
    while pad_bytes > 0 and response.ByteSize() < pad_bytes:
        for _ in range(max(1, (pad_bytes - response.ByteSize()) // _PADDING_POD_BYTES)):
            name = f"padding-{index:07d}-" + "x" * 200
            response.pod_resources.add(name=name, namespace="padding").containers.add(name="app")
            index += 1
