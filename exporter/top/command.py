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
            table = shape(build_table(source.read()), options.namespace, options.selector, options.by, options.sort)
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
                                  options.prometheus_password, options.prometheus_token)
        return PrometheusSource(access, options.window_seconds)
    from exporter.top.kube_client import make_top_client
    from exporter.top.proxy_source import ProxySource

    return ProxySource(make_top_client(options.kubeconfig, options.context), options.proxy, options.window_seconds)


def kubectl_gpu(argv: Optional[Sequence[str]] = None) -> int:
    """The `kubectl-gpu` console script: kubectl runs it for `kubectl gpu ...`, passing what follows `gpu`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print("usage: kubectl gpu top [flags]   (kubectl gpu top --help for the flags)\n\n"
              "  top   one row per container that holds a GPU: its share, memory, power, idle time, health, queue")
        return 0 if args else EXIT_USAGE
    if args[0] != "top":
        print(f"kubectl gpu: error: unknown command {args[0]!r} (the one command is `top`)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run_top(args[1:], prog="kubectl gpu top")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
