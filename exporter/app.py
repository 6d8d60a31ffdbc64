"""Wiring: a Config turned into running sources, core, exposition and web (serve), or one mapping (mapping)."""

from __future__ import annotations

import errno
import functools
import os
import platform
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Union

from exporter import __version__
from exporter.base.errors import ConfigError, KubeletError
from exporter.base.logs import log
from exporter.base.memory import tune_malloc
from exporter.config import Config
from exporter.core.attribution import Attribution
from exporter.core.mapping import build_mapping
from exporter.core.offered import OfferedReplicas
from exporter.exposition.label_limit import LabelLimit
from exporter.mapping_report import print_report
from exporter.nvml_wiring import mig_resolver, process_shares, xid_events
from exporter.section_wiring import build_sections

if TYPE_CHECKING:  # for the annotations only: serve imports these when it runs (see _build_sources)
    from exporter.core.mapping import MappingContext
    from exporter.shares.process_shares import FreshPods, ProcessShares
    from exporter.sources.dcgm.file_source import FileSource
    from exporter.sources.dcgm.http_source import HttpSource
    from exporter.sources.kubelet import PodResourcesClient
    from exporter.sources.kubernetes.context import KubernetesContext
    from exporter.sources.kubernetes.roles import KubernetesLifecycle
    from exporter.web.scrape import Scraper
    from exporter.web.webconfig_reload import ReloadingWebConfig

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# How long the first mapping waits for the Kubernetes API's first pod list (its labels): a 5,000-pod
# node lists in ~1.2 s. Never longer than --kubelet.timeout.
API_FIRST_LIST_WAIT_SECONDS = 2.0


def serve(config: Config, on_ready: Optional[Callable[[str], None]] = None, nvml: Any = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the process exit code. `nvml` is an NVML binding to use instead
    of pynvml: the demo's simulated one (a real node always loads the driver's library)."""
    # gRPC's C core logs transport chatter (e.g. "Got goaway" when the kubelet restarts) to stderr,
    # outside our log format; our own logs already say what matters.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    # First of all: a SIGTERM in any phase of start-up (the API's first list, nvmlInit, a kubelet
    # that hangs) ends the process at once, with its log line and code 0.
    stopping = threading.Event()
    listening: list = []  # the server, once there is one
    _stop_on_signals(stopping, listening)
    try:
        sources = _build_sources(config)
    except ConfigError as exc:
        print(f"pod-gpu-metrics-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    log("info", "starting pod-gpu-metrics-exporter", version=__version__, python=platform.python_version())
    tune_malloc()
    core = _build_core(config, sources, nvml)
    server = _listen(config, sources, core)
    if server is None:
        core.client.close()
        return EXIT_FAILURE
    listening.append(server)
    _start(config, sources, core)
    _announce(config, sources, server, on_ready)
    try:
        if not stopping.is_set():
            server.serve_until_stopped()
    finally:
        _stop(sources, core, server)
    log("info", "stopped")
    return EXIT_OK


class _Sources(NamedTuple):
    """What `serve` checks before it starts anything: a mistake in these is a usage error (exit 2)."""

    web_config: Optional[ReloadingWebConfig]  # None without --web.config.file
    dcgm: Union[HttpSource, FileSource]  # where dcgm-exporter's text comes from
    # The Kubernetes API's roles (not started), each None when the API is off: what the mapping asks,
    # its watches' lifecycle, and its pod index (for the per-process shares).
    kubernetes_mapping: Optional[MappingContext]
    kubernetes_lifecycle: Optional[KubernetesLifecycle]
    pod_index: Optional[FreshPods]


class _Core(NamedTuple):
    """The kubelet's client and what refreshes and serves from it."""

    client: PodResourcesClient
    resolve_mig: Callable
    attribution: Attribution
    shares: Optional[ProcessShares]  # in --sharing.mode process only
    scraper: Scraper
    xid_events: object  # the XID event watcher and its counters (--health.xid-events), or None
    hpc_jobs: object  # the job-mapping directory's source (--hpc.job-mapping-dir), or None


