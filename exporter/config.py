"""Command-line flags and POD_GPU_EXPORTER_* environment variables, validated into a frozen Config."""

from __future__ import annotations

import argparse
import re
from dataclasses import make_dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

from exporter.base.errors import ConfigError
from exporter.base.flag_values import format_seconds, format_size, parse_duration, parse_listen_address, parse_size
from exporter.base.logs import LOG_FORMATS, LOG_LEVELS
from exporter.collectors.collector import Flag, Kind
from exporter.collectors.registry import (VENDOR_AUTO, VENDOR_CHOICES, check_collector_settings, collector_flags,
                                          check_collector_options, collector_refusals, demo_flags, refused_setting,
                                          refused_vendor)
from exporter.exposition.labels import LABEL_STYLE_NAMES
from exporter.vendors import VENDORS
from exporter.exposition.series import LABEL_MODES
from exporter.web.routes import BUILT_IN_PATHS

ENV_PREFIX = "POD_GPU_EXPORTER_"
COMMANDS = ("serve", "demo", "mapping")
# The fewest labels --labels.limit allows: pod_gpu_allocation_info's own (owner, resource, device_id,
# UUID, gpu, GPU_I_ID, a DRA claim's name and namespace) must fit, as must a dcgm sample's ~9 and its owner's 3.
MIN_LABELS_LIMIT = 12

# The core's flags: the server, the kubelet mapping, the owner labels, the logs. Each collector
# declares its own (exporter/collectors); --help lists the core's serving flags, the collectors', then
# the process's.
_SERVING_FLAGS: Tuple[Flag, ...] = (
    Flag("--web.listen-address", "listen_address", "address", "Address to serve on, HOST:PORT (':9400' = all interfaces; port 0 picks a free one)."),
    Flag("--web.telemetry-path", "telemetry_path", "path", "Path under which the attributed GPU metrics are served.", "/gpu/metrics"),
    Flag("--web.config.file", "web_config_file", "text", "Prometheus exporter-toolkit web config (YAML) enabling TLS and/or basic auth."),
    Flag("--kubelet.socket", "kubelet_socket", "text", "Kubelet PodResources unix socket.", "/var/lib/kubelet/pod-resources/kubelet.sock"),
    Flag("--kubelet.refresh-interval", "kubelet_refresh_interval_seconds", "duration", "How often the GPU->pod mapping is refreshed from the kubelet (scrapes never call it).", 5.0),
    Flag("--kubelet.timeout", "kubelet_timeout_seconds", "duration", "Timeout of each kubelet PodResources call.", 5.0),
    Flag("--kubelet.mapping-max-age", "mapping_max_age_seconds", "duration", "How long the last good mapping is used while the kubelet cannot be reached; after that samples go unattributed.", 60.0),
    Flag("--labels.style", "labels_style", LABEL_STYLE_NAMES, "Owner label names: kubernetes = namespace,pod,container; legacy = pod_name,pod_namespace,container_name (the 2019 exporter's).", "kubernetes"),
    Flag("--labels.mode", "labels_mode", LABEL_MODES, "samples = GPU samples carry their holders' labels; join = GPU samples keep only their upstream labels and pod_gpu_allocation_info names the holders, for group_left joins (fewer series on shared GPUs, no added labels on each sample).", "samples"),
    Flag("--labels.limit", "labels_limit", "count", f"Most labels one served sample may carry (e.g. a store's per-series limit); extra labels are dropped to fit, annotations first, then pod labels, queues, workload, pod_uid (at least {MIN_LABELS_LIMIT})."),
    Flag("--gpu.vendor", "gpu_vendor", VENDOR_CHOICES, f"Whose GPUs this node has, which names their devices, upstream exporter and figures: {VENDOR_AUTO} = serve as {VENDOR_CHOICES[1]} until the node says otherwise.", VENDOR_AUTO),
)
_PROCESS_FLAGS: Tuple[Flag, ...] = (
    Flag("--log.level", "log_level", LOG_LEVELS, "Only log messages at or above this level.", "info"),
    Flag("--log.format", "log_format", LOG_FORMATS, "Log line format.", "logfmt"),
)


def all_flags() -> Tuple[Flag, ...]:
    """Every flag of serve, demo and mapping, in --help's order (the collectors' included)."""
    return _SERVING_FLAGS + collector_flags() + _PROCESS_FLAGS + demo_flags()


_FLAGS = all_flags()

