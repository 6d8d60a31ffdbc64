"""Entry point: argv → Config, logging, then the serve, demo or mapping command (exporter.app wires them)."""

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
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv, os.environ)
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
