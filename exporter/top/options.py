"""`top`'s flags, checked into a frozen TopOptions; a bad flag ends with one line and exit 2."""

from __future__ import annotations

import argparse
import re
import urllib.parse
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from exporter.base.flag_values import parse_duration, parse_size
from exporter.top.kubeconfig import kubeconfig_files
from exporter.top.proxy_source import ProxyAccess
from exporter.top.render import OUTPUTS
from exporter.top.shaping import GROUPINGS, SORT_KEYS, Requirement, parse_selector

PROMETHEUS_URL_ENV = "POD_GPU_EXPORTER_PROMETHEUS_URL"
PROMETHEUS_PASSWORD_ENV = "POD_GPU_EXPORTER_PROMETHEUS_PASSWORD"
PROMETHEUS_TOKEN_ENV = "POD_GPU_EXPORTER_PROMETHEUS_BEARER_TOKEN"
# Prometheus's rate() needs two scrapes inside the window (a 30 s scrape interval: 1m is the least);
# the pod proxy scrapes twice itself, and a user waits the window once.
PROMETHEUS_WINDOW_SECONDS = 120.0
PROXY_WINDOW_SECONDS = 10.0


@dataclass(frozen=True)
class TopOptions:
    prometheus_url: Optional[str]
    prometheus_user: Optional[str]
    prometheus_password: Optional[str]
    prometheus_token: Optional[str]
    prometheus_timeout_seconds: float
    prometheus_headers: Tuple[Tuple[str, str], ...]
    kubeconfigs: Tuple[str, ...]  # merged as kubectl merges $KUBECONFIG: the first file to set a name wins
    contexts: Tuple[str, ...]  # none: the current context
    all_contexts: bool
    proxy: ProxyAccess
    namespace: Optional[str]
    selector: List[Requirement]
    by: str
    sort: str
    output: str
    watch_seconds: Optional[float]
    window_seconds: float
    cluster: Optional[str] = None
    cluster_label: str = "cluster"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one clear line and exit 2, as the exporter's own flags
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _checked(convert: Callable[[str], object], positive: bool = True) -> Callable[[str], object]:
    def check(text: str):
        try:
            value = convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if positive and isinstance(value, (int, float)) and value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
        return value
    return check


def _url(text: str) -> str:
    if not re.match(r"https?://[^/\s]+", text):
        raise ValueError(f"expected an http:// or https:// URL, got {text!r}")
    try:  # urlsplit checks the port only when asked for it: a port out of range or not a number is caught here
        parts = urllib.parse.urlsplit(text)
        if parts.port == 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"expected a port from 1 to 65535 in the URL, got {text!r}") from None
    if not parts.hostname:
        raise ValueError(f"expected a host in the URL, got {text!r}")
    return text


def _header(text: str) -> Tuple[str, str]:
    """`Name: value`, as curl -H takes it: a token for the name, a value on one line."""
    name, colon, value = text.partition(":")
    if not colon or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name.strip()) or re.search(r"[\r\n\0]", value):
        raise ValueError(f"expected 'Name: value' (e.g. 'X-Scope-OrgID: team-a'), got {text!r}")
    return name.strip(), value.strip()


def _nonempty(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a name, got an empty one")
    return text


def _label_name(text: str) -> str:
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", text):
        raise ValueError(f"expected a Prometheus label name, got {text!r}")
    return text


def _seconds(text: str) -> float:
    """--watch takes plain seconds (`--watch 5`) as `watch -n` does, or a duration (`5s`, `1m`)."""
    return float(text) if re.fullmatch(r"\d+(\.\d+)?", text.strip()) else parse_duration(text)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=(
        "One row per container that holds a GPU: its GPUs, own SM share, utilisation, memory, power, idle time, health "
        f"and queue. From Prometheus with --prometheus (env {PROMETHEUS_URL_ENV}); without it, from the "
        "exporter pods themselves through the Kubernetes API server's pod proxy."))
    _add_prometheus_flags(parser.add_argument)
    _add_proxy_flags(parser.add_argument)
    _add_table_flags(parser.add_argument)
    return parser


def _add_prometheus_flags(add) -> None:
    add("--prometheus", metavar="URL", type=_checked(_url), help=f"Prometheus's root URL [env {PROMETHEUS_URL_ENV}]")
    add("--prometheus.user", dest="prometheus_user", metavar="USER", help="basic auth user for Prometheus")
    add("--prometheus.password-file", dest="prometheus_password_file", metavar="FILE",
        help=f"file holding the basic auth password [env {PROMETHEUS_PASSWORD_ENV}: the password]")
    add("--prometheus.bearer-token-file", dest="prometheus_token_file", metavar="FILE",
        help=f"file holding a bearer token for Prometheus [env {PROMETHEUS_TOKEN_ENV}: the token]")
    add("--prometheus.timeout", dest="prometheus_timeout", metavar="DURATION", type=_checked(parse_duration),
        default=10.0, help="time allowed for each query (default: 10s)")
    add("--prometheus.header", dest="prometheus_headers", metavar="'NAME: VALUE'", action="append",
        type=_checked(_header),
        help="a header sent with every query, repeatable (a tenant: 'X-Scope-OrgID: team-a' for Mimir or Cortex)")


