"""The exporter's exception hierarchy: every error we raise on purpose derives from ExporterError."""

from __future__ import annotations


class ExporterError(Exception):
    """Base of every error the exporter raises deliberately; its message is meant for operators.

    `reason` is a short stable word (`timeout`, `refused`, `absent`, ...) that status gauges and
    "log once per change" logic key on, so they never have to parse the human message.
    """

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason

    def __reduce__(self):
        # Keep `reason` when the error crosses a pickle boundary (Exception only pickles args).
        return (type(self), (self.message, self.reason))


class ConfigError(ExporterError):
    """A flag, environment variable or referenced file is invalid; start-up stops with exit code 2."""


class KubeletError(ExporterError):
    """The kubelet PodResources API could not be asked or answered badly.

    Reasons: absent, permission, unavailable, timeout, unimplemented, rate_limited, too_large, error.
    """


class UpstreamError(ExporterError):
    """dcgm-exporter's metrics (HTTP or textfile) could not be fetched.

    Reasons: refused, timeout, status, too_large, truncated, empty, absent, permission, error.
    """
