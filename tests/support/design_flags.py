"""The flags of the project's design contract (shared/DESIGN.md beside the repository): each must exist, with its environment variable."""

from __future__ import annotations

DESIGN_FLAGS = (
    "--web.listen-address", "--web.telemetry-path", "--web.config.file", "--dcgm.url", "--dcgm.file",
    "--dcgm.timeout", "--kubelet.socket", "--kubelet.refresh-interval", "--kubelet.timeout",
    "--labels.style", "--log.level", "--log.format",
)

