"""The one error `top` ends on: its source cannot answer (exit 1, one line)."""

from __future__ import annotations

from exporter.base.errors import ExporterError


class TopSourceError(ExporterError):
    """Prometheus or the API server cannot be asked, refuses, or has nothing of the exporter.

    Reasons: unreachable, denied, status, empty, no_labels.
    """
