"""The demo: a simulated GPU node (a real gRPC fake kubelet, a simulated dcgm-exporter) served as production would."""
