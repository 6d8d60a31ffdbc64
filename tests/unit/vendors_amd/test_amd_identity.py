"""The AMD identity keeper against a real service on a unix socket: the last good answer kept through outages
(restart, not ready, slow, erroring, garbage), one log line per outage, attribution back within one refresh."""

from __future__ import annotations

import io

import pytest

from exporter.base.logs import setup_logging
from exporter.core.refresher import Refresher
from exporter.vendors.amd.identity import AmdIdentity
from exporter.vendors.amd.identity_client import HEALTHY, UNHEALTHY, GpuState, IdentityClient
from support.clocks import ManualClock
from support.fake_amd_identity import FakeAmdIdentity
from support.waiting import wait_until

STATES = (GpuState("0", "uuid-0", HEALTHY, "0000:05:00.0"), GpuState("8", "uuid-8", UNHEALTHY, "0000:26:00.1"))


@pytest.fixture
def logs():
    stream = io.StringIO()
    setup_logging("info", "logfmt", stream)
    return stream


@pytest.fixture
def service(tmp_path):
    with FakeAmdIdentity(str(tmp_path / "amd.sock"), STATES) as fake:
        yield fake


def _identity(service, clock=None, timeout_seconds=2.0) -> AmdIdentity:
    client = IdentityClient(service.socket_path, timeout_seconds=timeout_seconds)
    return AmdIdentity(client, keep_seconds=600, clock=clock or ManualClock())


def test_nothing_is_known_before_the_first_answer(service):
    identity = _identity(service)
    snapshot = identity.snapshot()
    assert not snapshot.up and not snapshot.known and snapshot.health("0") == "unknown"


def test_an_answer_is_indexed_by_address_and_id(service):
    identity = _identity(service)
    identity.refresh()
    snapshot = identity.snapshot()
    assert snapshot.up and snapshot.known and snapshot.failure is None
    assert snapshot.by_address["0000:26:00.1"].gpu_id == "8" and snapshot.by_id["0"].uuid == "uuid-0"
    assert snapshot.health("8") == UNHEALTHY and snapshot.health("0") == HEALTHY and snapshot.health("3") == "unknown"


@pytest.mark.parametrize("fault", ["hang", "unavailable", "internal", "garbage", "missing_id"])
def test_a_failing_service_keeps_the_last_good_answer_and_is_down(service, fault):
    identity = _identity(service, timeout_seconds=0.3)
    identity.refresh()
    service.fault = fault
    identity.refresh()
    snapshot = identity.snapshot()
    assert not snapshot.up and snapshot.states == STATES  # identities survive; health does not
    assert snapshot.health("8") == "unknown" and snapshot.failure and service.socket_path in snapshot.failure
    service.fault = None
    identity.refresh()
    assert identity.snapshot().up and identity.snapshot().health("8") == UNHEALTHY


def test_a_restart_is_one_outage_one_line_and_one_recovery(service, logs):
    identity = _identity(service)
    identity.refresh()
    service.stop()  # the socket goes away
    identity.refresh()
    identity.refresh()
    service.set_states(())
    restarted = FakeAmdIdentity(service.socket_path)  # re-created, not ready until its first health pass
    with restarted:
        identity.refresh()
        identity.refresh()
        restarted.set_states(STATES[:1])
        identity.refresh()
    text = logs.getvalue()
    assert text.count("level=warn") == 1 and "cause=absent" in text and "cause=not_ready" not in text
    assert text.count("answering again") == 1
    assert identity.snapshot().states == STATES[:1]  # the new answer replaces the kept one whole


def test_a_kept_answer_is_trusted_for_a_bounded_time_only(service):
    clock = ManualClock()
    identity = _identity(service, clock)
    identity.refresh()
    service.fault = "unavailable"
    clock.now += 599
    identity.refresh()
    assert identity.snapshot().known
    clock.now += 2
    assert not identity.snapshot().known  # expired between refreshes
    identity.refresh()
    assert not identity.snapshot().known and identity.snapshot().states == ()


def test_a_service_that_never_answered_attributes_nothing(tmp_path, logs):
    identity = AmdIdentity(IdentityClient(str(tmp_path / "absent.sock")))
    for _ in range(3):
        identity.refresh()
    assert not identity.snapshot().known and "not found" in identity.snapshot().failure
    assert logs.getvalue().count("level=warn") == 1


def test_a_refresher_drives_it_and_attribution_returns_after_an_outage(service):
    identity = _identity(service, timeout_seconds=0.3)
    refresher = Refresher("amd-identity", identity.refresh, 0.05, "the AMD identity")
    refresher.start()
    try:
        assert refresher.wait_first(5)
        assert identity.snapshot().up
        service.fault = "garbage"
        wait_until(lambda: not identity.snapshot().up, describe="the identity down")
        service.fault = None
        wait_until(lambda: identity.snapshot().up, describe="the identity up again")
    finally:
        refresher.stop()
    assert service.list_calls >= 3