def _add_proxy_flags(add) -> None:
    add("--kubeconfig", metavar="PATH", help="kubeconfig file, read alone (default: $KUBECONFIG's files merged as "
        "kubectl merges them, ~/.kube/config, else in cluster)")
    add("--context", metavar="NAME", action="append", dest="contexts",
        help="a kubeconfig context to read, repeatable: each one a cluster (default: the current context)")
    add("--all-contexts", dest="all_contexts", action="store_true",
        help="read every context of the kubeconfig, each one a cluster")
    add("-N", "--exporter.namespace", dest="exporter_namespace", metavar="NAMESPACE", default=ProxyAccess.namespace,
        help=f"namespace of the exporter pods (default: {ProxyAccess.namespace})")
    add("--exporter.selector", dest="exporter_selector", metavar="SELECTOR", default=ProxyAccess.selector,
        help=f"label selector of the exporter pods (default: {ProxyAccess.selector})")
    add("--exporter.port", dest="exporter_port", metavar="PORT", default=ProxyAccess.port,
        help=f"the exporter's port, number or name (default: {ProxyAccess.port})")
    add("--exporter.scheme", dest="exporter_scheme", choices=("http", "https"), default=ProxyAccess.scheme,
        help="https when the exporter serves TLS (--web.config.file) (default: http)")
    add("--exporter.path", dest="exporter_path", metavar="PATH", default=ProxyAccess.path,
        help=f"the exporter's --web.telemetry-path (default: {ProxyAccess.path})")
    add("--scrape.timeout", dest="scrape_timeout", metavar="DURATION", type=_checked(parse_duration),
        default=ProxyAccess.timeout_seconds, help="time allowed for one pod's scrape (default: 10s)")
    add("--scrape.round-timeout", dest="scrape_round_timeout", metavar="DURATION", type=_checked(parse_duration),
        default=ProxyAccess.round_seconds, help="time allowed for one scrape of every pod (default: 30s)")
    add("--scrape.max-body-size", dest="scrape_max_body", metavar="SIZE", type=_checked(parse_size),
        default=ProxyAccess.max_body_bytes, help="largest answer read from one pod (default: 32MiB)")
    add("--scrape.concurrency", dest="scrape_concurrency", metavar="N", type=_checked(int),
        default=ProxyAccess.concurrency, help=f"pods scraped at once (default: {ProxyAccess.concurrency})")


def _add_table_flags(add) -> None:
    add("-n", "--namespace", metavar="NAMESPACE", help="only containers in this namespace")
    add("-l", "--selector", metavar="SELECTOR", type=_checked(parse_selector, positive=False),
        help="only pods with these labels (key=value, key!=value, key, !key), where the exporter serves them "
             "(--labels.pod-labels)")
    add("--by", choices=GROUPINGS, default="pod",
        help="one row per pod's container (default), namespace, queue, node or cluster")
    add("--cluster", metavar="NAME", type=_checked(_nonempty, positive=False),
        help="only this cluster (with the pod proxy: the context of that name)")
    add("--cluster-label", dest="cluster_label", metavar="NAME", type=_checked(_label_name, positive=False),
        default="cluster", help="the label naming a series' cluster in Prometheus (default: cluster)")
    add("--sort", choices=SORT_KEYS, default="sm", help="widest first by this column (default: sm)")
    add("-o", "--output", choices=OUTPUTS, default="table", help="output format (default: table)")
    add("--watch", metavar="SECONDS", type=_checked(_seconds), help="redraw every SECONDS in place until Ctrl+C")
    add("--window", metavar="DURATION", type=_checked(parse_duration),
        help=f"rate window of power and idle (default: {PROMETHEUS_WINDOW_SECONDS:g}s with Prometheus, "
             f"{PROXY_WINDOW_SECONDS:g}s through the pod proxy)")


def parse_options(argv: Sequence[str], environ: Mapping[str, str], prog: str) -> TopOptions:
    parser = build_parser(prog)
    args = parser.parse_args(list(argv))
    url = args.prometheus or environ.get(PROMETHEUS_URL_ENV) or None
    if url and not args.prometheus:
        try:
            _url(url)
        except ValueError as exc:
            parser.error(f"{PROMETHEUS_URL_ENV}: {exc}")
    password = _secret(parser, args.prometheus_password_file, "--prometheus.password-file", environ, PROMETHEUS_PASSWORD_ENV)
    token = _secret(parser, args.prometheus_token_file, "--prometheus.bearer-token-file", environ, PROMETHEUS_TOKEN_ENV)
    window = args.window or (PROMETHEUS_WINDOW_SECONDS if url else PROXY_WINDOW_SECONDS)
    proxy = ProxyAccess(args.exporter_namespace, args.exporter_selector, args.exporter_port, args.exporter_scheme,
                        args.exporter_path, args.scrape_timeout, args.scrape_round_timeout, args.scrape_max_body,
                        args.scrape_concurrency)
    contexts = tuple(dict.fromkeys(args.contexts or ()))
    if contexts and args.all_contexts:
        parser.error("--context and --all-contexts: give one or the other")
    kubeconfigs = (args.kubeconfig,) if args.kubeconfig else kubeconfig_files(environ)
    return TopOptions(url, args.prometheus_user, password, token, args.prometheus_timeout,
                      tuple(args.prometheus_headers or ()), kubeconfigs, contexts,
                      args.all_contexts, proxy, args.namespace, args.selector or [], args.by, args.sort, args.output,
                      args.watch, window, args.cluster, args.cluster_label)


def _secret(parser, path: Optional[str], flag: str, environ: Mapping[str, str], variable: str) -> Optional[str]:
    if path is None:
        return environ.get(variable) or None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError as exc:
        parser.error(f"{flag}: cannot read {path}: {exc.strerror}")
    return None
