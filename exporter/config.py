"""Command-line flags and POD_GPU_EXPORTER_* environment variables, validated into a frozen Config."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Tuple
from urllib.parse import unquote, urlsplit

from exporter.base.errors import ConfigError
from exporter.base.flag_values import format_seconds, format_size, parse_duration, parse_listen_address, parse_size
from exporter.base.logs import LOG_FORMATS, LOG_LEVELS
from exporter.command_settings import ENV_PREFIX, refuse_unused_settings
from exporter.exposition.labels import LABEL_STYLE_NAMES
from exporter.exposition.series import LABEL_MODES
from exporter.shares.energy import IDLE_POLICIES
from exporter.sources.dcgm import DEFAULT_MAX_BODY_BYTES, redact_url
from exporter.sources.dcgm.file_source import SETTLE_SECONDS
from exporter.sources.dcgm.options import DcgmEndpoint
from exporter.sources.kubernetes.labels import LabelSpec, compile_key_pattern, extra_choices, label_spec
from exporter.web.routes import BUILT_IN_PATHS

COMMANDS = ("serve", "demo", "mapping")
KUBERNETES_API_CHOICES = ("auto", "on", "off")
SHARING_MODES = ("device", "process")
DEMO_NVML_CHOICES = ("on", "off")
XID_EVENTS_CHOICES = ("auto", "on", "off")
# The fewest labels --labels.limit allows: pod_gpu_allocation_info's own (owner, resource, device_id,
# UUID, gpu, GPU_I_ID, a DRA claim's name and namespace) must fit, as must a dcgm sample's ~9 and its owner's 3.
MIN_LABELS_LIMIT = 12


@dataclass(frozen=True)
class Config:
    command: str = "serve"
    listen_host: str = ""
    listen_port: int = 9400
    telemetry_path: str = "/gpu/metrics"
    web_config_file: Optional[str] = None
    dcgm_url: str = "http://127.0.0.1:9401/metrics"
    dcgm_file: Optional[str] = None
    dcgm_timeout_seconds: float = 5.0
    dcgm_max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    kubelet_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    kubelet_refresh_interval_seconds: float = 5.0
    kubelet_timeout_seconds: float = 5.0
    mapping_max_age_seconds: float = 60.0
    labels_style: str = "kubernetes"
    kubernetes_api: str = "auto"
    kubernetes_kubeconfig: Optional[str] = None
    kubernetes_node_name: Optional[str] = None  # None: env NODE_NAME, else the host name
    kubernetes_watch_silence_seconds: float = 150.0
    labels_extra: str = ""
    labels_pod_labels: Optional[str] = None
    labels_pod_annotations: Optional[str] = None
    labels_mode: str = "samples"
    labels_limit: Optional[int] = None
    sharing_mode: str = "device"
    sharing_proc_root: str = "/proc"
    energy_idle_policy: str = "split"
    hpc_job_mapping_dir: Optional[str] = None
    health_xid_events: str = "auto"
    log_level: str = "info"
    log_format: str = "logfmt"
    output: str = "table"
    demo_nvml: str = "on"
    # Parsed once, here, from the fields above (also when dataclasses.replace makes a new Config): no source
    # parses a flag after start-up.
    label_spec: LabelSpec = field(init=False, repr=False, compare=False)  # --labels.extra/pod-labels/pod-annotations
    dcgm_endpoint: Optional[DcgmEndpoint] = field(init=False, repr=False, compare=False)  # where serve fetches

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_spec",
                           label_spec(self.labels_extra, self.labels_pod_labels, self.labels_pod_annotations))
        # Only where it is fetched from: `mapping` never does and `demo` serves its own, so neither is refused
        # over a serving container's environment; a textfile replaces it.
        fetched = self.command == "serve" and not self.dcgm_file
        object.__setattr__(self, "dcgm_endpoint", parse_dcgm_url(self.dcgm_url) if fetched else None)

    @property
    def listen_address(self) -> str:
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"{host}:{self.listen_port}"


# (flag, Config field, kind, help). Defaults come from Config so there is one source of truth.
_FLAGS: Tuple[Tuple[str, str, str, str], ...] = (
    ("--web.listen-address", "listen_address", "address", "Address to serve on, HOST:PORT (':9400' = all interfaces; port 0 picks a free one)."),
    ("--web.telemetry-path", "telemetry_path", "path", "Path under which the attributed GPU metrics are served."),
    ("--web.config.file", "web_config_file", "text", "Prometheus exporter-toolkit web config (YAML) enabling TLS and/or basic auth."),
    ("--dcgm.url", "dcgm_url", "url", "dcgm-exporter metrics URL to scrape on every request."),
    ("--dcgm.file", "dcgm_file", "text", "Read this legacy dcgm textfile (e.g. /run/prometheus/dcgm.prom) instead of --dcgm.url."),
    ("--dcgm.timeout", "dcgm_timeout_seconds", "duration", "Total time allowed for one dcgm-exporter fetch."),
    ("--dcgm.max-body-size", "dcgm_max_body_bytes", "size", "Largest dcgm answer accepted, once decoded (e.g. 8MiB, 512KiB); larger ones count as dcgm_up 0. Peak memory grows with it."),
    ("--kubelet.socket", "kubelet_socket", "text", "Kubelet PodResources unix socket."),
    ("--kubelet.refresh-interval", "kubelet_refresh_interval_seconds", "duration", "How often the GPU->pod mapping is refreshed from the kubelet (scrapes never call it)."),
    ("--kubelet.timeout", "kubelet_timeout_seconds", "duration", "Timeout of each kubelet PodResources call."),
    ("--kubelet.mapping-max-age", "mapping_max_age_seconds", "duration", "How long the last good mapping is used while the kubelet cannot be reached; after that samples go unattributed."),
    ("--labels.style", "labels_style", LABEL_STYLE_NAMES, "Owner label names: kubernetes = namespace,pod,container; legacy = pod_name,pod_namespace,container_name (the 2019 exporter's)."),
    ("--kubernetes.api", "kubernetes_api", KUBERNETES_API_CHOICES, "Kubernetes API server for pod UIDs, workloads, pod labels and DRA ResourceSlices: auto = when running in a pod or --kubernetes.kubeconfig is set; on = required (start-up fails without a config); off = never."),
    ("--kubernetes.kubeconfig", "kubernetes_kubeconfig", "text", "Kubeconfig file for the API server when not running in a pod (in a pod: the service account)."),
    ("--kubernetes.node-name", "kubernetes_node_name", "name", "This node's name; its pods are watched with fieldSelector spec.nodeName=<it>."),
    ("--kubernetes.watch-silence-timeout", "kubernetes_watch_silence_seconds", "duration", "A watch on which nothing arrives for this long (the API server sends a bookmark about every minute) is dropped and the resource listed again."),
    ("--labels.extra", "labels_extra", "extra", "Comma list of extra labels from the API: pod_uid (adds pod_uid), workload (adds workload_kind, workload), queue (adds cluster_queue, local_queue: the pod's Kueue or Volcano queue)."),
    ("--labels.pod-labels", "labels_pod_labels", "regex", "Regex (full match) of pod label keys to add as label_<key>, sanitised like kube-state-metrics."),
    ("--labels.pod-annotations", "labels_pod_annotations", "regex", "Regex (full match) of pod annotation keys to add as annotation_<key>."),
    ("--labels.mode", "labels_mode", LABEL_MODES, "samples = dcgm samples carry their holders' labels; join = dcgm samples keep only their upstream labels and pod_gpu_allocation_info names the holders, for group_left joins (fewer series on shared GPUs, no added labels on each sample)."),
    ("--labels.limit", "labels_limit", "count", f"Most labels one served sample may carry (e.g. a store's per-series limit); extra labels are dropped to fit, annotations first, then pod labels, queues, workload, pod_uid (at least {MIN_LABELS_LIMIT})."),
    ("--sharing.mode", "sharing_mode", SHARING_MODES, "device = values are device-level; process = also serve each holding container's own memory and SM share of its GPU, from NVML's per-process data (needs NVML, hostPID and the Kubernetes API)."),
    ("--sharing.proc-root", "sharing_proc_root", "path", "Where the host's processes are seen, for --sharing.mode process: /proc with hostPID: true, or the host's /proc mounted elsewhere (e.g. /host/proc)."),
    ("--energy.idle-policy", "energy_idle_policy", IDLE_POLICIES, "In --sharing.mode process, where a shared GPU's energy that no holder's SM activity accounts for goes: split = evenly between its holders; unattributed = to pod_gpu_unattributed_energy_joules_total{reason=\"idle\"}."),
    ("--hpc.job-mapping-dir", "hpc_job_mapping_dir", "text", "Directory of HPC job-mapping files as dcgm-exporter reads them (a file per GPU named <gpu> or <gpu>.<GPU_I_ID>, one job ID per line, e.g. written by a Slurm prolog): serves pod_gpu_hpc_job_info per job per device."),
    ("--health.xid-events", "health_xid_events", XID_EVENTS_CHOICES, "Count NVML's XID error events per GPU and per holding container (needs NVML): auto = in --sharing.mode process; on; off."),
    ("--log.level", "log_level", LOG_LEVELS, "Only log messages at or above this level."),
    ("--log.format", "log_format", LOG_FORMATS, "Log line format."),
    ("--demo.nvml", "demo_nvml", DEMO_NVML_CHOICES, "`demo` only: on = its node also simulates NVML, the host's processes, XIDs and a lost GPU, and serves --sharing.mode process; off = device-level samples only."),
)

# Defaults decided at run time, where the Config field's own default (None) would read "none".
_SHOWN_DEFAULTS = {"kubernetes_node_name": "env NODE_NAME, as the downward API sets it, else the host name"}


def env_var_name(flag: str) -> str:
    """--kubelet.refresh-interval → POD_GPU_EXPORTER_KUBELET_REFRESH_INTERVAL."""
    return ENV_PREFIX + re.sub(r"[.-]", "_", flag.lstrip("-")).upper()


def _split_url(url: str):
    """The form every command checks: an http(s) URL that splits; ValueError (parse_config names the flag
    or variable) otherwise."""
    shown = redact_url(url)
    if not re.match(r"https?://[^/\s]+", url):
        raise ValueError(f"expected an http:// or https:// URL, got {shown!r}")
    try:
        return urlsplit(url)
    except ValueError as exc:  # e.g. an IPv6 host without its closing bracket
        raise ValueError(f"invalid URL {shown!r}: {exc}") from None


def parse_dcgm_url(url: str) -> DcgmEndpoint:
    """--dcgm.url in the parts a fetch needs: ValueError when it is no http(s) URL, ConfigError when it
    names no host or a bad port."""
    parts, shown = _split_url(url), redact_url(url)
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--dcgm.url {shown!r} has an invalid port: {exc}") from None
    if not parts.hostname:
        raise ConfigError(f"--dcgm.url {shown!r} names no host")
    credentials = None if parts.username is None else (unquote(parts.username), unquote(parts.password or ""))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return DcgmEndpoint(parts.scheme, parts.hostname, port, path, shown, credentials)


def _convert(kind, value: str, field: str):
    if kind == "duration":
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError(f"duration must be positive, got {value!r}")
        return seconds
    if kind == "size":
        return parse_size(value)
    if kind == "count":
        if not value.strip().isdigit() or int(value) < MIN_LABELS_LIMIT:
            raise ValueError(f"expected a whole number of labels, at least {MIN_LABELS_LIMIT}, got {value!r}")
        return int(value)
    if kind == "path" and not value.startswith("/"):
        raise ValueError(f"path must start with '/', got {value!r}")
    if kind == "url":
        _split_url(value)
    if kind == "extra":
        extra_choices(value)
        return value
    if kind == "regex":
        compile_key_pattern(value)
        return value
    if isinstance(kind, tuple) and value not in kind:
        raise ValueError(f"invalid choice {value!r} (choose from {', '.join(kind)})")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one clear line and exit 2, instead of the whole usage text
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pod-gpu-metrics-exporter",
        description=(
            "Serve NVIDIA dcgm-exporter's GPU metrics with the Kubernetes namespace, pod and container that "
            "hold each GPU, asked from the kubelet's PodResources API. Every flag can also be set by the "
            "environment variable shown; the flag wins."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "commands:\n"
            "  serve     (default) serve attributed metrics at --web.listen-address + --web.telemetry-path\n"
            "  demo      serve a simulated GPU node (kubelet, dcgm-exporter, NVML, API server), no cluster needed;\n"
            "            listens on 127.0.0.1:9400 unless --web.listen-address says otherwise\n"
            "  mapping   print this node's GPU -> pod table from --kubelet.socket and exit (-o json for JSON)\n"
            "  top       one row per container that holds a GPU, across the cluster (`top --help` for its flags;\n"
            "            also installed as the kubectl plugin `kubectl gpu top`)\n"
        ),
    )
    parser.add_argument("command", nargs="?", default="serve", choices=COMMANDS, help="what to do (default: serve)")
    defaults = Config()
    for flag, field, kind, text in _FLAGS:
        default = defaults.listen_address if field == "listen_address" else getattr(defaults, field)
        if kind == "duration":
            default = format_seconds(default)
        elif kind == "size":
            default = format_size(default)
        shown = _SHOWN_DEFAULTS.get(field, "none" if default in (None, "") else default)
        parser.add_argument(flag, dest=field, metavar=_metavar(kind), help=f"{text} [env {env_var_name(flag)}] (default: {shown})")
    parser.add_argument("-o", "--output", choices=("table", "json"), help="mapping: output format (default: table)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return parser


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Flags over environment over defaults; raises ConfigError naming the flag or variable at fault."""
    args = build_parser().parse_args(list(argv))
    values = {"command": args.command}
    sources = {"output": "-o/--output"} if args.output is not None else {}
    for flag, field, kind, _ in _FLAGS:
        raw, source = getattr(args, field), flag
        if raw is None and env_var_name(flag) in environ:
            raw, source = environ[env_var_name(flag)], env_var_name(flag)
        if raw is None:
            continue
        sources[field] = source
        try:
            if field == "listen_address":
                values["listen_host"], values["listen_port"] = parse_listen_address(raw)
            else:
                values[field] = _convert(kind, raw, field)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    for field in ("web_config_file", "dcgm_file", "kubernetes_kubeconfig", "kubernetes_node_name",
                  "labels_pod_labels", "labels_pod_annotations"):
        if values.get(field) == "":
            values[field] = None
    if values.get("telemetry_path") in BUILT_IN_PATHS:
        raise ConfigError(f"--web.telemetry-path: {values['telemetry_path']} is a built-in route "
                          f"({', '.join(BUILT_IN_PATHS)}); choose another path, e.g. /gpu/metrics")
    refuse_unused_settings(args.command, sources)
    timeout = values.get("dcgm_timeout_seconds", Config.dcgm_timeout_seconds)
    if values.get("dcgm_file") and timeout < SETTLE_SECONDS:
        # A textfile changed in place is read once left alone that long: every scrape in the second
        # after each rewrite would run out of time and serve no GPU series.
        raise ConfigError(f"{sources.get('dcgm_timeout_seconds', '--dcgm.timeout')}: {timeout:g}s is shorter than "
                          f"the {SETTLE_SECONDS:g}s a textfile changed in place is left to settle before it is "
                          "read (--dcgm.file); allow at least that")
    if args.output is not None:
        values["output"] = args.output
    _check_proc_root(args.command, values)
    _check_hpc_job_mapping_dir(values)
    if args.command == "demo":
        values = {**_DEMO_DEFAULTS, **values}
    return Config(**values)  # which parses the label spec and --dcgm.url's parts (ConfigError: no host, bad port)


