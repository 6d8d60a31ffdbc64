"""Wiring: a Config turned into running sources, core, exposition and web (serve), or one mapping (mapping)."""

from __future__ import annotations

import dataclasses
import errno
import os
import platform
import signal
import sys
import threading
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

from exporter import __version__
from exporter.base.errors import ConfigError, KubeletError
from exporter.base.logs import log
from exporter.base.memory import tune_malloc
from exporter.collectors.registry import VENDOR_AUTO, Registry
from exporter.config import Config
from exporter.core.attribution import Attribution
from exporter.core.mapping import build_mapping
from exporter.core.offered import OfferedReplicas
from exporter.exposition.label_limit import LabelLimit
from exporter.mapping_report import print_report

if TYPE_CHECKING:  # for the annotations only: serve imports these when it runs (see _build_core)
    from exporter.auto_vendor import VendorWatch
    from exporter.sources.kubelet import PodResourcesClient
    from exporter.web.scrape import Scraper
    from exporter.web.webconfig_reload import ReloadingWebConfig

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def serve(config: Config, on_ready: Optional[Callable[[str], None]] = None,
          registry: Optional[Registry] = None) -> int:
    """Serve until SIGTERM/SIGINT with every registered collector the Config switches on (those of
    `registry` when given: the demo's, built around its simulated driver); returns the process exit code."""
    # gRPC's C core logs transport chatter (e.g. "Got goaway" when the kubelet restarts) to stderr,
    # outside our log format; our own logs already say what matters.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    # First of all: a SIGTERM in any phase of start-up (the API's first list, nvmlInit, a kubelet
    # that hangs) ends the process at once, with its log line and code 0.
    stopping = threading.Event()
    listening: list = []  # the server, once there is one
    _stop_on_signals(stopping, listening)
    try:
        node = build_node(config, registry)
    except ConfigError as exc:
        print(f"pod-gpu-metrics-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    server = node.listen()
    if server is None:
        node.core.client.close()
        return EXIT_FAILURE
    listening.append(server)
    node.start()
    node.announce(server, on_ready)
    try:
        if not stopping.is_set():
            server.serve_until_stopped()
    finally:
        node.stop(server)
    log("info", "stopped")
    return EXIT_OK


class _Core(NamedTuple):
    """The kubelet's client and what refreshes and serves from it."""

    client: PodResourcesClient
    attribution: Attribution
    scraper: Scraper


class Node:
    """One serving exporter, built but not started: the web config, the collectors, the core.

    `serve` runs it in named steps (listen, start, announce, stop); a test may do the same in-process.
    With --gpu.vendor auto and no vendor seen yet, `watch` looks at each mapping refresh; a vendor decided
    later than start-up is served from then on (switch_vendor).
    """

    def __init__(self, config: Config, registry: Registry, web_config: Optional[ReloadingWebConfig], core: _Core,
                 watch: Optional[VendorWatch] = None):
        self.config = config
        self.registry = registry
        self.web_config = web_config
        self.core = core
        self._server = None
        self._parts_lock = threading.Lock()  # a switch of vendor and stop take turns
        self._stopped = False
        if watch is not None:
            watch.on_decided = self._switch_soon

    def listen(self):
        """The listening server, or None (logged) when the address cannot be had."""
        from exporter.web.server import ExporterHTTPServer

        config, web_config = self.config, self.web_config
        try:
            self._server = ExporterHTTPServer.listen(config.listen_host, config.listen_port, self._app(),
                                                     web_config.current().ssl_context() if web_config else None)
        except OSError as exc:
            _log_listen_failure(config, exc)
            return None
        return self._server

    def _app(self):
        from exporter.web.service import App

        return App(self.core.scraper, self.core.attribution, self.config.telemetry_path, self.web_config,
                   collectors=self.registry)

    def start(self) -> None:
        """Start the refreshers behind the server, which answers already. What a collector's first
        data needs (the API's first list, the HPC jobs' first reading) is awaited briefly on the kubelet
        refresher's thread, so that the first mapping and answers carry it, and scrapes that come before
        the first mapping wait for it, at most as long as it can take."""
        self.registry.start()
        before_first, waits = self.registry.before_first_mapping()
        self.core.attribution.start(before_first=before_first,
                                    first_wait_seconds=waits + self.config.kubelet_timeout_seconds)

    def announce(self, server, on_ready: Optional[Callable[[str], None]]) -> None:
        config, web_config = self.config, self.web_config
        scheme = "https" if web_config is not None and web_config.current().tls_enabled else "http"
        log("info", "listening", address=server.bound_address, scheme=scheme, telemetry_path=config.telemetry_path,
            **self.registry.announce(), kubelet_socket=config.kubelet_socket, labels_style=config.labels_style,
            labels_mode=config.labels_mode)
        if on_ready is not None:
            on_ready(f"{scheme}://{_local_host(server)}{config.telemetry_path}")

    def stop(self, server) -> None:
        """Bounded whatever the kubelet, the API or NVML do: SIGTERM must end us well within the pod's
        grace period. Scrapes and calls still in flight run on daemon threads, cut when the process exits."""
        with self._parts_lock:
            self._stopped = True
            self._stop_parts(self.registry, self.core)
        server.server_close()

    @staticmethod
    def _stop_parts(registry: Registry, core: _Core) -> None:
        core.attribution.stop(timeout_seconds=0.2)
        registry.stop()
        core.client.close(wait_seconds=0.3)

    def _switch_soon(self, vendor: str) -> None:
        """Called on the mapping refresher, whose parts the switch stops: it runs on a thread of its own."""
        threading.Thread(target=self.switch_vendor, args=(vendor,), name="vendor-switch", daemon=True).start()

    def switch_vendor(self, vendor: str) -> bool:
        """Serve `vendor` from now on: its collectors and core built and started, swapped into the running
        server in one step (each request reads the server's app once), then the old ones stopped. A vendor
        whose collectors refuse this Config (a ConfigError) is logged, and the node goes on as it was."""
        with self._parts_lock:
            if self._stopped:
                return False
            config = dataclasses.replace(self.config, gpu_vendor=vendor)
            registry = Registry(config)
            try:
                registry.prepare()
            except ConfigError as exc:
                log("error", "cannot serve the GPU vendor chosen: serving as before", vendor=vendor,
                    served=self.registry.vendor.name, error=str(exc))
                return False
            old_registry, old_core = self.registry, self.core
            self.config, self.registry, self.core = config, registry, _build_core(config, registry)
            self.start()
            if self._server is not None:
                app = self._app()
                app.count_connections(self._server.connections)
                self._server.app = app
            self._stop_parts(old_registry, old_core)
        log("info", "serving the GPU vendor chosen", vendor=vendor, replaced=old_registry.vendor.name)
        return True


def build_node(config: Config, registry: Optional[Registry] = None) -> Node:
    """The web config and the collectors checked (ConfigError: a usage mistake, exit 2), then the core
    wired to them; nothing started. With --gpu.vendor auto (and no registry handed in), the node is looked at
    first, and served as the vendor seen, else as the fallback while the refresher looks again."""
    watch = None
    if registry is None and config.gpu_vendor == VENDOR_AUTO:
        config, watch = _look_for_vendor(config)
    registry = registry or Registry(config)
    web_config = _load_web_config(config.web_config_file)
    registry.prepare()
    log("info", "starting pod-gpu-metrics-exporter", version=__version__, python=platform.python_version())
    tune_malloc()
    return Node(config, registry, web_config, _build_core(config, registry, watch), watch)


def _look_for_vendor(config: Config):
    """(the Config to serve by, the watch that keeps looking or None): the vendor a marker path shows now, else
    auto served as the fallback vendor while each mapping refresh looks again (the kubelet is not asked
    before serving: one that hangs must not delay it)."""
    from exporter.auto_vendor import watch_from_start

    watch = watch_from_start(config)
    if watch.decided is not None:
        return dataclasses.replace(config, gpu_vendor=watch.decided.vendor), None
    return config, watch


def _build_core(config: Config, registry: Registry, watch: Optional[VendorWatch] = None) -> _Core:
    """The kubelet refresher, the collectors that read it, and the scraper, wired but not started; `watch`
    looks at what each refresh lists while the vendor is undecided."""
    from exporter.exposition.allocation import AllocationSection
    from exporter.exposition.pod_numbers import PodNumbersSection
    from exporter.exposition.sections import StatusSection
    from exporter.sources.kubelet import KubeletOptions, PodResourcesClient
    from exporter.web.scrape import Scraper

    hub = registry.hub
    client = PodResourcesClient(KubeletOptions(config.kubelet_socket, config.kubelet_timeout_seconds))
    forms = registry.vendor.devices
    list_devices = client.list_devices
    if watch is not None:
        watch.rebind(client.list_offered)
        if hub.mapping_context is not None:
            watch.read_slices_from(hub.mapping_context.published_drivers)
        list_devices = watch.wrap(client.list_devices, served=lambda: registry.vendor.name)
    attribution = Attribution(list_devices, forms, config.kubelet_refresh_interval_seconds,
                              config.mapping_max_age_seconds, resolve_mig=hub.resolve_mig,
                              describe=config.kubelet_socket, context=hub.mapping_context,
                              offered=OfferedReplicas(client.list_offered, forms),
                              resolver_generation=hub.resolver_generation)
    # One limit for every series written about a pod, so its count covers them all.
    label_limit = LabelLimit(config.labels_limit)
    registry.build(attribution, label_limit)
    vendor = registry.vendor
    allocation = AllocationSection(config.labels_style, label_limit, lambda: attribution.current().kubelet_up,
                                   vendor.figures)
    # Each pod's numbers, from the blocks before them: the vendor's per-holder use where a collector offers it.
    uses = hub.holder_use.holder_use if hub.holder_use is not None else (lambda: None)
    pod_numbers = PodNumbersSection(config.labels_style, label_limit, vendor.figures, allocation.gpu_memory_mib, uses)
    sections = registry.sections((allocation,), StatusSection(vendor.status), (pod_numbers,))
    scraper = Scraper(hub.upstream, attribution, config.labels_style, sections,
                      labels_mode=config.labels_mode, label_limit=label_limit, upstream_words=vendor.upstream_words,
                      dialect=vendor.figures.dialect)
    return _Core(client, attribution, scraper)


def _log_listen_failure(config: Config, exc: OSError) -> None:
    if exc.errno == errno.EADDRINUSE:
        # Usually a second exporter, or a dcgm-exporter left on its own default port 9400.
        log("error", f"cannot listen on {config.listen_address}: address already in use by another process; "
            "stop it or choose another address with --web.listen-address (env POD_GPU_EXPORTER_WEB_LISTEN_ADDRESS)",
            address=config.listen_address)
        return
    log("error", "cannot listen", address=config.listen_address, error=exc.strerror or str(exc))


def _load_web_config(path: Optional[str]):
    if path is None:
        return None
    from exporter.web.webconfig import load_web_config
    from exporter.web.webconfig_reload import ReloadingWebConfig

    # Checked once here (a bad file stops start-up), then re-read whenever it changes.
    return ReloadingWebConfig(path, load_web_config(path))


def _stop_on_signals(stopping: threading.Event, listening: list) -> None:
    """SIGTERM/SIGINT: log, set `stopping`, and stop the server once there is one (`listening`)."""
    def stop(signum, _frame):
        log("info", "shutting down", signal=signal.Signals(signum).name)
        stopping.set()
        for server in listening:
            server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _local_host(server) -> str:
    host, port = server.server_address[:2]
    if host in ("::", "0.0.0.0", ""):
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def print_mapping(config: Config) -> int:
    """`mapping`: one List, printed as a table or JSON."""
    from exporter.sources.kubelet import KubeletOptions, PodResourcesClient

    client = PodResourcesClient(KubeletOptions(config.kubelet_socket, config.kubelet_timeout_seconds))
    if config.gpu_vendor == VENDOR_AUTO:
        from exporter.auto_vendor import look_once

        # The vendor the node shows, as serve's looks read it (the fallback while nothing is seen).
        decided = look_once(config, client.list_offered, client.list_devices)
        if decided is not None:
            config = dataclasses.replace(config, gpu_vendor=decided.vendor)
    registry = Registry(config)
    try:
        # Only the collectors that offer the mapping a context (the API's labels, DRA keys) take part.
        hub = registry.prepare(only=lambda collector: collector.in_mapping, needs=())
        devices = client.list_devices()
    except (KubeletError, ConfigError) as exc:
        print(f"pod-gpu-metrics-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILURE
    finally:
        client.close()
    registry.start_for_mapping()
    # The same core function as the refresher's, so `mapping` shows what `serve` attributes.
    mapping = build_mapping(registry.vendor.devices, devices, hub.resolve_mig, hub.mapping_context)
    registry.stop()
    try:
        print_report(client.api_version, mapping, config.output, with_labels=hub.mapping_context is not None,
                     dialect=registry.vendor.figures.dialect)
        sys.stdout.flush()
    except BrokenPipeError:
        # `mapping | head` closed the pipe: what was wanted has been read. Point stdout at
        # /dev/null so the interpreter's own flush at exit raises nothing either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK
