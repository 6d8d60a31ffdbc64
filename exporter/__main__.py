"""`python -m exporter` runs the same command line as the pod-gpu-metrics-exporter script."""

import sys

from exporter.cli import main

sys.exit(main())