# A newcomer's demo stays on this machine unless --web.listen-address says otherwise, and
# refreshes often enough for changes to show quickly.
_DEMO_DEFAULTS = {"listen_host": "127.0.0.1", "kubelet_refresh_interval_seconds": 2.0}


def _check_hpc_job_mapping_dir(values: Mapping[str, object]) -> None:
    """A file is a mistake; a directory not there yet is not (a job prolog may create it; the reader says so)."""
    directory = values.get("hpc_job_mapping_dir")
    if directory and os.path.exists(directory) and not os.path.isdir(directory):
        raise ConfigError(f"--hpc.job-mapping-dir: {directory} is not a directory")


def _check_proc_root(command: str, values: Mapping[str, object]) -> None:
    """A --sharing.proc-root that is no folder is a configuration mistake for the commands that read it
    (`mapping` never does, so a serving container's environment is not refused there)."""
    proc_root = values.get("sharing_proc_root", Config.sharing_proc_root)
    if values.get("sharing_mode") == "process" and command != "mapping" and not os.path.isdir(proc_root):
        raise ConfigError(f"--sharing.proc-root: {proc_root} is not a directory (mount the host's /proc there "
                          "read-only, or run with hostPID: true and keep /proc)")


def _metavar(kind) -> str:
    if isinstance(kind, tuple):
        return "{" + ",".join(kind) + "}"
    return {"duration": "DURATION", "address": "HOST:PORT", "url": "URL", "path": "PATH", "size": "SIZE", "name": "NAME",
            "extra": "LIST", "regex": "REGEX", "count": "N"}.get(kind, "PATH")


def _version() -> str:
    from exporter import __version__

    return __version__
