"""Typed roles: the registry prepares a role's offerer before its takers, checks what is offered keeps its
protocol, and refuses at start-up a role that is needed and offered by none."""

from __future__ import annotations

import pytest

from exporter.base.errors import ConfigError
from exporter.collectors.collector import Collector
from exporter.collectors.registry import Registry, preparation_order
from exporter.collectors.roles import POD_INDEX, UPSTREAM
from exporter.config import parse_config


class _Pods:
    def pods(self):
        return {}


class _Upstream:
    def fetch(self) -> bytes:
        return b""

    def describe(self) -> str:
        return "nowhere"


class _Recording(Collector):
    def __init__(self, name, prepared, offers=(), needs=(), takes=(), value=None):
        self.name, self.offers, self.needs, self.takes = name, offers, needs, takes
        self._prepared, self._value = prepared, value

    def prepare(self, hub):
        self._prepared.append((self.name, hub.pod_index))
        for role in self.offers:
            setattr(hub, role.name, self._value)


def test_a_role_is_offered_before_it_is_taken_and_registration_order_is_kept_otherwise():
    prepared = []
    taker = _Recording("shares", prepared, takes=(POD_INDEX,))
    offerer = _Recording("context", prepared, offers=(POD_INDEX,), value=_Pods())
    reader = _Recording("reader", prepared, offers=(UPSTREAM,), value=_Upstream())
    assert [c.name for c in preparation_order([taker, reader, offerer])] == ["reader", "context", "shares"]
    registry = Registry(parse_config([], {}), [taker, reader, offerer])
    registry.prepare()
    assert [name for name, _ in prepared] == ["reader", "context", "shares"]
    assert isinstance(prepared[-1][1], _Pods)  # the taker saw the offer
    assert [state.name for state in registry.states()][1:] == ["shares", "reader", "context"]


def test_a_needed_role_that_none_offers_is_refused_in_one_line():
    prepared = []
    with pytest.raises(ConfigError, match=r"^the exporter needs the upstream role, which no collector switched on "
                                          r"offers: check the flags that switch collectors on and --gpu.vendor$"):
        Registry(parse_config([], {}), [_Recording("context", prepared, offers=(POD_INDEX,), value=_Pods())]).prepare()
    with pytest.raises(ConfigError, match=r"^collector shares needs the pod_index role"):
        Registry(parse_config([], {}), [_Recording("reader", prepared, offers=(UPSTREAM,), value=_Upstream()),
                                        _Recording("shares", prepared, needs=(POD_INDEX,))]).prepare()
    # What `mapping` prepares needs no upstream.
    Registry(parse_config([], {}), [_Recording("context", prepared)]).prepare(needs=())


def test_an_offer_that_breaks_its_protocol_is_a_defect_not_a_usage_mistake():
    broken = _Recording("reader", [], offers=(UPSTREAM,), value=object())
    with pytest.raises(TypeError, match="collector reader offers upstream as object, which is no Upstream"):
        Registry(parse_config([], {}), [broken]).prepare()