def _build_sources(config: Config) -> _Sources:
    """The web config, dcgm-exporter's source and the Kubernetes context, checked; raises ConfigError."""
    # Imported here so `--help` and `mapping` stay fast and independent of the HTTP stack.
    from exporter.sources.dcgm.file_source import FileSource
    from exporter.sources.dcgm.http_source import HttpSource
    from exporter.sources.dcgm.options import DcgmFileOptions, DcgmHttpOptions

    web_config = _load_web_config(config.web_config_file)
    source = (FileSource(DcgmFileOptions(config.dcgm_file, config.dcgm_timeout_seconds, config.dcgm_max_body_bytes))
              if config.dcgm_file else
              HttpSource(DcgmHttpOptions(config.dcgm_endpoint, config.dcgm_timeout_seconds,
                                         config.dcgm_max_body_bytes)))
    kubernetes = _prepare_kubernetes(config)
    if kubernetes is None:
        return _Sources(web_config, source, None, None, None)
    return _Sources(web_config, source, kubernetes.mapping, kubernetes.lifecycle, kubernetes.pod_index)


def _build_core(config: Config, sources: _Sources, nvml: Any = None) -> _Core:
    """The kubelet refresher, the share refresher, the HPC job source and the scraper, wired but not started."""
    from exporter.sources.hpc_jobs import make_hpc_job_source
    from exporter.sources.kubelet import KubeletOptions, PodResourcesClient
    from exporter.web.scrape import Scraper

    lifecycle = sources.kubernetes_lifecycle
    resolve_mig = mig_resolver(nvml)
    client = PodResourcesClient(KubeletOptions(config.kubelet_socket, config.kubelet_timeout_seconds))
    attribution = Attribution(client.list_devices, config.kubelet_refresh_interval_seconds,
                              config.mapping_max_age_seconds, resolve_mig=resolve_mig, describe=config.kubelet_socket,
                              context=sources.kubernetes_mapping, offered=OfferedReplicas(client.list_offered))
    # One limit for every series written about a pod, so its count covers them all.
    label_limit = LabelLimit(config.labels_limit)
    shares = process_shares(config, attribution, sources.pod_index, label_limit, nvml)
    xids = xid_events(config, attribution, label_limit, nvml)
    hpc_jobs = make_hpc_job_source(config.hpc_job_mapping_dir, config.kubelet_refresh_interval_seconds)
    sections = build_sections(config, attribution, label_limit, lifecycle, hpc_jobs, shares, xids)
    scraper = Scraper(sources.dcgm, attribution, config.labels_style, sections,
                      labels_mode=config.labels_mode, label_limit=label_limit)
    return _Core(client, resolve_mig, attribution, shares, scraper, xids, hpc_jobs)


def _listen(config: Config, sources: _Sources, core: _Core):
    """The listening server, or None (logged) when the address cannot be had."""
    from exporter.web.server import ExporterHTTPServer
    from exporter.web.node_view import NodeSources
    from exporter.web.service import App

    web_config = sources.web_config
    lifecycle = sources.kubernetes_lifecycle
    app = App(core.scraper, core.attribution, config.telemetry_path, web_config,
              kubernetes_status=lifecycle.status if lifecycle else None,
              node=NodeSources(core.shares.reading if core.shares else None,
                               core.xid_events.lost if core.xid_events else None))
    try:
        return ExporterHTTPServer.listen(config.listen_host, config.listen_port, app,
                                         web_config.current().ssl_context() if web_config else None)
    except OSError as exc:
        _log_listen_failure(config, exc)
        return None


