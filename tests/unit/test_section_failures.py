"""A scrape survives any one section: the exporter's real server, in-process on port 0, with a section
that raises. Its block is left out of a 200 answer, section_up reads 0, the failure is logged once (the
traceback at debug), it is retried on the next scrape and never cached; /metrics the same."""

from __future__ import annotations

import contextlib
import io
import threading
import urllib.request

import pytest

from exporter.app import build_node
from exporter.base.logs import setup_logging
from exporter.collectors.collector import Collector, PagePart, SourceState
from exporter.vendors.nvidia.collectors.dcgm import DcgmCollector
from exporter.collectors.registry import Registry
from exporter.config import parse_config
from exporter.exposition import families
from exporter.exposition.rows import render_family
from exporter.exposition.sections import BaseSection, ScrapeView, StatusSection
from exporter.sources.kubelet import AllocatedDevice
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes

L4 = fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom")
L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


class Flaky(BaseSection):
    """A section outside the product whose rows raise while `broken` is set; it counts its attempts."""

    def __init__(self, name: str, per_scrape: bool):
        super().__init__()
        self.name = name
        self.per_scrape = per_scrape
        self.broken = True
        self.attempts = 0

    def _rows(self, view: ScrapeView) -> bytes:
        self.attempts += 1
        if self.broken:
            raise RuntimeError(f"{self.name} rows exploded")
        return render_family(families.BUILD_INFO, [('version="x",python_version="y"', 1)]).encode()


class BrokenState(StatusSection):
    """A block that renders, but whose state raises when /metrics asks for it."""

    name = "broken_state"

    def state(self):
        raise ValueError("state unreadable")


class FlakyCollector(Collector):
    """A collector registered beside the real ones: its sections raise, and so does its part of /metrics."""

    name = "flaky"

    def __init__(self):
        self.kept, self.per_scrape = Flaky("kept_flaky", per_scrape=False), Flaky("scrape_flaky", per_scrape=True)

    def sections(self):
        return (self.kept, BrokenState(), self.per_scrape)

    def self_metrics(self):
        raise OSError("metrics unreadable")

    def state(self):
        return SourceState(self.name, not self.kept.broken, "rows explode" if self.kept.broken else None)


@pytest.fixture
def served(tmp_path):
    flaky = FlakyCollector()
    with _serving(tmp_path, flaky) as (base, logs, app):
        yield base, flaky.kept, flaky.per_scrape, logs, app


