"""The registry of collectors: each source's flags, refusals and state come from its one registration,
and one collector reaches another's data only through the hub."""

from __future__ import annotations

import pytest

from exporter.base.errors import ConfigError
from exporter.collectors.collector import Collector, PagePart
from exporter.collectors.registry import COLLECTORS, Registry, collector_flags
from exporter.config import build_parser, parse_config, refusing_commands
from exporter.core.identity import GpuIdentity
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS


def test_every_collectors_flag_is_in_the_one_parser_with_its_variable():
    help_text = build_parser().format_help()
    flags = collector_flags()
    assert {flag.field for flag in flags} >= {"dcgm_url", "kubernetes_api", "sharing_mode", "health_xid_events",
                                              "hpc_job_mapping_dir"}
    for flag in flags:
        assert flag.flag in help_text


def test_which_commands_refuse_a_flag_is_said_by_its_collector():
    assert refusing_commands("hpc_job_mapping_dir") == ("demo", "mapping")
    assert refusing_commands("dcgm_url") == ("demo", "mapping")
    assert refusing_commands("energy_idle_policy") == ("mapping",)
    assert refusing_commands("kubelet_socket") == ("demo",)  # the core's own
    assert refusing_commands("dcgm_timeout_seconds") == ("mapping",)
    with pytest.raises(ConfigError, match="--hpc.job-mapping-dir is not used by `mapping`"):
        parse_config(["mapping", "--hpc.job-mapping-dir", "/tmp"], {})


def test_a_config_switches_on_only_the_collectors_it_asks_for(tmp_path):
    config = parse_config(["--kubernetes.api", "off"], {})
    registry = Registry(config)
    registry.prepare()
    states = {state.name: state for state in registry.states()}
    assert list(states) == ["kubelet"] + [kind.name for kind in COLLECTORS]
    for name in ("kubernetes", "process_shares", "xid_events", "hpc_jobs"):
        assert (states[name].up, states[name].reason) == (False, "off")
    assert not states["dcgm"].up and states["dcgm"].reason == "not fetched yet"
    assert (states["kubelet"].up, states["kubelet"].reason) == (False, "not started")
    on = Registry(parse_config(["--kubernetes.api", "off", "--hpc.job-mapping-dir", str(tmp_path)], {}))
    on.prepare()
    hpc = {state.name: state for state in on.states()}["hpc_jobs"]
    assert (hpc.up, hpc.reason) == (False, "not read yet")


def test_process_shares_take_the_pod_index_from_the_hub_not_from_the_api_collector(tmp_path):
    """With the API off nothing offers a pod index: the shares are built with none (and serve no share)."""
    from exporter.core.attribution import Attribution
    from exporter.exposition.label_limit import LabelLimit

    config = parse_config(["--kubernetes.api", "off", "--sharing.mode", "process", "--sharing.proc-root",
                           str(tmp_path)], {})
    registry = Registry(config)
    hub = registry.prepare()
    assert hub.pod_index is None and hub.mapping_context is None
    registry.build(Attribution(lambda: [], DEVICE_FORMS, 60, 600), LabelLimit(None))
    names = [section.name for section in registry.sections((), _Status())]
    assert names == ["status", "process_shares", "xid_events"]  # xid_events: auto, in process mode


class _Status:
    name, per_scrape = "status", True


class _Adding(Collector):
    """A collector outside the product that adds `part` to the node page."""

    def __init__(self, name: str, part):
        self.name, self._part = name, part

    def page_part(self):
        return self._part


def test_the_node_page_gets_what_each_active_collector_adds_by_name_and_their_switches():
    one, two = GpuIdentity("GPU-1", "1", "", ""), GpuIdentity("GPU-2", "2", "", "")
    config = parse_config(["--kubernetes.api", "off"], {})
    first, second = PagePart(devices=frozenset({one})), PagePart(devices=frozenset({two}))
    registry = Registry(config, [_Adding("sees_one", first), _Adding("silent", None), _Adding("sees_two", second)])
    # Each part as its collector made it, in registration order: the page writes each on its own.
    assert registry.page_parts() == [("sees_one", first), ("sees_two", second)]
    assert Registry(config, []).page_parts() == []
    assert Registry(config).switches() == {"kubernetes": "--kubernetes.api", "process_shares": "--sharing.mode process",
                                           "xid_events": "--health.xid-events on", "hpc_jobs": "--hpc.job-mapping-dir"}