def _start(config: Config, sources: _Sources, core: _Core) -> None:
    """Start the refreshers behind the server, which answers already."""
    from exporter.sources.nvml.library import OPEN_TIMEOUT_SECONDS

    # The optional sources get ready behind the server. The API's first list is awaited briefly on
    # the refresher's thread (so that the first mapping carries its labels; an API slower than that
    # adds them at a later refresh), and scrapes that come before the first mapping wait for it, at
    # most as long as it can take.
    # The HPC jobs' first reading is awaited the same way, so that the first answers carry their rows.
    lifecycle = sources.kubernetes_lifecycle
    before_first, waits = [], 0.0
    if core.hpc_jobs is not None:
        core.hpc_jobs.start()
        before_first.append(functools.partial(core.hpc_jobs.wait_first, core.hpc_jobs.timeout_seconds))
        waits += core.hpc_jobs.timeout_seconds
    if lifecycle is not None:
        from exporter.sources.kubernetes.startup import start_and_wait

        api_wait = min(config.kubelet_timeout_seconds, API_FIRST_LIST_WAIT_SECONDS)
        before_first.append(functools.partial(start_and_wait, lifecycle, core.resolve_mig, api_wait))
        waits += api_wait
    core.attribution.start(before_first=_in_turn(before_first) if before_first else None,
                           first_wait_seconds=waits + config.kubelet_timeout_seconds + OPEN_TIMEOUT_SECONDS)
    if core.shares is not None:
        core.shares.start()
    if core.xid_events is not None:
        core.xid_events.start()


def _in_turn(calls: list) -> Callable[[], None]:
    def call_each() -> None:
        for call in calls:
            call()
    return call_each


def _announce(config: Config, sources: _Sources, server, on_ready: Optional[Callable[[str], None]]) -> None:
    web_config = sources.web_config
    scheme = "https" if web_config is not None and web_config.current().tls_enabled else "http"
    log("info", "listening", address=server.bound_address, scheme=scheme, telemetry_path=config.telemetry_path,
        dcgm=sources.dcgm.describe(), kubelet_socket=config.kubelet_socket, labels_style=config.labels_style,
        labels_mode=config.labels_mode)
    if on_ready is not None:
        on_ready(f"{scheme}://{_local_host(server)}{config.telemetry_path}")


def _stop(sources: _Sources, core: _Core, server) -> None:
    """Bounded whatever the kubelet, the API or NVML do: SIGTERM must end us well within the pod's
    grace period. Scrapes and calls still in flight run on daemon threads, cut when the process exits."""
    core.attribution.stop(timeout_seconds=0.2)
    if core.shares is not None:
        core.shares.stop(timeout_seconds=0.2)
    if core.xid_events is not None:
        core.xid_events.stop()
    if core.hpc_jobs is not None:
        core.hpc_jobs.stop(timeout_seconds=0.2)
    if sources.kubernetes_lifecycle is not None:
        sources.kubernetes_lifecycle.stop()
    core.client.close(wait_seconds=0.3)
    server.server_close()


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


def _prepare_kubernetes(config: Config) -> Optional[KubernetesContext]:
    """The Kubernetes API context (not started), or None when --kubernetes.api is off or finds no config."""
    # The source loads lightkube only when a client is made: with the API off, importing it costs
    # nothing, and its one check also warns about --labels.* that cannot act.
    from exporter.sources.kubernetes.options import KubernetesOptions
    from exporter.sources.kubernetes.startup import prepare_kubernetes

    return prepare_kubernetes(KubernetesOptions(
        api=config.kubernetes_api,
        kubeconfig=config.kubernetes_kubeconfig,
        node_name=config.kubernetes_node_name,
        labels=config.label_spec,
        grace_seconds=config.mapping_max_age_seconds,
        watch_silence_seconds=config.kubernetes_watch_silence_seconds,
    ))


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
    try:
        kubernetes = _prepare_kubernetes(config)
        devices = client.list_devices()
    except (KubeletError, ConfigError) as exc:
        print(f"pod-gpu-metrics-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILURE
    finally:
        client.close()
    resolve_mig = mig_resolver()
    if kubernetes is not None:
        from exporter.sources.kubernetes.startup import start_and_wait

        start_and_wait(kubernetes.lifecycle, resolve_mig, config.kubelet_timeout_seconds, slices=True)
    # The same core function as the refresher's, so `mapping` shows what `serve` attributes.
    mapping = build_mapping(devices, resolve_mig, kubernetes.mapping if kubernetes else None)
    if kubernetes is not None:
        kubernetes.lifecycle.stop()
    try:
        print_report(client.api_version, mapping, config.output, with_labels=kubernetes is not None)
        sys.stdout.flush()
    except BrokenPipeError:
        # `mapping | head` closed the pipe: what was wanted has been read. Point stdout at
        # /dev/null so the interpreter's own flush at exit raises nothing either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK
