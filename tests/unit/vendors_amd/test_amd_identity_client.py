"""The AMD identity client against real gRPC servers on unix sockets: the wire path pinned by a server that knows
only the literal names, and every way the service fails turned into one AmdIdentityError."""

from __future__ import annotations

import os
import socket
import time
from concurrent import futures

import grpc
import pytest

from exporter._gen.amd import metricssvc_pb2
from exporter.vendors.amd.identity_client import (HEALTHY, UNHEALTHY, UNKNOWN, AmdIdentityError, GpuState,
                                                  IdentityClient)
from support.fake_amd_identity import FakeAmdIdentity

STATES = (GpuState("0", "3dff74a1-0000-1000-80d3-0c4c1df1df58", HEALTHY, "0000:05:00.0", ("default/train",)),
          GpuState("1", "", UNHEALTHY, "0000:26:00.1"))


def _field(number: int, value: bytes) -> bytes:
    """One length-delimited protobuf field, encoded by hand so that nothing of our proto is assumed."""
    assert len(value) < 128
    return bytes([number << 3 | 2, len(value)]) + value


def _literal_server(socket_path: str, service: str, answer: bytes, seen: list) -> grpc.Server:
    """A server knowing only `service`/List, answering `answer` as bytes: not our generated servicer."""
    def list_(request: bytes, context) -> bytes:
        seen.append(request)
        return answer

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {
        "List": grpc.unary_unary_rpc_method_handler(list_, request_deserializer=None, response_serializer=None)}),))
    assert server.add_insecure_port("unix:" + socket_path)
    server.start()
    return server


def test_list_is_asked_on_the_metricssvc_wire_path(tmp_path):
    socket_path = str(tmp_path / "amd.sock")
    gpu = (_field(1, b"3") + _field(2, b"uuid-3") + _field(3, b"unhealthy") + _field(4, b"ns/pod")
           + _field(5, b"0000:E5:00.2"))
    seen: list = []
    server = _literal_server(socket_path, "metricssvc.MetricsService", _field(1, gpu), seen)
    try:
        states = IdentityClient(socket_path, timeout_seconds=5).list_states()
    finally:
        server.stop(None).wait()
    assert states == (GpuState("3", "uuid-3", UNHEALTHY, "0000:e5:00.2", ("ns/pod",)),)
    assert seen == [b""]  # google.protobuf.Empty


def test_the_look_alike_package_is_not_served_and_says_so(tmp_path):
    socket_path = str(tmp_path / "amd.sock")
    server = _literal_server(socket_path, "gpumetricssvc.MetricsService", b"", [])
    try:
        with pytest.raises(AmdIdentityError) as caught:
            IdentityClient(socket_path, timeout_seconds=5).list_states()
    finally:
        server.stop(None).wait()
    assert caught.value.reason == "unimplemented"
    assert "/metricssvc.MetricsService/List is not served" in caught.value.message


def test_the_generated_code_keeps_the_wire_names_and_numbers():
    service = metricssvc_pb2.DESCRIPTOR.services_by_name["MetricsService"]
    assert service.full_name == "metricssvc.MetricsService"
    assert service.methods_by_name["List"].input_type.full_name == "google.protobuf.Empty"
    assert service.methods_by_name["GetGPUState"].input_type.full_name == "metricssvc.GPUGetRequest"
    assert {f.name: f.number for f in metricssvc_pb2.GPUState.DESCRIPTOR.fields} == {
        "ID": 1, "UUID": 2, "Health": 3, "AssociatedWorkload": 4, "Device": 5}
    assert list(metricssvc_pb2.GPUState(AssociatedWorkload=["a", "b"]).AssociatedWorkload) == ["a", "b"]  # repeated
    assert {f.name: f.number for f in metricssvc_pb2.GPUStateResponse.DESCRIPTOR.fields} == {"GPUState": 1}


@pytest.fixture
def service(tmp_path):
    with FakeAmdIdentity(str(tmp_path / "amd.sock"), STATES) as fake:
        yield fake


def _client(service, timeout_seconds: float = 5.0) -> IdentityClient:
    return IdentityClient(service.socket_path, timeout_seconds=timeout_seconds)


def test_the_states_are_read_whole(service):
    assert _client(service).list_states() == STATES
    assert os.stat(service.socket_path).st_mode & 0o777 == 0o600


def test_a_missing_socket_is_absent_with_a_hint(tmp_path):
    with pytest.raises(AmdIdentityError) as caught:
        IdentityClient(str(tmp_path / "none.sock")).list_states()
    assert caught.value.reason == "absent" and "/var/lib/amd-metrics-exporter" in caught.value.message


def test_a_file_that_is_not_a_socket_is_refused(tmp_path):
    path = tmp_path / "file.sock"
    path.write_text("")
    with pytest.raises(AmdIdentityError, match="not a unix socket"):
        IdentityClient(str(path)).list_states()


def test_a_socket_nobody_listens_on_is_unavailable(tmp_path):
    path = str(tmp_path / "dead.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # bound, never listening: what a crashed exporter leaves behind
    try:
        with pytest.raises(AmdIdentityError) as caught:
            IdentityClient(path, timeout_seconds=2).list_states()
    finally:
        dead.close()
    assert caught.value.reason == "unavailable"


def test_before_its_first_health_pass_the_service_is_not_ready(tmp_path):
    with FakeAmdIdentity(str(tmp_path / "amd.sock")) as fresh:  # no states yet: AMD's own error
        with pytest.raises(AmdIdentityError) as caught:
            _client(fresh).list_states()
    assert caught.value.reason == "not_ready"


def test_a_slow_service_times_out_within_the_bound(service):
    service.fault = "hang"
    started = time.monotonic()
    with pytest.raises(AmdIdentityError) as caught:
        _client(service, timeout_seconds=0.3).list_states()
    assert caught.value.reason == "timeout" and time.monotonic() - started < 3
    assert "0.3s" in caught.value.message


@pytest.mark.parametrize("fault, reason", [("unavailable", "unavailable"), ("internal", "error"),
                                           ("garbage", "garbage"), ("missing_id", "garbage"),
                                           ("bad_address", "garbage")])
def test_errors_and_garbage_are_one_error_each(service, fault, reason):
    service.fault = fault
    with pytest.raises(AmdIdentityError) as caught:
        _client(service).list_states()
    assert caught.value.reason == reason
    assert service.socket_path in caught.value.message and "\n" not in caught.value.message


def test_an_unknown_health_word_is_unknown_not_healthy(service):
    service.set_states([GpuState("0", "", "degraded", "0000:05:00.0")])
    assert _client(service).list_states()[0].health == UNKNOWN


def test_an_answer_naming_a_gpu_twice_is_garbage(service):
    service.set_states([STATES[0], GpuState("0", "", HEALTHY, "0000:06:00.0")])
    with pytest.raises(AmdIdentityError) as caught:
        _client(service).list_states()
    assert caught.value.reason == "garbage"