@contextlib.contextmanager
def _serving(tmp_path, collector: Collector):
    """The real node in-process on port 0, dcgm-exporter's reader and `collector` registered; logs at debug."""
    path = tmp_path / "dcgm.prom"
    path.write_bytes(L4)
    kubelet = FakeKubelet(str(tmp_path / "kubelet.sock")).start()
    kubelet.set_devices([AllocatedDevice("ml", "trainer-0", "pytorch", "nvidia.com/gpu", L4_UUID)])
    config = parse_config(["--dcgm.file", str(path), "--kubelet.socket", str(tmp_path / "kubelet.sock"),
                           "--web.listen-address", "127.0.0.1:0", "--kubernetes.api", "off"], {})
    logs = io.StringIO()
    setup_logging("debug", "logfmt", logs)
    node = build_node(config, Registry(config, [DcgmCollector(), collector]))
    server = node.listen()
    node.start()
    thread = threading.Thread(target=server.serve_until_stopped, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", logs, server.app
    finally:
        server.stop()
        thread.join(5)
        node.stop(server)
        kubelet.stop()
        setup_logging("info", "logfmt")


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status, answer.read().decode()


def test_a_failing_section_is_left_out_and_the_rest_served(served):
    base, kept, per_scrape, logs, _ = served
    for _ in range(3):
        status, text = _get(base + "/gpu/metrics")
        assert status == 200
        assert 'pod="trainer-0"' in text and "DCGM_FI_DEV_GPU_UTIL" in text  # the samples
        assert "pod_gpu_allocation_info{" in text  # the sections that work
        assert "pod_gpu_exporter_kubelet_up 1" in text
        assert "pod_gpu_exporter_build_info" not in text  # neither failing block
    # Never cached: each scrape tries both again, the kept one included.
    assert kept.attempts == 3 and per_scrape.attempts == 3
    _get(base + "/metrics")
    status, metrics = _get(base + "/metrics")
    assert status == 200
    assert 'pod_gpu_exporter_section_up{section="kept_flaky"} 0.0' in metrics
    assert 'pod_gpu_exporter_section_up{section="scrape_flaky"} 0.0' in metrics
    assert 'pod_gpu_exporter_section_up{section="broken_state"} 0.0' in metrics
    assert 'pod_gpu_exporter_section_up{section="allocation"} 1.0' in metrics
    assert "pod_gpu_exporter_scrapes_total 3.0" in metrics  # the rest of /metrics is served
    assert "process_cpu_seconds_total" in metrics and "pod_gpu_exporter_build_info{" in metrics
    lines = logs.getvalue().splitlines()
    errors = [line for line in lines if "level=error" in line]
    assert len([line for line in errors if "section=kept_flaky" in line]) == 1  # once, not per scrape
    assert len([line for line in errors if "section=scrape_flaky" in line]) == 1
    assert any("kept_flaky rows exploded" in line for line in errors)
    assert any("level=debug" in line and "Traceback" in line and "section=kept_flaky" in line for line in lines)
    assert all("Traceback" not in line for line in errors)
    assert len([line for line in errors if "part=flaky" in line and "metrics unreadable" in line]) == 1


def test_a_section_that_recovers_is_served_again_and_up(served):
    base, kept, per_scrape, logs, _ = served
    _get(base + "/gpu/metrics")
    kept.broken = per_scrape.broken = False
    status, text = _get(base + "/gpu/metrics")
    assert status == 200 and text.count("pod_gpu_exporter_build_info{") == 2
    _, metrics = _get(base + "/metrics")
    assert 'pod_gpu_exporter_section_up{section="kept_flaky"} 1.0' in metrics
    assert 'pod_gpu_exporter_section_up{section="scrape_flaky"} 1.0' in metrics
    # The kept rows are now cached with the rewrite: a third scrape does not make them again.
    _get(base + "/gpu/metrics")
    assert kept.attempts == 2 and per_scrape.attempts == 3
    assert "section kept_flaky works again" in logs.getvalue()


def test_every_source_reports_its_state_in_one_shape(served):
    base, kept, _, _, app = served
    _get(base + "/gpu/metrics")
    states = {state.name: state for state in app.source_states()}
    assert list(states) == ["kubelet", "dcgm", "flaky"]
    assert states["kubelet"].up and states["kubelet"].reason is None and states["kubelet"].age_seconds >= 0
    assert states["dcgm"].up and states["dcgm"].age_seconds >= 0
    assert not states["flaky"].up and states["flaky"].reason == "rows explode"


def test_a_key_that_keeps_failing_is_logged_once_though_its_rows_work():
    """Each step fails and recovers on its own: rows that work do not clear a key that fails, so the
    key's failure is not logged again on every scrape."""
    from exporter.core.attribution import Snapshot
    from exporter.core.mapping import EMPTY_MAPPING
    from exporter.exposition.sections import SectionFailures

    class BadKey(Flaky):
        def key(self):
            raise KeyError("no key today")

    section, failures, logs = BadKey("bad_key", per_scrape=False), SectionFailures(), io.StringIO()
    section.broken = False
    setup_logging("debug", "logfmt", logs)
    try:
        for _ in range(3):
            failures.key(section)
            assert failures.render(section, ScrapeView(Snapshot(EMPTY_MAPPING, True, 0.0), frozenset()))
    finally:
        setup_logging("info", "logfmt")
    errors = [line for line in logs.getvalue().splitlines() if "level=error" in line]
    assert len(errors) == 1 and "step=key" in errors[0] and "no key today" in errors[0]
    assert not failures.state(section).up


def test_a_failure_whose_message_varies_is_logged_once_and_later_failures_still_are():
    """A message may carry a changing value (a count, a path): one line while the section keeps failing,
    however many scrapes and messages; after it recovers, another section's failure is logged too."""
    from exporter.core.attribution import Snapshot
    from exporter.core.mapping import EMPTY_MAPPING
    from exporter.exposition.sections import SectionFailures

    class Counting(Flaky):
        def _rows(self, view):
            self.attempts += 1
            if self.broken:
                raise ValueError(f"value {self.attempts}")
            return super()._rows(view)

    view = ScrapeView(Snapshot(EMPTY_MAPPING, True, 0.0), frozenset())
    counting, other = Counting("counting", per_scrape=True), Flaky("other", per_scrape=True)
    failures, logs = SectionFailures(), io.StringIO()
    setup_logging("debug", "logfmt", logs)
    try:
        for _ in range(100):
            assert failures.render(counting, view) is None
        counting.broken = False
        assert failures.render(counting, view)
        assert failures.render(other, view) is None
    finally:
        setup_logging("info", "logfmt")
    errors = [line for line in logs.getvalue().splitlines() if "level=error" in line]
    assert len(errors) == 2, errors
    assert "section=counting" in errors[0] and "value 1" in errors[0]
    assert "section=other" in errors[1] and "other rows exploded" in errors[1]


class Unreadable(Collector):
    """A collector whose answers to the node page raise: its state and its page part."""

    name = "unreadable"

    def state(self):
        raise RuntimeError("state exploded")

    def page_part(self):
        raise RuntimeError("page part exploded")


def test_a_collector_whose_state_or_page_part_raises_costs_its_own_row_not_the_node_page(tmp_path):
    with _serving(tmp_path, Unreadable()) as (base, logs, app):
        _get(base + "/gpu/metrics")
        status, page = _get(base + "/")
        assert status == 200
        assert "trainer-0" in page and "unreadable" in page and "its state could not be read" in page
        states = {state.name: state for state in app.source_states()}
        assert states["kubelet"].up and states["dcgm"].up and not states["unreadable"].up
        _get(base + "/")
    errors = [line for line in logs.getvalue().splitlines() if "level=error" in line]
    assert len(errors) == 2, errors  # the state and the page part, each once though the page was read twice
    assert any("state exploded" in line for line in errors) and any("page part exploded" in line for line in errors)


class _Unwritable:
    """A value of no kind the node page writes: writing the contribution that holds it raises."""


def _rows_that_raise():
    yield ("a first row",)
    raise RuntimeError("rows exploded")


class Contributing(Collector):
    """A collector that adds to the node page, some of it sound and some of it raising when written."""

    name = "contributing"

    def page_part(self):
        from exporter.core.identity import GpuIdentity, Owner
        from exporter.web.page_parts import Block, Cell, GpuColumn, HolderFigure

        gpu, holder = GpuIdentity(L4_UUID, "0", "", ""), Owner("ml", "trainer-0", "pytorch")
        return PagePart(
            columns=(GpuColumn("firmware", {gpu: Cell("fw-1.2")}), GpuColumn("broken column", {gpu: Cell(_Unwritable())})),
            figures=(HolderFigure("queue", {(gpu, holder): "7 jobs"}), HolderFigure("broken figure", {(gpu, holder): 0.5})),
            blocks=(Block("Sound block", [("all is well",)]), Block("Broken block", _rows_that_raise())))


def test_a_contribution_that_raises_costs_its_own_part_of_the_node_page_logged_once(tmp_path):
    with _serving(tmp_path, Contributing()) as (base, logs, _):
        _get(base + "/gpu/metrics")
        for _ in range(3):
            status, html = _get(base + "/")
            assert status == 200
            assert "ml/<b>trainer-0</b>/pytorch" in html and "NVIDIA L4" in html  # the rest of the page
            assert "<th>firmware</th>" in html and "<td>fw-1.2</td>" in html
            assert "<th>queue</th>" in html and "<td>7 jobs</td>" in html
            assert "<h2>Sound block</h2><ul><li>all is well</li></ul>" in html
            assert "broken" not in html.lower() and "a first row" not in html  # left out whole, not in halves
    errors = [line for line in logs.getvalue().splitlines() if "level=error" in line]
    assert len(errors) == 3, errors  # one line per failing contribution, though the page was read three times
    assert all("collector=contributing" in line and "left off the node page" in line for line in errors)
    for step, error in (("column broken column", "TypeError"), ("figure broken figure", "TypeError"),
                        ("block Broken block", "rows exploded")):
        assert any(f'step="{step}"' in line and error in line for line in errors), (step, errors)


class _RaisingUpstream:
    """dcgm-exporter's reader as offered on the hub, made to raise what no reader is meant to while `broken`."""

    def __init__(self, upstream, owner: "Faulty"):
        self._upstream, self._owner = upstream, owner

    def fetch(self) -> bytes:
        if self._owner.broken:
            raise RuntimeError("reader exploded")
        return self._upstream.fetch()

    def describe(self) -> str:
        return self._upstream.describe()


class Faulty(Collector):
    """A collector whose faults reach two routes' handlers while `broken`: the reader it offers in place of
    dcgm-exporter's raises (GET /gpu/metrics), and so does its switch, which the node page names (GET /)."""

    name = "faulty"

    def __init__(self):
        self.broken = True

    def prepare(self, hub):
        hub.upstream = _RaisingUpstream(hub.upstream, self)
        return True

    @property
    def switch(self) -> str:
        if self.broken:
            raise RuntimeError("switch unreadable")
        return "--faulty.on"


def test_a_route_whose_handler_raises_answers_500_on_a_kept_connection_and_logs_once(tmp_path):
    import http.client

    faulty = Faulty()
    with _serving(tmp_path, faulty) as (base, logs, _):
        connection = http.client.HTTPConnection(base.removeprefix("http://"), timeout=10)
        try:
            answers = []
            for path in ("/gpu/metrics", "/", "/gpu/metrics", "/", "/healthz", "/metrics"):
                connection.request("GET", path)  # one connection throughout: never dropped
                answer = connection.getresponse()
                answers.append((path, answer.status, answer.getheader("Content-Type"), answer.read()))
            faulty.broken = False
            connection.request("GET", "/gpu/metrics")
            recovered = connection.getresponse()
            assert recovered.status == 200 and b'pod="trainer-0"' in recovered.read()
        finally:
            connection.close()
    for path, status, content_type, body in answers[:4]:
        assert (status, content_type) == (500, "text/plain; charset=utf-8"), path
        assert body.count(b"\n") == 1 and body.endswith(b"\n") and b"exploded" not in body and b"unreadable" not in body
    assert [status for _, status, _, _ in answers[4:]] == [200, 200]  # the process goes on
    lines = logs.getvalue().splitlines()
    errors = [line for line in lines if "level=error" in line]
    assert len(errors) == 2, errors  # one per failing route, though each failed twice
    assert any("route=/gpu/metrics" in line and "reader exploded" in line and "answered 500" in line for line in errors)
    assert any("route=/ " in line and "switch unreadable" in line for line in errors)
    assert any("level=info" in line and "route=/gpu/metrics" in line and "works again" in line for line in lines)
