"""The routes the exporter serves itself, whatever --web.telemetry-path says."""

SELF_METRICS_PATH = "/metrics"  # the process's own prometheus_client registry
HEALTH_PATH = "/healthz"  # liveness; reachable without credentials, for kubelet probes
INDEX_PATH = "/"
BUILT_IN_PATHS = (SELF_METRICS_PATH, HEALTH_PATH, INDEX_PATH)