_MAPPING_ONLY = "it only shapes the output of `mapping`"
_CORE_REFUSED = {
    "demo": {"kubelet_socket": "the demo runs its own simulated kubelet; leave out `demo` to serve a real node",
             "output": _MAPPING_ONLY},
    "serve": {"output": _MAPPING_ONLY},
    # `mapping` asks the kubelet (and the API server, for its labels column) once and prints.
    "mapping": {
        **dict.fromkeys(("listen_address", "telemetry_path", "web_config_file"), "it prints one table and exits, serving nothing"),
        **dict.fromkeys(("kubelet_refresh_interval_seconds", "mapping_max_age_seconds"), "it asks the kubelet once"),
        **dict.fromkeys(("labels_style", "labels_mode", "labels_limit"), "it prints owners as columns, not as sample labels"),
    },
}


def refused_settings(command: str) -> Dict[str, str]:
    """Config field → why `command` refuses it (a flag given, or its variable): the core's and every
    collector's. `mapping` refuses a variable only where it is a flag given to it (see refuse_unused_settings)."""
    return {**_CORE_REFUSED.get(command, {}), **collector_refusals(command)}


def refusing_commands(field_name: str) -> Tuple[str, ...]:
    """The commands that refuse the flag of this Config field, e.g. ("demo", "mapping")."""
    return tuple(command for command in COMMANDS if field_name in refused_settings(command))


def refuse_unused_settings(command: str, origins: Mapping[str, str]) -> None:
    """A ConfigError naming the first setting given (a flag, or its variable) that `command` would not use:
    a user who passes one expects it to act."""
    for field_name, why in refused_settings(command).items():
        # `kubectl exec` into a serving container runs `mapping` with that container's environment:
        # its serving variables are the deployment's configuration, not a mistake, so only flags
        # given to `mapping` itself are refused.
        from_environment = origins.get(field_name, "").startswith(ENV_PREFIX)
        if field_name in origins and not (command == "mapping" and from_environment):
            raise ConfigError(f"{origins[field_name]} is not used by `{command}` ({why}): drop it")


def _listen_address(self) -> str:
    host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
    return f"{host}:{self.listen_port}"


# The Python type each kind of flag value is held as; a flag with no default holds None until given.
_VALUE_TYPES = {"duration": float, "size": int, "count": int}


def _value_type(flag: Flag) -> type:
    """The type of the Config field a flag sets: its kind's (text where the kind names none: choices, paths,
    names and what a collector's own Kind returns), Optional where it has no default."""
    held = _VALUE_TYPES.get(flag.kind, str) if isinstance(flag.kind, str) else str
    return Optional[held] if flag.default is None else held


def _make_config_class():
    """The frozen Config, typed: the command, the listening address's parts, one field per flag (its type
    from the flag's kind, its default from the flag tables, one source of truth) and -o/--output. It holds
    values only as parsed from the flags: what a collector makes of its own (a label spec, a URL's parts) is
    its options object (Collector.options), built from these fields by the collector."""
    fields = [("command", str, "serve"), ("listen_host", str, ""), ("listen_port", int, 9400)]
    fields += [(flag.field, _value_type(flag), flag.default) for flag in _FLAGS if flag.field != "listen_address"]
    fields.append(("output", str, "table"))
    namespace = {"listen_address": property(_listen_address), "__module__": __name__,
                 "__doc__": "Every setting, validated and parsed once (see parse_config)."}
    return make_dataclass("Config", fields, frozen=True, namespace=namespace)


Config = _make_config_class()


def env_var_name(flag: str) -> str:
    """--kubelet.refresh-interval → POD_GPU_EXPORTER_KUBELET_REFRESH_INTERVAL."""
    return ENV_PREFIX + re.sub(r"[.-]", "_", flag.lstrip("-")).upper()


