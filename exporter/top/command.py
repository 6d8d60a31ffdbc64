"""`pod-gpu-metrics-exporter top` and `kubectl gpu top`: options → source → table → output, once or under --watch."""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional, Sequence, TextIO

from exporter.top.errors import TopSourceError
from exporter.top.options import TopOptions, parse_options
from exporter.top.render import render
from exporter.top.shaping import shape
from exporter.top.table import build_table

EXIT_SOURCE, EXIT_USAGE = 1, 2


def run_top(argv: Sequence[str], prog: str = "pod-gpu-metrics-exporter top", environ: Optional[Mapping[str, str]] = None,
            out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    options = parse_options(argv, os.environ if environ is None else environ, prog)  # SystemExit(2) on a bad flag
    try:
        source = make_source(options)

        def draw() -> str:
            table = shape(build_table(source.read()), options.namespace, options.selector, options.by, options.sort,
                          options.cluster)
            return render(table, options.output, options.by)

        if options.watch_seconds:
            from exporter.top.watch import watch

            return watch(draw, options.watch_seconds, out, prog)
        out.write(draw())
        return 0
    except TopSourceError as exc:
        print(f"{prog}: error: {exc.message}", file=err)
        return EXIT_SOURCE
    except KeyboardInterrupt:
        return 130


def make_source(options: TopOptions):
    if options.prometheus_url:
        from exporter.top.prometheus_source import PrometheusAccess, PrometheusSource

        access = PrometheusAccess(options.prometheus_url, options.prometheus_timeout_seconds, options.prometheus_user,
                                  options.prometheus_password, options.prometheus_token, options.prometheus_headers)
        return PrometheusSource(access, options.window_seconds, options.cluster_label, options.cluster)
    return _proxy_source(options)


def _proxy_source(options: TopOptions):
    """One context: its source, as ever. Several (or --cluster): each read at once, rows named by context."""
    from exporter.top.clusters_source import ClustersSource
    from exporter.top.kube_client import contexts_to_read, load_kubeconfig, make_top_client
    from exporter.top.proxy_source import ProxySource

    config = load_kubeconfig(options.kubeconfigs)
    contexts = contexts_to_read(config, options.contexts, options.all_contexts, options.cluster)
    if not contexts:
        return ProxySource(make_top_client(config, None), options.proxy, options.window_seconds)
    if len(contexts) == 1 and not options.cluster:
        return ProxySource(make_top_client(config, contexts[0]), options.proxy, options.window_seconds)

    def maker(context: str):
        return lambda: ProxySource(make_top_client(config, context), options.proxy, options.window_seconds,
                                   cluster=context)

    # A cluster's read: its pods listed, a window, then two rounds of scrapes, each bounded on its own.
    access = options.proxy
    bound = options.window_seconds + 2 * (access.round_seconds + access.timeout_seconds)
    return ClustersSource({context: maker(context) for context in contexts}, bound)


def kubectl_gpu(argv: Optional[Sequence[str]] = None) -> int:
    """The `kubectl-gpu` console script: kubectl runs it for `kubectl gpu ...`, passing what follows `gpu`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print("usage: kubectl gpu top [flags]   (kubectl gpu top --help for the flags)\n\n"
              "  top   one row per container that holds a GPU: its share, utilisation, memory, power, idle time, "
              "health, queue; across clusters too")
        return 0 if args else EXIT_USAGE
    if args[0] != "top":
        print(f"kubectl gpu: error: unknown command {args[0]!r} (the one command is `top`)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run_top(args[1:], prog="kubectl gpu top")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
