"""Entry point: argv → Config, logging, then the serve, demo or mapping command (exporter.app wires them), or `top`."""

from __future__ import annotations

import faulthandler
import os
import sys
from typing import Optional, Sequence

from exporter.app import EXIT_USAGE, print_mapping, serve
from exporter.base.errors import ConfigError
from exporter.base.logs import setup_logging
from exporter.config import parse_config


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["top"]:  # a client of the exporters, with flags of its own (exporter.top.options)
        from exporter.top.command import run_top

        return run_top(argv[1:])
    try:
        config = parse_config(argv, os.environ)
    except ConfigError as exc:
        print(f"pod-gpu-metrics-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(config.log_level, config.log_format)
    # Our code is Python, but grpcio, protobuf, msgspec and NVML are C: should one of them crash the
    # process, this writes each thread's Python stack to stderr, so the pod's last log says where.
    try:
        faulthandler.enable()
    except (OSError, ValueError, AttributeError):
        pass  # stderr is no file (the exporter embedded in another program): it keeps its own handler
    if config.command == "mapping":
        return print_mapping(config)
    if config.command == "demo":
        from exporter.demo.node import run_demo  # imported lazily: only the demo needs the fakes

        return run_demo(config, serve)
    return serve(config)
