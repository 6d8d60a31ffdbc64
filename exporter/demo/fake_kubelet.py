"""A real gRPC PodResources server on a unix socket that plays the kubelet, for the demo (tests add faults to it)."""

from __future__ import annotations

import threading
from typing import Iterable, Sequence

import grpc

from exporter._gen.podresources.v1 import api_pb2 as v1_pb2
from exporter._gen.podresources.v1 import api_pb2_grpc as v1_grpc
from exporter._gen.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2
from exporter._gen.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from exporter.base.unix_grpc_server import UnixSocketGrpcServer
from exporter.sources.kubelet import AllocatedDevice

_PROTOS = {"v1": v1_pb2, "v1alpha1": v1alpha1_pb2}
_REGISTER = {"v1": v1_grpc.add_PodResourcesListerServicer_to_server,
             "v1alpha1": v1alpha1_grpc.add_PodResourcesListerServicer_to_server}


class FakeKubelet(UnixSocketGrpcServer):
    """Serves PodResources List for the `versions` given (others answer UNIMPLEMENTED, for real), and
    v1 GetAllocatableResources.

    The demo runs it as it is; tests/support adds faults and counts to it by overriding `_answer`,
    `_build` and `_generic_handlers`.
    """

    _workers = 8

    def __init__(self, socket_path: str, versions: Sequence[str] = ("v1", "v1alpha1")):
        unknown = set(versions) - set(_PROTOS)
        if unknown:
            raise ValueError(f"unknown PodResources versions {sorted(unknown)}; use v1 and/or v1alpha1")
        super().__init__(socket_path, "fake kubelet")
        self.versions = tuple(versions)
        self._lock = threading.Lock()
        self._devices: list[AllocatedDevice] = []
        # (resource, device ID) the device plugins offer, for v1 GetAllocatableResources; None: that
        # call is refused as a kubelet without the KubeletPodResourcesGetAllocatable gate refuses it.
        self._allocatable: list[tuple[str, str]] | None = None
        self._responses: dict[str, object] = {}  # built once per version until the devices change

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

    def _register(self, server: grpc.Server) -> None:
        for version in self.versions:
            _REGISTER[version](_Servicer(self, version), server)
        handlers = self._generic_handlers()
        if handlers:
            server.add_generic_rpc_handlers(handlers)

    def _generic_handlers(self) -> tuple:
        """gRPC handlers asked before the services are (none here: calls to absent ones are UNIMPLEMENTED)."""
        return ()

    def _answer(self, version: str, context: grpc.ServicerContext):
        """The List response for one call: built once for the devices set, then handed out again."""
        with self._lock:
            response = self._responses.get(version)
            if response is None:
                response = self._responses[version] = self._build(version)
        return response

    def _build(self, version: str):
        """One version's List response for the devices set (called with the lock held)."""
        return _build_response(_PROTOS[version], self._devices, version == "v1")


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


def _build_response(pb, devices: list[AllocatedDevice], with_dra: bool):
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
            # The CDI name the driver's kind gives a claimed device (k8s.<driver>/claim=<claim>-<device>).
            cdi = pb.CDIDevice(name=f"k8s.{device.resource}/claim={claim_name}-{device.device_id}")
            dynamic.claim_resources.add(cdi_devices=[cdi], driver_name=device.resource,
                                        pool_name=device.pool, device_name=device.device_id)

