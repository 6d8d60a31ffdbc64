"""Source: dcgm-exporter's Prometheus text, over HTTP (http_source) or from its legacy textfile (file_source)."""

# --dcgm.max-body-size's default, and the URL as logs show it: where NVIDIA's reader and its tests take them.
from exporter.sources.upstream import DEFAULT_MAX_BODY_BYTES, redact_url  # noqa: F401