def _convert(kind, value: str):
    if isinstance(kind, Kind):
        return kind.parse(value)
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
    if isinstance(kind, tuple) and value not in kind:
        raise ValueError(f"invalid choice {value!r} (choose from {', '.join(kind)})")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one clear line and exit 2, instead of the whole usage text
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def named_command(argv: Sequence[str]) -> str:
    """The command argv names, before it is parsed ("" where none is named): every flag takes one value,
    so the first word that is neither a flag nor a flag's value is it."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--version") or (word.startswith("-") and "=" in word):
            continue
        if word.startswith("-"):
            next(words, None)  # its value
            continue
        return word
    return ""


def build_parser(command: str = "") -> argparse.ArgumentParser:
    """Every flag; with `command` named (`demo --help`), the flags that command refuses are left out of
    its help (still parsed, so that giving one is refused with why)."""
    hidden = refused_settings(command) if command in COMMANDS else {}
    parser = _Parser(
        prog="pod-gpu-metrics-exporter",
        description=(
            f"Serve the GPU metrics of {' or '.join(vendor.upstream_words.name for vendor in VENDORS)} with the "
            "Kubernetes namespace, pod and container that hold each GPU, asked from the kubelet's PodResources API. "
            "Every flag can also be set by the environment variable shown; the flag wins."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "commands:\n"
            "  serve     (default) serve attributed metrics at --web.listen-address + --web.telemetry-path\n"
            "  demo      serve a simulated GPU node (kubelet, GPU exporter and driver, API server), no cluster needed;\n"
            "            listens on 127.0.0.1:9400 unless --web.listen-address says otherwise\n"
            "  mapping   print this node's GPU -> pod table from --kubelet.socket and exit (-o json for JSON)\n"
            "  top       one row per container that holds a GPU, across the cluster (`top --help` for its flags;\n"
            "            also installed as the kubectl plugin `kubectl gpu top`)\n"
            + (f"\nflags `{command}` does not use are left out (`--help` alone lists every flag)\n" if hidden else "")
        ),
    )
    # `top` is a command too, though main() hands it its own parser before this one is built.
    parser.add_argument("command", nargs="?", default="serve", choices=COMMANDS + ("top",),
                        help="what to do (default: serve)")
    defaults = Config()
    for flag in _FLAGS:
        default = defaults.listen_address if flag.field == "listen_address" else getattr(defaults, flag.field)
        if flag.kind == "duration":
            default = format_seconds(default)
        elif flag.kind == "size":
            default = format_size(default)
        shown = flag.shown_default or ("none" if default in (None, "") else default)
        shown_help = f"{flag.help} [env {env_var_name(flag.flag)}] (default: {shown})"
        parser.add_argument(flag.flag, dest=flag.field, metavar=_metavar(flag.kind),
                            help=argparse.SUPPRESS if flag.field in hidden else shown_help)
    parser.add_argument("-o", "--output", choices=("table", "json"),
                        help=argparse.SUPPRESS if "output" in hidden else "mapping: output format (default: table)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return parser


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Flags over environment over defaults; raises ConfigError naming the flag or variable at fault."""
    args = build_parser(named_command(argv)).parse_args(list(argv))
    if args.command == "top":
        raise ConfigError("`top` takes flags of its own and comes first: pod-gpu-metrics-exporter top [flags] "
                          "(see top --help)")
    values = {"command": args.command}
    origins = {"output": "-o/--output"} if args.output is not None else {}  # Config field → the flag or variable that set it
    for flag in _FLAGS:
        raw, source = getattr(args, flag.field), flag.flag
        if raw is None and env_var_name(flag.flag) in environ:
            raw, source = environ[env_var_name(flag.flag)], env_var_name(flag.flag)
        if raw is None:
            continue
        origins[flag.field] = source
        try:
            if flag.field == "listen_address":
                values["listen_host"], values["listen_port"] = parse_listen_address(raw)
            else:
                values[flag.field] = _convert(flag.kind, raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    for flag in _FLAGS:  # an empty variable or flag is no value, where none is the default
        if flag.default is None and values.get(flag.field) == "":
            values[flag.field] = None
    if values.get("telemetry_path") in BUILT_IN_PATHS:
        raise ConfigError(f"--web.telemetry-path: {values['telemetry_path']} is a built-in route "
                          f"({', '.join(BUILT_IN_PATHS)}); choose another path, e.g. /gpu/metrics")
    refuse_unused_settings(args.command, origins)
    refusal = refused_vendor(values.get("gpu_vendor", VENDOR_AUTO))
    if refusal:
        raise ConfigError(f"{origins['gpu_vendor']} {values['gpu_vendor']}: {refusal}")
    refused = refused_setting(values.get("gpu_vendor", VENDOR_AUTO), values)
    if refused:
        raise ConfigError(f"{origins.get(refused[0], refused[0])} {values[refused[0]]}: {refused[1]}")
    check_collector_settings(args.command, values, origins)
    if args.output is not None:
        values["output"] = args.output
    if args.command == "demo":
        values = {**_DEMO_DEFAULTS, **values}
    config = Config(**values)
    check_collector_options(config)  # each collector's options built once (ConfigError: e.g. a URL with no host)
    return config


# A newcomer's demo stays on this machine unless --web.listen-address says otherwise, and
# refreshes often enough for changes to show quickly.
_DEMO_DEFAULTS = {"listen_host": "127.0.0.1", "kubelet_refresh_interval_seconds": 2.0}


def _metavar(kind) -> str:
    if isinstance(kind, Kind):
        return kind.metavar
    if isinstance(kind, tuple):
        return "{" + ",".join(kind) + "}"
    return {"duration": "DURATION", "address": "HOST:PORT", "url": "URL", "path": "PATH", "size": "SIZE", "name": "NAME",
            "extra": "LIST", "regex": "REGEX", "count": "N"}.get(kind, "PATH")


def _version() -> str:
    from exporter import __version__

    return __version__
